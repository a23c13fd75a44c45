"""An ODDS .rda with missing values: one line, or drop, or impute."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedad.cli.app import app
from fedad.config import dump_toml
from tests.hostile.conftest import one_line_error, runner

rdata = pytest.importorskip("rdata")


@pytest.fixture
def holey_ionosphere(tmp_path: Path) -> Path:
    """mlbench's Ionosphere.rda with 5 values of V4 and V7 removed, as a real .rda file."""
    from fedad.data.odds import find_rda, read_rda_table

    try:
        frame = read_rda_table(find_rda("Ionosphere.rda", None, "t"), "Ionosphere").copy()
    except Exception:
        pytest.skip("r-cran-mlbench is not installed")
    frame.index = pd.RangeIndex(1, len(frame) + 1)
    frame.loc[[3, 50, 90], "V4"] = np.nan
    frame.loc[[7, 200], "V7"] = np.nan
    d = tmp_path / "holey"
    d.mkdir()
    rdata.write_rda(str(d / "Ionosphere.rda"), {"Ionosphere": frame})
    return d


def _cfg(tmp_path: Path, path: Path, missing: str | None) -> Path:
    data = {"name": "odds_ionosphere", "path": str(path)}
    if missing:
        data["missing"] = missing
    raw = {
        "rounds": 1,
        "data": data,
        "partition": {"clients": 2},
        "engine": {"progress": False},
        "methods": [{"name": "fedavg"}],
    }
    p = tmp_path / f"c-{missing}.toml"
    p.write_text(dump_toml(raw))
    return p


def test_missing_values_are_a_one_line_error(tmp_path: Path, holey_ionosphere: Path) -> None:
    out = tmp_path / "run"
    cfg = _cfg(tmp_path, holey_ionosphere, None)
    res = runner.invoke(app, ["run", str(cfg), "--out", str(out)])
    msg = one_line_error(res)
    assert "'odds_ionosphere' has 5 missing or infinite values in 5 rows (columns V4, V7)" in msg
    assert not out.exists()  # nothing trained, nothing left behind


def test_drop_and_impute_run(tmp_path: Path, holey_ionosphere: Path) -> None:
    sizes = {}
    for policy in ("drop", "impute-mean"):
        out = tmp_path / policy
        cfg = _cfg(tmp_path, holey_ionosphere, policy)
        res = runner.invoke(app, ["run", str(cfg), "--out", str(out), "-q"])
        assert res.exit_code == 0, res.output
        m = json.loads((out / "metrics.json").read_text())
        assert m["methods"]["fedavg"]["auroc"] is not None
        sizes[policy] = m["experiment"]["n_train"] + m["experiment"]["n_test"]
    assert 0 < sizes["impute-mean"] - sizes["drop"] <= 5  # the rows dropped, where they fell
