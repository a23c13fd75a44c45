"""From clients' evaluate replies to metrics, by metric family (engine-independent).

A **metric family** (:class:`MetricFamily`) is a group of metrics computed from the
evaluate replies, with the columns it shows (:class:`~fedad.evaluation.columns.FamilySpec`).
Evaluation computes every family that applies to a method:

* :data:`IMAGE`, image (sample) level, always: AUROC, AUPR, EER from the scores,
  F1/precision/recall/accuracy/FE/ME from the detector's own decisions (anomaly positive);
* :data:`PIXEL`, pixel level, when every reply carries anomaly maps and ground-truth masks
  (``"map"`` and ``"mask"``, see :meth:`fedad.core.algorithm.Algorithm.client_evaluate`):
  pixel AUROC and PRO (:mod:`fedad.evaluation.pixel`), pooled over all clients' pixels and
  regions, and per client;
* the families a method declares in :attr:`Algorithm.metric_families
  <fedad.core.algorithm.Algorithm.metric_families>`, e.g. :data:`NORMAL_POSITIVE`
  (ONLAD's Table I convention), and only for the methods that declare them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal, Protocol

import numpy as np
from scipy.stats import rankdata

from fedad.core.messages import Message
from fedad.evaluation.columns import Column, FamilySpec, MonitorFigure
from fedad.evaluation.metrics import (
    EVALUATE_KEYS,
    evaluate,
    evaluate_clients,
    normal_positive_metrics,
)
from fedad.evaluation.pixel import PIXEL_KEYS, pixel_metrics

log = logging.getLogger("fedad")

__all__ = [
    "BUILTIN",
    "IMAGE",
    "NORMAL_POSITIVE",
    "PIXEL",
    "TRAINING",
    "MetricFamily",
    "Pooled",
    "evaluate_replies",
    "families_for",
    "monitor_metrics",
    "pooled_arrays",
    "ranking_scores",
]


# -- pooled replies ---------------------------------------------------------------------------


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
    ranks: np.ndarray = rankdata(np.where(np.isnan(s), np.inf, s)).astype(np.float64)
    return ranks


def _map_pairs(replies: Mapping[int, Message]) -> list[tuple[int, np.ndarray, np.ndarray]] | None:
    """``(client, maps, masks)`` of every reply, or ``None`` when some reply has no
    usable maps (then the pixel family does not apply)."""
    out = []
    shape: tuple[int, ...] | None = None
    for cid in sorted(replies):
        a = replies[cid].arrays
        if "map" not in a or "mask" not in a:
            return None
        maps, masks = np.asarray(a["map"]), np.asarray(a["mask"])
        n = len(np.asarray(a["score"]).reshape(-1))
        ok = (
            maps.ndim == 3
            and masks.shape == maps.shape
            and len(maps) == n
            and (shape is None or maps.shape[1:] == shape)
            and (np.issubdtype(maps.dtype, np.floating) or np.issubdtype(maps.dtype, np.integer))
            and np.all((masks == 0) | (masks == 1))
        )
        if not ok:
            log.warning(
                "client %s's anomaly maps do not fit its masks and scores (maps %s, masks "
                "%s, %s scores): no pixel metrics",
                cid,
                maps.shape,
                masks.shape,
                n,
            )
            return None
        shape = maps.shape[1:]
        out.append((cid, maps, masks))
    return out


class Pooled:
    """The evaluate replies of one method, and their pooled (client-id order) arrays."""

    def __init__(self, replies: Mapping[int, Message]) -> None:
        self.replies = replies
        self.score, self.label, self.pred, self.client = pooled_arrays(replies)

    @cached_property
    def ranked(self) -> np.ndarray:
        """:func:`ranking_scores` of the pooled scores."""
        return ranking_scores(self.score)

    @cached_property
    def maps(self) -> list[tuple[int, np.ndarray, np.ndarray]] | None:
        """``(client, maps, masks)`` of every reply in client-id order, or ``None`` when
        some reply carries no usable maps and masks."""
        return _map_pairs(self.replies) if self.replies else None


# -- families ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricFamily(FamilySpec):
    """A group of metrics computed from the evaluate replies (override the hooks); what is
    shown of it: :class:`~fedad.evaluation.columns.FamilySpec`."""

    def applies(self, ev: Pooled) -> bool:
        """Whether the replies hold what this family needs."""
        return True

    def pooled(self, ev: Pooled) -> dict[str, Any]:
        """Metrics over all clients' test sets pooled (metrics.json, per method)."""
        return {}

    def per_client(self, ev: Pooled) -> dict[int, dict[str, Any]]:
        """Metrics of each client's own test set (merged into ``per_client`` rows)."""
        return {}

    def monitor(self, ev: Pooled) -> dict[str, Any]:
        """``eval_*`` learning-curve values of an intermediate model (history only)."""
        return {}


def _ratio(key: str, header: str, better: Literal["max", "min"], **kw: Any) -> Column:
    return Column(key, header, "ratio", better, **kw)


