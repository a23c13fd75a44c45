"""ProtoFL on one-vs-rest federations, side by side with its baselines.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/protofl.py
        --suite fashion|digits|ablation|dev|eval|odds|heads|eval2|tables
        [--seeds 5] [--first-seed 0] [--jobs 2] [--rounds 10] [--max-test 2000] [--work DIR]
        [--data breast_cancer|odds_breastw|odds_ionosphere|odds_satellite]  (tables)
        [--tag T]  (results file protofl_<suite>[_<data>][_dev]_<T>.json; ``_dev``: seeds >= 100)

Every suite is one fedad run with ``seeds = [0, ..., seeds - 1]`` (:func:`fedad.seeds.run_seeds`;
``--jobs`` worker processes, one torch thread each), every method of the suite on the same
federation per seed: 10 clients, client k holds only class k (``scheme = "one-vs-rest"``),
its local test set its own held-out class as normals and every other class as anomalies;
the pooled metric is the mean over clients (the papers' convention).

* ``fashion``: Fashion-MNIST, ``max_train_per_client = 600`` (600 images per class),
  the pooled test set capped at ``--max-test`` (keeping every class's share, so
  each client scores ``max-test / 10`` normals and the rest anomalies): ``protofl``
  (defaults: the paper's flow head), ``protofl`` with the Gaussian head, the ``phase1 =
  "local"`` baseline (same loss and flow, no FedAvg), ``local`` + ``pretrained`` (frozen
  EfficientNet-Lite0, k-NN, no training, no communication), ``fedavg`` + ``deepsvdd``,
  ``feduv``.
* ``digits``: the same methods on scikit-learn's digits (~125 training images per class,
  so every trained method gets ``local_epochs = 5``).
* ``ablation``: Fashion-MNIST, ProtoFL's Table 4 (KDE and OC-SVM heads; flow and Gaussian
  are in ``fashion``), Table 5 (without L_pd and L_reg: ``alpha = 1, lam = 0``; without
  L_p and L_reg: ``alpha = 0, lam = 0``; without L_reg: ``lam = 0``), Fig. 5 (3 new
  clients: joined and new clients' AUROC apart) and a control that is not in the paper:
  phase 1 switched off (``lr = 1e-9``: the heads on the seeded, untrained encoder), which
  says how much of the result the federated training contributes.

Registered before the runs they name (2026-11-26):

* ``dev``: the development federation, the only one anything was chosen on: Fashion-MNIST
  one-vs-rest as in ``fashion``, ``--first-seed 100 --seeds 1``, 8 rounds (as an
  earlier reported run): the ``efficientnet`` trunk (flow and Gaussian heads; phase 1 off,
  ``lr = 1e-9``; ``phase1 = "local"``), the CNN trunk with today's defaults, ``local`` +
  ``pretrained`` and ``fedavg`` + ``deepsvdd`` beside them, wall time of each in the same run.
* ``eval``: the evaluation, run once after the choices were made on ``dev``: the same
  federation at seeds 0-4 (``--seeds 5``, 8 rounds, default params; seed 0 is an earlier
  reported run's, where no choice of ours was made), ``protofl`` with its defaults and the
  ``efficientnet`` trunk's ablation (phase 1 off, local training only) beside ``local`` +
  ``pretrained`` and ``fedavg`` + ``deepsvdd``. The criteria: mean per-client
  AUROC >= 0.94, >= ``local`` + ``pretrained``, >= ``fedavg`` + ``deepsvdd`` + 0.05, in at
  most 8x the seconds of ``fedavg`` + ``deepsvdd`` (metrics.json's ``seconds``: a method's
  whole cost, measured in the same run).
* ``odds``: ProtoFL on a table with the MLP trunk beside the generic baselines: ODDS
  satellite, ``scheme = "iid"``, 5 clients, 10 rounds, seeds 0-4, default params.

Registered before it runs, after the heads changed (2026-11-26):

* ``heads``: the development federation of ``dev`` (seed 100, 8 rounds) after the heads
  changed (the Gaussian head centred, not standardised; ``normalize = "auto"``: L2 for the
  ``efficientnet`` trunk; chosen on frozen features of this federation, docs/methods/
  protofl.md). Rows: the ``efficientnet`` trunk with the Gaussian head untrained (``lr =
  1e-9``), federated at the default AdamW 1e-3, local only, at the paper's optimiser
  (``optimizer = "radam", lr = 1e-6``) and untrained at ``trunk_size = 96``; ``local`` +
  ``pretrained`` and ``fedavg`` + ``deepsvdd`` beside them. The question: does phase 1 now
  add over the same trunk untrained? Rule: ``protofl``'s defaults change to this trunk and
  head only if the federated row at the default optimiser is within 0.005 of the untrained
  row or above it, and above ``local`` + ``pretrained``; otherwise the defaults stay the
  paper's form and the rows are reported.
* ``eval2``: after ``heads`` (its rule kept the defaults: the federated row lost 0.033 to
  the untrained one), the same federation at seeds 0-4 (8 rounds) with today's heads: the
  ``efficientnet`` trunk with the Gaussian head untrained, at the paper's optimiser and at
  the default one, beside ``local`` + ``pretrained`` (k-NN, the criteria's reference), the
  same frozen features with that detector's Gaussian score (``score = "gaussian"``: what a
  purely local Gaussian on the off-the-shelf features gives, to separate the head's gain
  from anything the federation adds) and ``fedavg`` + ``deepsvdd``. ``protofl``'s defaults
  (the CNN trunk and the flow: unchanged by the head change) are in ``eval``.

Registered before it runs (2026-11-27):

* ``tables``: ProtoFL's MLP trunk on tables with and without its group norm
  (``vector_norm``). Found by an edge-case sweep of every method with no params: on
  scikit-learn's breast-cancer table (3 IID clients, 10 rounds, dev seed 100) ``protofl``
  scored 0.606 and its Gaussian head 0.604 against ``fedavg`` + ``autoencoder``'s 0.968;
  without the group norm 0.943 / 0.907 (a diagnostic that replaced ``nn.GroupNorm`` by the
  identity). Group norm rescales each row's hidden units, and a row anomalous by its size
  then looks normal. The federation: ``--data`` (breast_cancer, odds_breastw,
  odds_ionosphere, odds_satellite), ``scheme = "iid"``, 3 clients, 10 rounds, the whole
  table (no caps); rows: ``protofl`` and its Gaussian head, each at ``vector_norm = "group"``
  and ``"none"``, ``fedavg`` + ``autoencoder`` and ``fedavg`` + ``deepsvdd``. Development
  seeds 100-102 (``--first-seed 100 --seeds 3``), one run per table. Rule: ``protofl``'s
  default becomes ``vector_norm = "none"`` if, with the flow head, its AUROC averaged over
  the four tables (each the mean over the three seeds) is at least 0.02 above ``"group"``'s
  and no table is more than 0.01 below; otherwise the default stays the paper's group norm
  and the rows are reported. Evaluation afterwards, whatever the rule says: the same four
  tables at seeds 0-4 (``--seeds 5``).

Writes ``benchmarks/results/protofl_<suite>.json`` (per method: mean and std over seeds of
the mean per-client AUROC, per-class AUROC means, rounds, bytes, seconds, joined/new
AUROC) and prints a markdown table. ``--work`` keeps the run directory (and resumes it).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
from suites import Method, method_lines, run_suite

MAIN: list[Method] = [
    ("protofl", "protofl", {}, None),
    ("protofl-gaussian", "protofl", {"head": "gaussian"}, None),
    ("local-flow", "protofl", {"phase1": "local"}, None),
    ("local-pretrained", "local", {}, "pretrained"),
    ("fedavg-deepsvdd", "fedavg", {}, "deepsvdd"),
    ("feduv", "feduv", {}, None),
]
ABLATION: list[Method] = [
    ("head-kde", "protofl", {"head": "kde"}, None),
    ("head-ocsvm", "protofl", {"head": "ocsvm"}, None),
    ("no-lpd-no-lreg", "protofl", {"alpha": 1.0, "lam": 0.0}, None),
    ("no-lp-no-lreg", "protofl", {"alpha": 0.0, "lam": 0.0}, None),
    ("no-lreg", "protofl", {"lam": 0.0}, None),
    ("new-clients-3", "protofl", {"new_clients": 3}, None),
    ("untrained-flow", "protofl", {"lr": 1e-9}, None),
    ("untrained-gaussian", "protofl", {"lr": 1e-9, "head": "gaussian"}, None),
]
EFF = {"trunk": "efficientnet"}
DEV: list[Method] = [
    ("fedavg-deepsvdd", "fedavg", {}, "deepsvdd"),
    ("local-pretrained", "local", {}, "pretrained"),
    ("eff-gauss", "protofl", {**EFF, "head": "gaussian"}, None),
    ("eff-gauss-untrained", "protofl", {**EFF, "head": "gaussian", "lr": 1e-9}, None),
    ("eff-gauss-local", "protofl", {**EFF, "head": "gaussian", "phase1": "local"}, None),
    ("eff-flow", "protofl", EFF, None),
    ("protofl-cnn", "protofl", {}, None),
]
EVAL: list[Method] = [
    ("fedavg-deepsvdd", "fedavg", {}, "deepsvdd"),
    ("local-pretrained", "local", {}, "pretrained"),
    ("protofl", "protofl", {}, None),
    ("eff-gauss", "protofl", {**EFF, "head": "gaussian"}, None),
    ("eff-gauss-untrained", "protofl", {**EFF, "head": "gaussian", "lr": 1e-9}, None),
    ("eff-gauss-local", "protofl", {**EFF, "head": "gaussian", "phase1": "local"}, None),
]
HEADS: list[Method] = [
    ("fedavg-deepsvdd", "fedavg", {}, "deepsvdd"),
    ("local-pretrained", "local", {}, "pretrained"),
    ("eff-gauss-untrained", "protofl", {**EFF, "head": "gaussian", "lr": 1e-9}, None),
    ("eff-gauss", "protofl", {**EFF, "head": "gaussian"}, None),
    ("eff-gauss-local", "protofl", {**EFF, "head": "gaussian", "phase1": "local"}, None),
    ("eff-gauss-radam", "protofl",
     {**EFF, "head": "gaussian", "optimizer": "radam", "lr": 1e-6}, None),
    ("eff-gauss-96-untrained", "protofl",
     {**EFF, "head": "gaussian", "lr": 1e-9, "trunk_size": 96}, None),
]  # fmt: skip
EVAL2: list[Method] = [
    ("fedavg-deepsvdd", "fedavg", {}, "deepsvdd"),
    ("local-pretrained", "local", {}, "pretrained"),
    ("local-pretrained-gaussian", "local", {"score": "gaussian"}, "pretrained"),
    ("eff-gauss-untrained", "protofl", {**EFF, "head": "gaussian", "lr": 1e-9}, None),
    ("eff-gauss-radam", "protofl",
     {**EFF, "head": "gaussian", "optimizer": "radam", "lr": 1e-6}, None),
    ("eff-gauss", "protofl", {**EFF, "head": "gaussian"}, None),
]  # fmt: skip
ODDS: list[Method] = [
    ("protofl", "protofl", {}, None),
    ("protofl-gaussian", "protofl", {"head": "gaussian"}, None),
    ("protofl-local", "protofl", {"phase1": "local"}, None),
    ("fedavg-autoencoder", "fedavg", {}, "autoencoder"),
    ("local-autoencoder", "local", {}, "autoencoder"),
    ("fedavg-deepsvdd", "fedavg", {}, "deepsvdd"),
]
TABLES: list[Method] = [
    ("protofl-group", "protofl", {"vector_norm": "group"}, None),
    ("protofl-none", "protofl", {"vector_norm": "none"}, None),
    ("gaussian-group", "protofl", {"vector_norm": "group", "head": "gaussian"}, None),
    ("gaussian-none", "protofl", {"vector_norm": "none", "head": "gaussian"}, None),
    ("fedavg-autoencoder", "fedavg", {}, "autoencoder"),
    ("fedavg-deepsvdd", "fedavg", {}, "deepsvdd"),
]
TABLE_DATA = ("breast_cancer", "odds_breastw", "odds_ionosphere", "odds_satellite")
TRAINED = {"protofl", "fedavg", "feduv"}


SUITES: dict[str, list[Method]] = {
    "fashion": MAIN, "digits": MAIN, "ablation": ABLATION, "dev": DEV, "eval": EVAL,
    "odds": ODDS, "heads": HEADS, "eval2": EVAL2, "tables": TABLES,
}  # fmt: skip


def config_text(
    suite: str,
    seeds: int,
    rounds: int,
    max_test: int,
    first: int = 0,
    data: str = TABLE_DATA[0],
    only: list[str] | None = None,
) -> str:
    """The suite's experiment as TOML (seeds ``first .. first + seeds - 1``; ``data``: the
    table of ``tables``; ``only``: just these rows)."""
    digits = suite == "digits"
    methods = SUITES[suite]
    lines = [f"seeds = {list(range(first, first + seeds))}", f"rounds = {rounds}", "[data]"]
    if suite == "tables":
        lines += [f'name = "{data}"', "[partition]", 'scheme = "iid"', "clients = 3"]
        return "\n".join(lines + method_lines(methods, only, suite)) + "\n"
    if suite == "odds":
        lines += ['name = "odds_satellite"', "[partition]", 'scheme = "iid"', "clients = 5"]
        return "\n".join(lines + method_lines(methods, None, suite)) + "\n"
    lines += [f'name = "{"digits" if digits else "fashion_mnist"}"', f"normal = {list(range(10))}"]
    if not digits:
        lines += ["max_train_per_client = 600", f"max_test = {max_test}"]
    lines += ["[partition]", 'scheme = "one-vs-rest"', "clients = 10"]
    rows = [
        (label, name, {**params, "local_epochs": 5} if digits and name in TRAINED else params, det)
        for label, name, params, det in methods
    ]
    lines += method_lines(rows, None, suite)
    return "\n".join(lines) + "\n"


def summarise(run: Path) -> dict[str, Any]:
    """Per method, over the seeds finished in ``run`` (``seed-N/metrics.json``): mean and
    population std of the mean per-client AUROC, per-class (= per-client) AUROC means, EER,
    rounds, bytes, seconds, and the joined/new clients' AUROC where there were new clients."""
    seeds = sorted(run.glob("seed-*/metrics.json"))
    per_seed = [json.loads(f.read_text(encoding="utf-8"))["methods"] for f in seeds]
    labels = list(per_seed[0]) if per_seed else []
    out: dict[str, Any] = {}
    for label in labels:
        ms = [m[label] for m in per_seed if isinstance(m.get(label), dict)]
        per_class: dict[int, list[float]] = {}
        for m in ms:
            for row in m.get("per_client", []):
                if row.get("auroc") is not None:
                    per_class.setdefault(int(row["client"]), []).append(float(row["auroc"]))

        def mean(key: str, ms: list[dict[str, Any]] = ms) -> float | None:
            vals = [float(m[key]) for m in ms if m.get(key) is not None]
            return float(np.mean(vals)) if vals else None

        aurocs = [float(m["auroc"]) for m in ms if m.get("auroc") is not None]
        out[label] = {
            "auroc": mean("auroc"),
            "auroc_std": float(np.std(aurocs)) if aurocs else None,
            "auroc_per_seed": aurocs,
            "eer": mean("eer"),
            "per_class_auroc": {c: float(np.mean(v)) for c, v in sorted(per_class.items())},
            "rounds": mean("rounds"),
            "mb_up": (mean("bytes_up") or 0.0) / 1e6,
            "mb_down": (mean("bytes_down") or 0.0) / 1e6,
            "seconds": mean("seconds"),
            "auroc_joined": mean("auroc_joined") if mean("auroc_new") is not None else None,
            "auroc_new": mean("auroc_new"),
            "seeds": len(ms),
        }
    return out


