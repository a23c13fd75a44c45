"""Module names fedad used before, still importable: each is the module that now holds its
code (the same object, so an import, an attribute and a monkeypatch through the old name
reach the real module).

A finder at the end of :data:`sys.meta_path`, installed when :mod:`fedad` is imported, answers
only the names of :data:`MOVED`, and only after every other finder found nothing: no file
stands behind an old name.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

MOVED: dict[str, str] = {
    # the contracts every method and engine share
    "fedad.fl.algorithm": "fedad.core.algorithm",
    "fedad.fl.context": "fedad.core.context",
    "fedad.fl.rounds": "fedad.core.rounds",
    "fedad.fl.messages": "fedad.core.messages",
    "fedad.fl.validate": "fedad.core.validate",
    "fedad.fl.aggregate": "fedad.core.aggregate",
    "fedad.fl.grid": "fedad.core.grid",
    "fedad.catalog": "fedad.core.catalog",
    "fedad.errors": "fedad.core.errors",
    "fedad.seeding": "fedad.core.rng",
    "fedad.as_written": "fedad.core.as_written",
    "fedad.detector": "fedad.core.detector",
    "fedad.data.types": "fedad.core.types",
    "fedad.collapse": "fedad.core.collapse",
    # the run directory
    "fedad.outdir": "fedad.rundir.files",
    "fedad.claim": "fedad.rundir.claim",
    "fedad.checkpoints": "fedad.rundir.checkpoints",
    "fedad.outputs": "fedad.rundir.outputs",
    "fedad.runs": "fedad.rundir.load",
    "fedad.scoring": "fedad.rundir.score",
    "fedad.inputs": "fedad.rundir.inputs",
    "fedad.fingerprint": "fedad.rundir.fingerprint",
    "fedad.report.rundir": "fedad.rundir.read",
    # a method's exporter, in its folder
    "fedad.export.detectors.fadngs": "fedad.methods.fadngs.export",
    "fedad.export.detectors.feddymem": "fedad.methods.feddymem.export",
    "fedad.export.detectors.feduv": "fedad.methods.feduv.export",
    "fedad.export.detectors.onlad": "fedad.methods.onlad.export",
    "fedad.export.detectors.protofl": "fedad.methods.protofl.export",
    "fedad.export.detectors.protofl_layers": "fedad.methods.protofl.export_layers",
    # names that say what the module is
    "fedad.cli.running": "fedad.cli.progress",
    "fedad.bench.run": "fedad.bench.benchmark",
    "fedad.data.federation.catalog": "fedad.data.federation.blocks",
    "fedad.metrics": "fedad.evaluation.metrics",
    "fedad.pixel_metrics": "fedad.evaluation.pixel",
    "fedad.report.families": "fedad.evaluation.run_families",
    "fedad.accounting": "fedad.privacy.accounting",
    "fedad.privacy_budget": "fedad.privacy.budget",
}
"""Old module name -> the module that holds its code now."""


class OldNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old name of :data:`MOVED` and loads it as the module that holds its code."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(MOVED[spec.name])
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system has just set ``__spec__`` to the old name's spec: give the module
        # its own back, so that it keeps its real name for reloads, pickles and tracebacks.
        old_spec = module.__spec__
        if old_spec is not None and old_spec.loader_state is not None:
            module.__spec__ = old_spec.loader_state


def install() -> None:
    """Answer the old names (once per interpreter)."""
    if not any(isinstance(f, OldNames) for f in sys.meta_path):
        sys.meta_path.append(OldNames())
