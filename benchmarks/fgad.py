"""FGAD's Tables 1-3 analog on the synthetic graph domains, side by side with its baselines.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/fgad.py --suite single|multi|mutag|ablation
        (or generator-single|generator-multi|generator-mutag,
         or confirm-multi|confirm-mutag|confirm-single|confirm-social)
        [--seeds 5] [--jobs 2] [--rounds 20] [--clients N] [--domain graphs_social]
        [--work DIR] [--summarise-only] [--only LABEL ...] [--probe] [--by-source]

Every suite is one fedad run with ``seeds = [0, ..., seeds - 1]`` (:func:`fedad.seeds.run_seeds`),
every method on the same federation per seed. The paper's protocol, but for the hold-out
share: class 0 of a domain is normal, classes 1-3 anomalies; 70% of the normal graphs train
(``data.test_fraction`` at its default 0.3; the paper holds out 20%), the test set is the
held-out normals with as many anomalies of the client's own source (``test_anomaly_fraction
= 0.5``); AUC and AUPRC (anomaly positive) are means over the clients (the paper's), the
pooled ones beside them.

* ``single``: one domain (``--domain``), its normal graphs split IID over ``--clients``
  clients (the paper's single-dataset setting).
* ``multi``: the four domains, one per client (``scheme = "by-source"``): every client's
  graphs differ in size, density and node-feature width (the paper's multi-dataset
  setting).
* ``mutag``: the real-graph check ``mutag_perturbed`` (141 real MUTAG graphs normal, the
  anomalies rewired / densified / re-typed held-out MUTAG graphs; :mod:`fedad.data.graphs.
  perturbed`), its normal graphs split IID over ``--clients`` (default 2) clients.
* ``ablation``: Table 3 on the multi-dataset setting: FGAD_v1 (``collaboration = "none"``),
  FGAD_v2 (``"all"``), FGAD_v3 (``distill = false``) beside FGAD.
* ``generator-multi``, ``generator-single``, ``generator-mutag``: the generator candidates of
  :data:`GENERATOR` on that setting, summarised by training-only diagnostics only (the last
  round's eq. 8 against the best constant predictor's, the edge AUROC of the logits, from
  ``history.csv``; no test data is read): how :data:`VGAE` was chosen.
* ``confirm-multi``, ``confirm-mutag``, ``confirm-single``: the pre-registered check of the
  teacher-scored variant (docs/methods/fgad.md, "Pre-registered check of the teacher-scored
  variant"): the rows of :data:`CONFIRM` on seeds :data:`CONFIRM_SEEDS` (not used before),
  on the ``multi`` and ``mutag`` settings and on ``graphs_molecules`` IID over 4 clients
  (not used before as a single-dataset setting); ``--seeds`` and ``--domain`` do not apply.
  Prints, beside the table, the criterion fixed in advance (:func:`verdict`): the variant's
  client-mean AUC at least :data:`MARGIN` above the best baseline's.
* ``confirm-social``: the same check, declared afterwards (docs/methods/fgad.md, "Also
  measured"), on the benchmark's ``single`` setting, ``graphs_social`` IID over 4 clients,
  where the exploration's teacher was at chance; seeds :data:`CONFIRM_SEEDS`.

Methods of ``single``, ``multi`` and ``mutag``: ``local`` (Self-train), ``fedavg`` and
``fedprox`` with ``deepsvdd`` on the GIN, ``gcfl``, ``fedstar``, ``fgad``, ``fgad`` with
``distill_on = "all"`` (our variant: the student also distils on the generated graphs), and
``fgad`` with the generator chosen by training-only diagnostics (:data:`VGAE`: linear
output layers for mu and log sigma, a learnt logit bias, the balanced reconstruction loss),
showing the detector the soft adjacency or a 0/1 sample of it. Writes
``benchmarks/results/fgad_<suite>.json`` (per method: mean and population std over seeds of
the client-mean AUC and AUPRC, the pooled AUC, FGAD's teacher AUC, float32 parameters
uploaded per client per round, MB per round, seconds) and prints a markdown table.

``--probe`` (with ``--work``, after the run) reads every seed's ``fgad`` detectors back and
asks, per client, why the student scores as it does (:func:`probe`): label-free on the
training graphs, then once on the test set. Writes ``fgad_<suite>_probe.json``.
``--by-source`` (with ``--work``) gives every method's AUROC per client source, means over
the seeds (:func:`by_source`), and writes ``fgad_<suite>_by_source.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
from suites import (
    OUT,
    Method,
    mean_std,
    method_lines,
    pm,
    run_suite,
    seed_methods,
    traffic,
)

DOMAINS = ["graphs_molecules", "graphs_proteins", "graphs_social", "graphs_grids"]
VGAE: dict[str, Any] = {
    "gen_output": "linear",
    "decoder_bias": True,
    "reconstruction": "balanced",
}
"""The generator options that the training-only criterion picked (docs/methods/fgad.md): eq. 8
below the best constant predictor's on every domain's training graphs."""

TABLE: list[Method] = [
    ("self-train", "local", {}, "deepsvdd"),
    ("fedavg-svdd", "fedavg", {}, "deepsvdd"),
    ("fedprox-svdd", "fedprox", {}, "deepsvdd"),
    ("gcfl", "gcfl", {}, None),
    ("fedstar", "fedstar", {}, None),
    ("fgad", "fgad", {}, None),
    ("fgad-distill-all", "fgad", {"distill_on": "all"}, None),
    ("fgad-vgae", "fgad", VGAE, None),
    ("fgad-vgae-sampled", "fgad", {**VGAE, "fake_graphs": "sampled"}, None),
]
CONFIRM: list[Method] = [
    *TABLE[:6],  # the baselines and the paper's fgad
    ("fgad-vgae-sampled", "fgad", {**VGAE, "fake_graphs": "sampled"}, None),
    ("fgad-v3-vgae-sampled", "fgad", {**VGAE, "fake_graphs": "sampled", "distill": False}, None),
]
"""The pre-registered comparison: the baselines, the paper's ``fgad``, the student of the
generator options with sampled graphs, and the variant under test, FGAD_v3 (``distill =
false``: the teacher head travels, is averaged and scores) with those options."""
CONFIRM_SEEDS = [5, 6, 7, 8, 9]
CONFIRM_DOMAIN = {"confirm-single": "graphs_molecules", "confirm-social": "graphs_social"}
"""The single-dataset domain of each single-domain ``confirm-*`` suite (IID over 4 clients)."""
VARIANT = "fgad-v3-vgae-sampled"
BASELINES = ("self-train", "fedavg-svdd", "fedprox-svdd", "gcfl", "fedstar")
MARGIN = 0.05
"""The pre-registered criterion: the variant's client-mean AUC (mean over the seeds) at least
this much above the best baseline's, in each setting."""
GENERATOR: list[Method] = [
    ("paper", "fgad", {}, None),
    ("scaled-bias", "fgad", {"decoder": "scaled", "decoder_bias": True}, None),
    ("linear", "fgad", {"gen_output": "linear"}, None),
    ("linear-bias", "fgad", {"gen_output": "linear", "decoder_bias": True}, None),
    (
        "linear-balanced",
        "fgad",
        {"gen_output": "linear", "reconstruction": "balanced"},
        None,
    ),
    ("linear-bias-balanced", "fgad", VGAE, None),
    ("scaled-linear-bias-balanced", "fgad", {**VGAE, "decoder": "scaled"}, None),
]
"""The generator candidates, compared by training-only diagnostics (``--suite generator-*``)."""
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
    rows = {"ablation": ABLATION}.get(suite, GENERATOR if suite.startswith("generator") else TABLE)
    seed_list = list(range(seeds))
    if suite.startswith("plus-"):
        rows, seed_list = plus_rows(suite), PLUS_SEEDS
        suite, domain, clients = PLUS_SETTINGS[suite]
    if suite.startswith("confirm-"):
        rows, seed_list = CONFIRM, CONFIRM_SEEDS
        domain = CONFIRM_DOMAIN.get(suite, domain)
        suite = "single" if suite in CONFIRM_DOMAIN else suite
    suite = suite.removeprefix("generator-").removeprefix("confirm-")
    lines = [f"seeds = {seed_list}", f"rounds = {rounds}", "[data]"]
    if suite in ("single", "mutag"):
        name = "mutag_perturbed" if suite == "mutag" else domain
        lines += [f'name = "{name}"', "normal = [0]", "anomaly = [1, 2, 3]"]
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
    lines += method_lines(rows, only, suite)
    return "\n".join(lines) + "\n"


