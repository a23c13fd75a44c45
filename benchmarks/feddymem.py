"""FedDyMem's Table I/II and Table III analog on ``textures``, side by side with its baselines.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/feddymem.py --suite table|ablation|norm
        [--seeds 5] [--jobs 1] [--rounds 20] [--clients 5] [--alpha 0.1]
        [--work DIR] [--summarise-only] [--only LABEL ...]

Every suite is one fedad run with ``seeds = [0, ..., seeds - 1]``
(:func:`fedad.seeds.run_seeds`), every method on the same federation per seed. The paper's
setting: ``textures`` (real texture photographs as product types, defective test images
with exact pixel masks), a Dirichlet partition over the product types with ``alpha = 0.1``
over 5 clients; each client's local test set holds its own types' normal and defective
images.

* ``table``: ``local``, ``fedavg``, ``fedprox`` and ``centralized`` (the upper reference:
  pooled data) with the autoencoder (its reconstruction error as the anomaly map) and with
  the PatchCore-style detector (the same frozen features as FedDyMem, a projection averaged
  by FedAvg, a coreset bank of each client's own images); ``fedbn`` with both (normalisation
  layers stay local: the autoencoder has none, so it is FedAvg there) and ``scaffold`` with
  the autoencoder (control variates; it takes no PatchCore detector); ``feddymem``.
* ``ablation``: Table III: FedDyMem without the projection, without the generator, with
  the position-wise mean instead of k-means, with k-means' own centre order, and whole.
* ``norm``: FedDyMem as it is and with ``score_norm = "train"`` (each client's maps and
  scores on the scale of its own training images' scores; not in the paper), for the gap
  between the pooled and the client-mean image AUROC.

Writes ``benchmarks/results/feddymem_<suite>.json`` (per method: mean and population std
over seeds of the pooled image AUROC, the client-mean image AUROC, pixel AUROC and PRO,
bytes up per client per round, MB per round, seconds) and prints a markdown table.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
from suites import Method, mean_std, method_lines, pm, run_suite, seed_methods, traffic

TABLE: list[Method] = [
    ("local-ae", "local", {}, "autoencoder"),
    ("fedavg-ae", "fedavg", {}, "autoencoder"),
    ("fedprox-ae", "fedprox", {}, "autoencoder"),
    ("centralized-ae", "centralized", {}, "autoencoder"),
    ("fedbn-ae", "fedbn", {}, "autoencoder"),
    ("scaffold-ae", "scaffold", {}, "autoencoder"),
    ("local-patchcore", "local", {}, "patchcore"),
    ("fedbn-patchcore", "fedbn", {}, "patchcore"),
    ("fedavg-patchcore", "fedavg", {}, "patchcore"),
    ("fedprox-patchcore", "fedprox", {}, "patchcore"),
    ("centralized-patchcore", "centralized", {}, "patchcore"),
    ("feddymem", "feddymem", {}, None),
]
ABLATION: list[Method] = [
    ("feddymem-no-projection", "feddymem", {"projection": False}, None),
    ("feddymem-no-generator", "feddymem", {"generator": False}, None),
    ("feddymem-mean-aggregation", "feddymem", {"aggregation": "mean"}, None),
    ("feddymem-kmeans-order", "feddymem", {"bank_order": "kmeans"}, None),
    ("feddymem", "feddymem", {}, None),
]
NORM: list[Method] = [
    ("feddymem", "feddymem", {}, None),
    ("feddymem-score-norm", "feddymem", {"score_norm": "train"}, None),
]
SUITES = {"table": TABLE, "ablation": ABLATION, "norm": NORM}


def config_text(
    suite: str, seeds: int, rounds: int, clients: int, alpha: float, only: list[str] | None
) -> str:
    """The suite's experiment as TOML (``only``: just the rows with these labels)."""
    lines = [
        f"seeds = {list(range(seeds))}",
        f"rounds = {rounds}",
        "[data]",
        'name = "textures"',
        "[partition]",
        'scheme = "dirichlet"',
        f"clients = {clients}",
        f"alpha = {alpha}",
    ]
    lines += method_lines(SUITES[suite], only, suite)
    return "\n".join(lines) + "\n"


def summarise(run: Path) -> dict[str, Any]:
    """Per method, over the seeds finished in ``run``."""
    per_seed = seed_methods(run)
    labels = list(per_seed[0]) if per_seed else []
    out: dict[str, Any] = {}
    for label in labels:
        ms = [m[label] for m in per_seed if isinstance(m.get(label), dict)]
        row: dict[str, Any] = {"seeds": len(ms)}
        for key in ("auroc", "pixel_auroc", "pro"):
            row[key], row[f"{key}_std"] = mean_std(
                [float(m[key]) for m in ms if m.get(key) is not None]
            )
        client = [
            float(np.mean([r["auroc"] for r in m["per_client"] if r.get("auroc") is not None]))
            for m in ms
            if m.get("per_client")
        ]
        row["client_auroc"], row["client_auroc_std"] = mean_std(client)
        row.update(traffic(ms))
        out[label] = row
    return out


def table(rows: dict[str, Any]) -> str:
    """Markdown: one row per method."""
    lines = [
        "| method | seeds | image AUROC (pooled) | image AUROC (client mean) | pixel AUROC | "
        "PRO | bytes up / client / round | MB / round | s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, r in rows.items():
        lines.append(
            f"| {label} | {r['seeds']} | {pm(r, 'auroc')} | {pm(r, 'client_auroc')} | "
            f"{pm(r, 'pixel_auroc')} | {pm(r, 'pro')} | "
            f"{r['bytes_up_per_client_round']:,.0f} | {r['mb_per_round']:.2f} | "
            f"{r['seconds']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", choices=list(SUITES), required=True)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--clients", type=int, default=5)
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--only", nargs="+", default=None, metavar="LABEL")
    ap.add_argument("--work", type=Path, default=None, help="keep (and resume) the run here")
    ap.add_argument("--summarise-only", action="store_true")
    args = ap.parse_args()

    text = config_text(args.suite, args.seeds, args.rounds, args.clients, args.alpha, args.only)
    suffix = "_only" if args.only else ""
    rows = run_suite(
        text, f"feddymem_{args.suite}{suffix}", summarise, work=args.work, jobs=args.jobs,
        summarise_only=args.summarise_only, suite=args.suite,
    )  # fmt: skip
    print(f"```toml\n{text}```\n")
    print(table(rows))


if __name__ == "__main__":
    main()
