"""The report's first section: which method did best, on what, and what to be careful of.

:func:`answer_section` leads the report (:mod:`fedad.report.html`): the method with the
highest pooled AUROC, its pooled and client-mean AUROC (mean ± standard deviation over the
seeds when the run has several), one plain sentence reading the ranking (is the lead larger
than the seeds' spread; is the best a reference that pools the data), a small table of every
method's two AUROCs with its role, and the caveats that matter:

* a method below a lower reference (``local``: each client alone, no federation; the one
  with the same detector where the run has it, else any), by more than the seeds' spread
  (one seed: by any amount);
* the collapse guard's event, ``encoder not learning`` (:mod:`fedad.core.collapse`), in any seed;
* under ``[privacy] mechanism = "gaussian"``: a method without an ε (its note says why);
* a method that gave non-finite scores.

Below the table it says which methods' scores were normalised before pooling (their
``score_scale``) and how; the pooled AUROC of raw scores compares clients' own scales too.

A several-seed run's ``metrics.json`` holds no per-client rows or events, so they are read
from each ``seed-N/metrics.json`` (through the same link-safe reader as the rest); a seed
whose file is missing or unreadable is left out of the client mean and named in the notes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedad.core.collapse import NOT_LEARNING
from fedad.core.errors import FedadError
from fedad.report.fmt import esc
from fedad.rundir.layout import METRICS_FILE
from fedad.rundir.read import read_metrics

__all__ = ["Standing", "answer_section", "caveats", "reading", "score_scales", "standings"]

ROLES = {
    "centralized": "upper reference: the clients' data pooled in one place",
    "local": "lower reference: each client alone, no federation",
}
"""Methods that are references rather than candidates, by method name."""
LOWER = ("local",)
"""Reference methods a federated method should beat."""
MAX_SEEDS = 1000
"""The most seeds a config may list (:mod:`fedad.config`); a metrics.json listing more was
not written by fedad, and its seed folders are not read."""


@dataclass
class Standing:
    """One method's AUROCs: means over seeds (one seed: its values), their spreads."""

    label: str
    method: str
    detector: str
    pooled: float | None
    pooled_sd: float | None = None
    client_mean: float | None = None
    client_sd: float | None = None
    events: list[str] = field(default_factory=list)

    @property
    def role(self) -> str:
        return ROLES.get(self.method, "")

    @property
    def kind(self) -> str:
        return " / ".join(p for p in (self.method, self.detector) if p) or "–"