@dataclass(frozen=True)
class _Image(MetricFamily):
    """Image (sample) level: ranking metrics of the scores, thresholded ones of ``pred``."""

    def pooled(self, ev: Pooled) -> dict[str, Any]:
        return dict(evaluate(ev.label, ev.ranked, ev.pred))

    def per_client(self, ev: Pooled) -> dict[int, dict[str, Any]]:
        rows = evaluate_clients(ev.label, ev.ranked, ev.pred, ev.client)
        return {int(r["client"] or 0): dict(r) for r in rows}

    def monitor(self, ev: Pooled) -> dict[str, Any]:
        m = evaluate(ev.label, ev.ranked, ev.pred)
        return {"eval_auroc": m["auroc"], "eval_f1": m["f1"]}


IMAGE: MetricFamily = _Image(
    name="image",
    keys=EVALUATE_KEYS,
    columns=(
        _ratio("auroc", "AUROC", "max", terminal="AUROC", spread=True),
        _ratio("aupr", "AUPR", "max", terminal="AUPR", spread=True),
        _ratio("eer", "EER", "min"),
        _ratio("f1", "F1", "max", terminal="F1", spread=True),
        _ratio("precision", "Precision", "max", terminal="precision"),
        _ratio("recall", "Recall", "max", terminal="recall"),
        _ratio("fe", "FE", "min", terminal="FE", with_seeds=False),
        _ratio("me", "ME", "min", terminal="ME", with_seeds=False),
    ),
    per_client_columns=("auroc", "f1"),
    figures=(
        MonitorFigure(
            "eval_auroc",
            "AUROC per round (learning curve)",
            "Pooled test AUROC of each round's model (engine.eval_every); for curves only.",
        ),
    ),
)
"""Image-level metrics (:func:`fedad.evaluation.metrics.evaluate`), for every method."""


