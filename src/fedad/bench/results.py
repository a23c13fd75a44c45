"""A benchmark's results: one row per federation x method x seed, read from the runs'
own ``metrics.json`` and written as ``results.csv`` and ``results.json``.

Columns: ``federation, method, detector, label, seed``, then metrics.json's own keys
(:data:`METRICS`; a metric that does not apply is empty in the CSV and ``null`` in the
JSON), then ``kind`` (the data kind) and ``error`` (why a method failed, else empty).
:func:`read_results` reads ``results.csv`` back to the same rows.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from fedad.core.errors import FedadError
from fedad.rundir.files import read_text, write_text

__all__ = ["COLUMNS", "METRICS", "read_results", "rows_of_run", "write_results"]

KEYS = ("federation", "method", "detector", "label", "seed")
METRICS = (
    "auroc",
    "client_mean_auroc",
    "aupr",
    "f1",
    "fe",
    "me",
    "pixel_auroc",
    "pro",
    "bytes_up",
    "bytes_down",
    "seconds",
    "peak_mb",
)
"""The metrics of a row: metrics.json's keys (``peak_mb``: the method's peak memory)."""
COLUMNS = (*KEYS, *METRICS, "kind", "error")
_INTS = ("seed", "bytes_up", "bytes_down")


def _number(v: Any) -> float | int | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return v if math.isfinite(v) else None


def rows_of_run(
    federation: str, kind: str, labels: Sequence[str], metrics: dict[str, Any], seed: int
) -> list[dict[str, Any]]:
    """The rows of one seed's run (its metrics.json ``metrics``): a row per method of
    ``labels`` that finished or failed (methods not reached yet have none)."""
    methods = metrics.get("methods", {})
    listed = metrics.get("experiment", {}).get("failed_methods", [])
    failed = {
        str(f.get("method")): str(f.get("error", ""))
        for f in (listed if isinstance(listed, list) else [])
        if isinstance(f, dict)
    }
    out = []
    for label in labels:
        m = methods.get(label)
        if not isinstance(m, dict) and label not in failed:
            continue
        m = m if isinstance(m, dict) else {}
        row: dict[str, Any] = {
            "federation": federation,
            "method": m.get("method") or label,
            "detector": m.get("detector"),
            "label": label,
            "seed": seed,
        }
        row.update({k: _number(m.get(k)) for k in METRICS})
        row["kind"] = kind
        row["error"] = failed.get(label)
        out.append(row)
    return out


def _cell(v: Any) -> str:
    return "" if v is None else str(v)


def results_csv(rows: Iterable[dict[str, Any]]) -> str:
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=list(COLUMNS), restval="", extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({k: _cell(r.get(k)) for k in COLUMNS})
    return buf.getvalue()


def write_results(out: Path, rows: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    """``results.csv`` and ``results.json`` (the rows and ``meta``: the suite, its seeds)."""
    write_text(out / "results.csv", results_csv(rows))
    write_text(out / "results.json", json.dumps({**meta, "rows": rows}, indent=1))


def _parse(key: str, text: str) -> Any:
    if text == "":
        return None
    if key in _INTS:
        return int(text)
    if key in METRICS:
        return float(text)
    return text


def read_results(path: Path) -> list[dict[str, Any]]:
    """The rows of a ``results.csv`` (one-line errors for a damaged file)."""
    try:
        text = read_text(path)
    except (OSError, UnicodeDecodeError) as err:
        raise FedadError(f"cannot read '{path}': {err}") from None
    reader = csv.DictReader(io.StringIO(text))
    if tuple(reader.fieldnames or ()) != COLUMNS:
        raise FedadError(f"'{path}' is not a fedad bench results file (its columns differ)")
    try:
        return [{k: _parse(k, r.get(k) or "") for k in COLUMNS} for r in reader]
    except ValueError as err:
        raise FedadError(f"'{path}' is damaged: {err}") from None