def table(rows: dict[str, Any]) -> str:
    """Markdown: one row per method."""
    classes = sorted({c for r in rows.values() for c in r["per_class_auroc"]})
    head = (
        "| method | mean AUROC (std over seeds) | EER | "
        + " | ".join(str(c) for c in classes)
        + " | MB up | MB down | s |"
    )
    sep = "|" + "---|" * (7 + len(classes) - 1)
    lines = [head, sep]
    for label, r in rows.items():
        pcs = " | ".join(f"{r['per_class_auroc'].get(c, float('nan')):.3f}" for c in classes)
        extra = ""
        if r["auroc_new"] is not None:
            extra = f" (joined {r['auroc_joined']:.3f}, new {r['auroc_new']:.3f})"
        lines.append(
            f"| {label} | {r['auroc']:.3f} ± {r['auroc_std'] or 0:.3f}{extra} | {r['eer']:.3f} | "
            f"{pcs} | {r['mb_up']:.1f} | {r['mb_down']:.1f} | {r['seconds']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--suite",
        choices=list(SUITES),
        required=True,
    )
    ap.add_argument("--data", choices=TABLE_DATA, default=TABLE_DATA[0], help="tables: which")
    ap.add_argument(
        "--tag", default="", help="suffix of the results file (keeps an earlier run's file)"
    )
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--max-test", type=int, default=2000)
    ap.add_argument("--only", nargs="+", default=None, help="tables: just these rows")
    ap.add_argument("--work", type=Path, default=None, help="keep (and resume) the run here")
    ap.add_argument(
        "--summarise-only",
        action="store_true",
        help="do not run: summarise the seeds already finished in --work",
    )
    args = ap.parse_args()

    text = config_text(
        args.suite, args.seeds, args.rounds, args.max_test, args.first_seed, args.data, args.only
    )
    name = f"protofl_{args.suite}"
    if args.suite == "tables":
        name += f"_{args.data}" + ("_dev" if args.first_seed >= 100 else "")
    if args.tag:
        name += f"_{args.tag}"
    rows = run_suite(
        text, name, summarise, work=args.work, jobs=args.jobs,
        summarise_only=args.summarise_only, suite=args.suite,
    )  # fmt: skip
    print(f"```toml\n{text}```\n")
    print(table(rows))


if __name__ == "__main__":
    main()
