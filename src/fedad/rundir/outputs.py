"""The standard files of a run, written from the methods finished so far: ``metrics.json``,
``history.csv``, ``scores.npz`` and (where some method has them) ``maps.npz`` and
``embeddings.npz`` (docs/outputs.md). Each file is replaced atomically
(:mod:`fedad.rundir.files`), so an interruption never leaves one half-written."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedad.evaluation.columns import families_json, run_columns
from fedad.evaluation.families import BUILTIN, MetricFamily
from fedad.rundir.claim import Done
from fedad.rundir.files import write_npz, write_text
from fedad.rundir.layout import EMBEDDINGS_FILE, HISTORY_FILE, MAPS_FILE, METRICS_FILE, SCORES_FILE

HISTORY_COLUMNS = [
    "method",
    "round",
    "clients_sampled",
    "clients_replied",
    "clients_rejected",
    "clients_missing",
    "bytes_up",
    "bytes_down",
    "seconds",
    "loss",
]
"""The first columns of ``history.csv``; every other logged key follows, sorted."""


def _clean(v: Any) -> Any:
    """JSON-safe: NaN/Inf -> null, numpy scalars -> Python."""
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_clean(x) for x in v]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


MAPS_PREFIX = "maps:"
"""Arrays of a method's :class:`~fedad.rundir.claim.Done` that go to ``maps.npz`` (not
scores.npz)."""
EMBED_PREFIX = "embeddings:"
"""Arrays of a method's :class:`~fedad.rundir.claim.Done` that go to ``embeddings.npz``."""


def history_csv(rows: list[dict[str, Any]]) -> str:
    """``history.csv``'s text: the fixed columns, then every other logged key, sorted."""
    extra = sorted({k for r in rows for k in r} - set(HISTORY_COLUMNS))
    cols = HISTORY_COLUMNS + extra
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=cols, restval="")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in cols})
    return buf.getvalue()


def write_history(path: Path, rows: list[dict[str, Any]]) -> None:
    write_text(path, history_csv(rows))


def write_outputs(
    out: Path,
    labels: list[str],
    done: dict[str, Done],
    facts: dict[str, Any],
    seconds: float,
    families: Sequence[MetricFamily] = BUILTIN,
) -> dict[str, Any]:
    """Write ``metrics.json``, ``history.csv``, ``scores.npz`` (and ``maps.npz`` when some
    method has anomaly maps, ``embeddings.npz`` when some method has representations) from
    the methods done so far.

    Methods appear in config order. ``experiment.status`` is ``"complete"`` once every
    method is done, else ``"partial"`` with the missing ones in ``experiment.pending``.
    ``columns`` lists the metric columns the finished methods have, from ``families`` (every
    family of the run's methods, :func:`run_columns`), and ``families`` describes those
    families (:func:`families_json`), so that the report and the summary import no method.
    """
    finished = [lab for lab in labels if lab in done]
    pending = [lab for lab in labels if lab not in done]
    experiment = {
        **facts,
        "status": "partial" if pending else "complete",
        "total_seconds": seconds,
    }
    if pending:
        experiment["pending"] = pending
    methods = {lab: done[lab].metrics for lab in finished}
    data = {
        "methods": methods,
        "experiment": experiment,
        "columns": run_columns(methods.values(), families),
        "families": families_json(families),
    }
    arrays: dict[str, np.ndarray] = {}
    maps: dict[str, np.ndarray] = {}
    embeds: dict[str, np.ndarray] = {}
    for lab in finished:
        for k, v in done[lab].arrays.items():
            if k.startswith(MAPS_PREFIX):
                maps[k.removeprefix(MAPS_PREFIX)] = v
            elif k.startswith(EMBED_PREFIX):
                embeds[k.removeprefix(EMBED_PREFIX)] = v
            else:
                arrays[k] = v
    write_npz(out / SCORES_FILE, arrays, compressed=True)
    if maps:
        write_npz(out / MAPS_FILE, maps, compressed=True)
    if embeds:
        write_npz(out / EMBEDDINGS_FILE, embeds, compressed=True)
    write_history(out / HISTORY_FILE, [row for lab in finished for row in done[lab].history])
    write_text(out / METRICS_FILE, json.dumps(_clean(data), indent=2))
    return data
