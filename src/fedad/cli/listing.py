"""``fedad list methods | datasets | partitions``.

The methods come from :func:`method_rows`, the one place that reads the method catalog's
names, data kinds, detectors and descriptions.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from fedad.cli.options import fail, show
from fedad.core.errors import FedadError

PARTITIONS = {
    "iid": "normal training data shuffled and split evenly",
    "dirichlet": "per class, shares over clients ~ Dir(alpha); small alpha = very non-IID",
    "dominant": "each client mostly one normal class (dominant_fraction), the rest mixed",
    "one-class": "each client exactly one normal class",
    "by-source": "each client one data source (data.sources)",
    "one-vs-rest": "each client one normal class; the other classes are its anomalies",
    "natural": "one client per value of data.client_column (or the image folder's clients)",
}


def method_rows() -> list[tuple[str, str, str, str]]:
    """One row per method: name, detectors (``own`` if none), data kinds, what it is; from
    the catalog's declarations (:mod:`fedad.core.catalog`), importing no method module."""
    from fedad.core.catalog import method_entries

    return [
        (name, ", ".join(e.detectors) or "own", ", ".join(e.kinds), e.summary)
        for name, e in method_entries().items()
    ]


def suites_table() -> Table:
    """The shipped benchmark suites: name, split, data kinds, size, expected time."""
    from fedad.bench.suites import shipped_suites

    t = Table("suite", "split", "data", "size", "2 cores", "what it is")
    for name, s in shipped_suites().items():
        size = f"{len(s.federations)} federations x {len(s.seeds)} seeds"
        minutes = "–" if s.minutes is None else f"~{s.minutes:g} min"
        t.add_row(name, s.split, ", ".join(s.kinds), size, minutes, s.summary)
    return t


def list_(
    what: Annotated[str, typer.Argument(help="methods | datasets | partitions | suites")],
) -> None:
    """List registered methods, datasets, partition schemes or benchmark suites."""
    from fedad.data.registry import list_datasets

    if what == "methods":
        t = Table("method", "detectors", "data", "what it is")
        for row in method_rows():
            t.add_row(*row)
    elif what == "datasets":
        t = Table("dataset", "description")
        for name, desc in list_datasets():
            t.add_row(name, desc)
    elif what == "partitions":
        t = Table("scheme", "what it does")
        for name, desc in PARTITIONS.items():
            t.add_row(name, desc)
    elif what == "suites":
        t = suites_table()
    else:
        fail(FedadError(f"cannot list '{what}'", "choose methods, datasets, partitions or suites"))
    try:
        show(t)
    except FedadError as err:
        fail(err)
