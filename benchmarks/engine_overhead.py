"""In-process engine overhead, and clients in worker processes (``engine.workers``).

FedAvg with the autoencoder on Fashion-MNIST (normal 0-4, anomalies 5-9, IID, 100 training
images per client, pooled test set capped at 200), 10 and 100 clients, with ``workers`` 1
and 2: one ``fedad run`` each, timings from its ``metrics.json``:

- ``overhead = wall / client_compute - 1`` with one process, where ``wall`` is
  ``train_seconds`` (the server program) and ``client_compute`` is ``client_seconds`` (the
  clients' handlers, summed): message copies, byte accounting, reply checks, aggregation
  and history; target below 5%;
- ``wall / (compute / workers)``: how far the training rounds are from perfect parallel
  use of the workers (1.0), where ``compute`` sums the seconds the clients' handlers took
  in their workers (each worker has threads // workers torch threads); target below 1.25
  on a 2-core machine at 100 clients;
- ``total s``: the method's ``seconds`` (worker start-up, the evaluation phase and the
  metrics included), and the speed-up of that total over one process.

    .venv/bin/python benchmarks/engine_overhead.py [--rounds 3] [--workers 1 2] [--clients 10 100]
"""

from __future__ import annotations

import argparse
import platform

import torch
from fedad_child import fedad_run

CONFIG = """\
seed = 0
rounds = {rounds}

[data]
name = "fashion_mnist"
normal = [0, 1, 2, 3, 4]
anomaly = [5, 6, 7, 8, 9]
max_train_per_client = 100
max_test = 200

[partition]
scheme = "iid"
clients = {clients}

[engine]
progress = false
workers = {workers}

[[methods]]
name = "fedavg"
detector = "autoencoder"
"""


def measure(clients: int, rounds: int, workers: int) -> tuple[float, float, float]:
    """(training seconds, summed client seconds, the method's whole seconds)."""
    text = CONFIG.format(rounds=rounds, clients=clients, workers=workers)
    m = fedad_run(text).metrics["methods"]["fedavg"]
    return float(m["train_seconds"]), float(m["client_seconds"]), float(m["seconds"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 100])
    args = ap.parse_args()
    threads = torch.get_num_threads()
    print(
        f"# engine overhead, {platform.processor() or platform.machine()}, "
        f"torch {torch.__version__}, {threads} threads, {args.rounds} rounds"
    )
    print(
        "| clients | workers | threads/worker | wall s | client compute s | overhead "
        "| wall / (compute / workers) | total s | total speed-up |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for clients in args.clients:
        base_total = None
        for w in args.workers:
            wall, compute, total = measure(clients, args.rounds, w)
            base_total = total if base_total is None else base_total
            ratio = wall / (compute / w)
            overhead = f"{100 * (wall / compute - 1):.2f}%" if w == 1 else "–"
            print(
                f"| {clients} | {w} | {max(1, threads // w)} | {wall:.2f} | {compute:.2f} "
                f"| {overhead} | {ratio:.3f} | {total:.2f} | {base_total / total:.2f}x |",
                flush=True,
            )


if __name__ == "__main__":
    main()
