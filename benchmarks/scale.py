"""Scale: seconds per round and peak memory over 10, 100 and 1,000 clients, per engine.

FedAvg with the autoencoder on Fashion-MNIST (normal 0-4, anomalies 5-9, IID, 30 training
images per client, pooled test set capped at 2,000), ``--rounds`` rounds (default 3), on the
in-process engine with ``workers`` 1 and 2 and on the Flower simulation engine, all in one
run. Seconds per round are the mean of rounds 2.. from ``history.csv`` (round 1 carries
start-up: worker or Ray processes, torch's first optimiser step). Peak memory is the largest
sum of the resident set sizes of this process and all its descendants (workers, Ray's
processes), sampled every 0.1 s by a thread (psutil) while the run goes. ``data MB`` is the
federation's feature arrays (training + test); ``state MB`` the pickled size of the
clients' states after the run (in-process, one process only), which is where the rest of the
in-process memory goes.

    .venv/bin/python benchmarks/scale.py [--rounds 3] [--clients 10 100 1000]
"""

from __future__ import annotations

import argparse
import os
import pickle
import platform
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import torch
from suites import fashion_fedavg

from fedad.federation import build_federation
from fedad.runner import build_algorithms, run_method

SETTINGS = (("inprocess", 1), ("inprocess", 2), ("flower-simulation", 1))


class PeakRss:
    """The peak RSS of this process tree, sampled in a thread."""

    def __init__(self, every: float = 0.1) -> None:
        self.every, self.peak, self._stop = every, 0, threading.Event()
        self._me = psutil.Process(os.getpid())
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        total = 0
        for p in [self._me, *self._me.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            self._stop.wait(self.every)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def measure(engine: str, workers: int, clients: int, rounds: int) -> dict[str, Any]:
    cfg = fashion_fedavg(clients, rounds, 30, 2000, {"name": engine, "workers": workers})
    fed = build_federation(cfg)
    data_mb = sum(c.x_train.nbytes + c.x_test.nbytes for c in fed.clients) / 1e6  # type: ignore[union-attr]
    (algo,) = build_algorithms(cfg, fed).values()
    with tempfile.TemporaryDirectory() as tmp, PeakRss() as mem:
        t0 = time.perf_counter()
        out = run_method(cfg, algo, fed, workdir=Path(tmp))
        total = time.perf_counter() - t0
    steady = [float(r["seconds"]) for r in out.history if int(r["round"]) >= 2]
    state_mb = len(pickle.dumps(out.client_states)) / 1e6 if out.client_states else None
    return {
        "round1": float(out.history[0]["seconds"]),
        "per_round": sum(steady) / len(steady) if steady else float("nan"),
        "total": total,
        "peak_mb": mem.peak / 1e6,
        "data_mb": data_mb,
        "state_mb": state_mb,
        "bytes_up": out.bytes_up,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 100, 1000])
    args = ap.parse_args()
    print(
        f"# scale, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.rounds} rounds"
    )
    print(
        "| clients | engine | workers | round 1 s | s / round (2..) | run s | peak MB "
        "| data MB | client states MB |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for clients in args.clients:
        for engine, workers in SETTINGS:
            r = measure(engine, workers, clients, args.rounds)
            state = "–" if r["state_mb"] is None else f"{r['state_mb']:.1f}"
            print(
                f"| {clients} | {engine} | {workers} | {r['round1']:.2f} | {r['per_round']:.2f} "
                f"| {r['total']:.1f} | {r['peak_mb']:.0f} | {r['data_mb']:.1f} | {state} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
