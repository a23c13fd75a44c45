"""Figures for the run report: pure functions from arrays to :class:`matplotlib.figure.Figure`.

The figures are created with :class:`~matplotlib.figure.Figure` and an Agg canvas directly,
not through :mod:`matplotlib.pyplot`: no global figure registry is touched, no GUI backend is
needed, and a figure is freed as soon as it is no longer referenced (``plt.close`` is never
needed). Every function accepts empty input and then draws a figure that says so.
"""

from __future__ import annotations

import base64
import io
import math
import warnings
from collections.abc import Mapping

import numpy as np
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.text import Text
from matplotlib.ticker import EngFormatter, MaxNLocator
from numpy.typing import ArrayLike, NDArray

from fedad.evaluation.metrics import auroc, roc_curve
from fedad.printable import printable

__all__ = [
    "anomaly_map_figure",
    "bytes_figure",
    "figure_to_png_base64",
    "loss_figure",
    "per_client_auroc_figure",
    "roc_figure",
    "score_boxes_figure",
    "score_histograms",
    "tsne_coordinates",
    "tsne_figure",
]

#: ``history[method][column]``: one float per round (``nan`` = missing), see ``rundir.History``.
HistoryLike = Mapping[str, Mapping[str, NDArray[np.float64]]]

_NORMAL_COLOR = "#4C72B0"
_ANOMALY_COLOR = "#DD8452"


def _new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _empty(ax: Axes, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def _two_class(y: ArrayLike, s: ArrayLike) -> tuple[NDArray[np.int8], NDArray[np.float64]]:
    yy = np.asarray(y).reshape(-1).astype(np.int8)
    ss = np.asarray(s, dtype=np.float64).reshape(-1)
    keep = np.isfinite(ss)
    return yy[keep], ss[keep]


def figure_to_png_base64(fig: Figure, dpi: int = 100) -> str:
    """Render ``fig`` as a PNG and return it base64-encoded (ASCII), ready for a data URI.

    Labels come from the run directory (method labels, client names): every text of the
    figure is drawn as written (no mathtext: a crafted ``$\\frac{$`` neither fails the
    figure nor renders as math) with its control characters escaped
    (:func:`fedad.printable.printable`); a warning matplotlib gives while drawing (a glyph
    missing from the font, which quotes the character) is passed on escaped."""
    for text in fig.findobj(Text):
        text.set_text(printable(text.get_text()))
        text.set_parse_math(False)
    buf = io.BytesIO()
    with warnings.catch_warnings(record=True) as caught:
        fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    for w in caught:
        warnings.warn(printable(w.message), w.category, stacklevel=2)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def roc_figure(scores: Mapping[str, tuple[ArrayLike, ArrayLike]]) -> Figure:
    """ROC curves (TPR against FPR) of all methods in one axes.

    ``scores[label] = (y, s)`` with 0/1 labels (1 = anomaly) and scores (higher = more
    anomalous). The legend gives each method's AUROC; a method whose test set holds one class
    only has no ROC curve and is listed as such. The dashed diagonal is a random ranking.
    """
    fig = _new_figure(5.5, 5.0)
    ax = fig.add_subplot()
    drawn = 0
    for label, (y, s) in scores.items():
        yy, ss = _two_class(y, s)
        area = auroc(yy, ss) if len(yy) else None
        if area is None:
            ax.plot([], [], " ", label=f"{label} (one class: no ROC)")
            continue
        fpr, tpr, _ = roc_curve(yy, ss)
        ax.plot(fpr, tpr, lw=1.6, label=f"{label} (AUROC {area:.3f})")
        drawn += 1
    ax.plot([0, 1], [0, 1], ls="--", lw=0.8, color="0.6")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.01)
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_title("ROC on the pooled test set")
    if scores:
        ax.legend(loc="lower right", fontsize="small")
    if not drawn:
        ax.text(0.5, 0.55, "no ROC curve to draw", ha="center", color="0.4")
    return fig


