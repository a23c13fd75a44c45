"""Metrics over several seeds: each method's mean, standard deviation and per-seed values,
from the seeds' own ``metrics.json`` data, and their ``history.csv`` rows as one table.

A metric is averaged only when every finished seed has a finite value for it; otherwise its
mean and std are ``null`` (never a mean over the seeds that happened to work). The run that
writes them: :mod:`fedad.seeds`.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedad.evaluation.columns import columns_of
from fedad.evaluation.run_families import run_families

__all__ = ["DROPPED", "SHARED", "aggregate", "aggregate_method", "history_with_seeds"]

SHARED = ("method", "detector", "params", "personalized", "privacy", "score_scale")
"""Non-numeric entries of a method kept in the aggregate (equal across seeds)."""
DROPPED = ("per_client", "events", "missing_nodes")
"""Entries left in each seed's own metrics.json."""


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v) if math.isfinite(v) else None


def _is_metric(v: Any) -> bool:
    return v is None or (isinstance(v, int | float) and not isinstance(v, bool))


def aggregate_method(entries: Sequence[tuple[int, Mapping[str, Any]]]) -> dict[str, Any]:
    """One method's aggregate entry from ``[(seed, metrics entry), ...]``.

    Numeric keys: the mean over seeds (``None`` unless every seed has a finite value), with
    ``std[key]`` the population standard deviation; ``per_seed`` the seeds' own values.
    """
    keys: list[str] = []
    for _, e in entries:
        for k, v in e.items():
            if k not in keys and k not in SHARED and k not in DROPPED and _is_metric(v):
                keys.append(k)
    keys = [k for k in keys if any(_number(e.get(k)) is not None for _, e in entries)]
    first = next((e for _, e in entries if e), {})
    out: dict[str, Any] = {}
    std: dict[str, float | None] = {}
    for k in keys:
        values = [_number(e.get(k)) for _, e in entries]
        if all(v is not None for v in values):
            arr = np.asarray(values, dtype=np.float64)
            out[k], std[k] = float(np.mean(arr)), float(np.std(arr))
        else:
            out[k], std[k] = None, None
    for k in SHARED:
        if k in first and all(e.get(k) == first[k] for _, e in entries if e):
            out[k] = first[k]
    out["std"] = std
    out["per_seed"] = [{"seed": s, **{k: e.get(k) for k in keys}} for s, e in entries]
    return out


def aggregate(
    per_seed: Mapping[int, Mapping[str, Any]], seeds: Sequence[int], labels: Sequence[str]
) -> dict[str, Any]:
    """``metrics.json`` of a several-seed run from the seeds' own ``metrics.json`` data.

    ``per_seed`` holds the finished seeds; ``seeds`` all seeds in config order; ``labels``
    the methods in config order. A method appears when at least one seed finished it; one
    that failed in a finished seed (that seed's ``experiment.failed_methods``) has no mean.
    """
    done = [s for s in seeds if s in per_seed]
    methods: dict[str, Any] = {}
    for label in labels:
        got = {s: per_seed[s].get("methods", {}).get(label) for s in done}
        if any(isinstance(e, dict) for e in got.values()):  # failed in a seed: no mean
            methods[label] = aggregate_method(
                [(s, e if isinstance(e, dict) else {}) for s, e in got.items()]
            )
    experiment: dict[str, Any] = {}
    facts = [per_seed[s].get("experiment", {}) for s in done]
    if facts:
        for k, v in facts[0].items():
            if k not in ("seed", "status", "pending", "total_seconds") and all(
                f.get(k) == v for f in facts[1:]
            ):
                experiment[k] = v
    experiment["seeds"] = list(seeds)
    out: dict[str, Any] = {
        "methods": methods,
        "experiment": experiment,
        "columns": _columns(per_seed, done),
    }
    families = {k: v for s in reversed(done) for k, v in _families(per_seed[s]).items()}
    if families:  # none when every seed predates `families`: the report falls back then
        out["families"] = families
    return out


def _families(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A seed's ``families`` (the description of its metric families), or ``{}``."""
    raw = metrics.get("families")
    return raw if isinstance(raw, dict) else {}


def _columns(
    per_seed: Mapping[int, Mapping[str, Any]], done: Sequence[int]
) -> dict[str, list[str]]:
    """The union, in order, of the finished seeds' ``columns`` (each seed's runs the same
    methods on the same kind of data, so they are normally equal)."""
    out: dict[str, list[str]] = {}
    for s in done:
        metrics = per_seed[s]  # a seed written before columns were listed: as the report
        listed = isinstance(metrics.get("columns"), dict)
        for group, cols in columns_of(metrics, () if listed else run_families(metrics)).items():
            have = out.setdefault(group, [])
            have += [c for c in cols if c not in have]
    return out


def history_with_seeds(texts: Sequence[tuple[int, str]]) -> str:
    """Every seed's ``history.csv`` text as one CSV with a ``seed`` column first."""
    rows: list[dict[str, str]] = []
    columns: list[str] = ["seed"]
    for seed, text in texts:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        for c in reader.fieldnames or []:
            if c and c not in columns:
                columns.append(c)
        for row in reader:
            rows.append({"seed": str(seed), **{k: v for k, v in row.items() if k}})
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=columns, restval="", extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


# -- running ---------------------------------------------------------------------------------
