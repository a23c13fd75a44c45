"""Wall time per round: in-process vs Flower simulation vs Flower deployment, one run.

FedAvg with the autoencoder on digits (normal 0-4, anomalies 5-9), IID, 3 clients and
3 rounds, on each engine; then 100 clients in-process and in Flower simulation. Seconds per
round come from ``history.csv``; round 1 carries start-up costs (Ray, process spawns,
first torch optimiser step), so the ratio uses rounds 2-3. Also checks that the metrics
agree across engines.

``--secagg`` measures what Flower's SecAgg+ costs instead: the same runs with and without
``privacy.secagg``, seconds per round, bytes up per round (masked vectors) and the
protocol's own bytes (``secagg_bytes``: keys, encrypted shares, stage configs).

    .venv/bin/python benchmarks/flower_engines.py [--secagg]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from fedad.config import parse_config
from fedad.runner import run_experiment

ENGINES = ("inprocess", "flower-simulation", "flower-deployment")


def history(
    engine: str, clients: int, rounds: int = 3, privacy: dict[str, Any] | None = None
) -> tuple[list[dict[str, str]], float, float]:
    """(history rows, whole-run seconds, AUROC) of one run."""
    cfg = parse_config(
        {
            "seed": 0,
            "rounds": rounds,
            "data": {"name": "digits", "normal": [0, 1, 2, 3, 4], "anomaly": [5, 6, 7, 8, 9]},
            "partition": {"scheme": "iid", "clients": clients},
            "engine": {"name": engine, "progress": False},
            "privacy": privacy or {},
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
    return rows, total, float(data["methods"]["fedavg"]["auroc"])


def run(engine: str, clients: int, rounds: int = 3) -> tuple[list[float], float, float]:
    rows, total, auroc = history(engine, clients, rounds)
    per_round = [float(r["seconds"]) for r in rows if int(r["round"]) >= 1]
    return per_round, total, auroc


def secagg() -> None:
    """Plain vs SecAgg+ on each engine: seconds and bytes per round (rounds 2-3)."""
    print(
        "| engine | clients | SecAgg+ | rounds 2-3 s (mean) | vs plain | bytes up / round | "
        "protocol bytes / round | AUROC |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for clients, engines in ((3, ENGINES), (100, ENGINES[:2])):
        for engine in engines:
            base = None
            for on in (False, True):
                rows, _, auroc = history(engine, clients, privacy={"secagg": on})
                steady = [r for r in rows if int(r["round"]) >= 2]
                s = sum(float(r["seconds"]) for r in steady) / len(steady)
                up = sum(int(r["bytes_up"]) for r in steady) / len(steady)
                proto = sum(float(r.get("secagg_bytes") or 0) for r in steady) / len(steady)
                base = s if base is None else base
                print(
                    f"| {engine} | {clients} | {'on' if on else 'off'} | {s:.3f} | "
                    f"{s / base:.1f}x | {up:,.0f} | {proto:,.0f} | {auroc:.6f} |"
                )


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--secagg", action="store_true", help="measure SecAgg+'s cost")
    if parser.parse_args().secagg:
        secagg()
    else:
        main()
