"""Renamed :mod:`fedad.bench.benchmark`
(a name that says what it is); this name stays for code written against it, as the same
module object."""

import sys

from fedad.bench import benchmark as _moved

sys.modules[__name__] = _moved
