"""Does FedDyMem's final global bank lag its final networks? (development only)

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/feddymem_lag.py RUN_SEED_DIR LABEL

For a finished FedDyMem run (one seed's directory): each client's final networks (from the
run's checkpoints) compute the memory features of the client's own training images,
reduce them with Algorithm 4's weights 1, and the server's Algorithm 3 (k-means) turns the
clients' banks into a fresh global bank. Prints the pooled image AUROC of the run's own
global bank and of the fresh one. The federation is rebuilt from the run's config; test
labels only score (use it on development seeds).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

import fedad.methods  # noqa: F401  (the detectors)
from fedad.config import load_config
from fedad.federation import build_federation
from fedad.methods.feddymem.detector import FedDyMemDetector
from fedad.methods.feddymem.memory import aggregate_banks, memory_reduce
from fedad.runs import load_run


def main() -> None:
    run_dir, label = Path(sys.argv[1]), sys.argv[2]
    fed = build_federation(load_config(run_dir / "config.toml"))
    run = load_run(run_dir)
    dets: dict[int, FedDyMemDetector] = {}
    banks, weights = [], []
    for c in fed.clients:
        det = run.detector(label, c.client_id)
        assert isinstance(det, FedDyMemDetector)
        x = np.asarray(c.x_train, np.float32)
        banks.append(memory_reduce(det.memories(det.features(x)), None, 0))
        weights.append(float(len(x)))
        dets[c.client_id] = det
    fresh = aggregate_banks(banks, seed=0, weights=weights)
    for name, bank in (("run bank", None), ("fresh bank", fresh)):
        scores, labels = [], []
        for c in fed.clients:
            det = dets[c.client_id]
            if bank is not None:
                det.set_bank(bank)
                det.calibrate(np.asarray(c.x_train, np.float32))  # a no-op without score_norm
            scores.append(det.score(np.asarray(c.x_test, np.float32)))
            labels.append(c.y_test)
        auroc = roc_auc_score(np.concatenate(labels), np.concatenate(scores))
        print(f"{name}: pooled image AUROC {auroc:.4f}")


if __name__ == "__main__":
    main()
