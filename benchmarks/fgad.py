"""FGAD's Tables 1-3 analog on the synthetic graph domains, side by side with its baselines.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/fgad.py --suite single|multi|ablation
        [--seeds 5] [--jobs 2] [--rounds 20] [--clients 4] [--domain graphs_social]
        [--work DIR] [--summarise-only] [--only LABEL ...]

Every suite is one fedad run with ``seeds = [0, ..., seeds - 1]`` (:func:`fedad.seeds.run_seeds`),
every method on the same federation per seed. The paper's protocol: class 0 of a domain is
normal, classes 1-3 anomalies; 80% of the normal graphs train, the test set is the held-out
normals with as many anomalies of the client's own source (``test_anomaly_fraction =
0.5``); AUC and AUPRC (anomaly positive) are means over the clients (the paper's), the
pooled ones beside them.

* ``single``: one domain (``--domain``), its normal graphs split IID over ``--clients``
  clients (the paper's single-dataset setting).
* ``multi``: the four domains, one per client (``scheme = "by-source"``): every client's
  graphs differ in size, density and node-feature width (the paper's multi-dataset
  setting).
* ``ablation``: Table 3 on the multi-dataset setting: FGAD_v1 (``collaboration = "none"``),
  FGAD_v2 (``"all"``), FGAD_v3 (``distill = false``) beside FGAD.

Methods of ``single`` and ``multi``: ``local`` (Self-train), ``fedavg`` and ``fedprox`` with
``deepsvdd`` on the GIN, ``gcfl``, ``fedstar``, ``fgad``, and ``fgad`` with
``distill_on = "all"`` (our variant: the student also distils on the generated graphs). Writes
``benchmarks/results/fgad_<suite>.json`` (per method: mean and population std over seeds of
the client-mean AUC and AUPRC, the pooled AUC, FGAD's teacher AUC, float32 parameters
uploaded per client per round, MB per round, seconds) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
from suites import Method, mean_std, method_lines, pm, run_suite, seed_methods, traffic

DOMAINS = ["graphs_molecules", "graphs_proteins", "graphs_social", "graphs_grids"]

TABLE: list[Method] = [
    ("self-train", "local", {}, "deepsvdd"),
    ("fedavg-svdd", "fedavg", {}, "deepsvdd"),
    ("fedprox-svdd", "fedprox", {}, "deepsvdd"),
    ("gcfl", "gcfl", {}, None),
    ("fedstar", "fedstar", {}, None),
    ("fgad", "fgad", {}, None),
    ("fgad-distill-all", "fgad", {"distill_on": "all"}, None),
]
ABLATION: list[Method] = [
    ("fgad-v1-no-collaboration", "fgad", {"collaboration": "none"}, None),
    ("fgad-v2-fedavg-all", "fgad", {"collaboration": "all"}, None),
    ("fgad-v3-no-distillation", "fgad", {"distill": False}, None),
    ("fgad", "fgad", {}, None),
]


def config_text(
    suite: str,
    seeds: int,
    rounds: int,
    clients: int,
    domain: str,
    only: list[str] | None = None,
) -> str:
    """The suite's experiment as TOML (``only``: just the rows with these labels)."""
    lines = [f"seeds = {list(range(seeds))}", f"rounds = {rounds}", "[data]"]
    if suite == "single":
        lines += [f'name = "{domain}"', "normal = [0]", "anomaly = [1, 2, 3]"]
        part = ['scheme = "iid"', f"clients = {clients}"]
    else:
        lines += [
            f'name = "{DOMAINS[0]}"',
            f"sources = {json.dumps(DOMAINS)}",
            "normal = [0]",
            "anomaly = [1, 2, 3]",
        ]
        part = ['scheme = "by-source"', f"clients = {len(DOMAINS)}"]
    lines.append("test_anomaly_fraction = 0.5")  # the paper: as many anomalies as normals
    lines += ["[partition]", *part]
    lines += method_lines(ABLATION if suite == "ablation" else TABLE, only, suite)
    return "\n".join(lines) + "\n"


def summarise(run: Path) -> dict[str, Any]:
    """Per method, over the seeds finished in ``run``."""
    per_seed = seed_methods(run)
    labels = list(per_seed[0]) if per_seed else []
    out: dict[str, Any] = {}
    for label in labels:
        ms = [m[label] for m in per_seed if isinstance(m.get(label), dict)]
        row: dict[str, Any] = {"seeds": len(ms)}
        for key in ("auroc", "aupr"):
            client = [
                float(np.mean([r[key] for r in m["per_client"] if r.get(key) is not None]))
                for m in ms
                if m.get("per_client")
            ]
            row[f"client_{key}"], row[f"client_{key}_std"] = mean_std(client)
        row["auroc"], row["auroc_std"] = mean_std([float(m["auroc"]) for m in ms])
        teacher = [float(m["teacher_auroc"]) for m in ms if m.get("teacher_auroc") is not None]
        row["teacher_auroc"], row["teacher_auroc_std"] = mean_std(teacher)
        cost = traffic(ms)
        up = cost.pop("bytes_up_per_client_round")
        row["params_up_per_client_round"] = None if up is None else up / 4  # float32
        row.update(cost)
        out[label] = row
    return out


def table(rows: dict[str, Any]) -> str:
    """Markdown: one row per method."""
    lines = [
        "| method | seeds | AUC (client mean) | AUPRC (client mean) | AUC (pooled) | "
        "teacher AUC | params up / client / round | MB / round | s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, r in rows.items():
        lines.append(
            f"| {label} | {r['seeds']} | {pm(r, 'client_auroc')} | {pm(r, 'client_aupr')} | "
            f"{pm(r, 'auroc')} | {pm(r, 'teacher_auroc')} | "
            f"{r['params_up_per_client_round']:,.0f} | {r['mb_per_round']:.2f} | "
            f"{r['seconds']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", choices=["single", "multi", "ablation"], required=True)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--clients", type=int, default=4, help="single: clients of the domain")
    ap.add_argument("--domain", default="graphs_social", choices=DOMAINS)
    ap.add_argument("--only", nargs="+", default=None, metavar="LABEL")
    ap.add_argument("--work", type=Path, default=None, help="keep (and resume) the run here")
    ap.add_argument("--summarise-only", action="store_true")
    args = ap.parse_args()

    text = config_text(args.suite, args.seeds, args.rounds, args.clients, args.domain, args.only)
    suffix = "_only" if args.only else ""
    rows = run_suite(
        text, f"fgad_{args.suite}{suffix}", summarise, work=args.work, jobs=args.jobs,
        summarise_only=args.summarise_only, suite=args.suite,
    )  # fmt: skip
    print(f"```toml\n{text}```\n")
    print(table(rows))


if __name__ == "__main__":
    main()