def score_histograms(
    scores: Mapping[str, tuple[ArrayLike, ArrayLike]],
    thresholds: Mapping[str, float | None] | None = None,
    ncols: int = 3,
) -> Figure:
    """A grid of per-method histograms of test scores, normal and anomalous apart.

    ``scores[label] = (y, s)`` as in :func:`roc_figure`. Both classes share the bins of one
    method (40 equal bins over the method's score range) and are normalised to unit area, so
    their overlap shows how separable they are whatever the class sizes. A finite
    ``thresholds[label]`` is drawn as a vertical line (the method's decision threshold).
    """
    thresholds = thresholds or {}
    n = max(len(scores), 1)
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    fig = _new_figure(3.6 * ncols, 2.8 * nrows)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    flat = list(axes.ravel())
    if not scores:
        _empty(flat[0], "no test scores")
    for ax, (label, (y, s)) in zip(flat, scores.items(), strict=False):
        yy, ss = _two_class(y, s)
        ax.set_title(label, fontsize="medium")
        if len(ss) == 0:
            _empty(ax, "no scores")
            continue
        lo, hi = float(ss.min()), float(ss.max())
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5
        bins = np.linspace(lo, hi, 41)
        for cls, name, color in ((0, "normal", _NORMAL_COLOR), (1, "anomaly", _ANOMALY_COLOR)):
            part = ss[yy == cls]
            if len(part):
                ax.hist(
                    part,
                    bins=bins,
                    density=True,
                    alpha=0.55,
                    color=color,
                    label=f"{name} ({len(part)})",
                )
        t = thresholds.get(label)
        if t is not None and math.isfinite(t):
            ax.axvline(t, color="k", ls="--", lw=1.0, label="threshold")
        ax.set_xlabel("score")
        ax.set_ylabel("density")
        ax.legend(fontsize="x-small")
    for ax in flat[len(scores) :]:
        ax.set_visible(False)
    return fig


def _symlog_needed(values: NDArray[np.float64]) -> tuple[bool, float]:
    """Whether scores are so heavy-tailed that a linear axis squashes most boxes: the whole
    range is more than 50 times the middle half's (pooled over clients). Also a linear
    threshold for ``symlog``: the interquartile range, or 1 if that is 0."""
    if values.size < 4:
        return False, 1.0
    q1, q3 = np.percentile(values, [25, 75])
    iqr = float(q3 - q1)
    spread = float(values.max() - values.min())
    return spread > 50.0 * iqr if iqr > 0 else spread > 0, iqr if iqr > 0 else 1.0


