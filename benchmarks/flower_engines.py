"""Wall time per round: in-process vs Flower simulation vs Flower deployment, one run.

FedAvg with the autoencoder on digits (normal 0-4, anomalies 5-9), IID, 3 clients and
3 rounds, on each engine; then 100 clients in-process and in Flower simulation. Seconds per
round come from ``history.csv``; round 1 carries start-up costs (Ray, process spawns,
first torch optimiser step), so the ratio uses rounds 2-3. Also checks that the metrics
agree across engines.

    .venv/bin/python benchmarks/flower_engines.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from fedad.config import parse_config
from fedad.runner import run_experiment

ENGINES = ("inprocess", "flower-simulation", "flower-deployment")


def run(engine: str, clients: int, rounds: int = 3) -> tuple[list[float], float, float]:
    cfg = parse_config(
        {
            "seed": 0,
            "rounds": rounds,
            "data": {"name": "digits", "normal": [0, 1, 2, 3, 4], "anomaly": [5, 6, 7, 8, 9]},
            "partition": {"scheme": "iid", "clients": clients},
            "engine": {"name": engine, "progress": False},
            "methods": [{"name": "fedavg", "detector": "autoencoder"}],
        }
    )
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        data: dict[str, Any] = run_experiment(cfg, Path(tmp))
        total = time.perf_counter() - t0
        lines = (Path(tmp) / "history.csv").read_text().splitlines()
    header = lines[0].split(",")
    rows = [dict(zip(header, line.split(","), strict=False)) for line in lines[1:]]
    per_round = [float(r["seconds"]) for r in rows if int(r["round"]) >= 1]
    return per_round, total, float(data["methods"]["fedavg"]["auroc"])


def main() -> None:
    print("| engine | clients | round 1 s | mean of rounds 2-3 s | vs in-process | run s | AUROC |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for clients, engines in ((3, ENGINES), (100, ENGINES[:2])):
        base = None
        for engine in engines:
            per_round, total, auroc = run(engine, clients)
            steady = sum(per_round[1:]) / len(per_round[1:])
            base = steady if base is None else base
            print(
                f"| {engine} | {clients} | {per_round[0]:.2f} | {steady:.3f} | "
                f"{steady / base:.1f}x | {total:.1f} | {auroc:.6f} |"
            )


if __name__ == "__main__":
    main()
