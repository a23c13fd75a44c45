"""The report's figures: each returns a Figure, for full and for empty input."""

from __future__ import annotations

import base64

import numpy as np
import pytest
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
    # each pair names its client
    fig = plots.anomaly_map_figure(grey[:2], maps[:2], masks[:2], [1, 2], [1, 0], clients=[3, 0])
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles[:4] == ["client 3: anomaly", "score 1", "client 0: normal", "score 2"]


def test_score_boxes_two_clients_one_class_and_nan() -> None:
    y = np.array([0, 0, 1, 1, 0, 0, 0])
    s = np.array([0.1, 0.2, 2.0, np.nan, 0.3, 0.4, 0.2])
    c = np.array([0, 0, 0, 0, 1, 1, 1])  # client 1: normal samples only
    fig = plots.score_boxes_figure({"m": (y, s, c), "other": (y, s * 10, c)})
    _png_ok(fig)
    ax = fig.axes[0]
    assert "1 non-finite" in ax.get_title()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["normal", "anomaly"]
    # three boxes: client 0 normal and anomaly, client 1 normal only
    assert len(ax.patches) == 3


def test_score_boxes_caps_clients_and_uses_symlog_for_heavy_tails() -> None:
    rng = np.random.default_rng(0)
    c = np.repeat(np.arange(30), 10)
    y = np.tile([0] * 8 + [1] * 2, 30)
    s = rng.normal(size=300)
    s[::37] = 1e6
    fig = plots.score_boxes_figure({"m": (y, s, c)}, max_clients=20)
    ax = fig.axes[0]
    assert len(ax.get_xticklabels()) == 20
    assert ax.get_yscale() == "symlog" and "symlog" in ax.get_ylabel()
    _png_ok(plots.score_boxes_figure({}))
    _png_ok(plots.score_boxes_figure({"nan": (np.array([0]), np.array([np.nan]), np.array([0]))}))


def test_tsne_coordinates_and_figure() -> None:
    rng = np.random.default_rng(0)
    z = np.vstack([rng.normal(size=(20, 6)), rng.normal(size=(10, 6)) + 5])
    y = np.array([0] * 20 + [1] * 10)
    c = np.arange(30) % 3
    xy = plots.tsne_coordinates(z, seed=0)
    assert xy.shape == (30, 2)
    np.testing.assert_array_equal(xy, plots.tsne_coordinates(z, seed=0))
    assert plots.tsne_coordinates(z[:6]).shape == (6, 2)  # small sample: perplexity adapted
    assert plots.tsne_coordinates(z[:6, :1]).shape == (6, 2)  # one column
    _png_ok(plots.tsne_figure(xy, y, c))
    _png_ok(plots.tsne_figure(xy[:20], y[:20], c[:20]))  # normal only
    with pytest.raises(ValueError, match="at least 5"):
        plots.tsne_coordinates(z[:4])
