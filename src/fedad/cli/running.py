"""Renamed :mod:`fedad.cli.progress`
(a name that says what it is); this name stays for code written against it, as the same
module object."""

import sys

from fedad.cli import progress as _moved

sys.modules[__name__] = _moved
