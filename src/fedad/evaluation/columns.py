"""How metrics are shown: columns, the description of a metric family, and what
``metrics.json`` says of both (no numpy, no method: the report and the CLI summary read
this).

A run's ``metrics.json`` lists the columns it has (``"columns"``: ``"summary"``,
``"per_client"`` and one list per family shown as a table of its own, :func:`run_columns`)
and describes every metric family of its methods (``"families"``: keys, columns with header
and format, title, note, learning curves; :func:`families_json`). The terminal table and
the report render from those alone (:func:`families_of`, :func:`column_spec`); a run
written before ``"families"`` existed is described by the families the code knows (the
report's fallback).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, cast, get_args

__all__ = [
    "COST_COLUMNS",
    "PER_CLIENT",
    "SUMMARY",
    "Column",
    "FamilySpec",
    "MonitorFigure",
    "column_spec",
    "columns_of",
    "families_json",
    "families_of",
    "run_columns",
]

ColumnKind = Literal["ratio", "int", "bytes", "seconds", "number"]
Better = Literal["max", "min", ""]

SUMMARY = "summary"
PER_CLIENT = "per_client"

_MAX_TEXT = 2000
"""Longest header, note or caption read back from metrics.json (untrusted)."""
_MAX_ITEMS = 200
"""Most families, columns or figures read back from metrics.json (untrusted)."""


@dataclass(frozen=True)
class Column:
    """How a metric is shown: ``header`` in the report, ``terminal`` in the terminal table
    (``None``: not shown there), ``kind`` its format, ``better`` ``"max"``/``"min"`` (the
    report marks the best method in bold) or ``""``. ``spread``: shown as mean +- std in
    the terminal table and in the per-seed table of a several-seed run; ``with_seeds``:
    kept in the terminal table of a several-seed run (where ``± std`` takes room)."""

    key: str
    header: str
    kind: ColumnKind = "number"
    better: Better = ""
    terminal: str | None = None
    spread: bool = False
    with_seeds: bool = True


@dataclass(frozen=True)
class MonitorFigure:
    """A per-round learning curve the report draws from a monitor (``eval_*``) column."""

    column: str
    title: str
    caption: str


@dataclass(frozen=True)
class FamilySpec:
    """What is shown of a metric family (:class:`fedad.evaluation.families.MetricFamily`
    adds how it is computed).

    ``keys`` are the metrics.json entries it writes for a method (their presence tells that
    the family applied); ``columns`` what is shown of them; ``per_client_columns`` the keys
    the report's per-client table shows. A family with ``in_summary`` adds its columns to the
    results table; otherwise the report shows them in a table of its own, titled ``title``
    with ``note`` under it. ``figures`` are learning curves drawn from its monitor columns.
    """

    name: str
    keys: tuple[str, ...] = ()
    columns: tuple[Column, ...] = ()
    per_client_columns: tuple[str, ...] = ()
    in_summary: bool = True
    title: str = ""
    note: str = ""
    figures: tuple[MonitorFigure, ...] = ()


COST_COLUMNS: tuple[Column, ...] = (
    Column("bytes_up", "Bytes up", "bytes", terminal="MB up"),
    Column("bytes_down", "Bytes down", "bytes", terminal="MB down"),
    Column("bytes_up_per_client_round", "Bytes up / client / round", "bytes"),
    Column("seconds", "Seconds", "seconds", terminal="s"),
    Column("rounds", "Rounds", "int"),
)
"""What a run cost, at the end of the summary of every run."""


def column_spec(key: str, families: Iterable[FamilySpec]) -> Column:
    """How to show ``key``: the first family (or cost) column of that key, else a generic
    one (the key as header, numbers with 3 decimals, no better direction)."""
    for f in families:
        for c in f.columns:
            if c.key == key:
                return c
    for c in COST_COLUMNS:
        if c.key == key:
            return c
    return Column(key, key, "number", terminal=key)


def run_columns(
    entries: Iterable[Mapping[str, Any]], families: Sequence[FamilySpec]
) -> dict[str, list[str]]:
    """``metrics.json``'s ``columns``: which metric columns this run's methods have.

    ``"summary"``: the results table (terminal and report): the columns of every family
    with ``in_summary`` that some method has (its ``keys`` are in the method's entry), then
    :data:`COST_COLUMNS`; ``"per_client"``: the report's per-client table; and for every
    other family some method has, ``family.name``: the columns of its own table.
    """
    listed = list(entries)

    def present(fam: FamilySpec) -> bool:
        return any(k in e for e in listed for k in fam.keys)

    summary: list[str] = []
    per_client: list[str] = []
    own: dict[str, list[str]] = {}
    for fam in families:
        if not present(fam):
            continue
        cols = [c.key for c in fam.columns]
        if fam.in_summary:
            summary += [k for k in cols if k not in summary]
        else:
            own[fam.name] = cols
        per_client += [k for k in fam.per_client_columns if k not in per_client]
    summary += [c.key for c in COST_COLUMNS]
    return {SUMMARY: summary, PER_CLIENT: per_client, **own}


def columns_of(metrics: Mapping[str, Any], families: Sequence[FamilySpec]) -> dict[str, list[str]]:
    """The ``columns`` of a metrics.json's data (untrusted: anything that is not a list of
    strings is dropped), or, for a run written before they were listed, the columns its
    entries have (:func:`run_columns` over ``families``)."""
    raw = metrics.get("columns")
    if isinstance(raw, dict) and isinstance(raw.get(SUMMARY), list):
        out: dict[str, list[str]] = {}
        for name, cols in raw.items():
            if isinstance(name, str) and isinstance(cols, list):
                out[name] = list(dict.fromkeys(c for c in cols if isinstance(c, str)))
        out.setdefault(PER_CLIENT, [])
        return out
    methods = metrics.get("methods")
    entries = (
        [e for e in methods.values() if isinstance(e, dict)] if isinstance(methods, dict) else []
    )
    return run_columns(entries, families)


# -- metrics.json's "families" ------------------------------------------------------------------


def families_json(families: Iterable[FamilySpec]) -> dict[str, dict[str, Any]]:
    """``metrics.json``'s ``families``: each family's description by name (JSON-able)."""
    out: dict[str, dict[str, Any]] = {}
    for f in families:
        out[f.name] = {
            "keys": list(f.keys),
            "columns": [asdict(c) for c in f.columns],
            "per_client_columns": list(f.per_client_columns),
            "in_summary": f.in_summary,
            "title": f.title,
            "note": f.note,
            "figures": [asdict(g) for g in f.figures],
        }
    return out


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and len(value) <= _MAX_TEXT else None


def _texts(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value[:_MAX_ITEMS] if _text(v) is not None)


def _column(raw: object) -> Column | None:
    if not isinstance(raw, dict):
        return None
    key, header, terminal = _text(raw.get("key")), _text(raw.get("header")), raw.get("terminal")
    kind, better = raw.get("kind", "number"), raw.get("better", "")
    if key is None or header is None or kind not in get_args(ColumnKind):
        return None
    if better not in get_args(Better) or (terminal is not None and _text(terminal) is None):
        return None
    flags = [raw.get(k, d) for k, d in (("spread", False), ("with_seeds", True))]
    if not all(isinstance(b, bool) for b in flags):
        return None
    return Column(
        key, header, cast(ColumnKind, kind), cast(Better, better), _text(terminal), *flags
    )


def _figure(raw: object) -> MonitorFigure | None:
    if not isinstance(raw, dict):
        return None
    got = [_text(raw.get(k)) for k in ("column", "title", "caption")]
    return None if None in got else MonitorFigure(*cast(list[str], got))


def _family(name: str, raw: Mapping[str, Any]) -> FamilySpec:
    columns, figures = raw.get("columns"), raw.get("figures")
    columns = columns if isinstance(columns, list) else []
    figures = figures if isinstance(figures, list) else []
    in_summary = raw.get("in_summary")
    return FamilySpec(
        name=name,
        keys=_texts(raw.get("keys")),
        columns=tuple(c for c in map(_column, columns[:_MAX_ITEMS]) if c is not None),
        per_client_columns=_texts(raw.get("per_client_columns")),
        in_summary=in_summary if isinstance(in_summary, bool) else True,
        title=_text(raw.get("title")) or "",
        note=_text(raw.get("note")) or "",
        figures=tuple(g for g in map(_figure, figures[:_MAX_ITEMS]) if g is not None),
    )


def families_of(metrics: Mapping[str, Any]) -> tuple[FamilySpec, ...] | None:
    """The families a metrics.json's data describe (untrusted: a malformed column or figure
    is dropped, an overlong text ignored), or ``None`` for a run written before they were
    described."""
    raw = metrics.get("families")
    if not isinstance(raw, dict):
        return None
    return tuple(
        _family(name, value)
        for name, value in list(raw.items())[:_MAX_ITEMS]
        if _text(name) is not None and isinstance(value, dict)
    )
