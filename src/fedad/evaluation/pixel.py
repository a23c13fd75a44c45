"""Pixel-level anomaly-localisation metrics: pixel AUROC and PRO (area under the PRO curve).

Inputs are ``maps``, real-valued anomaly maps of shape ``(N, H, W)`` (a **higher score means
more anomalous**), and ``masks``, ground-truth masks of the same shape holding ``0`` (normal
pixel) and ``1`` (anomalous pixel) as ``bool``, integers or floats. An image without a defect
simply has an all-zero mask. Predicting "anomalous" for every pixel with ``score >= t``, the
thresholds ``t`` run over every distinct score in the maps, so pixels of equal score always
switch together (ties are never broken by position).

Both metrics return a plain ``float`` and ``nan`` where they are undefined (only one class of
pixel, or no pixels at all). Callers writing JSON should turn ``nan`` into ``null``, as
:mod:`fedad.evaluation.metrics` does with ``None``.

Notation used below, all pixels of all images pooled::

    P = #anomalous pixels,   Nn = #normal pixels,
    FP(t) = #{normal pixels with score >= t},     FPR(t) = FP(t) / Nn
    C_1 .. C_R = connected components of the masks (8-connectivity, within each image)
    PRO(t) = (1/R) * sum_k #{p in C_k : score(p) >= t} / |C_k|

Reference: [Bergmann et al. 2021] P. Bergmann, K. Batzner, M. Fauser, D. Sattlegger,
C. Steger, "The MVTec Anomaly Detection Dataset: A Comprehensive Real-World Dataset for
Unsupervised Anomaly Detection", IJCV 129, 2021 (section on the per-region overlap), and the
evaluation code MVTec distributes with the data set (``pro_curve_util.compute_pro`` and
``generic_util.trapezoid``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import ndimage

__all__ = ["PIXEL_KEYS", "pixel_auroc", "pixel_metrics", "pro_score"]

#: Keys of :func:`pixel_metrics`, in display order.
PIXEL_KEYS: tuple[str, ...] = ("pixel_auroc", "pro")

#: Neighbourhood for the ground-truth regions on an ``(N, H, W)`` stack: the 3x3 block of
#: ones (8-connectivity, as ``scipy.ndimage.label(gt, np.ones((3, 3)))`` in MVTec's
#: evaluation code) in the middle slice only, so that regions never join across images.
_STRUCTURE: NDArray[np.bool_] = np.zeros((3, 3, 3), dtype=bool)
_STRUCTURE[1] = True


# --------------------------------------------------------------------------- validation


def _maps(maps: ArrayLike) -> NDArray[Any]:
    arr = np.asarray(maps)
    if arr.ndim != 3:
        raise ValueError(f"maps must have shape (N, H, W), got shape {arr.shape}")
    if arr.dtype == bool or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise ValueError(f"maps must be real numbers, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating):
        bad = int(arr.size - np.count_nonzero(np.isfinite(arr)))
        if bad:
            raise ValueError(f"maps must be finite, found {bad} NaN or infinite value(s)")
    return arr


def _masks(masks: ArrayLike, shape: tuple[int, ...]) -> NDArray[np.bool_]:
    """The anomalous pixels as a bool array (no copy when ``masks`` is already bool)."""
    arr = np.asarray(masks)
    if arr.shape != shape:
        raise ValueError(f"masks must have the shape of maps {shape}, got {arr.shape}")
    if arr.dtype == bool:
        return arr.astype(bool, copy=False)
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise ValueError(f"masks must hold 0/1 values, got dtype {arr.dtype}")
    positive: NDArray[np.bool_] = np.equal(arr, 1)
    bad = ~(positive | (arr == 0))
    if np.any(bad):
        values = np.unique(arr[bad])[:5].tolist()
        raise ValueError(
            f"masks must hold only 0 (normal) and 1 (anomaly), found {values} "
            "(binarise them first, e.g. masks > 0)"
        )
    return positive


def _fpr_limit(fpr_limit: float) -> float:
    limit = float(fpr_limit)
    if not 0.0 < limit <= 1.0:
        raise ValueError(f"fpr_limit must lie in (0, 1], got {fpr_limit!r}")
    return limit


# --------------------------------------------------------------------------- shared sweep


#: Groups of equal score handled per step of the AUROC sum (bounds its temporaries).
_CHUNK = 1 << 20


class _Sweep:
    """The curve counts at every distinct score, from sorting rather than a full argsort.

    With ``t_0 < t_1 < ... < t_{G-1}`` the distinct scores and ``t_G = +inf`` (nothing
    predicted anomalous), for ``g = 0 .. G``::

        below[g] = #{anomalous p : s_p < t_g}      (so TP(t_g) = n_pos - below[g])
        fp[g]    = #{normal p : s_p >= t_g}

    ``fp`` decreases from ``n_neg`` to 0 and ``below`` increases to ``n_pos``. Only the
    anomalous pixels (usually a small share) are argsorted, and only when ``keep_order``:
    ``order`` sorts ``scores[positive]`` by increasing score. Sorting all scores by value is
    several times faster than argsorting them and needs one copy of the scores, no index.
    """

    def __init__(self, scores: NDArray[Any], positive: NDArray[np.bool_], keep_order: bool) -> None:
        n = int(scores.size)
        ranked = np.sort(scores)
        change = ranked[1:] != ranked[:-1]
        last = np.flatnonzero(change)  # last position of every run of equal scores but one
        del change
        groups = last.size + 1
        levels = np.empty(groups, dtype=ranked.dtype)
        np.take(ranked, last, out=levels[:-1])
        levels[-1] = ranked[-1]
        del ranked
        fp = np.empty(groups + 1, dtype=np.int64)  # first position of each run, then n
        fp[0] = 0
        fp[1:groups] = last
        fp[1:groups] += 1
        fp[groups] = n
        del last
        np.subtract(n, fp, out=fp)  # #{p : s_p >= t_g}
        anomalous = scores[positive]
        if keep_order:
            self.order: NDArray[np.intp] | None = np.argsort(anomalous)
            anomalous = anomalous[self.order]
        else:
            self.order = None
            anomalous.sort()
        self.n_pos = int(anomalous.size)
        self.n_neg = n - self.n_pos
        below = np.empty(groups + 1, dtype=np.int64)
        below[:groups] = np.searchsorted(anomalous, levels, side="left")
        below[groups] = self.n_pos
        del levels, anomalous
        fp -= self.n_pos  # minus TP = n_pos - below
        fp += below
        self.below = below
        self.fp = fp


def _sweep(
    maps: ArrayLike, masks: ArrayLike, keep_order: bool
) -> tuple[_Sweep | None, NDArray[np.bool_]]:
    arr = _maps(maps)
    positive = _masks(masks, arr.shape)
    if arr.size == 0:
        return None, positive
    return _Sweep(arr.reshape(-1), positive.reshape(-1), keep_order), positive


def _auroc(sweep: _Sweep | None) -> float:
    if sweep is None or sweep.n_pos == 0 or sweep.n_neg == 0:
        return math.nan
    # Trapezoid area under the ROC curve: lowering the threshold from t_{g+1} to t_g adds
    # (FP_g - FP_{g+1}) * (TP_g + TP_{g+1}) / 2, over P * Nn, with TP = n_pos - below.
    # Twice the sum is an integer, summed exactly (int64 chunks below 2**32 pixels).
    n_pos, fp, below = sweep.n_pos, sweep.fp, sweep.below
    dtype = np.int64 if n_pos + sweep.n_neg < 2**32 else np.float64
    twice: int | float = 0
    for a in range(0, fp.size - 1, _CHUNK):
        b = min(a + _CHUNK, fp.size - 1)
        gained_fp = (fp[a:b] - fp[a + 1 : b + 1]).astype(dtype, copy=False)
        tp_pair = (2 * n_pos - below[a:b] - below[a + 1 : b + 1]).astype(dtype, copy=False)
        twice += np.dot(gained_fp, tp_pair).item()
    return float(twice) / (2.0 * n_pos * sweep.n_neg)


def _area_to(x: NDArray[np.float64], y: NDArray[np.float64], limit: float) -> float:
    """Area under the polyline through ``(x, y)`` (``x`` non-decreasing, ``x[0] <= limit``)
    from ``x[0]`` to ``limit``, the last piece interpolated linearly at ``limit``."""
    k = int(np.searchsorted(x, limit, side="right"))  # x[:k] <= limit < x[k:]
    xs, ys = x[:k], y[:k]
    area = float(np.sum((xs[1:] - xs[:-1]) * (ys[1:] + ys[:-1]))) / 2.0
    if k < x.size:
        x0, y0, x1, y1 = float(x[k - 1]), float(y[k - 1]), float(x[k]), float(y[k])
        y_at = y0 + (y1 - y0) * (limit - x0) / (x1 - x0)
        area += (limit - x0) * (y0 + y_at) / 2.0
    return area


def _pro(sweep: _Sweep | None, positive: NDArray[np.bool_], limit: float) -> float:
    if sweep is None or sweep.n_neg == 0 or sweep.order is None:
        return math.nan
    labels, n_regions = ndimage.label(positive, structure=_STRUCTURE)
    if n_regions == 0:
        return math.nan
    # Each anomalous pixel p carries the weight 1 / |C(p)|, so that R * PRO(t) is the sum
    # of the weights of the anomalous pixels with score >= t: a suffix sum over the
    # anomalous pixels sorted by score (boolean indexing keeps the same pixel order).
    region = labels[positive]
    del labels
    size = np.bincount(region)
    size[0] = 1  # label 0 (normal) never occurs in `region`
    ranked = (1.0 / size)[region[sweep.order]]
    del region
    suffix = np.append(np.cumsum(ranked[::-1])[::-1], 0.0)  # suffix[k] = sum(ranked[k:])
    del ranked
    # The curve in decreasing threshold order, from (0, 0) at t_G = +inf to (1, 1) at the
    # smallest score. Only the points up to the first one past the limit matter: cut there
    # (with a margin of one false positive against rounding).
    fp = sweep.fp[::-1]
    below = sweep.below[::-1]
    cut = int(np.searchsorted(fp, math.floor(limit * sweep.n_neg) + 1, side="right")) + 1
    cut = min(cut, fp.size)
    fpr = fp[:cut] / sweep.n_neg
    pro = suffix[below[:cut]]
    pro /= n_regions
    np.minimum(pro, 1.0, out=pro)
    return _area_to(fpr, pro, limit) / limit


# --------------------------------------------------------------------------- public API


def pixel_auroc(maps: ArrayLike, masks: ArrayLike) -> float:
    """Area under the ROC curve over all pixels of all images, pooled.

    With the anomalous pixels as positives and a pixel predicted anomalous when its score is
    ``>= t``, ``TPR(t) = TP(t) / P`` and ``FPR(t) = FP(t) / Nn``; the ROC curve has one point
    per distinct score, starts at ``(0, 0)``, ends at ``(1, 1)`` and is integrated with the
    trapezoid rule, which equals the Mann-Whitney statistic with ties counted one half::

        AUROC = ( #{(a, n): s_a > s_n} + 1/2 #{(a, n): s_a = s_n} ) / (P * Nn)

    over anomalous pixels ``a`` and normal pixels ``n``. This is exactly
    ``sklearn.metrics.roc_auc_score(masks.ravel(), maps.ravel())``, computed from one sort in
    integer arithmetic. ``nan`` when the masks hold only one class (or no pixel at all).

    ``maps``: real scores of shape ``(N, H, W)``, finite; ``masks``: the same shape, 0/1
    (bool, integer or float). Raises ``ValueError`` otherwise.
    """
    sweep, _ = _sweep(maps, masks, keep_order=False)
    return _auroc(sweep)


def pro_score(maps: ArrayLike, masks: ArrayLike, fpr_limit: float = 0.3) -> float:
    """Normalised area under the per-region-overlap (PRO) curve up to ``fpr_limit``.

    The definition of [Bergmann et al. 2021], as MVTec's evaluation code computes it:

    * the regions ``C_1 .. C_R`` are the connected components of the ground-truth masks,
      image by image, with 8-connectivity (a 3x3 block of ones, as in MVTec's code; two
      anomalous pixels touching at a corner are one region);
    * for every threshold ``t`` (every distinct score; all pixels of equal score switch
      together) ``PRO(t) = (1/R) sum_k #{p in C_k : s_p >= t} / |C_k|``, the mean over
      **all regions of all images** of the share of the region predicted anomalous, and
      ``FPR(t) = #{normal p : s_p >= t} / Nn`` over the normal pixels of **all images**
      (an image without a defect contributes only normal pixels);
    * the curve ``(FPR(t), PRO(t))`` starts at ``(0, 0)`` (threshold above every score),
      ends at ``(1, 1)`` and is read as the polyline through those points; its area from
      FPR 0 to ``fpr_limit`` is taken with the trapezoid rule, the last piece interpolated
      linearly at exactly ``fpr_limit``, and divided by ``fpr_limit``::

          PRO-score = (1 / fpr_limit) * integral_0^fpr_limit PRO d(FPR)

    so a perfect map scores 1 and a constant map ``fpr_limit / 2``.

    Which variant, and why: published tools differ. MVTec's official evaluation code sweeps
    every distinct score, pools regions and normal pixels over all images, integrates to 0.3
    with linear interpolation at the limit and normalises by 0.3; that is the number
    reported in [Bergmann et al. 2021] and by most papers on MVTec AD, and it is what this
    function computes (in float64 throughout, where MVTec's code rounds the FPR to float32;
    anomalib's current ``AUPRO`` follows the same computation). Other widely copied
    implementations give different numbers and are not used here: anomalib's earlier
    ``AUPRO`` built one ROC curve per region (on that region plus the background) and
    averaged them after resampling onto a fixed FPR grid; several research repositories
    binarise the maps at about 200 evenly spaced thresholds, keep the points with
    FPR < 0.3 and rescale those FPRs to [0, 1] by their own min and max before taking the
    area, which drops the piece up to the limit and changes the normalisation. We follow
    the official definition so that our numbers compare with the published tables, and
    because it is exact: no threshold grid, no resampling.

    Returns ``nan`` when there is no anomalous region (nothing to overlap) or no normal
    pixel (the FPR is 0/0). ``fpr_limit`` must lie in ``(0, 1]``. Cost: one sort of all
    scores by value (no index array), an argsort of the anomalous pixels only, one
    connected-component labelling and cumulative sums; no loop over thresholds. Extra
    memory is about 5 bytes per pixel when the maps take few distinct values (8-bit maps)
    and about 27 when every score is distinct (6.5 million float32 pixels: about 1 s).
    """
    limit = _fpr_limit(fpr_limit)
    sweep, positive = _sweep(maps, masks, keep_order=True)
    return _pro(sweep, positive, limit)


def pixel_metrics(maps: ArrayLike, masks: ArrayLike, fpr_limit: float = 0.3) -> dict[str, float]:
    """``{"pixel_auroc": pixel_auroc(...), "pro": pro_score(...)}`` from one shared sort."""
    limit = _fpr_limit(fpr_limit)
    sweep, positive = _sweep(maps, masks, keep_order=True)
    return {"pixel_auroc": _auroc(sweep), "pro": _pro(sweep, positive, limit)}
