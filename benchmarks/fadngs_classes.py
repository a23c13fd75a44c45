"""Which classes a finished Fashion-MNIST run's detectors confuse: AUROC per anomaly class.

    .venv/bin/python benchmarks/fadngs_classes.py RUN_DIR [--label LABEL ...] [--per-class 500]

``RUN_DIR`` is one seed's run of a Fashion-MNIST federation, e.g. the classes swapped, seed
0, of the suite ``benchmarks/suites/fadngs-eval.toml`` (docs/methods/fadngs.md, "Measured")::

    OMP_NUM_THREADS=1 fedad bench benchmarks/suites/fadngs-eval.toml --out bench/fadngs-eval \\
        -q --jobs 2
    .venv/bin/python benchmarks/fadngs_classes.py bench/fadngs-eval/runs/reverse/seed-0 \\
        --label fadngs-nosed fedavg-ae

Scores ``--per-class`` images of every class of Fashion-MNIST's official test split (none of
them seen in training: the clients' images come from the training split) with client 0's
detector of each method (all by default), and prints one JSON line per method: the AUROC of
the normal classes' images against each anomaly class's, and the median score of each class
in units of the normal images' spread (0: the normal images' median). A diagnostic: it reads
test labels, so nothing in it may choose a method or a setting.

Public API only: :func:`fedad.load` and the run's ``config.toml`` (its ``data`` table), and
the official test files read here (``data.path``, else the Debian package's folder,
docs/data.md).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # numpy's BLAS on one thread, before numpy loads

import argparse  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402

import fedad  # noqa: E402

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
"""Where Debian's ``dataset-fashion-mnist`` puts the files (docs/data.md)."""
CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
"""Fashion-MNIST's class names, by label."""


def read_idx(folder: Path, stem: str) -> np.ndarray:
    """The array of the IDX file ``stem`` (or ``stem.gz``) in ``folder``: a magic number
    (two zero bytes, the type code 0x08 for unsigned bytes, the number of dimensions), one
    big-endian uint32 per dimension, then the bytes."""
    plain = folder / stem
    if plain.is_file():
        raw = plain.read_bytes()
    else:
        with gzip.open(f"{plain}.gz") as fh:
            raw = fh.read()
    if raw[:3] != b"\x00\x00\x08":
        raise SystemExit(f"{plain}: not an IDX file of unsigned bytes")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def fashion_test(path: str | None) -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST's official test split: images ``(10000, 1, 28, 28)`` float32 in [0, 1]
    (as fedad loads them) and their labels."""
    folder = Path(path).expanduser() if path else FASHION_MNIST_DIR
    images = read_idx(folder, "t10k-images-idx3-ubyte")
    labels = read_idx(folder, "t10k-labels-idx1-ubyte").astype(np.int64)
    x = images.astype(np.float32) * np.float32(1.0 / 255.0)
    return x[:, None], labels


def class_index(c: int | str) -> int:
    """A class of the config (an index, or a name as fedad accepts it) as its label."""
    if isinstance(c, int):
        return c
    names = [n.lower() for n in CLASSES]
    if c.lower() not in names:
        raise SystemExit(f"no Fashion-MNIST class {c!r}")
    return names.index(c.lower())


def auroc(normal: np.ndarray, anomalous: np.ndarray) -> float:
    """AUROC of ``anomalous`` scores against ``normal`` ones."""
    y = np.r_[np.zeros(len(normal)), np.ones(len(anomalous))]
    return float(roc_auc_score(y, np.r_[normal, anomalous]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="one seed's run directory")
    ap.add_argument("--label", nargs="+", default=None, help="methods (default: all)")
    ap.add_argument("--per-class", type=int, default=500)
    args = ap.parse_args()
    run = fedad.load(str(args.run))
    data = run.config["data"]
    if data.get("name") != "fashion_mnist" or data.get("size") not in (None, 28):
        raise SystemExit(f"{args.run}: not a run on Fashion-MNIST at 28 px")
    normal = [class_index(c) for c in data["normal"]]
    anomaly = [class_index(c) for c in data.get("anomaly") or []]
    if not anomaly:
        raise SystemExit(f"{args.run}: no anomaly classes of Fashion-MNIST in its config")
    x, y = fashion_test(data.get("path"))
    rng = np.random.default_rng(0)
    picks = {
        c: rng.choice(np.flatnonzero(y == c), args.per_class, replace=False)
        for c in normal + anomaly
    }
    for label in args.label or list(run.detectors):
        det = run.detector(label)
        s = {c: np.asarray(det.score(x[i]), dtype=np.float64) for c, i in picks.items()}
        ref = np.concatenate([s[c] for c in normal])
        med, iqr = np.median(ref), np.subtract(*np.percentile(ref, [75, 25])) or 1.0
        aurocs = {CLASSES[c]: round(auroc(ref, s[c]), 3) for c in anomaly}
        where = {CLASSES[c]: round(float((np.median(s[c]) - med) / iqr), 2) for c in s}
        print(json.dumps({"method": label, "auroc_by_anomaly": aurocs, "median_by_class": where}))


if __name__ == "__main__":
    main()
