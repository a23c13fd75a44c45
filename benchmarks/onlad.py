"""ONLAD with selective aggregation (Qin et al.): Table I analog, Fig. 4/5/7, throughput, scale.

    .venv/bin/python benchmarks/onlad.py [--seeds 5] [--jobs 1] [--only table|fig4|throughput|scale]

* Table I analog: each scenario config (``configs/onlad_scenario{1,2,3}.toml``) plus
  scenario 1 under the model-poisoning attacks (``scaled-update``, ``sign-flip``; one client of
  five), ``--seeds`` seeds, the three aggregations side by side in every run. Each setting is
  one fedad run with ``seeds = [0, ..., seeds - 1]`` (:func:`fedad.seeds.run_seeds`, into a
  temporary directory; ``--jobs`` worker processes): mean and std over seeds from its
  ``metrics.json``, per-round curves from its ``history.csv``. Metrics of the
  last round's global model at the server's threshold; precision/recall/F with normal as the
  positive class (the paper's convention) and AUROC/F1 with anomaly as positive.
* Fig. 5: F-score (normal-positive) against rounds, mean over seeds (``engine.eval_every``).
* Fig. 7: scenario 2, selective aggregation with a fixed against an adaptive lambda.
* Fig. 4: observed-set loss of a client model trained from the global initial model on
  data with 0-100% anomalies.
* Throughput: detect-then-learn on one client (784 inputs, 64 hidden units), chunk sizes 1
  and 32, beside a FLOP-bound estimate from this machine's measured matmul rate.
* Scale: one round with 1,000 clients in the in-process engine: wall time, peak memory.

Writes ``benchmarks/results/onlad_*.json`` and ``.png``; prints markdown for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from fedad.config import ExperimentConfig, apply_overrides, parse_config, read_toml
from fedad.data.registry import load_dataset
from fedad.federation import build_federation
from fedad.methods.onlad.detector import OSELMAutoEncoder
from fedad.methods.onlad.federated import observed_loss
from fedad.runner import build_algorithms, run_method, with_server_data
from fedad.seeds import run_seeds

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results"
METHODS = ("onlad", "onlad-score", "onlad-selective")
SCENARIOS: dict[str, tuple[str, list[str]]] = {
    "1 (clean)": ("onlad_scenario1.toml", []),
    "2 (contamination)": ("onlad_scenario2.toml", []),
    "3 (gaussian-data)": ("onlad_scenario3.toml", []),
    "1 + scaled-update": (
        "onlad_scenario1.toml",
        ['attack.kind="scaled-update"', "attack.clients=1"],
    ),
    "1 + sign-flip": ("onlad_scenario1.toml", ['attack.kind="sign-flip"', "attack.clients=1"]),
}
KEYS = ("normal_precision", "normal_recall", "accuracy", "normal_f1", "f1", "auroc")


def run(cfg: ExperimentConfig, jobs: int = 1) -> dict[str, dict[str, Any]]:
    """Every seed of ``cfg`` (all its methods on one federation per seed) as one fedad run.

    Per label: the aggregate entry of ``metrics.json`` (means over seeds, ``std``,
    ``per_seed``) and ``curves``, each seed's ``eval_normal_f1`` of rounds 1.. from
    ``history.csv`` (NaN where a round was not evaluated).
    """
    with tempfile.TemporaryDirectory(prefix="fedad-onlad-") as tmp:
        out = Path(tmp) / "run"
        data = run_seeds(cfg, out, jobs=jobs)
        with (out / "history.csv").open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    methods: dict[str, dict[str, Any]] = data["methods"]
    for label, entry in methods.items():
        entry["curves"] = [
            [
                float(r["eval_normal_f1"]) if r.get("eval_normal_f1") else np.nan
                for r in rows
                if r["method"] == label and r["seed"] == str(s) and int(r["round"]) >= 1
            ]
            for s in cfg.seed_list()
        ]
    return methods


def config(name: str, overrides: list[str], seeds: int) -> ExperimentConfig:
    """The scenario's config with ``seeds = [0, ..., seeds - 1]`` (replacing its ``seed``)."""
    raw = apply_overrides(
        read_toml(ROOT / "configs" / name), [*overrides, f"seeds={list(range(seeds))}"]
    )
    return parse_config(raw)


