"""Heads on frozen EfficientNet-Lite0 features, on the clients of a fedad federation.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/frozen_heads.py CONFIG [--size 96]
        [--set seed=100 ...]

Builds the federation ``CONFIG`` describes (any fedad experiment TOML; only ``[data]``,
``[partition]`` and ``seed`` are read), embeds every client's training and test images with
the frozen off-the-shelf model (what ProtoFL's ``efficientnet`` trunk is before phase 1,
and what the ``pretrained`` detector uses) at ``--size`` px, and scores each client's own
test set with heads fit on its own training features only:

* ``knn``: the ``pretrained`` detector's default (mean distance to the 2 nearest);
* ``std``: Ledoit-Wolf Gaussian on per-feature standardised features (ProtoFL's earlier
  Gaussian head);
* ``centred``: the same Gaussian on the features as they are (centred only);
* ``l2``: the same on L2-normalised features (``normalize = "l2"``);
* ``l2-std``: L2-normalised, then standardised.

Prints each client's AUROC and the means (the papers' per-client convention). No test
label is used for anything but the AUROC.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from fedad.components.detectors.pretrained import PretrainedDetector
from fedad.config import load_config
from fedad.federation import build_federation
from fedad.methods.protofl.heads import ledoit_wolf
from fedad.metrics import auroc


def gaussian(train: np.ndarray, test: np.ndarray) -> np.ndarray:
    """Squared Mahalanobis distance of ``test`` rows under the Ledoit-Wolf fit of ``train``."""
    mean, precision = ledoit_wolf(train.astype(np.float64))
    d = test.astype(np.float64) - mean
    return np.asarray(((d @ precision) * d).sum(1))


def standardised(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both sets standardised with ``train``'s mean and floored standard deviation (as
    ProtoFL's detector does)."""
    mu, sd = train.mean(0), train.std(0)
    sd = np.maximum(sd, 1e-3 * float(sd.mean()) + 1e-6)
    return (train - mu) / sd, (test - mu) / sd


def unit(a: np.ndarray) -> np.ndarray:
    return a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", type=Path)
    ap.add_argument("--size", type=int, default=96, help="side images are resized to")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--set", nargs="*", default=[], help="config overrides, as fedad run's")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    fed = build_federation(load_config(args.config, args.set))
    det = PretrainedDetector(image_size=args.size, batch_size=128, k=2)
    res: dict[str, list[float]] = {"knn": [], "std": [], "centred": [], "l2": [], "l2-std": []}
    t0 = time.perf_counter()
    for c in fed.clients:
        tr = det.embed(np.asarray(c.x_train, dtype=np.float32))
        te = det.embed(np.asarray(c.x_test, dtype=np.float32))
        y = c.y_test
        res["knn"].append(auroc(y, det.set_features(tr).score_features(te)))
        res["std"].append(auroc(y, gaussian(*standardised(tr, te))))
        res["centred"].append(auroc(y, gaussian(tr, te)))
        res["l2"].append(auroc(y, gaussian(unit(tr), unit(te))))
        res["l2-std"].append(auroc(y, gaussian(*standardised(unit(tr), unit(te)))))
        row = " ".join(f"{k} {v[-1]:.3f}" for k, v in res.items())
        print(f"client {c.client_id}: {row} ({time.perf_counter() - t0:.0f} s)", flush=True)
    print(f"\n{args.config} {' '.join(args.set)} at {args.size} px, mean per-client AUROC:")
    print("| head | " + " | ".join(res) + " |")
    print("|---|" + "---|" * len(res))
    print("| AUROC | " + " | ".join(f"{np.mean(v):.4f}" for v in res.values()) + " |")


if __name__ == "__main__":
    main()
