"""Plots and the self-contained HTML report of a run directory.

``write_report(run_dir)`` (from :mod:`fedad.report.html`) is re-exported lazily, so importing
this package does not import matplotlib.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedad.report.html import render_report, write_report

__all__ = ["render_report", "write_report"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from fedad.report import html

        return getattr(html, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
