"""The terminal summary of a run: :func:`results_table`, from metrics.json alone.

metrics.json is read back from a run directory (``--resume``, a several-seed run), so
every text in the table (labels, headers, cells) has its control characters
(:func:`fedad.printable.printable`) and its Rich markup escaped.
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from fedad.printable import printable


def _text(v: object) -> str:
    return escape(printable(v))


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _mb(v: Any) -> str:
    return "–" if v is None else f"{v / 1e6:.2f}"


def _cell(m: dict[str, Any], key: str, kind: str, spread: bool) -> str:
    """One value of the results table, formatted by its column's kind; ``mean ± std`` of a
    several-seed aggregate for the columns with ``spread``."""
    v = m.get(key)
    if kind == "bytes":
        return _mb(v) if isinstance(v, int | float) or v is None else _fmt(v)
    digits = 1 if kind == "seconds" else 3
    text = _fmt(v, digits)
    std = m.get("std")
    if spread and isinstance(std, dict) and isinstance(std.get(key), float) and v is not None:
        text += f" ± {std[key]:.{digits}f}"
    return text


def results_table(metrics: dict[str, Any]) -> Table:
    """The terminal summary: one row per method, pooled metrics (mean +- std over seeds).

    The columns are metrics.json's ``columns["summary"]``, each shown as its ``families``
    say (:mod:`fedad.evaluation.columns`, which imports no method): those with a
    terminal header, and with seeds only those kept beside the ``± std`` of the spread ones.
    """
    from fedad.evaluation.columns import column_spec, columns_of, families_of

    seeds = metrics.get("experiment", {}).get("seeds")
    several = isinstance(seeds, list)
    how = "pooled over clients' local test sets"
    if metrics.get("experiment", {}).get("pooled") == "client-mean":
        how = "mean over clients of their one-vs-rest metrics"
    title = f"results ({how})"
    if several:
        title = f"results: mean ± std over {len(seeds)} seeds ({how})"
    t = Table(title=title)
    t.add_column("method", no_wrap=True)
    families = families_of(metrics) or ()
    specs = [column_spec(k, families) for k in columns_of(metrics, families)["summary"]]
    specs = [c for c in specs if c.terminal is not None and (c.with_seeds or not several)]
    for c in specs:
        wraps = c.kind in ("bytes", "seconds")
        t.add_column(_text(c.terminal or c.key), justify="right", no_wrap=not wraps)
    methods = metrics.get("methods")
    for label, m in (methods if isinstance(methods, dict) else {}).items():
        entry = m if isinstance(m, dict) else {}
        cells = (_text(_cell(entry, c.key, c.kind, c.spread)) for c in specs)
        t.add_row(_text(label), *cells)
    return t
