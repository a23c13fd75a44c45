"""Built-in methods. Importing this package reads each method folder's declarations (its
``__init__.py``: names, data kinds, detectors, the module behind each; nothing heavy) into
:mod:`fedad.core.catalog`; a method's own modules are imported when its name is looked up.
The catalog imports it at its first look-up, as the entry point ``builtin`` of group
``fedad.methods`` (``pyproject.toml``); nothing else of fedad imports it. A new method is a
folder and one line here."""

from fedad.methods import baselines as _baselines  # noqa: F401
from fedad.methods import fadngs as _fadngs  # noqa: F401
from fedad.methods import fedbn as _fedbn  # noqa: F401
from fedad.methods import feddymem as _feddymem  # noqa: F401
from fedad.methods import fedstar as _fedstar  # noqa: F401
from fedad.methods import feduv as _feduv  # noqa: F401
from fedad.methods import fgad as _fgad  # noqa: F401
from fedad.methods import gcfl as _gcfl  # noqa: F401
from fedad.methods import onlad as _onlad  # noqa: F401
from fedad.methods import protofl as _protofl  # noqa: F401
from fedad.methods import scaffold as _scaffold  # noqa: F401
