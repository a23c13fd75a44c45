"""Module names that moved keep working: each old name is the new module itself (the same
object, so an import, an attribute and a monkeypatch through it reach the real module)."""

from __future__ import annotations

import importlib

import pytest

MOVED = {
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
    "fedad.outdir": "fedad.rundir.files",
    "fedad.claim": "fedad.rundir.claim",
    "fedad.checkpoints": "fedad.rundir.checkpoints",
    "fedad.outputs": "fedad.rundir.outputs",
    "fedad.runs": "fedad.rundir.load",
    "fedad.scoring": "fedad.rundir.score",
    "fedad.inputs": "fedad.rundir.inputs",
    "fedad.fingerprint": "fedad.rundir.fingerprint",
    "fedad.export.detectors.fadngs": "fedad.methods.fadngs.export",
    "fedad.export.detectors.feddymem": "fedad.methods.feddymem.export",
    "fedad.export.detectors.feduv": "fedad.methods.feduv.export",
    "fedad.export.detectors.onlad": "fedad.methods.onlad.export",
    "fedad.export.detectors.protofl": "fedad.methods.protofl.export",
    "fedad.export.detectors.protofl_layers": "fedad.methods.protofl.export_layers",
    "fedad.cli.running": "fedad.cli.progress",
    "fedad.bench.run": "fedad.bench.benchmark",
    "fedad.data.federation.catalog": "fedad.data.federation.blocks",
}


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_name_is_the_module_itself(old: str, new: str) -> None:
    assert importlib.import_module(old) is importlib.import_module(new)


def test_names_reached_through_an_old_name_are_the_real_ones() -> None:
    from fedad.core.errors import ConfigError
    from fedad.errors import ConfigError as Old
    from fedad.rundir.layout import METRICS_FILE
    from fedad.runs import load_run

    assert Old is ConfigError and METRICS_FILE == "metrics.json"
    assert load_run.__module__ == "fedad.rundir.load"
