"""The ``smoke`` suite through ``fedad bench``: every method and detector runs end to end
on tiny development data (a check that each works in a benchmark, not a measurement)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedad.bench.results import read_results
from fedad.bench.suites import shipped_suites
from fedad.cli.app import app
from tests.hostile.conftest import runner


@pytest.mark.slow
def test_every_method_of_the_smoke_suite_runs(tmp_path: Path) -> None:
    out = tmp_path / "smoke"
    result = runner.invoke(app, ["bench", "smoke", "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output[-3000:]
    rows = read_results(out / "results.csv")
    failed = [(r["label"], r["error"]) for r in rows if r["error"]]
    assert failed == []
    for r in rows:
        assert r["auroc"] is not None and 0.0 <= r["auroc"] <= 1.0, r
    suite = shipped_suites()["smoke"]
    assert {r["federation"] for r in rows} == {f.name for f in suite.federations}
    assert (out / "leaderboard.html").read_text().count("ranks first") >= len(suite.kinds)
