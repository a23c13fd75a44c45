"""Moved to :mod:`fedad.rundir.load` (the run directory's own package); this name stays for
code written against it, as the same module object."""

import sys

from fedad.rundir import load as _moved

sys.modules[__name__] = _moved
