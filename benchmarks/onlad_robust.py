"""ONLAD under poisoning: FedAvg, selective aggregation (paper) and onlad-robust (ours).

    .venv/bin/python benchmarks/onlad_robust.py [--seeds 5] [--jobs 1] [--no-detect]
                                                [--only tops|fashion|satellite|shuttle]

Settings (one config each, every method of the config on the same federation per run):

* ``tops``: ``configs/onlad_robust_fashion_tops.toml`` — Fashion-MNIST, normal 0,2,3,5,7
  (T-shirt, pullover, dress, sandal, sneaker), anomalies 1,4,6,8,9, six clients, Dirichlet
  alpha = 0.5, 1,000 images per client;
* ``fashion``: ``configs/onlad_robust_fashion.toml`` — Fashion-MNIST, normal 1,3,5,7,9,
  anomalies 0,2,4,6,8, otherwise the same;
* ``satellite``: ``configs/onlad_robust_satellite.toml`` — ODDS satellite, six clients, IID;
* ``shuttle``: ``configs/onlad_robust_shuttle.toml`` — ODDS shuttle, six clients, IID,
  1,000 samples per client.

Scenarios: clean (``attack.kind = "none"``) and the attacks, on at most a third of the
clients: ``contamination`` (half of the data of two clients replaced by anomalies),
``contamination-1`` (the same on one client), ``gaussian-data`` (all of the data of two
clients replaced by N(0, 1) samples), ``scaled-update`` (two clients' updates times 10),
``sign-flip`` (two clients). Seeds ``0 .. seeds-1``, each scenario one fedad run with
``seeds = [0, ..., seeds - 1]`` (:func:`fedad.seeds.run_seeds` into a temporary directory,
``--jobs`` worker processes); AUROC of the last round's global model, mean ± std over the
seeds from its ``metrics.json``; from its ``history.csv``, per seed, the updates given weight
0 in each round, split into the attacked clients' and the honest clients' (``refused``).

Beside the methods, ``server-only``: the AUROC of the model the server starts from (its 200
initial normal samples, inputs scaled with its own normal data, as ``onlad-robust`` does)
on the same test sets, with no client data at all: what the federation adds to
``onlad-robust`` is its clean AUROC minus this.

The configs run every method with default params (``detect = true``, ONLAD's own
detect-then-learn); ``--no-detect`` sets ``detect = false`` for every method, the paper's
experimental assumption. Writes ``benchmarks/results/onlad_robust_default.json``
(``onlad_robust_nodetect.json`` with ``--no-detect``) and prints the markdown tables of
BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from fedad.attacks import attacked_clients
from fedad.config import ExperimentConfig, apply_overrides, parse_config, read_toml
from fedad.data.types import dense
from fedad.federation import build_federation
from fedad.methods.onlad.federated import ONLADRobust
from fedad.methods.onlad.model import standardizer
from fedad.metrics import auroc
from fedad.runner import build_algorithms, with_server_data
from fedad.seeds import run_seeds

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results"
SETTINGS = {
    "tops": "onlad_robust_fashion_tops.toml",
    "fashion": "onlad_robust_fashion.toml",
    "satellite": "onlad_robust_satellite.toml",
    "shuttle": "onlad_robust_shuttle.toml",
}
SCENARIOS: dict[str, list[str]] = {
    "clean": ['attack.kind="none"'],
    "contamination": ['attack.kind="contamination"', "attack.clients=2", "attack.fraction=0.5"],
    "contamination-1": ['attack.kind="contamination"', "attack.clients=1", "attack.fraction=0.5"],
    "gaussian-data": ['attack.kind="gaussian-data"', "attack.clients=2", "attack.fraction=1.0"],
    "scaled-update": ['attack.kind="scaled-update"', "attack.clients=2", "attack.scale=10"],
    "sign-flip": ['attack.kind="sign-flip"', "attack.clients=2"],
}


def config(name: str, overrides: list[str], seeds: int, detect: bool = True) -> ExperimentConfig:
    """The setting's config with ``seeds = [0, ..., seeds - 1]`` (replacing its ``seed``);
    ``detect = False`` sets it in every method's params."""
    raw = apply_overrides(
        read_toml(ROOT / "configs" / name), [*overrides, f"seeds={list(range(seeds))}"]
    )
    if not detect:
        for m in raw["methods"]:
            m.setdefault("params", {})["detect"] = False
    return parse_config(raw)


def _weights(cell: str) -> dict[int, float]:
    return {int(k): float(v) for k, v in (p.split(":") for p in cell.split())}


