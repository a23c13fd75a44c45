"""In-process engine overhead, and clients in worker processes (``engine.workers``).

FedAvg with the autoencoder on Fashion-MNIST (IID, 100 training images per client), 10 and
100 clients, with ``workers`` 1 and 2, measured in one run:

- ``overhead = wall / client_compute - 1`` with one process: message copies, byte
  accounting, reply checks, aggregation and history; target below 5%;
- ``wall / (compute / workers)``: how far the training rounds are from perfect parallel
  use of the workers (1.0), where ``compute`` sums the seconds the clients' handlers took
  in their workers (each worker has threads // workers torch threads); target below 1.25
  on a 2-core machine at 100 clients;
- ``total s``: the whole ``run_method`` (worker start-up and the evaluation phase included),
  and the speed-up of that total over one process.

    .venv/bin/python benchmarks/engine_overhead.py [--rounds 3] [--workers 1 2]
"""

from __future__ import annotations

import argparse
import platform
import time

import torch
from suites import fashion_fedavg

from fedad.federation import build_federation
from fedad.runner import build_algorithms, run_method


def measure(clients: int, rounds: int, workers: int) -> tuple[float, float, float]:
    """(training seconds, summed client seconds, total seconds of run_method)."""
    cfg = fashion_fedavg(clients, rounds, 100, 200, {"workers": workers})
    fed = build_federation(cfg)
    (algo,) = build_algorithms(cfg, fed).values()
    t0 = time.perf_counter()
    out = run_method(cfg, algo, fed)
    return out.seconds, out.client_seconds, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
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
