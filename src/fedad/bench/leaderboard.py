"""``leaderboard.html``: a benchmark's results on one page.

From the top: one sentence per data kind saying what wins and whether the seeds separate it
from the second (:mod:`fedad.bench.ranks`); per data kind the average ranks, the test and
a figure of quality against cost (mean AUROC against mean seconds per method); per
federation every method's mean ± std over seeds (population std, ``ddof = 0``, as the
several-seed ``metrics.json``), best values in bold; the methods that failed, with why.
Everything read from the results is escaped (:func:`fedad.report.fmt.esc`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from fedad.bench.ranks import KindRanks, rank_kinds
from fedad.bench.results import METRICS
from fedad.report.fmt import CSS, DASH, esc, figure_html

__all__ = ["render_leaderboard"]

SHOWN = (
    ("auroc", "AUROC", "ratio"),
    ("client_mean_auroc", "client-mean AUROC", "ratio"),
    ("aupr", "AUPR", "ratio"),
    ("f1", "F1", "ratio"),
    ("pixel_auroc", "pixel AUROC", "ratio"),
    ("pro", "PRO", "ratio"),
    ("seconds", "seconds", "seconds"),
    ("bytes_up", "MB up", "mb"),
    ("peak_mb", "peak MB", "plain"),
)
HIGHER_BETTER = {"auroc", "client_mean_auroc", "aupr", "f1", "pixel_auroc", "pro"}


def _values(rows: Sequence[dict[str, Any]], key: str) -> list[float]:
    out = []
    for r in rows:
        v = r.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            out.append(float(v))
    return out


def _fmt(mean: float, kind: str) -> str:
    if kind == "ratio":
        return f"{mean:.3f}"
    if kind == "mb":
        return f"{mean / 1e6:.2f}"
    if kind == "seconds":
        return f"{mean:.1f}" if mean >= 1 else f"{mean:.2f}"
    return f"{mean:.0f}"


def _stat(rows: Sequence[dict[str, Any]], key: str, kind: str) -> tuple[float | None, str]:
    """(mean, ``mean ± std``) of ``key`` over the seeds' rows; the mean alone for one."""
    v = _values(rows, key)
    if not v:
        return None, DASH
    mean, std = float(np.mean(v)), float(np.std(v))
    text = _fmt(mean, kind)
    if len(v) > 1 and kind in ("ratio", "seconds"):
        text += f" ± {_fmt(std, kind)}"
    return mean, text


