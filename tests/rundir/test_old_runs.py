"""Run directories written by an earlier fedad load, score and report as they did.

``old_runs/`` holds two run directories written by fedad at commit 191b36f (before the
shared contracts moved into ``fedad.core`` and the run directory into ``fedad.rundir``), and
what that fedad gave for them:

- ``tables/`` (``tables.toml``): examples/own-data's breast-cancer table, one client per
  site (3, natural partition, a categorical ``scanner`` column), 3 rounds; methods
  ``fedavg-ae`` (FedAvg autoencoder), ``onlad``, ``local-ocsvm`` and ``local-pyod-knn``.
- ``images/`` (``images.toml``): scikit-learn's 8x8 digits, 3 IID clients, 3 rounds;
  methods ``fedavg-ae`` and ``fadngs``.
- ``inputs/``: ``rows.csv`` (examples/own-data's 40 new rows and 10 made from them, with a
  scanner the run never saw), ``digits/`` (12 digits as PNG files) and ``digits.npy`` (the
  same images as arrays).
- ``references/``: ``RUN.LABEL.csv``, what ``fedad score`` wrote; ``api_scores.npz``,
  ``fedad.load(RUN).score(LABEL, inputs, client)`` and each client's ``threshold_``;
  ``auroc.json``, each method's pooled AUROC in ``metrics.json``.

Each run's ``report.html`` was left out (``fedad report`` writes it again); nothing else was
changed. They were written on CPU with the project's virtual environment, ``OLD`` a checkout
of commit 191b36f, in an empty folder into which ``tables.toml``, ``images.toml`` and
``make_references.py`` of ``old_runs/`` had been copied:

    export PYTHONPATH=OLD/src
    python OLD/examples/own-data/make_table.py data
    python -m fedad.cli run tables.toml --out tables
    python -m fedad.cli run images.toml --out images
    python make_references.py
    rm tables/report.html images/report.html

and ``tables/``, ``images/``, ``inputs/`` and ``references/`` were copied into ``old_runs/``
(``data/``, the training table, was not). ``make_references.py`` runs ``fedad score RUN DATA
--method LABEL`` (``--id-column id`` for the table) for every method. On the machine that
wrote them, the fedad of the commit that added this test scored them bit for bit as the
references say; the checks allow a relative 1e-6 for another machine's arithmetic.

Everything is read from a copy in a temporary folder: the committed files are never written.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import fedad
from fedad.cli.app import app

OLD_RUNS = Path(__file__).parent / "old_runs"
REFERENCES = OLD_RUNS / "references"
LABELS = {
    "tables": ["fedavg-ae", "local-ocsvm", "local-pyod-knn", "onlad"],
    "images": ["fadngs", "fedavg-ae"],
}
CLIENTS = 3
RTOL = 1e-6
RUNS = [(run, label) for run, labels in LABELS.items() for label in labels]

runner = CliRunner()


def _needs(label: str) -> None:
    if "pyod" in label:
        pytest.importorskip("pyod")


@pytest.fixture(scope="module")
def copied(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of ``old_runs/`` (the committed files stay as written)."""
    dst = tmp_path_factory.mktemp("old") / "old_runs"
    shutil.copytree(OLD_RUNS, dst)
    return dst


@pytest.fixture(scope="module")
def loaded(copied: Path) -> dict[str, Any]:
    return {run: fedad.load(copied / run) for run in LABELS}


def _inputs(copied: Path, run: str) -> Any:
    if run == "tables":
        return pd.read_csv(copied / "inputs" / "rows.csv")
    return np.load(copied / "inputs" / "digits.npy")


def _score_rows(text: str) -> tuple[list[tuple[str, str, int]], np.ndarray]:
    """``fedad score``'s CSV as (id, client, anomaly) rows and the scores."""
    rows = list(csv.DictReader(io.StringIO(text)))
    keys = [(r["id"], r["client"], int(r["anomaly"])) for r in rows]
    return keys, np.array([float(r["score"]) for r in rows])


def test_every_method_loads_with_its_metrics(loaded: dict[str, Any]) -> None:
    """``fedad.load`` finds every method's detectors for every client, the run's inputs,
    config and metrics (the pooled AUROC as written)."""
    auroc = json.loads((REFERENCES / "auroc.json").read_text())
    for run, labels in LABELS.items():
        r = loaded[run]
        assert sorted(r.detectors) == labels
        assert r.node_models == {}
        assert r.inputs is not None
        for label in labels:
            assert sorted(r.detectors[label]) == list(range(CLIENTS))
        assert {k: v["auroc"] for k, v in r.metrics["methods"].items()} == auroc[run]
        assert r.config["rounds"] == 3


@pytest.mark.parametrize(("run", "label"), RUNS)
def test_detectors_score_as_they_did(
    run: str, label: str, copied: Path, loaded: dict[str, Any]
) -> None:
    """Each client's loaded detector scores the rows (a DataFrame, preprocessed by the
    run's inputs.json) or images as it did, and keeps its threshold."""
    _needs(label)
    x = _inputs(copied, run)
    with np.load(REFERENCES / "api_scores.npz") as ref:
        for k in range(CLIENTS):
            got = np.asarray(loaded[run].score(label, x, k))
            want = ref[f"{run}/{label}/{k}/score"]
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=0)
            assert loaded[run].detector(label, k).threshold_ == ref[f"{run}/{label}/{k}/threshold"]


@pytest.mark.parametrize(("run", "label"), RUNS)
def test_fedad_score_writes_what_it_did(run: str, label: str, copied: Path, tmp_path: Path) -> None:
    """``fedad score`` gives every row or image the id, client, score and flag it gave
    (table rows to their own site's detector, a scanner never seen among them)."""
    _needs(label)
    data = copied / "inputs" / ("rows.csv" if run == "tables" else "digits")
    extra = ["--id-column", "id"] if run == "tables" else []
    out = tmp_path / "scores.csv"
    args = ["score", str(copied / run), str(data), "--method", label, "--out", str(out)]
    res = runner.invoke(app, [*args, *extra])
    assert res.exit_code == 0, res.output
    keys, scores = _score_rows(out.read_text())
    ref_keys, ref_scores = _score_rows((REFERENCES / f"{run}.{label}.csv").read_text())
    assert keys == ref_keys
    np.testing.assert_allclose(scores, ref_scores, rtol=RTOL, atol=0)


@pytest.mark.parametrize("run", list(LABELS))
def test_fedad_report_renders_an_old_run(run: str, copied: Path, tmp_path: Path) -> None:
    """``fedad report`` renders an old run (on a copy of its own): every method's row
    and its AUROC."""
    run_dir = shutil.copytree(copied / run, tmp_path / run)
    res = runner.invoke(app, ["report", str(run_dir)])
    assert res.exit_code == 0, res.output
    html = (run_dir / "report.html").read_text()
    auroc = json.loads((REFERENCES / "auroc.json").read_text())[run]
    for label in LABELS[run]:
        assert f"<td>{label}</td>" in html
        assert f">{auroc[label]:.3f}</td>" in html
