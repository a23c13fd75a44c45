"""Formatting shared by the report's sections: escaping, numbers, figures."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from typing import Any

from matplotlib.figure import Figure

from fedad.printable import printable
from fedad.report import plots

DASH = "–"


def esc(text: object) -> str:
    """``text`` for HTML: markup characters escaped, and control characters (but newlines
    and tabs) written as escapes (:func:`fedad.printable.printable`), so that a crafted run
    puts no terminal control code into report.html."""
    return html.escape(printable(text, keep="\n\t"), quote=True)


def num(value: object) -> float | None:
    """A finite float, or ``None`` for null, booleans, non-numbers, nan and inf."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    x = float(value)
    return x if math.isfinite(x) else None


def fmt(value: object, kind: str) -> str:
    x = num(value)
    if x is None:
        return DASH
    if kind == "ratio":
        return f"{x:.3f}"
    if kind == "bytes":
        for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
            if abs(x) >= size:
                return f"{x / size:.2f} {unit}"
        return f"{x:.0f} B"
    if kind == "seconds":
        return f"{x:.2f}" if abs(x) < 10 else f"{x:.1f}"
    if kind == "int":
        return f"{x:.0f}" if x == round(x) else f"{x:g}"
    return f"{x:g}"


def figure_html(fig: Figure, alt: str, caption: str) -> str:
    data = plots.figure_to_png_base64(fig)
    return (
        f'<figure><img src="data:image/png;base64,{data}" alt="{esc(alt)}">'
        f"<figcaption>{esc(caption)}</figcaption></figure>"
    )


def threshold(entry: Mapping[str, Any]) -> float | None:
    """The method's threshold: its pooled ``threshold``, else the mean of per-client ones."""
    t = num(entry.get("threshold"))
    if t is not None:
        return t
    per_client = entry.get("per_client")
    if not isinstance(per_client, list):
        return None
    values = [
        v
        for row in per_client
        if isinstance(row, dict)
        if (v := num(row.get("threshold"))) is not None
    ]
    return sum(values) / len(values) if values else None
