"""examples/export/score_onnx.py scores a table with onnxruntime alone (no fedad, torch or
pandas in the process) exactly as ``fedad score`` does: scores within 1e-5, the same
decisions, each row by its own site's model."""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from fedad.cli.app import app
from tests.export.test_cli import export
from tests.hostile.conftest import runner

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "export" / "score_onnx.py"
CHECK = ROOT / "examples" / "export" / "check_run.py"
ALONE = """
import runpy, sys
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as done:
    code = done.code
else:
    code = 0
bad = sorted(m for m in ("fedad", "torch", "pandas") if m in sys.modules)
assert not bad, f"imported {bad}"
sys.exit(code)
"""


def scores(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize("method", ["fedavg-ae", "local-ocsvm"])
def test_the_script_scores_as_fedad_score_does(
    table_run: Path, tmp_path: Path, method: str
) -> None:
    table = table_run.parent / "records.csv"
    folder = tmp_path / "export"
    assert export(table_run, method, folder).exit_code == 0  # type: ignore[attr-defined]
    theirs = tmp_path / "fedad.csv"
    done = runner.invoke(app, ["score", str(table_run), str(table), "--method", method,
                               "--out", str(theirs)])  # fmt: skip
    assert done.exit_code == 0, done.output
    ours = tmp_path / "onnx.csv"
    proc = subprocess.run(
        [sys.executable, "-c", ALONE, str(SCRIPT), str(folder), str(table), "--out", str(ours)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    a, b = scores(theirs), scores(ours)
    assert len(a) == len(b) == 150
    assert [r["client"] for r in a] == [r["client"] for r in b]
    assert [r["anomaly"] for r in a] == [r["anomaly"] for r in b]
    fa = np.array([float(r["score"]) for r in a])
    fb = np.array([float(r["score"]) for r in b])
    meta = json.loads((folder / "model.json").read_text())
    by_name = {c["name"]: c["threshold"] for c in meta["clients"]}
    thr = np.array([abs(by_name[r["client"]]) for r in a])
    assert np.max(np.abs(fa - fb) / np.maximum(np.abs(fa), thr)) <= 1e-5


def test_the_script_says_what_is_wrong_in_one_line(table_run: Path, tmp_path: Path) -> None:
    folder = tmp_path / "export"
    assert export(table_run, "fedavg-ae", folder).exit_code == 0  # type: ignore[attr-defined]
    bad = tmp_path / "bad.csv"
    bad.write_text("age,pressure,device\n50,120,acme\n")
    proc = subprocess.run([sys.executable, str(SCRIPT), str(folder), str(bad)],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: '{bad}' lacks the feature column 'dose'"


def _check_run() -> ModuleType:
    """examples/export/check_run.py as a module (its main() reads sys.argv)."""
    spec = importlib.util.spec_from_file_location("check_run", CHECK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("fixture", "method"), [("table_run", "local-ocsvm"),
                                                 ("image_run", "local-svdd")])  # fmt: skip
def test_check_run_scores_the_runs_own_data_alike(
    request: pytest.FixtureRequest,
    fixture: str,
    method: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = request.getfixturevalue(fixture)
    monkeypatch.setattr(sys, "argv", ["check_run.py", str(run), str(tmp_path), "-m", method])
    assert _check_run().main() == 0
    line = capsys.readouterr().out.strip()
    found = re.fullmatch(rf"{method}: (\d+) rows, largest relative difference (\S+), "
                         r"0 decisions differ", line)  # fmt: skip
    assert found is not None, line
    assert int(found.group(1)) > 0 and float(found.group(2)) <= 1e-5


def test_check_run_fails_on_a_score_that_differs(
    table_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = _check_run()
    real = module.onnx_scores

    def shifted(*args: Any) -> list[dict[str, str]]:
        rows = real(*args)
        row = next(r for r in rows if np.isfinite(float(r["score"])))
        row["score"] = str(float(row["score"]) * (1 + 1e-4))
        return rows

    monkeypatch.setattr(module, "onnx_scores", shifted)
    monkeypatch.setattr(sys, "argv", ["check_run.py", str(table_run), str(tmp_path),
                                      "-m", "local-ocsvm"])  # fmt: skip
    assert module.main() == 1