def refused(rows: list[dict[str, str]], bad: list[int]) -> dict[str, int]:
    """Updates given weight 0 over a run's rounds, the attacked clients' and the others'."""
    out = {"attacked": 0, "honest": 0}
    for r in rows:
        for cid, w in _weights(r.get("client_weights") or "").items():
            if w == 0.0:
                out["attacked" if cid in bad else "honest"] += 1
    return out


def run(cfg: ExperimentConfig, jobs: int = 1) -> dict[str, dict[str, Any]]:
    """Every seed of ``cfg`` (all its methods on one federation per seed) as one fedad run.

    Per label: AUROC's mean and std over seeds (fedad's aggregate: ``np.mean`` and ``np.std``
    with ``ddof = 0``), each seed's AUROC, each seed's updates given weight 0 per round
    (``excluded`` of ``history.csv``) and those counts split into attacked and honest
    clients (``refused``).
    """
    with tempfile.TemporaryDirectory(prefix="fedad-onlad-robust-") as tmp:
        out = Path(tmp) / "run"
        data = run_seeds(cfg, out, jobs=jobs)
        with (out / "history.csv").open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    result: dict[str, dict[str, Any]] = {}
    for label, entry in data["methods"].items():
        mine = [r for r in rows if r["method"] == label and int(r["round"]) >= 1]
        per_seed = {s: [r for r in mine if r["seed"] == str(s)] for s in cfg.seed_list()}
        clients = cfg.partition.clients
        result[label] = {
            "mean": entry["auroc"],
            "std": entry["std"]["auroc"],
            "per_seed": [p["auroc"] for p in entry["per_seed"]],
            "excluded_per_round": [
                [int(r["excluded"]) if r.get("excluded") else 0 for r in per_seed[s]]
                for s in cfg.seed_list()
            ],
            "refused": [
                refused(per_seed[s], attacked_clients(cfg.attack, clients, s))
                for s in cfg.seed_list()
            ],
        }
    return result


def server_only(cfg: ExperimentConfig) -> dict[str, Any]:
    """AUROC of ``onlad-robust``'s initial model, per seed: the server's initial normal
    samples alone, inputs scaled with the server's normal data (no client data)."""
    aucs: list[float] = []
    for s in cfg.seed_list():
        one = with_server_data(cfg.model_copy(update={"seed": s, "seeds": None}))
        fed = build_federation(one)
        algo = next(a for a in build_algorithms(one, fed).values() if isinstance(a, ONLADRobust))
        server = dense(fed.server_normal, algo.name) if fed.server_normal is not None else None
        assert server is not None
        p = algo.params
        n_init = min(p.init_samples, max(1, len(server) // 6))
        det = algo.make_detector()
        det.set_scaling(*standardizer(server[: n_init + p.observed]))
        det.fit(server[:n_init])
        x = np.concatenate([dense(c.x_test, algo.name) for c in fed.clients])
        y = np.concatenate([c.y_test for c in fed.clients])
        auc = auroc(y, det.score(x))
        assert auc is not None  # the test sets hold both classes
        aucs.append(auc)
    return {"mean": float(np.mean(aucs)), "std": float(np.std(aucs)), "per_seed": aucs}


def setting(name: str, seeds: int, detect: bool = True, jobs: int = 1) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for scen, overrides in SCENARIOS.items():
        t0 = time.perf_counter()
        cfg = config(SETTINGS[name], overrides, seeds, detect)
        result[scen] = run(cfg, jobs)
        if scen == "clean":
            result["server-only"] = server_only(cfg)
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
        ref = per["server-only"]
        first = f"| {name} | server-only | {ref['mean']:.3f} ± {ref['std']:.3f} |"
        print(first + " |" * len(scens))
    print()
    print("| data | scenario | onlad-robust refused: attacked | honest (per run, mean) |")
    print("|---|---|---:|---:|")
    for name, per in results.items():
        for scen in scens:
            ref = per[scen]["onlad-robust"]["refused"]
            bad = np.mean([r["attacked"] for r in ref])
            good = np.mean([r["honest"] for r in ref])
            print(f"| {name} | {scen} | {bad:.1f} | {good:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=1, help="worker processes for the seeds")
    ap.add_argument("--only", choices=list(SETTINGS))
    ap.add_argument("--no-detect", action="store_true", help="detect = false for every method")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    detect = not args.no_detect
    path = OUT / ("onlad_robust_default.json" if detect else "onlad_robust_nodetect.json")
    results: dict[str, Any] = json.loads(path.read_text()) if args.only and path.exists() else {}
    for name in SETTINGS:
        if args.only in (None, name):
            results[name] = setting(name, args.seeds, detect, args.jobs)
            path.write_text(json.dumps({k: results[k] for k in SETTINGS if k in results}, indent=2))
    table({k: results[k] for k in SETTINGS if k in results})


if __name__ == "__main__":
    main()