def table(seeds: int, jobs: int = 1) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for scen, (name, overrides) in SCENARIOS.items():
        agg = run(config(name, overrides, seeds), jobs)
        # mean and std are fedad's several-seed aggregate: np.mean and np.std (ddof = 0) of
        # the seeds' values, the numbers this script computed itself before.
        results[scen] = {
            m: {
                "mean": {k: agg[m][k] for k in KEYS},
                "std": {k: agg[m]["std"][k] for k in KEYS},
                "curve": np.nanmean(agg[m]["curves"], axis=0).tolist(),
            }
            for m in METHODS
        }
    head = ("precision", "recall", "accuracy", "F-score", "F1 (anomaly)", "AUROC")
    print("| scenario | aggregation | " + " | ".join(head) + " |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for scen, per in results.items():
        for m, r in per.items():
            cells = " | ".join(f"{r['mean'][k]:.3f} ± {r['std'][k]:.3f}" for k in KEYS)
            print(f"| {scen} | {m} | {cells} |")
    fig, axes = plt.subplots(1, len(results), figsize=(4 * len(results), 3.2), sharey=True)
    for ax, (scen, per) in zip(axes, results.items(), strict=True):
        for m, r in per.items():
            ax.plot(range(1, len(r["curve"]) + 1), r["curve"], marker="o", ms=3, label=m)
        ax.set_title(f"scenario {scen}", fontsize=9)
        ax.set_xlabel("round")
    axes[0].set_ylabel("F-score (normal positive)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(OUT / "onlad_fig5.png", dpi=110)
    return results


def fig7(seeds: int, jobs: int = 1) -> dict[str, Any]:
    curves: dict[str, list[float]] = {}
    for adaptive in (False, True):
        cfg = config(
            "onlad_scenario2.toml", [f"methods.2.params.adaptive={str(adaptive).lower()}"], seeds
        )
        cfg = cfg.model_copy(update={"methods": [cfg.methods[2]]})
        r = run(cfg, jobs)["onlad-selective"]
        key = "adaptive lambda" if adaptive else "fixed lambda"
        curves[key] = np.mean(r["curves"], axis=0).tolist()
        curves[key + " (final F-score)"] = [float(r["normal_f1"])]
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    for key in ("fixed lambda", "adaptive lambda"):
        ax.plot(range(1, len(curves[key]) + 1), curves[key], marker="o", ms=3, label=key)
    ax.set_xlabel("round")
    ax.set_ylabel("F-score (normal positive)")
    ax.set_title("scenario 2: onlad-selective", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "onlad_fig7.png", dpi=110)
    print("| lambda | final F-score (normal positive), mean over seeds |")
    print("|---|---:|")
    for key in ("fixed lambda", "adaptive lambda"):
        print(f"| {key} | {curves[key + ' (final F-score)'][0]:.4f} |")
    return curves


def fig4() -> dict[str, Any]:
    """Observed loss of a client model against the share of anomalies in its data."""
    digits = load_dataset("digits", size=28)
    fashion = load_dataset("fashion_mnist")
    rng = np.random.default_rng(0)
    order = rng.permutation(len(digits.x))
    init, observed, pool = order[:200], order[200:1200], order[1200:]
    x = digits.x.reshape(len(digits.x), -1)
    anomalies = fashion.x[rng.permutation(len(fashion.x))[:1000]].reshape(1000, -1)
    n = len(pool)
    shares = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    losses = []
    for share in shares:
        k = round(share * n)
        data = np.concatenate([x[pool[: n - k]], anomalies[:k]])
        det = OSELMAutoEncoder(seed=0).fit(x[init])
        det.partial_fit(data)
        losses.append(observed_loss(det.hidden(x[observed]), x[observed], det.beta_))
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    ax.bar([f"{int(100 * s)}" for s in shares], losses)
    ax.set_xlabel("anomalies in the client's training data (%)")
    ax.set_ylabel("loss on the observed set")
    fig.tight_layout()
    fig.savefig(OUT / "onlad_fig4.png", dpi=110)
    print("| anomalies (%) | " + " | ".join(f"{int(100 * s)}" for s in shares) + " |")
    print("|---|" + "---:|" * len(shares))
    print("| observed loss | " + " | ".join(f"{v:.4f}" for v in losses) + " |")
    return {"shares": shares, "losses": losses}


def gemm_flops() -> float:
    """Measured float64 matmul rate of this machine (FLOP/s), 1024x1024 by 1024x1024."""
    a = np.random.default_rng(0).random((1024, 1024))
    a @ a
    t0 = time.perf_counter()
    reps = 10
    for _ in range(reps):
        a @ a
    return reps * 2 * 1024**3 / (time.perf_counter() - t0)


def detect_learn_flops(k: int, n: int = 784, h: int = 64) -> float:
    """Matmul FLOPs of ``detect_and_learn`` on a chunk of ``k`` samples, all learned.

    Hidden layer :math:`x\\alpha` (2knh), residual :math:`x - H\\beta` (2khn), :math:`PH^T`
    (2h²k), :math:`HPH^T` (2k²h), its solve (2k³/3), the new :math:`P` (2h²k),
    :math:`P_iH^T` (2h²k) and its product with the residual (2hkn).
    """
    return float(6 * k * n * h + 6 * h * h * k + 2 * k * k * h + (2 * k**3) / 3)


def throughput() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    x = rng.random((4096, 784))
    peak = gemm_flops()
    rows = {}
    print(f"measured float64 matmul rate: {peak / 1e9:.1f} GFLOP/s")
    print("| chunk | samples/s | FLOP/s achieved | FLOP-bound samples/s | of the bound |")
    print("|---:|---:|---:|---:|---:|")
    for k in (1, 32):
        det = OSELMAutoEncoder(n_hidden=64, seed=0).fit(x[:256])
        tau = float(np.quantile(det.score(x[:256]), 0.95))
        n_samples = 2048 if k > 1 else 1024
        t0 = time.perf_counter()
        for i in range(256, 256 + n_samples, k):
            det.detect_and_learn(x[i : i + k], tau)
        dt = time.perf_counter() - t0
        rate = n_samples / dt
        flops = detect_learn_flops(k) / k * rate
        bound = peak / (detect_learn_flops(k) / k)
        rows[k] = {"samples_per_s": rate, "flops": flops, "bound": bound}
        print(f"| {k} | {rate:,.0f} | {flops / 1e9:.2f} G | {bound:,.0f} | {rate / bound:.1%} |")
    return {"gemm_flops": peak, "rows": rows}


def scale() -> dict[str, Any]:
    raw = {
        "seed": 0,
        "rounds": 1,
        "data": {
            "name": "fashion_mnist",
            "normal": [0, 1, 2, 3, 4],
            "anomaly": [5, 6, 7, 8, 9],
            "max_train_per_client": 20,
            "max_test": 2000,
        },
        "partition": {"scheme": "iid", "clients": 1000},
        "engine": {"progress": False},
        "methods": [{"name": "onlad-selective"}],
    }
    cfg = with_server_data(parse_config(raw))
    fed = build_federation(cfg)
    (algo,) = build_algorithms(cfg, fed).values()
    t0 = time.perf_counter()
    out = run_method(cfg, algo, fed)
    wall = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    r = {
        "clients": 1000,
        "round_seconds": out.seconds,
        "with_evaluation_seconds": wall,
        "peak_rss_mb": peak_mb,
        "bytes_up": out.bytes_up,
        "bytes_down": out.bytes_down,
    }
    print(
        f"1,000 clients, one round: {out.seconds:.1f} s (with the evaluation phase "
        f"{wall:.1f} s); peak RSS {peak_mb:.0f} MB; {out.bytes_down / 1e6:.0f} MB down, "
        f"{out.bytes_up / 1e6:.0f} MB up"
    )
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=1, help="worker processes for the seeds")
    ap.add_argument("--only", choices=["table", "fig4", "fig7", "throughput", "scale"])
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    parts = {
        "table": lambda: table(args.seeds, args.jobs),
        "fig7": lambda: fig7(args.seeds, args.jobs),
        "fig4": fig4,
        "throughput": throughput,
        "scale": scale,
    }
    for name, fn in parts.items():
        if args.only in (None, name):
            print(f"\n## {name}\n")
            result = fn()
            (OUT / f"onlad_{name}.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
