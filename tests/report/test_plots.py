"""The report's figures: each returns a Figure, for full and for empty input."""

from __future__ import annotations

import base64

import numpy as np
from matplotlib.figure import Figure

from fedad.report import plots


def _pairs() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    y = (rng.random(80) < 0.3).astype(int)
    return {
        "a": (y, rng.normal(size=80) + y),
        "b": (y, rng.normal(size=80)),
        "one-class": (np.zeros(5, dtype=int), np.arange(5.0)),
    }


def _history() -> dict[str, dict[str, np.ndarray]]:
    r = np.arange(1.0, 5.0)
    return {
        "a": {"round": r, "loss": 1 / r, "bytes_up": 10 * r, "bytes_down": 10 * r},
        "b": {"round": r, "loss": np.full(4, np.nan), "bytes_up": 1e6 * r, "bytes_down": r},
    }


def _png_ok(fig: Figure) -> None:
    assert isinstance(fig, Figure)
    png = base64.b64decode(plots.figure_to_png_base64(fig, dpi=40))
    assert png.startswith(b"\x89PNG")


def test_roc_and_histograms() -> None:
    pairs = _pairs()
    fig = plots.roc_figure(pairs)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any(t.startswith("a (AUROC") for t in labels)
    assert any("one class" in t for t in labels)
    _png_ok(fig)
    fig = plots.score_histograms(pairs, {"a": 0.5, "b": None}, ncols=2)
    assert sum(ax.get_visible() for ax in fig.axes) == 3
    _png_ok(fig)


def test_history_figures() -> None:
    history = _history()
    fig = plots.loss_figure(history)
    assert len(fig.axes[0].lines) == 1  # "b" never logged a finite loss
    _png_ok(fig)
    fig = plots.bytes_figure(history)
    assert fig.axes[0].get_yscale() == "log"
    np.testing.assert_allclose(fig.axes[0].lines[0].get_ydata(), [20, 60, 120, 200])
    _png_ok(fig)


def test_per_client_bars_and_heatmap() -> None:
    few = {"a": {0: 0.9, 1: None, 2: 0.7}, "b": {0: 0.5, 2: 0.6}}
    fig = plots.per_client_auroc_figure(few)
    assert len(fig.axes[0].patches) == 6
    _png_ok(fig)
    many = {m: {c: (c % 10) / 10 for c in range(50)} for m in ("a", "b")}
    fig = plots.per_client_auroc_figure(many)
    assert fig.axes[0].images  # heatmap
    _png_ok(fig)


def test_empty_inputs() -> None:
    for fig in (
        plots.roc_figure({}),
        plots.score_histograms({}),
        plots.loss_figure({}),
        plots.bytes_figure({}),
        plots.per_client_auroc_figure({}),
    ):
        _png_ok(fig)


def test_anomaly_map_figure() -> None:
    rng = np.random.default_rng(0)
    masks = np.zeros((5, 8, 8), np.uint8)
    masks[:3, 2:5, 2:5] = 1
    maps = rng.random((5, 8, 8))
    maps[0, 0, 0] = np.nan
    grey = rng.random((5, 1, 8, 8))
    fig = plots.anomaly_map_figure(grey, maps, masks, rng.random(5), [1, 1, 1, 0, 0], "t")
    _png_ok(fig)
    # 2 rows x (4 pairs + 3 gaps) + a colour bar
    assert len(fig.axes) == 2 * (4 * 2 + 3) + 1
    rgb = rng.normal(size=(2, 3, 8, 8))  # standardised, outside [0, 1]
    _png_ok(plots.anomaly_map_figure(rgb, maps[:2], masks[:2], [0.1, np.inf], [1, 0]))
    _png_ok(plots.anomaly_map_figure(np.zeros((0, 1, 8, 8)), [], [], [], []))
