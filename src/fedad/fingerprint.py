"""Moved to :mod:`fedad.rundir.fingerprint` (the run directory's own package); this name stays for
code written against it, as the same module object."""

import sys

from fedad.rundir import fingerprint as _moved

sys.modules[__name__] = _moved
