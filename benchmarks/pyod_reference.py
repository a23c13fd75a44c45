"""PyOD on the pooled data of a run's federation, and why fedad's ``ocsvm`` ranks below PyOD's.

    .venv/bin/python benchmarks/pyod_reference.py [CONFIG] [--raw]

``CONFIG`` (default ``configs/pyod_satellite.toml``: ODDS satellite, 5 clients, Dirichlet
1.0, contamination 0.02, seed 0) gives the federation; its clients' training data are
pooled (as ``centralized`` pools the uploads) and their local test sets scored together.
``--raw`` turns off the run's z-scoring of the features (``data.standardize = false``).

1. PyOD used directly, defaults: ``IForest(random_state=0)``, ``ECOD`` (the test set as one
   batch, as ``decision_function`` scores it, and one row at a time, as ``pyod-ecod`` does),
   ``KNN``, ``OCSVM``. AUROC.
2. scikit-learn's RBF one-class SVM over ``nu`` (fedad's ``ocsvm``: the contamination;
   PyOD's: 0.5) and ``gamma`` (fedad's: ``"scale"``, 1 / (D Var X); PyOD's: ``"auto"``,
   1 / D; and 4 / D, 16 / D): AUROC and the number of support vectors.

Prints markdown tables. Needs the ``pyod`` extra.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from sklearn.svm import OneClassSVM

from fedad.components.detectors.pyod_ecod import RowECOD
from fedad.config import parse_config
from fedad.federation import build_federation
from fedad.metrics import auroc
from fedad.toml_files import read_toml


def pooled(config: str, raw: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pooled training rows, the pooled local test rows and their labels."""
    spec = read_toml(config)
    if raw:
        spec.setdefault("data", {})["standardize"] = False
    fed = build_federation(parse_config(spec))
    x = np.concatenate([np.asarray(c.x_train) for c in fed.clients]).astype(np.float64)
    xt = np.concatenate([np.asarray(c.x_test) for c in fed.clients]).astype(np.float64)
    yt = np.concatenate([c.y_test for c in fed.clients])
    return x, xt, yt


def pyod_table(x: np.ndarray, xt: np.ndarray, yt: np.ndarray) -> None:
    from pyod.models.ecod import ECOD
    from pyod.models.iforest import IForest
    from pyod.models.knn import KNN
    from pyod.models.ocsvm import OCSVM

    print("| PyOD, defaults | AUROC | fit + score (s) |\n|---|---:|---:|")
    models = [
        ("IForest(random_state=0)", IForest(random_state=0)),
        ("ECOD", ECOD()),
        ("KNN", KNN()),
        ("OCSVM", OCSVM()),
    ]
    for name, model in models:
        t = time.perf_counter()
        s = model.fit(x).decision_function(xt)
        row(f"{name} (test set one batch)", auroc(yt, s), time.perf_counter() - t)
    t = time.perf_counter()
    s = RowECOD(x).score(xt)
    row("ECOD, one row at a time (pyod-ecod)", auroc(yt, s), time.perf_counter() - t)


def row(name: str, value: float, seconds: float) -> None:
    print(f"| {name} | {value:.3f} | {seconds:.1f} |")


def svm_table(x: np.ndarray, xt: np.ndarray, yt: np.ndarray) -> None:
    d = x.shape[1]
    gammas = [
        ("scale: 1/(D Var X)", 1.0 / (d * x.var())),
        ("auto: 1/D", 1.0 / d),
        ("4/D", 4.0 / d),
        ("16/D", 16.0 / d),
    ]
    nus = (0.02, 0.1, 0.5)
    head = " | ".join(f"nu = {nu}" for nu in nus)
    print(f"\n| gamma | {head} |\n|---|{'---:|' * len(nus)}")
    for name, g in gammas:
        cells = []
        for nu in nus:
            svm = OneClassSVM(kernel="rbf", gamma=g, nu=nu).fit(x)
            a = auroc(yt, -svm.decision_function(xt))
            cells.append(f"{a:.3f} ({len(svm.support_)} SVs)")
        print(f"| {name} = {g:.4g} | {' | '.join(cells)} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", default="configs/pyod_satellite.toml")
    ap.add_argument("--raw", action="store_true", help="data.standardize = false")
    args = ap.parse_args()
    x, xt, yt = pooled(args.config, args.raw)
    print(
        f"pooled training rows {x.shape}, test rows {xt.shape} ({yt.mean():.3f} anomalies), "
        f"Var X {x.var():.3f}\n"
    )
    pyod_table(x, xt, yt)
    svm_table(x, xt, yt)


if __name__ == "__main__":
    main()
