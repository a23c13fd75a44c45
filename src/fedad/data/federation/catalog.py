"""Renamed :mod:`fedad.data.federation.blocks`
(a name that says what it is); this name stays for code written against it, as the same
module object."""

import sys

from fedad.data.federation import blocks as _moved

sys.modules[__name__] = _moved