def score_boxes_figure(
    scores: Mapping[str, tuple[ArrayLike, ArrayLike, ArrayLike]], max_clients: int = 20
) -> Figure:
    """Per-client box plots of test scores, normal and anomalous side by side, one panel per
    method (stacked), after FADngs's Fig. 8.

    ``scores[label] = (y, s, client)``: 0/1 labels, scores and each sample's client id.
    Per client (the first ``max_clients`` ids in order) a box of its normal test scores and
    one of its anomalous ones (boxes: quartiles, the black line the median, whiskers 1.5
    IQR, outliers as dots). Non-finite scores are left out (their count is in the panel's
    title); a client with one class only has one box. A panel whose scores span more than
    50 times their interquartile range uses a symmetric-log y axis (its label says so).
    """
    n = max(len(scores), 1)
    clients_of = {
        lab: np.unique(np.asarray(c).reshape(-1))[:max_clients] for lab, (_, _, c) in scores.items()
    }
    widest = max((len(c) for c in clients_of.values()), default=1)
    fig = _new_figure(max(6.0, 0.6 * widest + 2.0), 2.9 * n + 0.3)
    axes = fig.subplots(n, 1, squeeze=False)[:, 0]
    if not scores:
        _empty(axes[0], "no test scores")
        return fig
    for ax, (label, (y, s, c)) in zip(axes, scores.items(), strict=False):
        yy = np.asarray(y).reshape(-1)
        ss = np.asarray(s, dtype=np.float64).reshape(-1)
        cc = np.asarray(c).reshape(-1)
        finite = np.isfinite(ss)
        dropped = int((~finite).sum())
        yy, ss, cc = yy[finite], ss[finite], cc[finite]
        clients = clients_of[label]
        shown = np.isin(cc, clients)
        title = label + (f" ({dropped} non-finite score(s) left out)" if dropped else "")
        ax.set_title(title, fontsize="medium")
        if not shown.any():
            _empty(ax, "no finite scores")
            continue
        drawn_kinds: set[int] = set()
        for j, cid in enumerate(clients):
            for cls, offset, color in ((0, -0.2, _NORMAL_COLOR), (1, 0.2, _ANOMALY_COLOR)):
                part = ss[(cc == cid) & (yy == cls)]
                if part.size == 0:
                    continue
                ax.boxplot(
                    part,
                    positions=[j + offset],
                    widths=0.34,
                    patch_artist=True,
                    boxprops={"facecolor": color, "alpha": 0.75, "edgecolor": "0.25"},
                    medianprops={"color": "black", "linewidth": 1.6},
                    whiskerprops={"color": "0.35"},
                    capprops={"color": "0.35"},
                    flierprops={"marker": ".", "markersize": 2.5, "markeredgecolor": color},
                    manage_ticks=False,
                )
                drawn_kinds.add(cls)
        log_axis, linthresh = _symlog_needed(ss[shown])
        if log_axis:
            ax.set_yscale("symlog", linthresh=linthresh)
        ax.set_ylabel("score (symlog)" if log_axis else "score")
        ax.set_xticks(np.arange(len(clients)), [str(int(k)) for k in clients])
        ax.set_xlim(-0.6, len(clients) - 0.4)
        ax.set_xlabel("client")
        handles = [
            Patch(facecolor=color, alpha=0.75, edgecolor="0.25", label=name)
            for cls, name, color in ((0, "normal", _NORMAL_COLOR), (1, "anomaly", _ANOMALY_COLOR))
            if cls in drawn_kinds
        ]
        ax.legend(handles=handles, fontsize="x-small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def tsne_coordinates(z: ArrayLike, seed: int = 0) -> NDArray[np.float64]:
    """2-d t-SNE (scikit-learn, ``random_state = seed``, PCA initialisation) of the rows of
    ``z`` ``(n, D)``; perplexity ``min(30, (n - 1) / 3)`` (at least 2), so that small samples
    work. ``ValueError`` for fewer than 5 rows."""
    from sklearn.manifold import TSNE

    x = np.asarray(z, dtype=np.float64)
    if x.ndim != 2 or len(x) < 5:
        raise ValueError(f"t-SNE needs at least 5 rows of (n, D), got {x.shape}")
    if x.shape[1] < 2:
        x = np.hstack([x, np.zeros_like(x)])
    perplexity = float(max(2.0, min(30.0, (len(x) - 1) / 3.0)))
    tsne = TSNE(
        n_components=2, perplexity=perplexity, init="pca", learning_rate="auto", random_state=seed
    )
    out: NDArray[np.float64] = np.asarray(tsne.fit_transform(x), dtype=np.float64)
    return out


def tsne_figure(
    coords: ArrayLike, labels: ArrayLike, clients: ArrayLike, title: str = ""
) -> Figure:
    """Two t-SNE panels of the same points ``coords`` ``(n, 2)``: left the normal samples
    coloured by client (after FADngs's Fig. 6; anomalies in light grey), right all samples,
    normal against anomalous (Fig. 7). ``labels`` 0/1, ``clients`` the samples' client ids."""
    xy = np.asarray(coords, dtype=np.float64)
    y = np.asarray(labels).reshape(-1)
    c = np.asarray(clients).reshape(-1)
    fig = _new_figure(11.0, 4.8)
    left, right = fig.subplots(1, 2)
    for ax in (left, right):
        ax.set_xticks([])
        ax.set_yticks([])
    normal = y != 1
    if (~normal).any():  # context: where the anomalies lie, in light grey
        left.scatter(*xy[~normal].T, s=5, color="0.85", label="anomalous")
    ids = np.unique(c[normal])
    cmap = colormaps["tab10" if len(ids) <= 10 else "tab20"]
    for k, cid in enumerate(ids):
        at = normal & (c == cid)
        left.scatter(*xy[at].T, s=7, alpha=0.75, color=cmap(k % cmap.N), label=str(int(cid)))
    if len(ids) == 0:
        _empty(left, "no normal samples")
    elif len(ids) <= 20:
        left.legend(
            ncols=1 + len(ids) // 11,
            title="client",
            fontsize="x-small",
            title_fontsize="x-small",
            markerscale=2,
        )
    left.set_title("normal test samples by client (anomalies grey)", fontsize="medium")
    for cls, name, color in ((0, "normal", _NORMAL_COLOR), (1, "anomaly", _ANOMALY_COLOR)):
        at = (y == 1) if cls else normal
        if at.any():
            right.scatter(*xy[at].T, s=7, alpha=0.6, color=color, label=f"{name} ({int(at.sum())})")
    right.legend(fontsize="x-small", markerscale=2)
    right.set_title("normal vs anomalous test samples", fontsize="medium")
    if title:
        fig.suptitle(title, fontsize="medium")
    return fig


def _rounds(table: Mapping[str, NDArray[np.float64]], length: int) -> NDArray[np.float64]:
    r = table.get("round")
    if r is None or len(r) != length or not np.all(np.isfinite(r)):
        return np.arange(1, length + 1, dtype=np.float64)
    return np.asarray(r, dtype=np.float64)


def loss_figure(history: HistoryLike, column: str = "loss") -> Figure:
    """The training loss ``history[method][column]`` against the round, one line per method.

    Missing (``nan``) rounds are left out; methods that never logged the column are skipped.
    """
    fig = _new_figure(6.0, 3.8)
    ax = fig.add_subplot()
    drawn = 0
    for method, table in history.items():
        values = table.get(column)
        if values is None:
            continue
        v = np.asarray(values, dtype=np.float64)
        x = _rounds(table, len(v))
        keep = np.isfinite(v)
        if not keep.any():
            continue
        ax.plot(x[keep], v[keep], marker="o", ms=3, lw=1.4, label=method)
        drawn += 1
    if not drawn:
        _empty(ax, f"no '{column}' logged")
        return fig
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round")
    ax.set_ylabel(column)
    ax.set_title(f"{column} per round")
    ax.legend(fontsize="small")
    return fig


def bytes_figure(history: HistoryLike) -> Figure:
    """Cumulative communication, ``sum over rounds <= r of (bytes_up + bytes_down)``, per method.

    A missing cell counts as 0 bytes; a method that logged no bytes at all is skipped. The
    y-axis is logarithmic when the positive values span more than two orders of magnitude.
    """
    fig = _new_figure(6.0, 3.8)
    ax = fig.add_subplot()
    positive: list[float] = []
    drawn = 0
    for method, table in history.items():
        parts = [
            np.asarray(table[c], dtype=np.float64) for c in ("bytes_up", "bytes_down") if c in table
        ]
        if not parts or not any(np.isfinite(p).any() for p in parts):
            continue
        total = np.nansum(np.vstack(parts), axis=0)
        cumulative = np.cumsum(total)
        x = _rounds(table, len(cumulative))
        ax.plot(x, cumulative, marker="o", ms=3, lw=1.4, label=method)
        positive += [float(c) for c in cumulative if c > 0]
        drawn += 1
    if not drawn:
        _empty(ax, "no bytes logged")
        return fig
    if positive and max(positive) / min(positive) > 100.0:
        ax.set_yscale("log")
    ax.yaxis.set_major_formatter(EngFormatter(unit="B"))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round")
    ax.set_ylabel("cumulative bytes (up + down)")
    ax.set_title("communication")
    ax.legend(fontsize="small")
    return fig


def per_client_auroc_figure(
    per_client: Mapping[str, Mapping[int, float | None]],
    max_bars: int = 60,
    names: Mapping[int, str] | None = None,
) -> Figure:
    """Per-client AUROC of each method: grouped bars, or a heatmap for many clients.

    ``per_client[label][client] = auroc`` (``None``: undefined, e.g. a one-class local test
    set). With at most ``max_bars`` bars in total a grouped bar chart is drawn (clients on the
    x-axis, one bar per method, labelled with ``names[client]`` under the number when given:
    natural partitions); otherwise a methods-by-clients heatmap on ``[0, 1]`` with
    undefined cells in grey.
    """
    methods = list(per_client)
    clients = sorted({c for m in methods for c in per_client[m]})
    if not methods or not clients:
        fig = _new_figure(6.0, 3.0)
        _empty(fig.add_subplot(), "no per-client metrics")
        return fig
    grid = np.full((len(methods), len(clients)), np.nan)
    for i, m in enumerate(methods):
        for j, c in enumerate(clients):
            v = per_client[m].get(c)
            if v is not None and math.isfinite(v):
                grid[i, j] = v
    if len(methods) * len(clients) <= max_bars:
        fig = _new_figure(max(5.0, 0.35 * len(methods) * len(clients) + 2.0), 3.8)
        ax = fig.add_subplot()
        width = 0.8 / len(methods)
        x = np.arange(len(clients))
        for i, m in enumerate(methods):
            ax.bar(x - 0.4 + width * (i + 0.5), np.nan_to_num(grid[i], nan=0.0), width, label=m)
            for k in np.flatnonzero(np.isnan(grid[i])):
                ax.text(x[k] - 0.4 + width * (i + 0.5), 0.02, "n/a", ha="center", fontsize=7)
        ax.axhline(0.5, ls="--", lw=0.8, color="0.6")
        shown = {c: f"{c}\n{names[c][:16]}" for c in clients if names and names.get(c)}
        ax.set_xticks(x, [shown.get(c, str(c)) for c in clients])
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("client")
        ax.set_ylabel("AUROC")
        fig.legend(fontsize="small", ncols=min(len(methods), 4), loc="outside lower center")
    else:
        fig = _new_figure(min(16.0, 2.5 + 0.3 * len(clients)), 1.2 + 0.45 * len(methods))
        ax = fig.add_subplot()
        masked = np.ma.masked_invalid(grid)
        cmap = colormaps["viridis"].with_extremes(bad="0.85")
        image = ax.imshow(
            masked, aspect="auto", vmin=0.0, vmax=1.0, cmap=cmap, interpolation="nearest"
        )
        ax.set_yticks(np.arange(len(methods)), methods)
        step = max(1, len(clients) // 30)
        ax.set_xticks(np.arange(0, len(clients), step), [str(c) for c in clients[::step]])
        ax.set_xlabel("client")
        fig.colorbar(image, ax=ax, label="AUROC")
    ax.set_title("per-client AUROC")
    return fig


def seed_spread_figure(per_seed: Mapping[str, Mapping[int, float | None]]) -> Figure:
    """Each seed's value per method (dots) with the mean +- one standard deviation (bar).

    ``per_seed[label][seed] = value`` (``None``: undefined; left out). The standard deviation
    is numpy's (``ddof = 0``), as in the aggregate ``metrics.json``.
    """
    methods = list(per_seed)
    fig = _new_figure(max(5.0, 1.1 * len(methods) + 2.0), 3.8)
    ax = fig.add_subplot()
    if not methods:
        _empty(ax, "no per-seed values")
        return fig
    for i, m in enumerate(methods):
        values = np.array(
            [v for v in per_seed[m].values() if v is not None and math.isfinite(v)], dtype=float
        )
        if values.size == 0:
            ax.text(i, 0.5, "n/a", ha="center", fontsize=8)
            continue
        jitter = np.linspace(-0.12, 0.12, values.size) if values.size > 1 else np.zeros(1)
        ax.scatter(i + jitter, values, s=18, alpha=0.8, zorder=3)
        ax.errorbar(
            i + 0.25, values.mean(), yerr=values.std(), fmt="_", color="0.2", capsize=4, zorder=4
        )
    ax.set_xticks(np.arange(len(methods)), methods, rotation=30, ha="right")
    ax.set_xlim(-0.6, len(methods) - 0.4)
    ax.set_ylabel("AUROC")
    ax.set_title("AUROC per seed (dots) and mean ± std (bar)")
    return fig


def _display_image(image: NDArray[np.floating]) -> tuple[NDArray[np.float64], bool]:
    """``(C, H, W)`` -> an ``(H, W)`` grey or ``(H, W, 3)`` RGB image in [0, 1]; and
    whether it is RGB. Values outside [0, 1] (standardised data) are rescaled per image."""
    x = np.asarray(image, dtype=np.float64)
    x = np.where(np.isfinite(x), x, 0.0)
    rgb = x.shape[0] == 3
    x = np.moveaxis(x, 0, -1) if rgb else x.mean(axis=0)
    lo, hi = float(x.min()), float(x.max())
    if lo < 0.0 or hi > 1.0:
        x = (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x)
    return x, rgb


def anomaly_map_figure(
    images: ArrayLike,
    maps: ArrayLike,
    masks: ArrayLike,
    scores: ArrayLike,
    labels: ArrayLike,
    title: str = "",
    ncols: int = 4,
    clients: ArrayLike | None = None,
) -> Figure:
    """Anomaly maps over their test images, two panels per image.

    ``images`` ``(n, C, H, W)``, ``maps`` and ``masks`` ``(n, H, W)`` (1 = defect pixel),
    one ``score`` and 0/1 ``label`` per image, and optionally the ``clients`` whose test
    images they are. Left panel: the image with the ground-truth defect outlined in red;
    right: the map as heat over the greyed image (one colour scale for all of the method's
    maps, from their 1st to 99th percentile), the defect outlined in cyan. Each pair is
    titled with the image's client, label and score.
    """
    imgs = np.asarray(images)
    mp = np.asarray(maps, dtype=np.float64)
    mk = np.asarray(masks)
    sc = np.asarray(scores, dtype=np.float64).reshape(-1)
    lb = np.asarray(labels).reshape(-1)
    cl = None if clients is None else np.asarray(clients).reshape(-1)
    n = len(mp)
    ncols = max(1, min(ncols, n))
    nrows = max(1, math.ceil(n / ncols))
    fig = _new_figure(3.3 * ncols + 0.7, 1.75 * nrows + 0.45)
    if n == 0:
        _empty(fig.add_subplot(), "no anomaly maps")
        return fig
    finite = mp[np.isfinite(mp)]
    lo, hi = np.percentile(finite, [1, 99]) if finite.size else (0.0, 1.0)
    if not hi > lo:
        lo, hi = lo - 0.5, hi + 0.5
    heat = colormaps["inferno"]
    # pairs of panels, a narrow empty column between pairs
    ratios = ([1.0, 1.0, 0.18] * ncols)[:-1]
    grid = fig.subplots(nrows, len(ratios), squeeze=False, gridspec_kw={"width_ratios": ratios})
    for ax in grid[:, 2::3].ravel():
        ax.set_axis_off()
    axes = np.delete(grid, np.s_[2::3], axis=1)
    shown = None
    for i in range(nrows * ncols):
        left, right = axes[i // ncols, 2 * (i % ncols)], axes[i // ncols, 2 * (i % ncols) + 1]
        for ax in (left, right):
            ax.set_xticks([])
            ax.set_yticks([])
        if i >= n:
            left.set_axis_off()
            right.set_axis_off()
            continue
        img, rgb = _display_image(imgs[i])
        left.imshow(img, cmap=None if rgb else "gray", vmin=0.0, vmax=1.0, interpolation="nearest")
        grey = img.mean(axis=-1) if rgb else img
        right.imshow(grey, cmap="gray", vmin=0.0, vmax=1.0, interpolation="nearest")
        m = np.where(np.isfinite(mp[i]), mp[i], hi)
        shown = right.imshow(m, cmap=heat, vmin=lo, vmax=hi, alpha=0.6, interpolation="bilinear")
        if np.any(mk[i] == 1):
            left.contour(mk[i] == 1, levels=[0.5], colors="red", linewidths=0.9)
            right.contour(mk[i] == 1, levels=[0.5], colors="cyan", linewidths=0.9)
        kind = "anomaly" if lb[i] == 1 else "normal"
        score = f"{sc[i]:.3g}" if math.isfinite(sc[i]) else str(sc[i])
        color = _ANOMALY_COLOR if lb[i] == 1 else _NORMAL_COLOR
        who = f"client {int(cl[i])}: " if cl is not None and i < len(cl) else ""
        left.set_title(who + kind, fontsize=8, color=color)
        right.set_title(f"score {score}", fontsize=8)
    if shown is not None:
        fig.colorbar(shown, ax=grid.ravel().tolist(), shrink=0.8, label="anomaly map")
    if title:
        fig.suptitle(title, fontsize="medium")
    return fig
