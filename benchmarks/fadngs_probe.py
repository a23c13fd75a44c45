"""Diagnostics of one FADngs run: what the score reads, and what an untrained encoder gives.

    .venv/bin/python benchmarks/fadngs_probe.py '{"method": "fadngs-nosed"}' [--threads 1]
        [--seed 100] [--normal 1 3 5 7 9] [--clients 5] [--per-client 200] [--rounds 10]
        [--init]

Builds the Fashion-MNIST federation (``dominant``, each client's own test share, anomalies
the classes not named normal), runs the method with the JSON params through the in-process
engine (one process, ``--threads`` torch threads, numpy's BLAS on one), and prints one JSON
line: the run's pooled AUROC, then the AUROC of the final global model scored three ways
with every client's training Gaussian refitted (``z``: eq. 6 on :math:`z(x)`, what FADngs
scores; ``unit``: on :math:`z / \\lVert z \\rVert`, the authors' code; ``f``: on the
backbone's features), the last round's loss, its collapsed value and ``rep_cos``.
``--init`` instead scores the untrained network (three initialisations): how much of the
AUROC Mahalanobis distance on random convolutional features already gives.

These are diagnostics, not benchmarks: docs/methods/fadngs.md and BENCHMARKS.md say which
numbers came from here (the dev federation: normal 1, 3, 5, 7, 9, seeds 100-102).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np
import torch
from sklearn.metrics import roc_auc_score

from fedad.blas import limit_blas_threads
from fedad.components.nn.resnet import Encoder
from fedad.config import parse_config
from fedad.data.types import Federation
from fedad.federation import build_federation
from fedad.fl.algorithm import Setup, build_algorithm
from fedad.fl.engine import run_inprocess
from fedad.methods.fadngs.density import fit_gaussians, min_mahalanobis
from fedad.methods.fadngs.detector import FADngsDetector
from fedad.methods.fadngs.privacy import unit_rows
from fedad.methods.fadngs.train import embed


def federation(args: argparse.Namespace) -> Federation:
    anomaly = [c for c in range(10) if c not in args.normal]
    cfg = parse_config({
        "seed": args.seed, "rounds": args.rounds,
        "data": {"name": "fashion_mnist", "normal": args.normal, "anomaly": anomaly,
                 "max_train_per_client": args.per_client, "max_test": 2000},
        "partition": {"scheme": "dominant", "clients": args.clients, "contamination": 0.01},
        "methods": [{"name": "fadngs-nosed"}],
    })  # fmt: skip
    return build_federation(cfg)


def scores(enc: Encoder, fed: Federation) -> dict[str, float]:
    """AUROC of eq. 6 on z, unit z and backbone features, every client's Gaussian refitted."""
    xt = np.concatenate([np.asarray(c.x_test) for c in fed.clients])
    yt = np.concatenate([c.y_test for c in fed.clients])
    out: dict[str, float] = {}
    for kind in ("z", "unit", "f"):

        def feats(x: np.ndarray, kind: str = kind) -> np.ndarray:
            if kind == "f":
                enc.eval()
                with torch.no_grad():
                    return enc(torch.from_numpy(x.astype(np.float32))).double().numpy()
            z = embed(enc, x)
            return unit_rows(z) if kind == "unit" else z

        fits = [fit_gaussians(feats(np.asarray(c.x_train)), np.zeros(c.n_train, int), 0.1)
                for c in fed.clients]  # fmt: skip
        means = np.concatenate([m for m, _ in fits])
        covs = np.concatenate([c for _, c in fits])
        out[kind] = round(float(roc_auc_score(yt, min_mahalanobis(feats(xt), means, covs))), 4)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("params", nargs="?", default="{}", help="JSON: method and its params")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=100)
    ap.add_argument("--normal", type=int, nargs="+", default=[1, 3, 5, 7, 9])
    ap.add_argument("--clients", type=int, default=5)
    ap.add_argument("--per-client", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--init", action="store_true", help="score untrained networks only")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    limit_blas_threads()
    fed = federation(args)
    params: dict[str, Any] = json.loads(args.params)
    if args.init:
        for s in range(3):
            det = FADngsDetector(input_shape=list(fed.feature_shape), seed=s, head_norm="none")
            print(json.dumps({"init_seed": s, **scores(det.build().encoder_, fed)}))
        return
    name = params.pop("method", "fadngs-nosed")
    setup = Setup(fed.kind, fed.feature_shape, rounds=args.rounds, seed=args.seed,
                  contamination=0.01, num_clients=len(fed.clients))  # fmt: skip
    algo = build_algorithm(name, params, setup)
    t0 = time.perf_counter()
    out = run_inprocess(algo, fed, rounds=args.rounds, seed=args.seed)
    ev = out.evaluations
    s = np.concatenate([np.asarray(ev[i].arrays["score"]) for i in sorted(ev)])
    y = np.concatenate([np.asarray(ev[i].arrays["label"]) for i in sorted(ev)])
    weights = {k: v for k, v in out.result.arrays.items() if k not in ("means", "covs")}
    enc = algo.make_detector().build().set_model(weights).encoder_  # type: ignore[attr-defined]
    last = out.history[-1]
    print(json.dumps({
        "method": name, "params": params, "seed": args.seed, "threads": args.threads,
        "auroc": round(float(roc_auc_score(y, s)), 4), **scores(enc, fed),
        **{k: round(float(last[k]), 4) for k in ("loss", "loss_collapsed", "rep_cos") if k in last},
        "seconds": round(time.perf_counter() - t0, 1),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