def _finite_maps(maps: np.ndarray) -> np.ndarray:
    """Maps for the pixel metrics with non-finite values placed fail-closed (as scores):
    NaN and +Inf above every finite value, -Inf below."""
    if np.all(np.isfinite(maps)):
        return maps
    m = np.asarray(maps, dtype=np.float64)
    finite = m[np.isfinite(m)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
    span = max(1.0, hi - lo)
    out: np.ndarray = np.where(np.isneginf(m), lo - span, np.where(np.isfinite(m), m, hi + span))
    return out


@dataclass(frozen=True)
class _Pixel(MetricFamily):
    """Pixel level: pixel AUROC and PRO of the replies' anomaly maps against their masks."""

    def applies(self, ev: Pooled) -> bool:
        return ev.maps is not None

    def pooled(self, ev: Pooled) -> dict[str, Any]:
        pairs = ev.maps or []
        maps = np.concatenate([_finite_maps(m) for _, m, _ in pairs])
        masks = np.concatenate([k for _, _, k in pairs])
        return dict(pixel_metrics(maps, masks))

    def per_client(self, ev: Pooled) -> dict[int, dict[str, Any]]:
        return {cid: dict(pixel_metrics(_finite_maps(m), k)) for cid, m, k in ev.maps or []}


PIXEL: MetricFamily = _Pixel(
    name="pixel",
    keys=PIXEL_KEYS,
    columns=(
        _ratio("pixel_auroc", "Pixel AUROC", "max", terminal="pixel AUROC", spread=True),
        _ratio("pro", "PRO", "max", terminal="PRO", spread=True),
    ),
    per_client_columns=PIXEL_KEYS,
    note=(
        "Pixel AUROC ranks every test pixel of every client, pooled; PRO is the area under "
        "the per-region-overlap curve up to a false-positive rate of 0.3, divided by 0.3 "
        "(regions: 8-connected components of each image's mask; MVTec AD's official "
        "definition). “–” where a test set has no defect pixel."
    ),
)
"""Pixel-level metrics (:func:`fedad.evaluation.pixel.pixel_metrics`), when replies carry maps."""


@dataclass(frozen=True)
class _NormalPositive(MetricFamily):
    """Precision, recall, F1 with *normal* as the positive class, from the same decisions."""

    def pooled(self, ev: Pooled) -> dict[str, Any]:
        if len(ev.label) == 0:
            return {"normal_precision": None, "normal_recall": None, "normal_f1": None}
        m = normal_positive_metrics(ev.label, ev.pred)
        return {f"normal_{k}": v for k, v in m.items()}

    def monitor(self, ev: Pooled) -> dict[str, Any]:
        return {"eval_normal_f1": self.pooled(ev)["normal_f1"]}


NORMAL_POSITIVE: MetricFamily = _NormalPositive(
    name="normal-positive",
    keys=("normal_precision", "normal_recall", "normal_f1"),
    columns=(
        _ratio("normal_precision", "Precision", "max"),
        _ratio("normal_recall", "Recall", "max"),
        _ratio("accuracy", "Accuracy", "max"),
        _ratio("normal_f1", "F-score", "max"),
    ),
    in_summary=False,
    title="Normal-positive metrics",
    note=(
        "Precision, recall and F-score with normal as the positive class, the convention "
        "of ONLAD's Table I (Qin et al.); the summary above uses anomaly as the positive "
        "class. Same predictions, same thresholds."
    ),
    figures=(
        MonitorFigure(
            "eval_normal_f1",
            "F-score per round (learning curve)",
            "F-score with normal as the positive class of each round's global model on the "
            "test sets (engine.eval_every): a learning curve only; the reported model is the "
            "last round's.",
        ),
    ),
)
"""ONLAD's Table I convention: ``normal_precision``, ``normal_recall``, ``normal_f1``
(pooled) and the monitor column ``eval_normal_f1``, for the methods that declare it
(ONLAD's)."""


@dataclass(frozen=True)
class _Training(MetricFamily):
    def applies(self, ev: Pooled) -> bool:
        return False  # history columns only: nothing in metrics.json


TRAINING: MetricFamily = _Training(
    name="training",
    figures=(
        MonitorFigure(
            "loss_ratio",
            "Contrastive loss against its collapsed value",
            "Each round's contrastive loss divided by the value it takes when every "
            "representation points the same way (log(N - 1) for SimCLR's pairs): 1 means "
            "the encoder is not learning (collapse); a learning encoder falls below it "
            "within a few rounds (fedad.core.collapse).",
        ),
        MonitorFigure(
            "rep_cos",
            "Mean pairwise cosine of the representations",
            "Mean cosine similarity between the representations of different training "
            "samples in each round's batches: near 1 when they all point the same way "
            "(collapse), near 0 when they spread.",
        ),
    ),
)
"""Learning curves of the collapse guard (:mod:`fedad.core.collapse`), drawn for the methods that
log ``loss_ratio`` / ``rep_cos``; no metrics."""

BUILTIN: tuple[MetricFamily, ...] = (IMAGE, PIXEL, TRAINING)
"""Families evaluation computes for every method, each where it applies."""


class DeclaresFamilies(Protocol):
    """A method (class or instance) and the metric families it declares
    (:attr:`fedad.core.algorithm.Algorithm.metric_families`)."""

    @property
    def metric_families(self) -> tuple[MetricFamily, ...]: ...


def families_for(algorithm: DeclaresFamilies) -> tuple[MetricFamily, ...]:
    """The built-in families, then those ``algorithm`` declares (each once, by name)."""
    out: dict[str, MetricFamily] = {f.name: f for f in BUILTIN}
    for f in algorithm.metric_families:
        out.setdefault(f.name, f)
    return tuple(out.values())


# -- evaluation of a method -------------------------------------------------------------------


COUNT_KEYS = ("n", "n_anomalies")
"""Pooled keys that count samples (never averaged over clients)."""


def evaluate_replies(
    ev: Pooled, families: Sequence[MetricFamily], client_mean: bool = False
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Pooled metrics and per-client rows (sorted by client id) of every family that applies.

    Pooled keys come family by family in ``families``' order; a per-client row holds
    ``"client"``, then each family's values. With ``client_mean`` (federations whose local
    test sets overlap, ``partition.scheme = "one-vs-rest"``), each pooled metric that has
    per-client values is their unweighted mean over the clients where it is defined
    (``None`` if none), the one-vs-rest papers' convention: pooling overlapping test sets
    would count shared samples once per client. Counts (:data:`COUNT_KEYS`) and metrics
    without per-client values stay computed over the union of the local test sets.
    """
    pooled: dict[str, Any] = {}
    rows: dict[int, dict[str, Any]] = {}
    for fam in families:
        if not fam.applies(ev):
            continue
        pooled.update(fam.pooled(ev))
        for cid, values in fam.per_client(ev).items():
            rows.setdefault(cid, {"client": cid}).update(values)
    out = [rows[c] for c in sorted(rows)]
    if client_mean:
        for key in pooled:
            if key in COUNT_KEYS:  # sizes stay totals over the local test sets
                continue
            per = [r[key] for r in out if key in r]
            if not per:
                continue
            finite = [float(v) for v in per if isinstance(v, int | float) and math.isfinite(v)]
            pooled[key] = float(np.mean(finite)) if finite else None
    return pooled, out


def monitor_metrics(
    evaluations: Mapping[int, Message], families: Sequence[MetricFamily] | None = None
) -> dict[str, Any]:
    """Test metrics of an intermediate model, for learning curves only (``eval_*`` keys).

    They are never used to choose a model or a threshold: the reported model is the last
    round's, thresholded on training data. ``families``: the method's
    (:func:`families_for`); by default the built-in ones.
    """
    ev = Pooled(evaluations)
    if len(ev.label) == 0:
        return {}
    out: dict[str, Any] = {}
    for fam in BUILTIN if families is None else families:
        if fam.applies(ev):
            out.update(fam.monitor(ev))
    return out
