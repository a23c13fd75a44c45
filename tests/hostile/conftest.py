"""A finished run directory, written once per session, that hostile tests copy and damage."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedad.config import parse_config
from fedad.runner import run_experiment

SMALL_RUN = {
    "seed": 3,
    "rounds": 1,
    "data": {"name": "digits", "normal": [0, 1], "anomaly": [7], "max_test": 60},
    "partition": {"scheme": "iid", "clients": 2},
    "engine": {"progress": False},
    "methods": [
        {"name": "fedavg", "label": "fedavg-ae"},
        {"name": "local", "detector": "deepsvdd", "label": "local-svdd"},
        {"name": "onlad", "params": {"init_samples": 20, "observed": 40}},
    ],
}


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("finished") / "run"
    run_experiment(parse_config(SMALL_RUN), out)
    return out


@pytest.fixture
def run_copy(finished_run: Path, tmp_path: Path) -> Path:
    """A private copy of the finished run, to damage."""
    dst = tmp_path / "run"
    shutil.copytree(finished_run, dst)
    return dst


def one_line_error(result: object) -> str:
    """Assert a CliRunner result is exit 2 with one error line and no traceback; return it."""
    out = getattr(result, "output", "")  # click >= 8.2: stdout and stderr together
    assert getattr(result, "exit_code", None) == 2, out
    assert "Traceback" not in out, out
    exc = getattr(result, "exception", None)
    assert exc is None or isinstance(exc, SystemExit), repr(exc)
    lines = [ln for ln in out.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert len(errors) == 1, out
    return errors[0]


runner = CliRunner()
