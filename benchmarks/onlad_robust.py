"""ONLAD under poisoning: FedAvg, selective aggregation (paper) and onlad-robust (ours).

    .venv/bin/python benchmarks/onlad_robust.py [--seeds 5] [--jobs 1] [--only fashion|satellite]
                                                [--detect]

Settings (one config each, every method of the config on the same federation per run):

* ``fashion``: ``configs/onlad_robust_fashion.toml`` — Fashion-MNIST, normal 1,3,5,7,9,
  anomalies 0,2,4,6,8, six clients, Dirichlet alpha = 0.5, 1,000 images per client;
* ``satellite``: ``configs/onlad_robust_satellite.toml`` — ODDS satellite, six clients, IID.

Scenarios: clean (``attack.kind = "none"``) and four attacks on two clients of six:
``contamination`` (half of their data replaced by anomalies), ``gaussian-data`` (all of their
data replaced by N(0, 1) samples), ``scaled-update`` (update times 10), ``sign-flip``.
Seeds ``0 .. seeds-1``, each scenario one fedad run with ``seeds = [0, ..., seeds - 1]``
(:func:`fedad.seeds.run_seeds` into a temporary directory, ``--jobs`` worker processes); AUROC
of the last round's global model, mean ± std over the seeds from its ``metrics.json``, rejected
updates per round from its ``history.csv``.

The configs have clients learn every sample (``detect = false``, the paper's assumption);
``--detect`` runs ONLAD's own detect-then-learn instead (``detect = true`` for every method).

Writes ``benchmarks/results/onlad_robust.json`` (``onlad_robust_detect.json`` with
``--detect``) and prints the markdown table of BENCHMARKS.md; rejected updates per run are in
the JSON (``excluded_per_round``).
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from fedad.config import ExperimentConfig, apply_overrides, parse_config, read_toml
from fedad.seeds import run_seeds

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results"
SETTINGS = {
    "fashion": "onlad_robust_fashion.toml",
    "satellite": "onlad_robust_satellite.toml",
}
SCENARIOS: dict[str, list[str]] = {
    "clean": ['attack.kind="none"'],
    "contamination": ['attack.kind="contamination"', "attack.clients=2", "attack.fraction=0.5"],
    "gaussian-data": ['attack.kind="gaussian-data"', "attack.clients=2", "attack.fraction=1.0"],
    "scaled-update": ['attack.kind="scaled-update"', "attack.clients=2", "attack.scale=10"],
    "sign-flip": ['attack.kind="sign-flip"', "attack.clients=2"],
}


def config(name: str, overrides: list[str], seeds: int, detect: bool = False) -> ExperimentConfig:
    """The setting's config with ``seeds = [0, ..., seeds - 1]`` (replacing its ``seed``)."""
    raw = apply_overrides(
        read_toml(ROOT / "configs" / name), [*overrides, f"seeds={list(range(seeds))}"]
    )
    if detect:
        for m in raw["methods"]:
            m.setdefault("params", {})["detect"] = True
    return parse_config(raw)


def run(cfg: ExperimentConfig, jobs: int = 1) -> dict[str, dict[str, Any]]:
    """Every seed of ``cfg`` (all its methods on one federation per seed) as one fedad run.

    Per label: AUROC's mean and std over seeds (fedad's aggregate: ``np.mean`` and ``np.std``
    with ``ddof = 0``, as this script computed them before), each seed's AUROC, and each
    seed's rejected updates in rounds 1.. (``excluded`` of ``history.csv``).
    """
    with tempfile.TemporaryDirectory(prefix="fedad-onlad-robust-") as tmp:
        out = Path(tmp) / "run"
        data = run_seeds(cfg, out, jobs=jobs)
        with (out / "history.csv").open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    result: dict[str, dict[str, Any]] = {}
    for label, entry in data["methods"].items():
        result[label] = {
            "mean": entry["auroc"],
            "std": entry["std"]["auroc"],
            "per_seed": [p["auroc"] for p in entry["per_seed"]],
            "excluded_per_round": [
                [
                    int(r["excluded"]) if r.get("excluded") else 0
                    for r in rows
                    if r["method"] == label and r["seed"] == str(s) and int(r["round"]) >= 1
                ]
                for s in cfg.seed_list()
            ],
        }
    return result


def setting(name: str, seeds: int, detect: bool = False, jobs: int = 1) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for scen, overrides in SCENARIOS.items():
        t0 = time.perf_counter()
        result[scen] = run(config(SETTINGS[name], overrides, seeds, detect), jobs)
        print(f"  {name} / {scen}: {time.perf_counter() - t0:.1f} s", flush=True)
    return result


def table(results: dict[str, Any]) -> None:
    scens = list(SCENARIOS)
    print("| data | method | " + " | ".join(scens) + " | worst drop |")
    print("|---|---|" + "---:|" * (len(scens) + 1))
    for name, per in results.items():
        for label in per["clean"]:
            cells = [f"{per[s][label]['mean']:.3f} ± {per[s][label]['std']:.3f}" for s in scens]
            clean = per["clean"][label]["mean"]
            drop = max(clean - per[s][label]["mean"] for s in scens[1:])
            print(f"| {name} | {label} | " + " | ".join(cells) + f" | {drop:.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=1, help="worker processes for the seeds")
    ap.add_argument("--only", choices=list(SETTINGS))
    ap.add_argument("--detect", action="store_true", help="detect-then-learn on the clients")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / ("onlad_robust_detect.json" if args.detect else "onlad_robust.json")
    results: dict[str, Any] = json.loads(path.read_text()) if args.only and path.exists() else {}
    for name in SETTINGS:
        if args.only in (None, name):
            results[name] = setting(name, args.seeds, args.detect, args.jobs)
    path.write_text(json.dumps({k: results[k] for k in SETTINGS if k in results}, indent=2))
    table({k: results[k] for k in SETTINGS if k in results})


if __name__ == "__main__":
    main()
