"""Moved to :mod:`fedad.methods.protofl.export`
(a method's exporter lives in its folder); this name stays for code written against it,
as the same module object."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("fedad.methods.protofl.export")
