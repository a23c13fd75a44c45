"""Built-in methods; importing this package registers them."""

from fedad.methods.baselines import federated as _baselines  # noqa: F401
from fedad.methods.fadngs import federated as _fadngs  # noqa: F401
from fedad.methods.fedbn import federated as _fedbn  # noqa: F401
from fedad.methods.feddymem import federated as _feddymem  # noqa: F401
from fedad.methods.fedstar import federated as _fedstar  # noqa: F401
from fedad.methods.feduv import federated as _feduv  # noqa: F401
from fedad.methods.fgad import federated as _fgad  # noqa: F401
from fedad.methods.gcfl import federated as _gcfl  # noqa: F401
from fedad.methods.onlad import federated as _onlad  # noqa: F401
from fedad.methods.protofl import federated as _protofl  # noqa: F401
from fedad.methods.scaffold import federated as _scaffold  # noqa: F401
