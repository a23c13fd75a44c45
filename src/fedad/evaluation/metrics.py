"""Anomaly-detection metrics: ranking metrics, thresholded metrics, and per-client breakdowns.

Conventions used throughout:

* the anomaly is the **positive class** (label ``1``), normal data are label ``0``;
* a **higher score means more anomalous**;
* a prediction ``pred`` is the detector's own 0/1 decision (its ``threshold_`` comes from
  training data only, see docs/architecture.md "Evaluation").

Every function returns plain Python ``float``/``int`` values (JSON-serialisable) and ``None``
where a metric is undefined: a ranking metric on a set with only one class, or a ratio whose
numerator and denominator are both zero (``0/0``). ``None`` is never replaced by ``0`` or
``nan``, so an undefined number can never be mistaken for a bad (or perfect) one.

Confusion-matrix counts with the anomaly as positive class::

    TP = #(pred = 1, y = 1)    FP = #(pred = 1, y = 0)
    FN = #(pred = 0, y = 1)    TN = #(pred = 0, y = 0)
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.stats import rankdata

__all__ = [
    "BINARY_KEYS",
    "EVALUATE_KEYS",
    "aupr",
    "auroc",
    "binary_metrics",
    "confusion_counts",
    "eer",
    "evaluate",
    "evaluate_clients",
    "normal_positive_metrics",
    "roc_curve",
]

#: Keys of :func:`binary_metrics`, in display order.
BINARY_KEYS: tuple[str, ...] = ("precision", "recall", "f1", "accuracy", "fe", "me")

#: Keys of :func:`evaluate`, in display order.
EVALUATE_KEYS: tuple[str, ...] = (
    "auroc",
    "aupr",
    "eer",
    "f1",
    "precision",
    "recall",
    "accuracy",
    "fe",
    "me",
    "n",
    "n_anomalies",
)


# --------------------------------------------------------------------------- validation


def _as_1d(x: ArrayLike, name: str) -> NDArray[Any]:
    arr = np.asarray(x)
    if arr.ndim == 0:
        raise ValueError(f"{name} must be a 1-D array, got a scalar")
    if arr.ndim > 1:
        if arr.ndim == 2 and 1 in arr.shape:
            return arr.reshape(-1)
        raise ValueError(f"{name} must be a 1-D array, got shape {arr.shape}")
    return arr


def _binary(x: ArrayLike, name: str) -> NDArray[np.int8]:
    """Validate a 0/1 vector (bool, int or float holding exactly 0 and 1)."""
    arr = _as_1d(x, name)
    if arr.dtype == bool:
        return arr.astype(np.int8)
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise ValueError(f"{name} must hold 0/1 values, got dtype {arr.dtype}")
    bad = ~np.isin(arr, (0, 1))
    if np.any(bad):
        values = np.unique(arr[bad])[:5].tolist()
        raise ValueError(f"{name} must hold only 0 (normal) and 1 (anomaly), found {values}")
    return arr.astype(np.int8)


def _scores(x: ArrayLike, name: str = "scores") -> NDArray[np.float64]:
    arr = _as_1d(x, name)
    if arr.dtype == bool or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise ValueError(f"{name} must be real numbers, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    finite = np.isfinite(arr)
    if not np.all(finite):
        idx = int(np.flatnonzero(~finite)[0])
        raise ValueError(
            f"{name} must be finite, found {arr[idx]} at index {idx} "
            f"({int((~finite).sum())} non-finite value(s) in total)"
        )
    return arr


def _same_length(**arrays: NDArray[Any]) -> None:
    lengths = {name: len(a) for name, a in arrays.items()}
    if len(set(lengths.values())) > 1:
        described = ", ".join(f"{k}={v}" for k, v in lengths.items())
        raise ValueError(f"inputs must have the same length, got {described}")


def _ratio(num: int, den: int) -> float | None:
    """``num / den`` as a float, or ``None`` when ``den == 0`` (then ``num == 0`` too)."""
    return None if den == 0 else float(num) / float(den)


def _both_classes(y: NDArray[np.int8]) -> bool:
    return bool(np.any(y == 1) and np.any(y == 0))


# --------------------------------------------------------------------------- ranking metrics


def roc_curve(
    y: ArrayLike, s: ArrayLike
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """ROC curve ``(fpr, tpr, thresholds)`` with one point per distinct score.

    Predicting "anomaly" for ``s >= t``, for each distinct score ``t`` in decreasing order::

        TPR(t) = TP(t) / (TP + FN),   FPR(t) = FP(t) / (FP + TN)

    The curve starts at ``(0, 0)`` with threshold ``+inf`` and ends at ``(1, 1)``. No point
    is dropped (unlike scikit-learn's ``drop_intermediate``). Raises ``ValueError`` when ``y``
    does not hold both classes, because one of the rates is then ``0/0``.
    """
    yy = _binary(y, "y")
    ss = _scores(s)
    _same_length(y=yy, scores=ss)
    if not _both_classes(yy):
        raise ValueError("roc_curve needs both normal (0) and anomalous (1) samples in y")
    order = np.argsort(-ss, kind="mergesort")
    ss_sorted, y_sorted = ss[order], yy[order]
    # last index of each run of equal scores (scores sorted in decreasing order)
    last = np.r_[np.flatnonzero(np.diff(ss_sorted) != 0), len(ss_sorted) - 1]
    tp = np.cumsum(y_sorted)[last].astype(np.float64)
    fp = (last + 1 - tp).astype(np.float64)
    tpr = np.r_[0.0, tp / tp[-1]]
    fpr = np.r_[0.0, fp / fp[-1]]
    thresholds = np.r_[np.inf, ss_sorted[last]]
    return fpr, tpr, thresholds


def auroc(y: ArrayLike, s: ArrayLike) -> float | None:
    """Area under the ROC curve, or ``None`` when ``y`` holds only one class.

    Computed as the Mann-Whitney statistic with ties counted as one half::

        AUROC = P(s_a > s_n) + 0.5 * P(s_a = s_n)
              = (R_1 - n_1 (n_1 + 1) / 2) / (n_1 n_0)

    where ``s_a`` / ``s_n`` are the scores of a random anomaly / normal sample, ``R_1`` is the
    sum of the (tie-averaged) ranks of the anomalies' scores, and ``n_1`` / ``n_0`` count
    anomalies / normals. This equals the trapezoidal area under :func:`roc_curve`.
    """
    yy = _binary(y, "y")
    ss = _scores(s)
    _same_length(y=yy, scores=ss)
    if not _both_classes(yy):
        return None
    n1 = int(yy.sum())
    n0 = len(yy) - n1
    ranks = rankdata(ss)  # average ranks for ties, 1-based
    r1 = float(ranks[yy == 1].sum())
    return (r1 - n1 * (n1 + 1) / 2.0) / (n1 * n0)


def aupr(y: ArrayLike, s: ArrayLike) -> float | None:
    """Area under the precision-recall curve as average precision; ``None`` for one class.

    With one threshold per distinct score ``t_1 > t_2 > ... > t_K``, precision ``P_k`` and
    recall ``R_k`` of the rule "anomaly iff ``s >= t_k``", and ``R_0 = 0``::

        AP = sum_k (R_k - R_{k-1}) * P_k

    (the step-wise, non-interpolated definition used by scikit-learn's
    ``average_precision_score``). Its chance level is the anomaly share ``n_1 / n``.
    """
    yy = _binary(y, "y")
    ss = _scores(s)
    _same_length(y=yy, scores=ss)
    if not _both_classes(yy):
        return None
    order = np.argsort(-ss, kind="mergesort")
    ss_sorted, y_sorted = ss[order], yy[order]
    last = np.r_[np.flatnonzero(np.diff(ss_sorted) != 0), len(ss_sorted) - 1]
    tp = np.cumsum(y_sorted)[last].astype(np.float64)
    precision = tp / (last + 1)
    recall = tp / tp[-1]
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def eer(y: ArrayLike, s: ArrayLike) -> float | None:
    """Equal error rate: the error where FPR = FNR on the ROC curve; ``None`` for one class.

    With ``FNR = 1 - TPR`` and ``d = FPR - FNR = FPR + TPR - 1``, ``d`` is non-decreasing along
    the ROC curve from ``-1`` at ``(0, 0)`` to ``+1`` at ``(1, 1)``. Let ``k`` be the first ROC
    point with ``d_k >= 0``. If ``d_k = 0`` the EER is ``FPR_k``; otherwise the segment between
    points ``k-1`` and ``k`` is interpolated linearly::

        w   = -d_{k-1} / (d_k - d_{k-1})
        EER = FPR_{k-1} + w * (FPR_k - FPR_{k-1})   (= FNR at the same point)

    A perfect ranking gives 0, a random one about 0.5, a reversed one 1.
    """
    yy = _binary(y, "y")
    ss = _scores(s)
    _same_length(y=yy, scores=ss)
    if not _both_classes(yy):
        return None
    fpr, tpr, _ = roc_curve(yy, ss)
    fnr = 1.0 - tpr
    d = fpr - fnr
    k = int(np.argmax(d >= 0.0))  # exists: d[-1] == 1
    if d[k] == 0.0 or k == 0:
        return float(fpr[k])
    w = -d[k - 1] / (d[k] - d[k - 1])
    return float(fpr[k - 1] + w * (fpr[k] - fpr[k - 1]))


# --------------------------------------------------------------------------- binary metrics


def confusion_counts(y: ArrayLike, pred: ArrayLike, positive: int = 1) -> tuple[int, int, int, int]:
    """Confusion-matrix counts ``(TP, FP, FN, TN)`` with ``positive`` as the positive class.

    ``TP = #(pred = p, y = p)``, ``FP = #(pred = p, y != p)``, ``FN = #(pred != p, y = p)``,
    ``TN = #(pred != p, y != p)`` for ``p = positive`` (``1``: anomaly, ``0``: normal).
    """
    if positive not in (0, 1):
        raise ValueError(f"positive must be 0 (normal) or 1 (anomaly), got {positive!r}")
    yy = _binary(y, "y")
    pp = _binary(pred, "pred")
    _same_length(y=yy, pred=pp)
    yp = yy == positive
    pp_ = pp == positive
    tp = int(np.sum(yp & pp_))
    fp = int(np.sum(~yp & pp_))
    fn = int(np.sum(yp & ~pp_))
    tn = int(np.sum(~yp & ~pp_))
    return tp, fp, fn, tn


def binary_metrics(y: ArrayLike, pred: ArrayLike, positive: int = 1) -> dict[str, float | None]:
    """Thresholded metrics of 0/1 predictions; ``None`` wherever a ratio is ``0/0``.

    With counts from :func:`confusion_counts` (``positive=1``: anomaly is positive, the
    default; ``positive=0``: normal is positive, as in ONLAD's Table I)::

        precision = TP / (TP + FP)
        recall    = TP / (TP + FN)
        f1        = 2 TP / (2 TP + FP + FN)      (harmonic mean of precision and recall)
        accuracy  = (TP + TN) / n
        fe        = FP / (TP + FP)  = 1 - precision   (FADngs: false alarms among alarms)
        me        = FN / (TP + FN)  = 1 - recall      (FADngs: missed share of positives)

    ``f1`` is ``0`` (not ``None``) when some positive exists in ``y`` or ``pred`` but no true
    positive was found; it is ``None`` only when ``TP + FP + FN = 0``.
    """
    tp, fp, fn, tn = confusion_counts(y, pred, positive=positive)
    return {
        "precision": _ratio(tp, tp + fp),
        "recall": _ratio(tp, tp + fn),
        "f1": _ratio(2 * tp, 2 * tp + fp + fn),
        "accuracy": _ratio(tp + tn, tp + fp + fn + tn),
        "fe": _ratio(fp, tp + fp),
        "me": _ratio(fn, tp + fn),
    }


def normal_positive_metrics(y: ArrayLike, pred: ArrayLike) -> dict[str, float | None]:
    """Precision, recall and F1 with **normal** (label 0) as the positive class.

    ``binary_metrics(y, pred, positive=0)`` restricted to ``precision``, ``recall``, ``f1``:
    ``precision = TN / (TN + FN)``, ``recall = TN / (TN + FP)``, ``f1 = 2 TN / (2 TN + FP + FN)``
    in anomaly-positive counts. ONLAD's Table I reports these.
    """
    m = binary_metrics(y, pred, positive=0)
    return {"precision": m["precision"], "recall": m["recall"], "f1": m["f1"]}


# --------------------------------------------------------------------------- combined


def evaluate(
    y: ArrayLike, scores: ArrayLike, pred: ArrayLike | None = None
) -> dict[str, float | int | None]:
    """All pooled metrics of one test set, keyed as :data:`EVALUATE_KEYS`.

    ``auroc``, ``aupr``, ``eer`` rank ``scores`` (:func:`auroc`, :func:`aupr`, :func:`eer`);
    ``f1``, ``precision``, ``recall``, ``accuracy``, ``fe``, ``me`` come from
    :func:`binary_metrics` on ``pred`` (all ``None`` when ``pred`` is ``None``);
    ``n = len(y)`` and ``n_anomalies = sum(y)`` are ints.
    """
    yy = _binary(y, "y")
    ss = _scores(scores)
    _same_length(y=yy, scores=ss)
    if pred is not None:
        pp = _binary(pred, "pred")
        _same_length(y=yy, pred=pp)
        binary = binary_metrics(yy, pp)
    else:
        binary = dict.fromkeys(BINARY_KEYS)
    out: dict[str, float | int | None] = {
        "auroc": auroc(yy, ss),
        "aupr": aupr(yy, ss),
        "eer": eer(yy, ss),
    }
    for key in ("f1", "precision", "recall", "accuracy", "fe", "me"):
        out[key] = binary[key]
    out["n"] = len(yy)
    out["n_anomalies"] = int(yy.sum())
    return out


def evaluate_clients(
    y: ArrayLike, scores: ArrayLike, pred: ArrayLike | None, client: ArrayLike
) -> list[dict[str, float | int | None]]:
    """:func:`evaluate` on each client's share of a pooled test set, sorted by client id.

    ``client[i]`` is the integer id of the client whose local test set holds sample ``i``.
    Each dict holds ``"client"`` (an ``int``) followed by the :data:`EVALUATE_KEYS`; a client
    whose test set has one class gets ``None`` for its ranking metrics.
    """
    yy = _binary(y, "y")
    ss = _scores(scores)
    cc = _as_1d(client, "client")
    if cc.dtype == bool or not (
        np.issubdtype(cc.dtype, np.integer) or np.issubdtype(cc.dtype, np.floating)
    ):
        raise ValueError(f"client must hold integer client ids, got dtype {cc.dtype}")
    if np.issubdtype(cc.dtype, np.floating) and (
        not np.all(np.isfinite(cc)) or np.any(cc != np.round(cc))
    ):
        raise ValueError("client must hold integer client ids, found non-integer values")
    cc = cc.astype(np.int64)
    pp = None if pred is None else _binary(pred, "pred")
    if pp is None:
        _same_length(y=yy, scores=ss, client=cc)
    else:
        _same_length(y=yy, scores=ss, pred=pp, client=cc)
    rows: list[dict[str, float | int | None]] = []
    for cid in np.unique(cc):
        mask = cc == cid
        row: dict[str, float | int | None] = {"client": int(cid)}
        row.update(evaluate(yy[mask], ss[mask], None if pp is None else pp[mask]))
        rows.append(row)
    return rows
