"""A single self-contained HTML report of a run directory.

:func:`write_report` reads ``metrics.json`` (required), ``history.csv``, ``scores.npz``,
``maps.npz``, ``embeddings.npz`` and ``config.toml`` (all optional) and writes
``report.html`` next to them. It leads with the answer (:mod:`fedad.report.answer`: the
best method's pooled and client-mean AUROC, one sentence reading the ranking, the caveats)
and the summary table; the rest follows in closed ``<details>`` folds: experiment facts,
a table per method-declared metric family, the figures of :mod:`fedad.report.plots`
embedded as base64 PNG (per-client score boxes; anomaly-map overlays when the run kept
maps; t-SNE maps of the test samples' representations when it kept those), a per-client
table, the evaluation protocol and the resolved config.
Which metric columns the tables show comes from metrics.json's ``columns``
(:func:`fedad.evaluation.columns.columns_of`), their headers, formats and the families'
titles and notes from its ``families`` (:func:`fedad.evaluation.run_families.run_families`). The
page has no external CSS, JS or images, so it can be mailed or archived as one file. Every
piece of text taken from the run directory is HTML-escaped. The run directory is read as
untrusted input (:func:`fedad.rundir.files.reading`): a symbolic link anywhere in its structure is
a one-line error before anything is read, and no file is read through a link.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import fedad
from fedad.evaluation.columns import (
    PER_CLIENT,
    SUMMARY,
    Column,
    FamilySpec,
    column_spec,
    columns_of,
)
from fedad.evaluation.metrics import evaluate_clients
from fedad.evaluation.run_families import run_families
from fedad.report import plots
from fedad.report.answer import answer_section
from fedad.report.figures import (
    embedding_section,
    figures_section,
    maps_section,
    read_embedding_sample,
    read_map_sample,
)
from fedad.report.fmt import CSS, DASH, esc, figure_html, fmt, num
from fedad.rundir.files import anchored, reading, write_text
from fedad.rundir.layout import CONFIG_FILE, HISTORY_FILE, METRICS_FILE, REPORT_FILE, SCORES_FILE
from fedad.rundir.read import (
    MethodScores,
    read_config_text,
    read_history,
    read_metrics,
    read_scores,
)

__all__ = ["render_report", "write_report"]


PROTOCOL_NOTE = (
    "Thresholds and any model selection come from training data only; the test set is never "
    "used to pick a threshold or a round. The model evaluated is the last round's. Pooled "
    "metrics are computed over the union of all clients' local test sets; per-client metrics "
    "over each client's own test set (the per-client mean is unweighted). AUROC, AUPR and EER "
    "are threshold-free; F1, precision, recall, FE and ME use each detector's own threshold, "
    "with the anomaly as the positive class. FE = FP / (TP + FP) is the share of false alarms "
    "among predicted anomalies, ME = FN / (TP + FN) the share of anomalies missed. "
    f"“{DASH}” marks a metric that is undefined (e.g. a test set with one class, or 0/0) or "
    "does not apply."
)

_CSS = CSS


# --------------------------------------------------------------------------- formatting


def _fact(value: object) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return DASH
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, default=str)
    return str(value)


# --------------------------------------------------------------------------- data helpers


def _method_entries(metrics: Mapping[str, Any], notes: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for label, entry in metrics["methods"].items():
        if isinstance(entry, dict):
            out[str(label)] = entry
        else:
            notes.append(f"{label}: metrics entry is not an object; shown empty")
            out[str(label)] = {}
    return out


def _per_client(
    entries: Mapping[str, Mapping[str, Any]], scores: Mapping[str, MethodScores]
) -> dict[str, dict[int, dict[str, Any]]]:
    """``{label: {client: row}}`` from metrics.json, or computed from scores.npz if absent."""
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for label, entry in entries.items():
        rows: dict[int, dict[str, Any]] = {}
        listed = entry.get("per_client")
        if isinstance(listed, list):
            for row in listed:
                if isinstance(row, dict) and (cid := num(row.get("client"))) is not None:
                    rows[int(cid)] = row
        ms = scores.get(label)
        if not rows and ms is not None and ms.client is not None:
            for row in evaluate_clients(ms.label, ms.score, ms.pred, ms.client):
                rows[int(row["client"] or 0)] = row
        if rows:
            out[label] = rows
    return out


# --------------------------------------------------------------------------- sections


def _partial_banner(experiment: Mapping[str, Any]) -> str:
    """A warning at the top of the report of an interrupted run (``status = "partial"``)."""
    if experiment.get("status") != "partial":
        return ""
    pending = experiment.get("pending")
    missing = ", ".join(map(str, pending)) if isinstance(pending, list) and pending else "?"
    return (
        f'<p class="warning">This run is incomplete; not finished: {esc(missing)}. Complete '
        "it with <code>fedad run CONFIG --resume --out DIR</code> (same config).</p>"
    )


def _facts_section(run_dir: Path, metrics: Mapping[str, Any], n_methods: int) -> str:
    facts: list[tuple[str, str]] = [("run directory", str(run_dir.resolve()))]
    facts += [(str(k), _fact(v)) for k, v in metrics["experiment"].items()]
    facts.append(("methods", str(n_methods)))
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in facts)
    return f'<h2>Experiment</h2><table class="facts">{rows}</table>'


def _std(entry: Mapping[str, Any], key: str) -> float | None:
    """The standard deviation over seeds of ``key`` (several-seed runs), else None."""
    std = entry.get("std")
    return num(std.get(key)) if isinstance(std, dict) else None


def _summary_section(
    entries: Mapping[str, Mapping[str, Any]],
    columns: list[Column],
    families: Sequence[FamilySpec],
    n_seeds: int = 0,
    client_mean: bool = False,
) -> str:
    if not entries:
        return '<h2>Summary</h2><p class="muted">No methods in metrics.json.</p>'
    best: dict[str, float] = {}
    if len(entries) > 1:
        for c in columns:
            values = [v for e in entries.values() if (v := num(e.get(c.key))) is not None]
            if c.better and values:
                best[c.key] = max(values) if c.better == "max" else min(values)
    head = "".join(f"<th>{esc(c.header)}</th>" for c in columns)
    body = []
    for label, entry in entries.items():
        kind_parts = [str(entry[k]) for k in ("method", "detector") if entry.get(k)]
        cells = [f"<td>{esc(label)}</td>", f"<td>{esc(' / '.join(kind_parts) or DASH)}</td>"]
        for c in columns:
            value = entry.get(c.key)
            x = num(value)
            cls = "num best" if c.key in best and x is not None and x == best[c.key] else "num"
            title = f' title="{esc(fmt(value, "int"))} bytes"' if c.kind == "bytes" and x else ""
            text = fmt(value, c.kind)
            sd = _std(entry, c.key)
            if sd is not None and x is not None and c.kind == "ratio":
                text += f" ± {fmt(sd, c.kind)}"
            cells.append(f'<td class="{cls}"{title}>{esc(text)}</td>')
        body.append(f"<tr>{''.join(cells)}</tr>")
    what = (
        f"Mean ± standard deviation over {n_seeds} seeds (each a complete run) of the pooled"
        if n_seeds
        else "Pooled"
    )
    if client_mean:  # one-vs-rest: local test sets overlap (families.evaluate_replies)
        what += (
            " (here: the mean over clients of each client's metric, since the clients' "
            "one-vs-rest test sets overlap)"
        )
    keys = {c.key for c in columns}
    notes = "".join(
        f'<p class="muted">{esc(f.note)}</p>'
        for f in families
        if f.in_summary and f.note and any(c.key in keys for c in f.columns)
    )
    return (
        "<h2>Summary</h2>"
        f'<p class="muted">{esc(what)} test-set metrics of the last round\'s model; the best '
        "value of each metric is in bold.</p>"
        f'<div class="scroll"><table><thead><tr><th>Label</th><th>Method / detector</th>{head}'
        f"</tr></thead><tbody>{''.join(body)}</tbody></table></div>" + notes
    )


def _family_sections(
    entries: Mapping[str, Mapping[str, Any]],
    groups: Mapping[str, list[str]],
    families: Sequence[FamilySpec],
) -> str:
    """One table per metric family that metrics.json lists apart from the summary (e.g.
    ONLAD's normal-positive metrics), left out when none of its own values is defined."""
    parts = []
    for name, keys in groups.items():
        if name in (SUMMARY, PER_CLIENT) or not keys:
            continue
        family = next((f for f in families if f.name == name), None)
        own = family.keys if family is not None and family.keys else tuple(keys)
        if not any(num(e.get(k)) is not None for e in entries.values() for k in own):
            continue
        specs = [column_spec(k, families) for k in keys]
        head = "".join(f"<th>{esc(c.header)}</th>" for c in specs)
        rows = "".join(
            f"<tr><td>{esc(label)}</td>"
            + "".join(f'<td class="num">{esc(fmt(e.get(c.key), c.kind))}</td>' for c in specs)
            + "</tr>"
            for label, e in entries.items()
        )
        title = family.title if family is not None and family.title else f"Metrics: {name}"
        note = f'<p class="muted">{esc(family.note)}</p>' if family and family.note else ""
        parts.append(
            f"<h2>{esc(title)}</h2>{note}"
            f"<table><thead><tr><th>Label</th>{head}</tr></thead><tbody>{rows}</tbody></table>"
        )
    return "".join(parts)


def _seeds_section(
    run_dir: Path,
    entries: Mapping[str, Mapping[str, Any]],
    seeds: list[Any],
    notes: list[str],
    columns: list[Column],
    families: Sequence[FamilySpec],
) -> str:
    """A several-seed run: each seed's values, their spread, and links to the seeds' reports.

    The per-seed table shows the summary's columns with a spread (AUROC, AUPR, F1, and the
    pixel metrics when the run has them)."""
    shown_cols = [c for c in columns if c.spread] or [column_spec(k, families) for k in ("auroc",)]
    per_seed: dict[str, dict[int, dict[str, Any]]] = {}
    for label, entry in entries.items():
        rows = entry.get("per_seed")
        if isinstance(rows, list):
            per_seed[label] = {
                int(seed): r
                for r in rows
                if isinstance(r, dict) and (seed := num(r.get("seed"))) is not None
            }
    shown = [int(s) for s in seeds if isinstance(s, int) and not isinstance(s, bool)]
    labels = list(per_seed)
    top = "".join(f'<th colspan="{len(shown_cols)}">{esc(lab)}</th>' for lab in labels)
    sub = "".join(f"<th>{esc(c.header)}</th>" for c in shown_cols) * len(labels)
    body = []
    for s in shown:
        name = f"seed-{s}"
        link = (
            f'<a href="{esc(name)}/report.html">{esc(s)}</a>'
            if (run_dir / name / REPORT_FILE).is_file()
            else esc(s)
        )
        cells = [f'<td class="num">{link}</td>']
        for lab in labels:
            row = per_seed[lab].get(s, {})
            cells += [
                f'<td class="num">{esc(fmt(row.get(c.key), c.kind))}</td>' for c in shown_cols
            ]
        body.append(f"<tr>{''.join(cells)}</tr>")
    table = (
        '<div class="scroll"><table class="per-seed"><thead>'
        f'<tr><th rowspan="2">Seed</th>{top}</tr><tr>{sub}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )
    auroc = {
        lab: {s: num(r.get("auroc")) for s, r in rows.items()} for lab, rows in per_seed.items()
    }
    figure = ""
    if any(v is not None for rows in auroc.values() for v in rows.values()):
        try:
            figure = figure_html(
                plots.seed_spread_figure(auroc),
                "AUROC per seed",
                "Pooled AUROC of each seed's run (dots) with the mean and one standard deviation "
                "(bar) per method.",
            )
        except Exception as exc:  # a broken figure must not cost the rest of the report
            notes.append(f"figure 'AUROC per seed' could not be drawn: {exc}")
    return (
        "<h2>Seeds</h2>"
        '<p class="muted">Every seed is a complete run (its own partition, initialisation '
        "and sampling) in <code>seed-N/</code>, with its own report: follow a seed's link for "
        "its ROC curves, score histograms and per-client metrics.</p>" + figure + table
    )


def _mean_over_seeds(history: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per-round columns averaged over seeds (a several-seed run's history has ``seed``)."""
    out: dict[str, dict[str, Any]] = {}
    for method, table in history.items():
        if "seed" not in table or "round" not in table:
            out[method] = dict(table)
            continue
        rounds = np.unique(table["round"][np.isfinite(table["round"])])
        cols = [c for c in table if c not in ("seed", "round")]
        mean: dict[str, Any] = {"round": rounds}
        for c in cols:
            values = []
            for r in rounds:
                v = table[c][table["round"] == r]
                v = v[np.isfinite(v)]
                values.append(float(v.mean()) if v.size else math.nan)
            mean[c] = np.asarray(values)
        out[method] = mean
    return out


def _per_client_section(
    per_client: Mapping[str, Mapping[int, Mapping[str, Any]]],
    keys: list[str],
    families: Sequence[FamilySpec],
) -> str:
    title = "<h2>Per-client metrics</h2>"
    if not per_client:
        return title + '<p class="muted">No per-client metrics in this run.</p>'
    specs = [column_spec(k, families) for k in keys or ["auroc", "f1"]]
    labels = list(per_client)
    clients = sorted({c for rows in per_client.values() for c in rows})
    top = "".join(f'<th colspan="{len(specs)}">{esc(lab)}</th>' for lab in labels)
    sub = "".join(f"<th>{esc(c.header)}</th>" for c in specs) * len(labels)
    body = []
    for c in clients:
        first = next(rows[c] for rows in per_client.values() if c in rows)
        name = first.get("client_name")
        shown = f"{c} {esc(name[:60])}" if isinstance(name, str) and name else str(c)
        cells = [
            f'<td class="num">{shown}</td>',
            f'<td class="num">{esc(fmt(first.get("n"), "int"))}</td>',
            f'<td class="num">{esc(fmt(first.get("n_anomalies"), "int"))}</td>',
        ]
        for lab in labels:
            row = per_client[lab].get(c, {})
            cells += [f'<td class="num">{esc(fmt(row.get(s.key), s.kind))}</td>' for s in specs]
        body.append(f"<tr>{''.join(cells)}</tr>")
    mean_cells = ['<td colspan="3">mean over clients</td>']
    for lab in labels:
        for s in specs:
            values = [
                v for row in per_client[lab].values() if (v := num(row.get(s.key))) is not None
            ]
            mean = sum(values) / len(values) if values else None
            mean_cells.append(f'<td class="num">{esc(fmt(mean, s.kind))}</td>')
    body.append(f'<tr class="mean">{"".join(mean_cells)}</tr>')
    return (
        title
        + '<div class="scroll"><table class="per-client"><thead>'
        + '<tr><th rowspan="2">Client</th><th rowspan="2">n</th><th rowspan="2">anomalies</th>'
        + f"{top}</tr><tr>{sub}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    )


def _privacy_section(entries: Mapping[str, Mapping[str, Any]]) -> str:
    """The (epsilon, delta) of each method run with ``[privacy] mechanism = "gaussian"``,
    or why a method has none (``metrics.json``'s ``privacy``)."""
    rows = []
    for label, entry in entries.items():
        p = entry.get("privacy")
        if not isinstance(p, dict):
            continue
        phases = p.get("privatised_phases")
        shown = ", ".join(map(str, phases)) if isinstance(phases, list) and phases else DASH
        cells = [
            esc(label),
            fmt(p.get("epsilon"), "float"),
            fmt(p.get("delta"), "float"),
            fmt(p.get("noise_multiplier"), "float"),
            fmt(p.get("sampling_rate"), "float"),
            fmt(p.get("releases"), "int"),
            esc(shown),
            esc(str(p.get("note", ""))[:400]),
        ]
        rows.append(
            "<tr>"
            + "".join(
                f'<td class="num">{c}</td>' if 0 < i < 6 else f"<td>{c}</td>"
                for i, c in enumerate(cells)
            )
            + "</tr>"
        )
    if not rows:
        return ""
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "Label",
            "ε",
            "δ",
            "σ (noise multiplier)",
            "q (sampling)",
            "releases",
            "noised phases",
            "what it covers",
        )
    )
    return (
        "<h2>Privacy</h2>"
        '<p class="muted">Client-level differential privacy of the Gaussian mechanism on model '
        "updates (DP-FedAvg), from dp-accounting over the releases the run made, each to a "
        "fixed number of clients sampled without replacement (replace-one neighbours); "
        "against the server, which chose the samples, metrics.json's epsilon_server holds. "
        "A method whose clients also send un-noised arrays has no ε.</p>"
        f'<div class="scroll"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


# --------------------------------------------------------------------------- entry points


def _fold(sections: str) -> str:
    """Each ``<h2>`` section of ``sections`` as a closed ``<details>`` fold (its heading the
    summary). Text from the run is escaped, so every ``<h2>`` here starts a section."""
    parts = [p for p in sections.split("<h2>") if p.strip()]
    out = []
    for part in parts:
        head, sep, body = part.partition("</h2>")
        if not sep:  # text before the first heading (none today): left as it is
            out.append(part)
            continue
        out.append(f"<details><summary><h2>{head}</h2></summary>{body}</details>")
    return "".join(out)


def render_report(run_dir: str | Path) -> str:
    """The HTML text of the report of ``run_dir`` (see :func:`write_report`); a symbolic
    link anywhere in the run's structure is a one-line error
    (:func:`fedad.rundir.files.reading`)."""
    run = Path(run_dir)
    with reading(run):
        return _render(run)


def _render(run: Path) -> str:
    """:func:`render_report` within :func:`fedad.rundir.files.reading`."""
    notes: list[str] = []
    metrics = read_metrics(run / METRICS_FILE)
    entries = _method_entries(metrics, notes)
    history = read_history(run / HISTORY_FILE)
    if not (run / HISTORY_FILE).is_file():
        notes.append("no history.csv: per-round figures are left out")
    elif not history:
        notes.append("history.csv has no rows: per-round figures are left out")
    if (run / SCORES_FILE).is_file():
        scores, score_notes = read_scores(run / SCORES_FILE, list(entries))
        notes += score_notes
    else:
        scores = {}
        notes.append("no scores.npz: ROC curves and histograms are left out")
    per_client = _per_client(entries, scores)
    maps = read_map_sample(run, list(entries), notes)
    embeds = read_embedding_sample(run, list(entries), notes)
    families = run_families(metrics)
    groups = columns_of(metrics, families)
    summary = [column_spec(k, families) for k in groups[SUMMARY]]
    config = read_config_text(run / CONFIG_FILE)
    seeds = metrics["experiment"].get("seeds")
    several = isinstance(seeds, list)
    if several:
        history = _mean_over_seeds(history)
        notes[:] = [n for n in notes if not n.startswith("no scores.npz")]

    dataset = metrics["experiment"].get("dataset")
    title = f"fedad report: {run.resolve().name}"
    subtitle = f"dataset {dataset}" if dataset is not None else ""
    lead = [
        _partial_banner(metrics["experiment"]),
        answer_section(run, metrics, entries, notes),
        _summary_section(
            entries,
            summary,
            families,
            len(seeds) if several else 0,
            metrics["experiment"].get("pooled") == "client-mean",
        ),
    ]
    sections = [
        _facts_section(run, metrics, len(entries)),
        _seeds_section(run, entries, seeds, notes, summary, families) if several else "",
        _family_sections(entries, groups, families),
        figures_section(entries, scores, history, per_client, notes, families, several),
        maps_section(maps, notes),
        embedding_section(embeds, notes),
        "" if several else _per_client_section(per_client, groups.get(PER_CLIENT, []), families),
        _privacy_section(entries),
        f'<h2>Evaluation protocol</h2><p class="note">{esc(PROTOCOL_NOTE)}</p>',
    ]
    if notes:
        items = "".join(f"<li>{esc(n)}</li>" for n in notes)
        sections.append(f"<h2>Notes</h2><ul>{items}</ul>")
    sections.append("<h2>Configuration</h2>")
    sections.append(
        f"<pre>{esc(config)}</pre>"
        if config is not None
        else '<p class="muted">No config.toml in the run directory.</p>'
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{esc(title)}</h1>"
        + (f'<p class="muted">{esc(subtitle)}</p>' if subtitle else "")
        + "".join(lead)
        + _fold("".join(sections))
        + f'<p class="muted">Generated by fedad {esc(fedad.__version__)}.</p>'
        + "</body></html>\n"
    )


def write_report(run_dir: str | Path) -> Path:
    """Write ``report.html`` into ``run_dir`` and return its path.

    Requires ``metrics.json``; ``history.csv``, ``scores.npz`` and ``config.toml`` are used
    when present (what is missing is listed in the report's notes). Per-client metrics come
    from ``metrics.json``'s ``per_client`` lists, or are computed from ``scores.npz`` with
    :func:`fedad.evaluation.metrics.evaluate_clients` when a method has none. Raises
    :class:`~fedad.core.errors.FedadError` when ``metrics.json`` is missing or malformed.
    """
    run = Path(run_dir)
    text = render_report(run)
    out = run / REPORT_FILE
    with anchored(run):  # the run is untrusted: never written through a link below it
        write_text(out, text)
    return out