TRAINING_KEYS = (
    "loss_g",
    "recon_constant",
    "recon_edge_auc",
    "loss_ad",
    "student_flags_generated",
)


def summarise_training(run: Path) -> dict[str, Any]:
    """Per method, the training-only diagnostics of ``history.csv`` (client-weighted means
    over the clients of a round): the first round's ``loss_g`` and the last round's
    :data:`TRAINING_KEYS`, each a mean over the seeds. No test data is read."""
    import csv

    per: dict[str, dict[str, list[float]]] = {}
    for hist in sorted(run.glob("seed-*/history.csv")):
        with open(hist, encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        for label in dict.fromkeys(r["method"] for r in rows):
            mine = [r for r in rows if r["method"] == label]
            d = per.setdefault(label, {})
            d.setdefault("loss_g_first", []).append(float(mine[0]["loss_g"]))
            for k in TRAINING_KEYS:
                d.setdefault(k, []).append(float(mine[-1][k]))
    return {lab: {"seeds": len(d["loss_g"]), **{k: float(np.mean(v)) for k, v in d.items()}}
            for lab, d in per.items()}  # fmt: skip


def training_table(rows: dict[str, Any]) -> str:
    """Markdown: the training-only diagnostics, one row per generator candidate."""
    lines = [
        "| generator | eq. 8, round 1 | eq. 8, last round | constant predictor | edge AUROC | "
        "l_ad | student flags generated |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, r in rows.items():
        lines.append(
            f"| {label} | {r['loss_g_first']:.3f} | {r['loss_g']:.3f} | "
            f"{r['recon_constant']:.3f} | {r['recon_edge_auc']:.3f} | {r['loss_ad']:.3f} | "
            f"{r['student_flags_generated']:.3f} |"
        )
    return "\n".join(lines)


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
        row["client_auroc_per_seed"] = [
            float(np.mean([r["auroc"] for r in m["per_client"] if r.get("auroc") is not None]))
            for m in ms
            if m.get("per_client")
        ]
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


def verdict(rows: dict[str, Any]) -> dict[str, Any]:
    """The pre-registered criterion on a ``confirm-*`` suite's summary: the best baseline (of
    :data:`BASELINES`, by mean client-mean AUC), the variant's, their difference, and whether
    it is at least :data:`MARGIN`; beside it (descriptive, not the criterion) the variant's
    margin over each seed's best baseline, per seed."""
    best = max(BASELINES, key=lambda lab: rows[lab]["client_auroc"])
    variant, base = rows[VARIANT]["client_auroc"], rows[best]["client_auroc"]
    per_seed = [
        v - max(vals)
        for v, *vals in zip(
            rows[VARIANT]["client_auroc_per_seed"],
            *(rows[lab]["client_auroc_per_seed"] for lab in BASELINES),
            strict=True,
        )
    ]
    return {
        "variant": VARIANT, "best_baseline": best, "variant_auc": variant,
        "best_baseline_auc": base, "margin": variant - base, "required": MARGIN,
        "holds": bool(variant - base >= MARGIN), "margin_per_seed": per_seed,
    }  # fmt: skip


def by_source(run: Path) -> dict[str, dict[str, float]]:
    """Per method and client source, the mean over the seeds of ``run`` of that source's
    clients' AUROC (descriptive: which domains a method's client mean comes from)."""
    from fedad.config import parse_config
    from fedad.federation import build_federation
    from fedad.runner import with_server_data
    from fedad.runs import read_config

    per: dict[str, dict[str, list[float]]] = {}
    for seed_dir in sorted(run.glob("seed-*")):
        fed = build_federation(
            with_server_data(parse_config(read_config(seed_dir / "config.toml")))
        )
        source = {c.client_id: c.source for c in fed.clients}
        methods = json.loads((seed_dir / "metrics.json").read_text(encoding="utf-8"))["methods"]
        for label, m in methods.items():
            for r in m.get("per_client", []):
                if r.get("auroc") is not None:
                    per.setdefault(label, {}).setdefault(source[r["client"]], []).append(r["auroc"])
    return {lab: {src: float(np.mean(v)) for src, v in d.items()} for lab, d in per.items()}


def by_source_table(result: dict[str, dict[str, float]]) -> str:
    """Markdown: one row per source, one column per method."""
    labels = list(result)
    sources = sorted({s for d in result.values() for s in d})
    lines = ["| source | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    for src in sources:
        cells = [f"{result[lab][src]:.3f}" if src in result[lab] else "–" for lab in labels]
        lines.append(f"| {src} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def probe(run: Path) -> dict[str, Any]:
    """Why the student scores as it does, per ``fgad`` row, client and seed of ``run``.

    Label-free, on each client's training graphs: the Spearman correlation of the student's
    score (its probability of "generated") with the norm of the graph representation
    :math:`\\|h_G\\|` (the sum readout grows with the graph) and with the edge count, the same
    for the authors' score (minus the student's raw "normal" logit), the share of graphs whose
    score falls when :math:`h_G` is doubled (the head's extrapolation outward) and the mean
    score. Then once on the test set: the AUROC of the student's score and of the authors',
    beside the AUROC of :math:`-\\|h_G\\|` and of the edge count, and the anomalies' mean norm
    over the normals'.
    """
    import torch
    from scipy.stats import spearmanr

    from fedad.config import parse_config
    from fedad.data.types import GraphSet
    from fedad.federation import build_federation
    from fedad.methods.fgad.detector import FGADDetector
    from fedad.methods.fgad.model import NORMAL
    from fedad.metrics import auroc
    from fedad.runner import with_server_data
    from fedad.runs import load_run, read_config

    def heads(det: FGADDetector, g: GraphSet) -> dict[str, np.ndarray]:
        """The student's p(generated) at h_G and 2 h_G, minus its "normal" logit (the
        authors' score, as an anomaly score), and the norm of h_G."""
        with torch.no_grad():
            b = g.batch(np.arange(len(g)))
            z = det.net_.represent(b.x, b.edge_index, b.batch, int(b.num_graphs))
            logits = det.net_.student(z).double()
            doubled = torch.softmax(det.net_.student(2 * z).double(), 1)[:, 1 - NORMAL]
        return {
            "score": torch.softmax(logits, 1)[:, 1 - NORMAL].numpy(),
            "doubled": doubled.numpy(),
            "authors": -logits[:, NORMAL].numpy(),
            "norm": z.norm(dim=1).numpy(),
        }

    rows: dict[str, list[dict[str, Any]]] = {}
    for seed_dir in sorted(run.glob("seed-*")):
        cfg = with_server_data(parse_config(read_config(seed_dir / "config.toml")))
        fed = build_federation(cfg)
        loaded = load_run(seed_dir)
        for label, dets in loaded.detectors.items():
            for c in fed.clients:
                det = dets.get(c.client_id)
                if not isinstance(det, FGADDetector):
                    continue
                assert isinstance(c.x_train, GraphSet) and isinstance(c.x_test, GraphSet)
                tr, te = heads(det, c.x_train), heads(det, c.x_test)
                s, h = tr["score"], tr["norm"]
                edges = np.diff(c.x_train.edge_ptr) / 2
                et = np.diff(c.x_test.edge_ptr) / 2
                y = np.asarray(c.y_test)
                rows.setdefault(label, []).append({
                    "seed": seed_dir.name, "client": c.client_id, "source": c.source,
                    "train_rho_norm": float(spearmanr(s, h)[0]),
                    "train_rho_edges": float(spearmanr(s, edges)[0]),
                    "train_rho_authors_norm": float(spearmanr(tr["authors"], h)[0]),
                    "train_falls_when_doubled": float(np.mean(tr["doubled"] < s)),
                    "train_mean_score": float(np.mean(s)),
                    "test_auc_student": auroc(y, te["score"]),
                    "test_auc_authors": auroc(y, te["authors"]),
                    "test_auc_minus_norm": auroc(y, -te["norm"]),
                    "test_auc_edges": auroc(y, et),
                    "test_norm_ratio": float(te["norm"][y == 1].mean() / te["norm"][y == 0].mean()),
                })  # fmt: skip
    out: dict[str, Any] = {}
    for label, rs in rows.items():
        keys = [k for k in rs[0] if k.startswith(("train_", "test_"))]
        summary: dict[str, Any] = {"n": len(rs)}
        for group in [*sorted({r["source"] for r in rs}), "all"]:
            sel = [r for r in rs if group in ("all", r["source"])]
            summary[group] = {k: float(np.nanmean([np.nan if r[k] is None else r[k] for r in sel]))
                              for k in keys}  # fmt: skip
        out[label] = {"summary": summary, "per_client": rs}
    return out


def probe_table(result: dict[str, Any]) -> str:
    """Markdown: one row per fgad row and source (means over seeds and clients)."""
    lines = [
        "| method | source | rho(score, norm) | rho(score, edges) | rho(authors', norm) | "
        "falls when h doubled | mean score | AUC student | AUC authors' | AUC -norm | "
        "AUC edges | norm anom/normal |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, r in result.items():
        for group, v in r["summary"].items():
            if group == "n":
                continue
            lines.append(
                f"| {label} | {group} | {v['train_rho_norm']:+.2f} | {v['train_rho_edges']:+.2f} | "
                f"{v['train_rho_authors_norm']:+.2f} | {v['train_falls_when_doubled']:.2f} | "
                f"{v['train_mean_score']:.3f} | {v['test_auc_student']:.3f} | "
                f"{v['test_auc_authors']:.3f} | {v['test_auc_minus_norm']:.3f} | "
                f"{v['test_auc_edges']:.3f} | {v['test_norm_ratio']:.2f} |"
            )
    return "\n".join(lines)


DEV_SEEDS = [100, 101, 102]
"""Seeds of the development runs that chose ``fgad-plus``'s options (never used for the
pre-registered check or the tables)."""
VAL_FRACTION = 0.2
"""Share of every client's training graphs held out for the validation AUC."""
FGAD_PLUS = {**VGAE, "fake_graphs": "sampled", "distill_on": "all", "fake_features": "auto"}
"""The options of ``fgad-plus`` that the development runs start from (see SELECT)."""
SELECT: list[Method] = [
    ("paper", "fgad", {}, None),
    ("audit", "fgad", {**VGAE, "fake_graphs": "sampled", "distill_on": "all"}, None),
    ("degree-features", "fgad", FGAD_PLUS, None),
    ("tau2", "fgad", {**FGAD_PLUS, "tau": 2.0}, None),
    ("student-ad", "fgad", {**FGAD_PLUS, "student_ad": 1.0}, None),
    ("tau2-student-ad", "fgad", {**FGAD_PLUS, "tau": 2.0, "student_ad": 1.0}, None),
    ("keep-adam", "fgad", {**FGAD_PLUS, "keep_optimizer": True}, None),
    ("lr3e-4", "fgad", {**FGAD_PLUS, "lr": 3e-4}, None),
]
"""Candidates compared by the validation AUC (``--suite select-*``)."""


PLUS_ROWS: list[Method] = [
    ("self-train", "local", {}, "deepsvdd"),
    ("fedavg-svdd", "fedavg", {}, "deepsvdd"),
    ("gcfl", "gcfl", {}, None),
    ("fedstar", "fedstar", {}, None),
    ("fgad", "fgad", {}, None),
    ("fgad-v2-fedavg-all", "fgad", {"collaboration": "all"}, None),
    ("fgad-plus", "fgad-plus", {}, None),
]
"""The pre-registered comparison of ``fgad-plus`` (``--suite plus-*``): the baselines of
:data:`PLUS_BASELINES` and FedStar (context), the paper's ``fgad``, FGAD_v2 (FedAvg of the
whole model but the input layers: the paper's communication comparison) and ``fgad-plus``
with no params."""
PLUS_BASELINES = ("self-train", "fedavg-svdd", "gcfl")
"""The baselines of ``fgad-plus``'s criterion: the best of ``local`` / ``fedavg`` + Deep SVDD and
``gcfl`` in the same run."""
PLUS_ABLATION: list[Method] = [
    ("plus-without-student-ad", "fgad-plus", {"student_ad": 0.0}, None),
    ("plus-without-distill-on-all", "fgad-plus", {"distill_on": "normal"}, None),
    ("plus-without-sampled-graphs", "fgad-plus", {"fake_graphs": "soft"}, None),
    ("plus-without-degree-features", "fgad-plus", {"fake_features": "real"}, None),
    ("plus-without-balanced-eq8", "fgad-plus", {"reconstruction": "eq8"}, None),
    ("plus-without-decoder-bias", "fgad-plus", {"decoder_bias": False}, None),
    ("plus-without-linear-output", "fgad-plus", {"gen_output": "gin"}, None),
]
"""``fgad-plus`` with one of its differences from the paper set back to the paper's value
(the ablation table of docs/methods/fgad.md); descriptive, decides nothing."""
PLUS_SEEDS = [0, 1, 2, 3, 4]
PLUS_SETTINGS: dict[str, tuple[str, str, int]] = {
    "plus-multi": ("multi", DOMAINS[0], 4),
    "plus-multi-ablation": ("multi", DOMAINS[0], 4),
    "plus-social": ("single", "graphs_social", 4),
    "plus-proteins": ("single", "graphs_proteins", 4),
    "plus-mutag": ("mutag", DOMAINS[0], 2),
}
"""Per ``plus-*`` suite: the benchmark setting, its single-dataset domain, its clients."""


def plus_rows(suite: str) -> list[Method]:
    """The rows of a ``plus-*`` suite: :data:`PLUS_ROWS` then :data:`PLUS_ABLATION` (multi:
    the ablation is its own run, ``plus-multi-ablation``, to keep the main run short).
    ``plus-social`` and ``plus-proteins`` without FedStar and FGAD_v2, and only social with
    one ablation row, ``fake_features = "real"`` (amended before they ran, for time)."""
    if suite == "plus-multi":
        return PLUS_ROWS
    if suite in ("plus-social", "plus-proteins"):  # amended before they ran: time
        light = [r for r in PLUS_ROWS if r[0] not in ("fedstar", "fgad-v2-fedavg-all")]
        extra = [r for r in PLUS_ABLATION if r[0] == "plus-without-degree-features"]
        return light + (extra if suite == "plus-social" else [])
    if suite == "plus-multi-ablation":
        return [r for r in PLUS_ROWS if r[0] == "fgad-plus"] + PLUS_ABLATION
    return PLUS_ROWS + PLUS_ABLATION


def plus_verdict(rows: dict[str, Any]) -> dict[str, Any]:
    """The registered criterion on a ``plus-*`` summary: ``fgad-plus``'s client-mean AUC (mean
    over the seeds) at least :data:`MARGIN` above the best of :data:`PLUS_BASELINES`, and its
    upload per client and round no more than ``fgad``'s; per seed, descriptive."""
    best = max(PLUS_BASELINES, key=lambda lab: rows[lab]["client_auroc"])
    plus, base = rows["fgad-plus"]["client_auroc"], rows[best]["client_auroc"]
    per_seed = [
        v - max(vals)
        for v, *vals in zip(
            rows["fgad-plus"]["client_auroc_per_seed"],
            *(rows[lab]["client_auroc_per_seed"] for lab in PLUS_BASELINES),
            strict=True,
        )
    ]
    up, fgad_up = (
        rows["fgad-plus"]["params_up_per_client_round"],
        rows["fgad"]["params_up_per_client_round"],
    )
    return {
        "best_baseline": best, "plus_auc": plus, "best_baseline_auc": base,
        "margin": plus - base, "required": MARGIN, "auc_holds": bool(plus - base >= MARGIN),
        "params_up": up, "fgad_params_up": fgad_up, "upload_holds": bool(up <= fgad_up),
        "margin_per_seed": per_seed,
    }  # fmt: skip


def select_run(
    setting: str, rows: list[Method], seeds: list[int], rounds: int, clients: int, domain: str
) -> dict[str, Any]:
    """Every candidate of ``rows`` per seed through :func:`fedad.methods.fgad.select.validate`
    (trained on each client's training graphs less :data:`VAL_FRACTION`, scored on the
    held-out ones against generated graphs), the choice by :func:`fedad.methods.fgad.select.
    choose` on those numbers alone, and only then, kept apart for the report, the dev test
    AUC that the same detectors reach (client mean)."""
    import tomllib

    from fedad.config import parse_config
    from fedad.federation import build_federation
    from fedad.methods.fgad.select import choose, validate
    from fedad.metrics import auroc
    from fedad.runner import with_server_data

    text = config_text(setting, 1, rounds, clients, domain, None).replace("seeds = [0]", "seed = 0")
    keys = ("val", "val_own", "val_teacher", "loss_g", "recon_constant", "admissible")
    out: dict[str, Any] = {lab: {k: [] for k in (*keys, "test")} for lab, *_ in rows}
    kept = []
    for seed in seeds:
        raw = tomllib.loads(text.replace("seed = 0", f"seed = {seed}", 1))
        fed = build_federation(with_server_data(parse_config(raw)))
        found, dets = validate(fed, [(r[0], r[1], r[2]) for r in rows], rounds, seed, VAL_FRACTION)
        for label, r in found.items():
            for k in keys:
                out[label][k].append(r[k])
        kept.append((fed, dets))
    chosen = choose(
        {lab: out[lab]["val"] for lab, *_ in rows},
        {lab: all(out[lab]["admissible"]) for lab, *_ in rows},
    )
    for fed, dets in kept:  # the dev test sets, read only after the choice
        for label, ds in dets.items():
            out[label]["test"].append(float(np.mean([
                auroc(c.y_test, ds[c.client_id].score(c.x_test)) for c in fed.clients
            ])))  # fmt: skip
    return {"chosen": chosen, "seeds": seeds, "rounds": rounds, "candidates": out}


def select_table(result: dict[str, Any]) -> str:
    """Markdown: one row per candidate, validation AUCs (the criterion) then dev test AUC."""
    lines = [
        "| candidate | generator criterion (eq. 8 < constant, every seed) | validation AUC, "
        "pooled generated (criterion) | own generated | teacher, pooled | dev test AUC "
        "(after the choice) |",
        "|---|---|---|---|---|---|",
    ]
    for label, r in result["candidates"].items():
        mark = " (chosen)" if label == result["chosen"] else ""
        gen = f"{np.mean(r['loss_g']):.3f} / {np.mean(r['recon_constant']):.3f}: " + (
            "yes" if all(r["admissible"]) else "no"
        )
        cells = [f"{np.mean(r[k]):.3f} ± {np.std(r[k]):.3f}"
                 for k in ("val", "val_own", "val_teacher", "test")]  # fmt: skip
        lines.append(f"| {label}{mark} | {gen} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


SELECT_FINAL = ["degree-features", "tau2", "student-ad", "lr3e-4"]
"""The candidates run on all three development settings (multi ran only these)."""


def select_combine() -> dict[str, Any]:
    """The rule of docs/methods/fgad.md ("How the options were chosen"): multi's shares
    (``fgad_select_multi_only_s*.json``, one per development seed) merged, then per candidate
    of :data:`SELECT_FINAL` the validation AUC averaged over multi, social and MUTAG (each the
    mean over its seeds); the highest among those whose generator met the eq. 8 criterion on
    every seed of multi. Validation numbers only."""
    from fedad.methods.fgad.select import choose

    merged: dict[str, dict[str, list[Any]]] = {}
    seeds: list[int] = []
    for path in sorted(OUT.glob("fgad_select_multi_only_s*.json")):
        part = json.loads(path.read_text())
        seeds += part["seeds"]
        for label, r in part["candidates"].items():
            for k, v in r.items():
                merged.setdefault(label, {}).setdefault(k, []).extend(v)
    settings = {"multi": merged}
    for name in ("social", "mutag"):
        settings[name] = json.loads((OUT / f"fgad_select_{name}.json").read_text())["candidates"]
    val = {
        lab: [float(np.mean(settings[s][lab]["val"])) for s in ("multi", "social", "mutag")]
        for lab in SELECT_FINAL
    }
    admissible = {lab: all(merged[lab]["admissible"]) for lab in SELECT_FINAL}
    return {
        "multi_seeds": sorted(seeds), "multi": merged, "val_per_setting": val,
        "val_mean": {lab: float(np.mean(v)) for lab, v in val.items()},
        "admissible_multi": admissible, "chosen": choose(val, admissible),
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--suite",
        choices=["single", "multi", "mutag", "ablation",
                 "generator-single", "generator-multi", "generator-mutag",
                 "confirm-multi", "confirm-mutag", "confirm-single", "confirm-social",
                 "select-multi", "select-social", "select-mutag", "select-combine",
                 *PLUS_SETTINGS],
        required=True,
    )  # fmt: skip
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--clients", type=int, default=None, help="single 4, mutag 2 (iid)")
    ap.add_argument("--domain", default="graphs_social", choices=DOMAINS)
    ap.add_argument("--only", nargs="+", default=None, metavar="LABEL")
    ap.add_argument(
        "--dev-seeds", nargs="+", type=int, default=DEV_SEEDS, metavar="SEED",
        help="select-*: a share of the development seeds (one process per share)",
    )  # fmt: skip
    ap.add_argument("--work", type=Path, default=None, help="keep (and resume) the run here")
    ap.add_argument("--summarise-only", action="store_true")
    ap.add_argument("--probe", action="store_true", help="after the run: probe (needs --work)")
    ap.add_argument(
        "--by-source", action="store_true",
        help="after the run: AUROC per client source (needs --work)",
    )  # fmt: skip
    args = ap.parse_args()
    if args.probe and args.work is None:
        raise SystemExit("--probe reads the run's detectors back: give --work DIR")
    if args.by_source and args.work is None:
        raise SystemExit("--by-source reads the run's seeds back: give --work DIR")
    clients = args.clients or (2 if args.suite.endswith("mutag") else 4)

    if args.suite == "select-combine":
        combined = select_combine()
        (OUT / "fgad_select_combined.json").write_text(json.dumps(combined, indent=1) + "\n")
        print("| candidate | multi | social | MUTAG | mean | eq. 8 criterion on multi |")
        print("|---|---|---|---|---|---|")
        for lab, v in combined["val_per_setting"].items():
            mark = " (chosen)" if lab == combined["chosen"] else ""
            ok = "yes" if combined["admissible_multi"][lab] else "no"
            cells = " | ".join(f"{x:.3f}" for x in v)
            print(f"| {lab}{mark} | {cells} | {combined['val_mean'][lab]:.3f} | {ok} |")
        return
    if args.suite.startswith("select-"):
        setting = args.suite.removeprefix("select-")
        domain = "graphs_social" if setting == "social" else args.domain
        cands = [r for r in SELECT if not args.only or r[0] in args.only]
        result = select_run(
            "single" if setting == "social" else setting, cands, args.dev_seeds, args.rounds,
            clients, domain,
        )  # fmt: skip
        suffix = ("_only" if args.only else "") + (
            "" if args.dev_seeds == DEV_SEEDS else "_s" + "-".join(map(str, args.dev_seeds))
        )
        (OUT / f"fgad_select_{setting}{suffix}.json").write_text(
            json.dumps(result, indent=1) + "\n"
        )
        print(select_table(result))
        return
    text = config_text(args.suite, args.seeds, args.rounds, clients, args.domain, args.only)
    suffix = "_only" if args.only else ""
    training = args.suite.startswith("generator")
    rows = run_suite(
        text, f"fgad_{args.suite.replace('-', '_')}{suffix}",
        summarise_training if training else summarise, work=args.work, jobs=args.jobs,
        summarise_only=args.summarise_only, suite=args.suite,
    )  # fmt: skip
    print(f"```toml\n{text}```\n")
    print(training_table(rows) if training else table(rows))
    if args.suite.startswith("confirm-") and not args.only:
        v = verdict(rows)
        path = OUT / f"fgad_{args.suite.replace('-', '_')}{suffix}.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "verdict": v}, indent=1) + "\n")
        print(
            f"\n{v['variant']} {v['variant_auc']:.3f} - best baseline {v['best_baseline']} "
            f"{v['best_baseline_auc']:.3f} = {v['margin']:+.3f} (required >= {MARGIN}): "
            f"{'holds' if v['holds'] else 'fails'}; per seed, over that seed's best baseline: "
            + ", ".join(f"{m:+.3f}" for m in v["margin_per_seed"])
        )
    if args.suite in PLUS_SETTINGS and args.suite != "plus-multi-ablation" and not args.only:
        v = plus_verdict(rows)
        path = OUT / f"fgad_{args.suite.replace('-', '_')}.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "verdict": v}, indent=1) + "\n")
        print(
            f"\nfgad-plus {v['plus_auc']:.3f} - best baseline {v['best_baseline']} "
            f"{v['best_baseline_auc']:.3f} = {v['margin']:+.3f} (required >= {MARGIN}): "
            f"{'holds' if v['auc_holds'] else 'fails'}; upload {v['params_up']:,.0f} float32 "
            f"against fgad's {v['fgad_params_up']:,.0f}: "
            f"{'holds' if v['upload_holds'] else 'fails'}; per seed: "
            + ", ".join(f"{m:+.3f}" for m in v["margin_per_seed"])
        )
    if args.by_source:
        sources = by_source(args.work)
        (OUT / f"fgad_{args.suite.replace('-', '_')}{suffix}_by_source.json").write_text(
            json.dumps(sources, indent=1) + "\n"
        )
        print()
        print(by_source_table(sources))
    if args.probe:
        result = probe(args.work)
        (OUT / f"fgad_{args.suite}{suffix}_probe.json").write_text(
            json.dumps(result, indent=1) + "\n"
        )
        print()
        print(probe_table(result))


if __name__ == "__main__":
    main()
