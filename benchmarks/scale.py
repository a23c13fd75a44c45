"""Scale: seconds per round and peak memory over 10, 100 and 1,000 clients, per engine.

FedAvg with the autoencoder on Fashion-MNIST (normal 0-4, anomalies 5-9, IID, 30 training
images per client, pooled test set capped at 2,000), ``--rounds`` rounds (default 3), on the
in-process engine with ``workers`` 1 and 2 and on the Flower simulation engine: one
``fedad run`` per setting. Seconds per round are the mean of rounds 2.. from ``history.csv``
(round 1 carries start-up: worker or Ray processes, torch's first optimiser step); ``run s``
is the method's ``seconds`` in ``metrics.json`` (start-up, evaluation and metrics included).
Peak memory is the largest sum of the resident set sizes of the ``fedad run`` process and all
its descendants (workers, Ray's processes), sampled every 0.1 s by a thread (psutil) over the
whole command (interpreter start-up, data loading and the report included). ``data MB`` is the
federation's feature arrays (training + test, float32), from ``metrics.json``'s ``n_train``,
``n_test`` and ``feature_shape``.

    .venv/bin/python benchmarks/scale.py [--rounds 3] [--clients 10 100 1000]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import threading
from typing import Any

import psutil
import torch
from fedad_child import fedad_run

SETTINGS = (("inprocess", 1), ("inprocess", 2), ("flower-simulation", 1))

CONFIG = """\
seed = 0
rounds = {rounds}

[data]
name = "fashion_mnist"
normal = [0, 1, 2, 3, 4]
anomaly = [5, 6, 7, 8, 9]
max_train_per_client = 30
max_test = 2000

[partition]
scheme = "iid"
clients = {clients}

[engine]
name = "{engine}"
progress = false
workers = {workers}

[[methods]]
name = "fedavg"
detector = "autoencoder"
"""


class PeakRss:
    """The peak RSS of the process ``pid`` and its descendants, sampled in a thread."""

    def __init__(self, pid: int, every: float = 0.1) -> None:
        self.every, self.peak, self._stop = every, 0, threading.Event()
        self._root = psutil.Process(pid)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        try:
            procs = [self._root, *self._root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0
        total = 0
        for p in procs:
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
    """One ``fedad run`` of the setting: its round and run seconds, peak and data MB."""
    text = CONFIG.format(rounds=rounds, clients=clients, engine=engine, workers=workers)
    run = fedad_run(text, watch=PeakRss)
    metrics = run.metrics
    history = [r for r in run.history if r["method"] == "fedavg"]
    m, facts = metrics["methods"]["fedavg"], metrics["experiment"]
    steady = [float(r["seconds"]) for r in history if int(r["round"]) >= 2]
    values = (facts["n_train"] + facts["n_test"]) * math.prod(facts["feature_shape"])
    return {
        "round1": float(history[0]["seconds"]),
        "per_round": sum(steady) / len(steady) if steady else float("nan"),
        "total": float(m["seconds"]),
        "peak_mb": run.watched.peak / 1e6,
        "data_mb": values * 4 / 1e6,
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
        "| clients | engine | workers | round 1 s | s / round (2..) | run s | peak MB | data MB |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for clients in args.clients:
        for engine, workers in SETTINGS:
            r = measure(engine, workers, clients, args.rounds)
            print(
                f"| {clients} | {engine} | {workers} | {r['round1']:.2f} | {r['per_round']:.2f} "
                f"| {r['total']:.1f} | {r['peak_mb']:.0f} | {r['data_mb']:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