def _by(rows: Sequence[dict[str, Any]], key: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(str(r[key]), []).append(r)
    return out


def _federation_table(name: str, rows: Sequence[dict[str, Any]]) -> str:
    by_label = _by(rows, "label")
    shown = [c for c in SHOWN if _values(rows, c[0])]
    stats = {lab: {k: _stat(rs, k, kind) for k, _, kind in shown} for lab, rs in by_label.items()}
    best: dict[str, float] = {}
    for key, _, _ in shown:
        means = [m for m, _ in (s[key] for s in stats.values()) if m is not None]
        if means and key in HIGHER_BETTER:
            best[key] = max(means)

    def quality(lab: str) -> float:
        mean = stats[lab].get("auroc", (None, ""))[0]
        return -1.0 if mean is None else mean

    order = sorted(by_label, key=lambda lab: -quality(lab))
    head = "".join(f"<th>{esc(title)}</th>" for _, title, _ in shown)
    body = []
    for lab in order:
        cells = []
        for key, _, _ in shown:
            mean, text = stats[lab][key]
            bold = mean is not None and best.get(key) == mean
            cells.append(f'<td class="num{" best" if bold else ""}">{esc(text)}</td>')
        seeds = len(by_label[lab])
        body.append(f"<tr><td>{esc(lab)}</td><td class='num'>{seeds}</td>{''.join(cells)}</tr>")
    kind = esc(rows[0].get("kind", ""))
    return (
        f"<h3>{esc(name)} <span class='muted'>({kind})</span></h3><div class='scroll'>"
        f"<table><tr><th>method</th><th>seeds</th>{head}</tr>{''.join(body)}</table></div>"
    )


def _frontier(points: list[tuple[str, float, float]]) -> set[str]:
    """The labels no other label beats on both quality and cost (the Pareto front)."""
    return {
        lab
        for lab, sec, q in points
        if not any(s2 <= sec and q2 >= q and (s2, q2) != (sec, q) for _, s2, q2 in points)
    }


def _cost_figure(kr: KindRanks, rows: Sequence[dict[str, Any]]) -> str:
    """Mean AUROC against mean seconds per method of one kind (log seconds)."""
    by_label = _by(rows, "label")
    points = []
    for lab, rs in by_label.items():
        q, t = _values(rs, "auroc"), _values(rs, "seconds")
        if q and t:
            points.append((lab, float(np.mean(t)), float(np.mean(q))))
    if not points:
        return ""
    fig = Figure(figsize=(7.5, 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    named = set(kr.labels[:3]) | _frontier(points)
    for lab, sec, quality in points:
        colour = "#4C72B0" if lab in named else "0.6"
        ax.scatter([sec], [quality], s=22, color=colour, zorder=3)
        if lab in named:
            ax.annotate(lab, (sec, quality), fontsize=7, xytext=(3, 2), textcoords="offset points")
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g} s"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("seconds per run (mean over federations and seeds, log scale)")
    ax.set_ylabel("AUROC (mean)")
    ax.grid(alpha=0.3)
    return figure_html(
        fig,
        f"quality against cost, {kr.kind}",
        f"Quality against cost on {kr.kind} data: each method's mean AUROC against its mean "
        "wall time per run (the whole method: training, evaluation, metrics); named: the "
        "three best ranked and those no other method beats on both (in blue).",
    )


def _kind_section(kr: KindRanks, rows: Sequence[dict[str, Any]], note: bool = True) -> str:
    """One family's ranks, test and cost figure; ``note = False`` leaves out its sentence
    (a page of one family already has it at the top)."""
    by_label = _by(rows, "label")
    lines = []
    for i, lab in enumerate(kr.labels, 1):
        q = _values(by_label[lab], "auroc")
        s = _values(by_label[lab], "seconds")
        lines.append(
            f"<tr><td class='num'>{i}</td><td>{esc(lab)}</td>"
            f"<td class='num'>{kr.mean_rank[lab]:.2f}</td>"
            f"<td class='num'>{np.mean(q):.3f}</td>"
            f"<td class='num'>{_fmt(float(np.mean(s)), 'seconds')}</td></tr>"
        )
    test = (
        f"<p>{esc(kr.test)}: p = {kr.pvalue:.3g}"
        + (f", critical difference {kr.cd:.2f} ranks" if kr.cd is not None else "")
        + f" over {kr.blocks} federation × seed blocks (α = 0.05).</p>"
        if kr.test is not None and kr.pvalue is not None
        else ""
    )
    left = (
        f"<p class='muted'>Not ranked (no {esc(kr.metric)} on every block): "
        f"{esc(', '.join(kr.excluded))}.</p>"
        if kr.excluded
        else ""
    )
    return (
        f"<h2>{esc(kr.kind)} data</h2>"
        + (f"<p class='note'>{esc(kr.note)}</p>" if note else "")
        + f"{test}"
        "<table><tr><th>rank</th><th>method</th><th>average rank</th><th>mean AUROC</th>"
        f"<th>mean seconds</th></tr>{''.join(lines)}</table>{left}{_cost_figure(kr, rows)}"
    )


def _failures(rows: Sequence[dict[str, Any]]) -> str:
    bad = [r for r in rows if r.get("error")]
    if not bad:
        return ""
    items = "".join(
        f"<li>{esc(r['federation'])}, seed {esc(r['seed'])}, {esc(r['label'])}: "
        f"{esc(r['error'])}</li>"
        for r in bad
    )
    return f"<h2>Failed</h2><div class='warning'><ul>{items}</ul></div>"


def render_leaderboard(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The page's HTML for the results ``rows`` of the suite described by ``meta``."""
    ranks = rank_kinds(rows)
    kinds = {kr.kind: kr for kr in ranks}
    title = f"fedad bench: {meta.get('suite', '')}"
    top = "".join(f"<p class='headline'>{esc(kr.note)}</p>" for kr in ranks)
    facts = (
        f"<p class='muted'>Suite {esc(meta.get('suite', ''))} ({esc(meta.get('split', ''))}"
        f" split), seeds {esc(', '.join(str(s) for s in meta.get('seeds', [])))}; "
        f"{len(rows)} rows; metrics: {esc(', '.join(METRICS))}. Ranks by AUROC per "
        "federation × seed; mean ± std over seeds.</p>"
    )
    kind_html = "".join(
        _kind_section(kinds[k], [r for r in rows if str(r.get("kind")) == k], len(kinds) > 1)
        for k in kinds
    )
    feds = _by(rows, "federation")
    fed_html = "".join(_federation_table(name, rs) for name, rs in feds.items())
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        f"<h1>{esc(title)}</h1>{top}{facts}{kind_html}<h2>Per federation</h2>{fed_html}"
        f"{_failures(rows)}</body></html>"
    )
