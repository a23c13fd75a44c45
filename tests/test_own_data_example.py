"""The worked example of docs/own-data.md runs as written (fewer rounds)."""

from __future__ import annotations

import csv
import io
import runpy
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedad.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "own-data"


def test_example_table_runs_and_scores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["make_table.py", str(tmp_path)])
    runpy.run_path(str(EXAMPLE / "make_table.py"), run_name="__main__")
    runner = CliRunner()
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", str(EXAMPLE / "config.toml"), "--out", str(out), "-q",
                              "--set", f"data.path={tmp_path / 'records.csv'}",
                              "--set", "rounds=2"])  # fmt: skip
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["score", str(out), str(tmp_path / "new_rows.csv"), "-m", "fedavg"])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert len(rows) == 40 and {r["client"] for r in rows} == {"centre", "north", "south"}
    flagged = sum(int(r["anomaly"]) for r in rows)
    assert f"scored 40 inputs with 'fedavg': {flagged} flagged" in res.output
