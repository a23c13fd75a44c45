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


CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto;
       max-width: 1200px; padding: 0 1rem; color: #222; line-height: 1.45; }
h1 { margin-bottom: 0.2rem; } h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2rem;
       margin-top: 2.2rem; }
table { border-collapse: collapse; margin: 0.6rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #ddd; padding: 0.25rem 0.55rem; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.best { font-weight: bold; } tr.mean td { border-top: 2px solid #999; font-style: italic; }
.facts th { text-align: left; } .muted { color: #777; } .scroll { overflow-x: auto; }
figure { margin: 1rem 0; } figcaption { color: #555; font-size: 0.88rem; max-width: 60rem; }
img { max-width: 100%; height: auto; }
pre { background: #f7f7f7; border: 1px solid #e3e3e3; padding: 0.8rem; overflow-x: auto; }
.note { background: #f4f8fc; border-left: 4px solid #4C72B0; padding: 0.6rem 0.9rem; }
.warning { background: #fdf3e7; border-left: 4px solid #DD8452; padding: 0.6rem 0.9rem; }
.warning ul { margin: 0.3rem 0; } .headline { font-size: 1.15rem; font-weight: 600; }
details { margin-top: 1.2rem; } details > summary { cursor: pointer; }
details > summary > h2 { display: inline; border: none; margin: 0; }
details[open] > summary > h2 { border-bottom: 1px solid #ddd; }
"""
"""The style of fedad's HTML pages (the report, the benchmark's leaderboard)."""


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
