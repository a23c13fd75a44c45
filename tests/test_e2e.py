"""Slow end-to-end runs of the shipped configs, as a user runs them (marked ``slow``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
MLBENCH = Path("/usr/lib/R/site-library/mlbench/data/Satellite.rda")


def fedad(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fedad.cli", *args],
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=ROOT,
    )


@pytest.mark.skipif(not FMNIST.exists(), reason="Debian dataset-fashion-mnist not installed")
def test_quickstart_as_in_the_readme(tmp_path: Path) -> None:
    p = fedad("run", "configs/quickstart.toml", "--out", str(tmp_path), "--quiet")
    assert p.returncode == 0, p.stderr
    m = json.loads((tmp_path / "metrics.json").read_text())["methods"]
    assert len(m) == 8
    for label, entry in m.items():
        # every detector learns something on Fashion-MNIST normal-vs-anomaly classes
        assert entry["auroc"] > 0.65, (label, entry["auroc"])
        assert entry["events"] == []
    # communication: local sends nothing, centralized sends the data once
    assert m["local-ae"]["bytes_up"] < 1e4
    n_train = json.loads((tmp_path / "metrics.json").read_text())["experiment"]["n_train"]
    assert m["centralized-ae"]["bytes_up"] >= n_train * 28 * 28 * 4
    assert (tmp_path / "report.html").stat().st_size > 10_000


@pytest.mark.skipif(not MLBENCH.exists(), reason="Debian r-cran-mlbench not installed")
def test_odds_config(tmp_path: Path) -> None:
    p = fedad("run", "configs/odds_satellite.toml", "--out", str(tmp_path), "--quiet")
    assert p.returncode == 0, p.stderr
    m = json.loads((tmp_path / "metrics.json").read_text())["methods"]
    for label, entry in m.items():
        assert entry["auroc"] > 0.6, (label, entry["auroc"])


@pytest.mark.skipif(not MLBENCH.exists(), reason="Debian r-cran-mlbench not installed")
@pytest.mark.parametrize("name", ["odds_shuttle", "odds_breastw", "odds_ionosphere"])
def test_every_odds_set_runs(name: str, tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'rounds = 5\n[data]\nname = "{name}"\n[partition]\nclients = 3\n'
        '[[methods]]\nname = "fedavg"\n[[methods]]\nname = "fedavg"\ndetector = "deepsvdd"\n'
    )
    p = fedad("run", str(cfg), "--out", str(tmp_path / "o"), "--quiet")
    assert p.returncode == 0, p.stderr
    m = json.loads((tmp_path / "o" / "metrics.json").read_text())["methods"]
    assert m["fedavg"]["auroc"] > 0.6


@pytest.mark.skipif(not FMNIST.exists(), reason="Debian dataset-fashion-mnist not installed")
@pytest.mark.parametrize("scenario", [1, 2, 3])
def test_onlad_scenarios(scenario: int, tmp_path: Path) -> None:
    p = fedad("run", f"configs/onlad_scenario{scenario}.toml", "--out", str(tmp_path), "--quiet")
    assert p.returncode == 0, p.stderr
    data = json.loads((tmp_path / "metrics.json").read_text())
    m = data["methods"]
    assert set(m) == {"onlad", "onlad-score", "onlad-selective"}
    for entry in m.values():
        assert entry["auroc"] > 0.95 and entry["normal_f1"] > 0.9
    history = (tmp_path / "history.csv").read_text().splitlines()
    header = history[0].split(",")
    rows = [dict(zip(header, line.split(","), strict=False)) for line in history[1:]]
    selective = [r for r in rows if r["method"] == "onlad-selective" and r["round"] != "0"]
    assert len(selective) == 10 and all(r["eval_auroc"] for r in selective)
    if scenario == 3:
        (bad,) = data["experiment"]["attacked_clients"]
        for r in selective:
            weights = dict(w.split(":") for w in r["client_weights"].split())
            assert float(weights[str(bad)]) == 0.0
