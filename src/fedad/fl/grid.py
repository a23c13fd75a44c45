"""Moved to :mod:`fedad.core.grid` (the contracts every method and engine share); this name
stays for code written against it, as the same module object."""

import sys

from fedad.core import grid as _moved

sys.modules[__name__] = _moved
