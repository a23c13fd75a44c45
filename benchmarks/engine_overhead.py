"""In-process engine overhead: wall time of a run divided by the summed client compute time.

FedAvg with the autoencoder on Fashion-MNIST (IID, 100 training images per client), 10 and
100 clients, measured in one run. ``overhead = wall / client_compute - 1`` includes message
copies, byte accounting, reply checks, aggregation and history; target below 5%.

    .venv/bin/python benchmarks/engine_overhead.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import platform

import torch

from fedad.config import parse_config
from fedad.data.federation import build_federation
from fedad.runner import build_algorithms, run_method


def measure(clients: int, rounds: int) -> tuple[float, float]:
    cfg = parse_config(
        {
            "seed": 0,
            "rounds": rounds,
            "data": {
                "name": "fashion_mnist",
                "normal": [0, 1, 2, 3, 4],
                "anomaly": [5, 6, 7, 8, 9],
                "max_train_per_client": 100,
                "max_test": 200,
            },
            "partition": {"scheme": "iid", "clients": clients},
            "engine": {"progress": False},
            "methods": [{"name": "fedavg", "detector": "autoencoder"}],
        }
    )
    fed = build_federation(cfg)
    (algo,) = build_algorithms(cfg, fed).values()
    out = run_method(cfg, algo, fed)
    return out.seconds, out.client_seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(
        f"# engine overhead, {platform.processor() or platform.machine()}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.rounds} rounds"
    )
    print("| clients | wall s | client compute s | wall / compute | overhead |")
    print("|---:|---:|---:|---:|---:|")
    for clients in (10, 100):
        wall, compute = measure(clients, args.rounds)
        ratio = wall / compute
        print(
            f"| {clients} | {wall:.2f} | {compute:.2f} | {ratio:.4f} | {100 * (ratio - 1):.2f}% |"
        )


if __name__ == "__main__":
    main()