def _num(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _mean_sd(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    """Mean and population standard deviation of the defined values (None: none are)."""
    defined = [v for v in values if v is not None]
    if not defined:
        return None, None
    arr = np.asarray(defined, dtype=np.float64)
    return float(arr.mean()), float(arr.std())


def client_mean_auroc(entry: Mapping[str, Any]) -> float | None:
    """The unweighted mean over clients of each client's AUROC (``per_client``)."""
    rows = entry.get("per_client")
    if not isinstance(rows, list):
        return None
    values = [v for r in rows if isinstance(r, dict) and (v := _num(r.get("auroc"))) is not None]
    return float(np.mean(values)) if values else None


def seed_methods(run: Path, seeds: Sequence[Any], notes: list[str]) -> dict[int, dict[str, Any]]:
    """``{seed: metrics.json's methods}`` of each readable ``seed-N/metrics.json``."""
    out: dict[int, dict[str, Any]] = {}
    if len(seeds) > MAX_SEEDS:
        notes.append(
            f"metrics.json lists {len(seeds)} seeds, more than a run can have: "
            "the seeds' folders are not read"
        )
        return out
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, int):
            continue
        path = run / f"seed-{s}" / METRICS_FILE
        if not path.is_file():
            notes.append(f"seed {s}: no seed-{s}/metrics.json: left out of the client means")
            continue
        try:
            out[s] = read_metrics(path)["methods"]
        except FedadError as err:
            notes.append(f"seed {s}: {err}: left out of the client means")
    return out


def _events(entry: Mapping[str, Any]) -> list[str]:
    events = entry.get("events")
    return [str(e) for e in events if isinstance(e, str)] if isinstance(events, list) else []


def standings(
    entries: Mapping[str, Mapping[str, Any]],
    per_seed: Mapping[int, Mapping[str, Any]] | None = None,
) -> list[Standing]:
    """Every method's standing, best pooled AUROC first (undefined last).

    ``entries``: metrics.json's methods; ``per_seed``: each seed's own methods for a
    several-seed run (client means and events come from there), else None."""
    out = []
    for label, entry in entries.items():
        sd = entry.get("std")
        st = Standing(
            label=label,
            method=str(entry.get("method") or ""),
            detector=str(entry.get("detector") or ""),
            pooled=_num(entry.get("auroc")),
            pooled_sd=_num(sd.get("auroc")) if isinstance(sd, dict) else None,
        )
        if per_seed is None:
            st.client_mean = client_mean_auroc(entry)
            st.events = _events(entry)
        else:
            seeds = [(s, m.get(label)) for s, m in sorted(per_seed.items())]
            own = [(s, e) for s, e in seeds if isinstance(e, dict)]
            st.client_mean, st.client_sd = _mean_sd([client_mean_auroc(e) for _, e in own])
            st.events = [f"seed {s}: {ev}" for s, e in own for ev in _events(e)]
        out.append(st)
    out.sort(key=lambda s: -s.pooled if s.pooled is not None else math.inf)
    return out


def _spread(*items: Standing) -> float:
    return max((s.pooled_sd or 0.0) for s in items)


def _apart(x: float) -> str:
    return "less than 0.001" if x < 0.0005 else f"{x:.3f}"


def reading(ranked: Sequence[Standing], n_seeds: int) -> str:
    """One plain sentence on the ranking (``ranked``: :func:`standings`' order)."""
    scored = [s for s in ranked if s.pooled is not None]
    if not scored:
        return "No method has a pooled AUROC, so none can be called best."
    top = scored[0]
    if len(scored) == 1:
        return f"{top.label} is the only method with a pooled AUROC; nothing to compare it with."
    second, gap = scored[1], (scored[0].pooled or 0.0) - (scored[1].pooled or 0.0)
    spread = _spread(top, second)
    close = n_seeds > 1 and gap <= spread
    if close:
        text = (
            f"{top.label} and {second.label} are {_apart(gap)} apart in pooled AUROC, within the "
            f"seeds' spread (± {spread:.3f}): these seeds do not separate them"
        )
    elif n_seeds > 1:
        text = (
            f"{top.label} leads {second.label} by {gap:.3f} pooled AUROC, more than the seeds' "
            f"spread (± {spread:.3f})"
        )
    else:
        text = (
            f"{top.label} leads {second.label} by {_apart(gap)} pooled AUROC on one seed "
            "(seeds = [...] shows whether that holds)"
        )
    if top.method == "centralized":
        kept = next((s for s in scored if s.method != "centralized"), None)
        if kept is not None:
            below = (top.pooled or 0.0) - (kept.pooled or 0.0)
            text += (
                f"; {top.label} pools the clients' data in one place, and the best method that "
                f"keeps data where it is, {kept.label}, is {below:.3f} below it"
            )
    elif top.method in LOWER:
        beat = "is clearly above it" if close else "beat it here"
        text += f"; {top.label} trains each client alone, and no federated method {beat}"
    return text + _client_mean_clause(top, scored, n_seeds) + "."


def _client_mean_clause(top: Standing, scored: Sequence[Standing], n_seeds: int) -> str:
    """'; by the client-mean AUROC X is best' when another method leads there by more than
    the seeds' spread (one seed: by 0.001 or more), else nothing."""
    if top.client_mean is None:
        return ""
    other = max(
        (s for s in scored if s.client_mean is not None and s is not top),
        key=lambda s: s.client_mean or 0.0,
        default=None,
    )
    if other is None or other.client_mean is None:
        return ""
    lead = other.client_mean - top.client_mean
    spread = max(top.client_sd or 0.0, other.client_sd or 0.0) if n_seeds > 1 else 0.0
    if lead < 0.0005 or lead <= spread:
        return ""
    return f"; by the client-mean AUROC {other.label} is best ({_apart(lead)} above {top.label})"


def caveats(
    ranked: Sequence[Standing], entries: Mapping[str, Mapping[str, Any]], n_seeds: int
) -> list[str]:
    """The caveats that matter (see the module docstring), plain text."""
    out: list[str] = []
    refs = [s for s in ranked if s.method in LOWER and s.pooled is not None]
    for s in ranked:
        if s.pooled is None or s.method in ROLES:
            continue
        own = [r for r in refs if r.detector == s.detector] or refs  # same detector first
        margin = {r.label: _spread(s, r) if n_seeds > 1 else 0.0 for r in own}
        above = [r for r in own if (r.pooled or 0.0) - s.pooled > margin[r.label]]
        if above:
            r = max(above, key=lambda r: r.pooled or 0.0)
            out.append(
                f"{s.label} (pooled AUROC {s.pooled:.3f}) is below {r.label} ({r.pooled:.3f}), "
                "where each client trains alone: the federation did not help it here"
            )
    for s in ranked:
        stuck = [e for e in s.events if NOT_LEARNING in e]
        if stuck:
            more = f" (and {len(stuck) - 1} more)" if len(stuck) > 1 else ""
            out.append(f"{s.label}: {stuck[0][:240]}{more}")
    private = {k: e["privacy"] for k, e in entries.items() if isinstance(e.get("privacy"), dict)}
    for label, p in private.items():
        if _num(p.get("epsilon")) is None:
            why = str(p.get("note") or "no privacy guarantee was computed")[:240]
            out.append(f"{label} has no ε under [privacy]: {why}")
    for label, e in entries.items():
        bad = _num(e.get("nonfinite_scores"))
        if bad:
            out.append(f"{label} gave {int(bad)} non-finite scores (counted as most anomalous)")
    return out


def _pm(value: float | None, sd: float | None, n_seeds: int) -> str:
    if value is None:
        return "–"
    return f"{value:.3f} ± {sd:.3f}" if n_seeds > 1 and sd is not None else f"{value:.3f}"


def _headline(top: Standing, experiment: Mapping[str, Any], n_seeds: int, same: bool) -> str:
    what = [str(experiment[k]) for k in ("dataset",) if experiment.get(k) is not None]
    clients, scheme = experiment.get("clients"), experiment.get("scheme")
    if clients is not None:
        what.append(f"{clients} clients" + (f" ({scheme})" if scheme else ""))
    on = f" on {', '.join(what)}" if what else ""
    seeds = f", over {n_seeds} seeds" if n_seeds > 1 else ""
    pooled = _pm(top.pooled, top.pooled_sd, n_seeds)
    if same:
        numbers = f"AUROC {pooled} (the mean over clients)"
    else:
        client = _pm(top.client_mean, top.client_sd, n_seeds)
        numbers = f"pooled AUROC {pooled}, client-mean AUROC {client}"
    return f"Best{on}: {top.label} ({top.kind}), {numbers}{seeds}."


def _table(ranked: Sequence[Standing], n_seeds: int, same: bool) -> str:
    e = esc
    head = (
        "<th>AUROC (client mean)</th>"
        if same
        else "<th>pooled AUROC</th><th>client-mean AUROC</th>"
    )
    rows = []
    for s in ranked:
        cells = f'<td class="num">{e(_pm(s.pooled, s.pooled_sd, n_seeds))}</td>'
        if not same:
            cells += f'<td class="num">{e(_pm(s.client_mean, s.client_sd, n_seeds))}</td>'
        rows.append(
            f"<tr><td>{e(s.label)}</td><td>{e(s.kind)}</td>{cells}"
            f'<td class="muted">{e(s.role)}</td></tr>'
        )
    return (
        '<div class="scroll"><table class="answer"><thead><tr><th>Label</th>'
        f"<th>Method / detector</th>{head}<th>Role</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def score_scales(entries: Mapping[str, Mapping[str, Any]]) -> str:
    """One sentence on how each method's scores were put on one scale before pooling: a
    method's ``score_scale`` (:meth:`fedad.core.algorithm.Algorithm.score_scale`), the rest
    raw; empty when every method's scores are raw."""
    scaled = {
        label: str(e["score_scale"])[:400]
        for label, e in entries.items()
        if isinstance(e.get("score_scale"), str) and e["score_scale"]
    }
    if not scaled:
        return ""
    named = "; ".join(f"{label}: {how}" for label, how in scaled.items())
    rest = " Every other method's scores are pooled raw." if len(scaled) < len(entries) else ""
    return f" Scores normalised before pooling: {named}.{rest}"


def answer_section(
    run: Path,
    metrics: Mapping[str, Any],
    entries: Mapping[str, Mapping[str, Any]],
    notes: list[str],
) -> str:
    """The report's first section (see the module docstring), as HTML."""
    e = esc
    experiment = metrics.get("experiment", {})
    seeds = experiment.get("seeds")
    per_seed = seed_methods(run, seeds, notes) if isinstance(seeds, list) else None
    n_seeds = len(seeds) if isinstance(seeds, list) else 1
    same = experiment.get("pooled") == "client-mean"
    ranked = standings(entries, per_seed)
    top = next((s for s in ranked if s.pooled is not None), None)
    if top is None:
        return '<h2>Answer</h2><p class="muted">No method has a pooled AUROC.</p>'
    found = caveats(ranked, entries, n_seeds)
    if found:
        items = "".join(f"<li>{e(c)}</li>" for c in found)
        warn = f'<div class="warning"><strong>Caveats</strong><ul>{items}</ul></div>'
    else:
        warn = (
            '<p class="muted">No caveats found: no method below a lower reference, no '
            "collapse warning, no non-finite scores.</p>"
        )
    return (
        '<h2 id="answer">Answer</h2>'
        f'<p class="headline">{e(_headline(top, experiment, n_seeds, same))}</p>'
        f"<p>{e(reading(ranked, n_seeds))}</p>"
        + _table(ranked, n_seeds, same)
        + warn
        + '<p class="muted">Pooled: over the union of the clients\' test sets; client mean: '
        "each client's AUROC on its own test set, averaged."
        + e(score_scales(entries))
        + " The details follow, folded.</p>"
    )
