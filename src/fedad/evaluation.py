"""From clients' evaluate replies to pooled arrays and metrics (engine-independent)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from scipy.stats import rankdata

from fedad.fl.messages import Message
from fedad.metrics import evaluate, normal_positive_metrics


def pooled_arrays(
    evaluations: Mapping[int, Message],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Concatenate (score, label, pred, client id) over clients in client-id order."""
    ids = sorted(evaluations)
    if not ids:
        empty = np.zeros(0, np.int64)
        return np.zeros(0), empty, empty, empty
    ev = [evaluations[i] for i in ids]
    score = np.concatenate([m.arrays["score"] for m in ev])
    label = np.concatenate([m.arrays["label"] for m in ev])
    pred = np.concatenate([m.arrays["pred"] for m in ev])
    client = np.concatenate(
        [np.full(len(m.arrays["score"]), i, dtype=np.int64) for i, m in zip(ids, ev, strict=True)]
    )
    return score, label, pred, client


def ranking_scores(score: np.ndarray) -> np.ndarray:
    """Scores for the ranking metrics, with non-finite ones placed fail-closed.

    A detector that cannot score a sample (NaN, or +Inf from an overflow) is taken to flag
    it: such scores rank above every finite one (ties among themselves), -Inf below. With
    only finite scores this is the identity; otherwise the ranks, which give the same
    AUROC, AUPR and EER as any scores of that order.
    """
    s = np.asarray(score, dtype=np.float64)
    if np.all(np.isfinite(s)):
        return s
    return rankdata(np.where(np.isnan(s), np.inf, s)).astype(np.float64)


def normal_positive(label: np.ndarray, pred: np.ndarray) -> dict[str, Any]:
    """Precision, recall, F1 with normal as the positive class (ONLAD's Table I convention)."""
    if len(label) == 0:
        return {"normal_precision": None, "normal_recall": None, "normal_f1": None}
    m = normal_positive_metrics(label, pred)
    return {f"normal_{k}": v for k, v in m.items()}


def monitor_metrics(evaluations: Mapping[int, Message]) -> dict[str, Any]:
    """Test metrics of an intermediate model, for learning curves only (``eval_*`` keys).

    They are never used to choose a model or a threshold: the reported model is the last
    round's, thresholded on training data.
    """
    score, label, pred, _ = pooled_arrays(evaluations)
    if len(label) == 0:
        return {}
    m = evaluate(label, ranking_scores(score), pred)
    return {
        "eval_auroc": m["auroc"],
        "eval_f1": m["f1"],
        "eval_normal_f1": normal_positive(label, pred)["normal_f1"],
    }
