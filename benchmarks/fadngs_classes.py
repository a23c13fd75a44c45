"""Which classes a finished Fashion-MNIST run's detectors confuse: AUROC per anomaly class.

    .venv/bin/python benchmarks/fadngs_classes.py RUN_DIR [--label LABEL ...] [--per-class 500]

``RUN_DIR`` is one seed's run (e.g. a ``benchmarks/fadngs.py --work`` folder's
``seed-0``). Scores ``--per-class`` images of every class of Fashion-MNIST's official test
split (none of them seen in training: the clients' images come from the training split)
with client 0's detector of each method (all by default), and prints one JSON line per
method: the AUROC of the normal classes' images against each anomaly class's, and the mean
score of each class in units of the normal images' spread (0: the normal images' median).
A diagnostic: it reads test labels, so nothing in it may choose a method or a setting.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

import fedad
from fedad.blas import limit_blas_threads
from fedad.data.idx import load_fashion_mnist
from fedad.data.types import Dataset


def auroc(normal: np.ndarray, anomalous: np.ndarray) -> float:
    """AUROC of ``anomalous`` scores against ``normal`` ones."""
    y = np.r_[np.zeros(len(normal)), np.ones(len(anomalous))]
    return float(roc_auc_score(y, np.r_[normal, anomalous]))


def load_run(path: Path) -> tuple[Any, list[int], list[int], Dataset]:
    """A finished run (:func:`fedad.load`), its normal and anomaly classes, and
    Fashion-MNIST with its official test split."""
    run = fedad.load(str(path))
    data = run.config["data"]
    ds = load_fashion_mnist(data.get("path"))
    assert ds.x_test is not None and ds.y_test is not None
    return run, list(data["normal"]), list(data["anomaly"]), ds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--label", nargs="+", default=None)
    ap.add_argument("--per-class", type=int, default=500)
    args = ap.parse_args()
    limit_blas_threads()
    run, normal, anomaly, ds = load_run(args.run)
    assert ds.y_test is not None
    rng = np.random.default_rng(0)
    picks = {
        c: rng.choice(np.flatnonzero(ds.y_test == c), args.per_class, replace=False)
        for c in normal + anomaly
    }
    x = np.asarray(ds.x_test, dtype=np.float32)  # the loader gives (N, 1, 28, 28) in [0, 1]
    for label in args.label or list(run.detectors):
        det = run.detector(label)
        s = {c: np.asarray(det.score(x[i]), dtype=np.float64) for c, i in picks.items()}
        ref = np.concatenate([s[c] for c in normal])
        med, iqr = np.median(ref), np.subtract(*np.percentile(ref, [75, 25])) or 1.0
        aurocs = {ds.classes[c]: round(auroc(ref, s[c]), 3) for c in anomaly}
        where = {ds.classes[c]: round(float((np.median(s[c]) - med) / iqr), 2) for c in s}
        print(json.dumps({"method": label, "auroc_by_anomaly": aurocs, "median_by_class": where}))


if __name__ == "__main__":
    main()
