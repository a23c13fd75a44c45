"""From clients' evaluate replies to metrics, by metric family (engine-independent).

A **metric family** is a group of metrics computed from the evaluate replies, with the
columns it shows (:class:`Column`: header, format, which value is better). Evaluation
computes every family that applies to a method:

* :data:`IMAGE`, image (sample) level, always: AUROC, AUPR, EER from the scores,
  F1/precision/recall/accuracy/FE/ME from the detector's own decisions (anomaly positive);
* :data:`PIXEL`, pixel level, when every reply carries anomaly maps and ground-truth masks
  (``"map"`` and ``"mask"``, see :meth:`fedad.fl.algorithm.Algorithm.client_evaluate`):
  pixel AUROC and PRO (:mod:`fedad.pixel_metrics`), pooled over all clients' pixels and
  regions, and per client;
* the families a method declares in :attr:`Algorithm.metric_families
  <fedad.fl.algorithm.Algorithm.metric_families>`, e.g. :data:`NORMAL_POSITIVE`
  (ONLAD's Table I convention).

``metrics.json`` lists the columns a run has (:func:`run_columns`: ``"summary"`` and
``"per_client"``, plus one list per family shown as a table of its own), and the terminal
table and the report render from that list, with :func:`column_spec` for each key's header
and format (a generic one for keys no family declares).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from scipy.stats import rankdata

from fedad.fl.messages import Message
from fedad.metrics import EVALUATE_KEYS, evaluate, evaluate_clients, normal_positive_metrics
from fedad.pixel_metrics import PIXEL_KEYS, pixel_metrics

if TYPE_CHECKING:
    from fedad.fl.algorithm import Algorithm

log = logging.getLogger("fedad")

__all__ = [
    "COST_COLUMNS",
    "EMBED_CAP",
    "EMBED_PER_CLIENT",
    "IMAGE",
    "MAPS_CAP",
    "NORMAL_POSITIVE",
    "PIXEL",
    "Column",
    "MetricFamily",
    "Pooled",
    "client_sample_indices",
    "column_spec",
    "columns_of",
    "embedding_indices",
    "embedding_sample",
    "families_for",
    "known_families",
    "map_sample",
    "monitor_metrics",
    "pooled_arrays",
    "ranking_scores",
    "run_columns",
]

ColumnKind = Literal["ratio", "int", "bytes", "seconds", "number"]


@dataclass(frozen=True)
class Column:
    """How a metric is shown: ``header`` in the report, ``terminal`` in the terminal table
    (``None``: not shown there), ``kind`` its format, ``better`` ``"max"``/``"min"`` (the
    report marks the best method in bold) or ``""``. ``spread``: shown as mean +- std in
    the terminal table and in the per-seed table of a several-seed run; ``with_seeds``:
    kept in the terminal table of a several-seed run (where ``± std`` takes room)."""

    key: str
    header: str
    kind: ColumnKind = "number"
    better: Literal["max", "min", ""] = ""
    terminal: str | None = None
    spread: bool = False
    with_seeds: bool = True


@dataclass(frozen=True)
class MonitorFigure:
    """A per-round learning curve the report draws from a monitor (``eval_*``) column."""

    column: str
    title: str
    caption: str


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
class MetricFamily:
    """A group of metrics computed from the evaluate replies (override the hooks).

    ``keys`` are the metrics.json entries it writes for a method (their presence tells that
    the family applied); ``columns`` what is shown of them; ``per_client_columns`` the keys
    the report's per-client table shows. A family with ``in_summary`` adds its columns to the
    results table; otherwise the report shows them in a table of its own, titled ``title``
    with ``note`` under it. ``figures`` are learning curves drawn from its monitor columns.
    """

    name: str
    keys: tuple[str, ...] = ()
    columns: tuple[Column, ...] = ()
    per_client_columns: tuple[str, ...] = ()
    in_summary: bool = True
    title: str = ""
    note: str = ""
    figures: tuple[MonitorFigure, ...] = ()

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
"""Image-level metrics (:func:`fedad.metrics.evaluate`), for every method."""


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
"""Pixel-level metrics (:func:`fedad.pixel_metrics.pixel_metrics`), when replies carry maps."""


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
(pooled) and the monitor column ``eval_normal_f1``. The default of
:attr:`Algorithm.metric_families <fedad.fl.algorithm.Algorithm.metric_families>`, see there
why."""


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
            "within a few rounds (fedad.collapse).",
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
"""Learning curves of the collapse guard (:mod:`fedad.collapse`), drawn for the methods that
log ``loss_ratio`` / ``rep_cos``; no metrics."""

BUILTIN: tuple[MetricFamily, ...] = (IMAGE, PIXEL, TRAINING)
"""Families evaluation computes for every method, each where it applies."""

COST_COLUMNS: tuple[Column, ...] = (
    Column("bytes_up", "Bytes up", "bytes", terminal="MB up"),
    Column("bytes_down", "Bytes down", "bytes", terminal="MB down"),
    Column("bytes_up_per_client_round", "Bytes up / client / round", "bytes"),
    Column("seconds", "Seconds", "seconds", terminal="s"),
    Column("rounds", "Rounds", "int"),
)
"""What a run cost, at the end of the summary of every run."""


def families_for(algorithm: Algorithm | type[Algorithm]) -> tuple[MetricFamily, ...]:
    """The built-in families, then those ``algorithm`` declares (each once, by name)."""
    out: dict[str, MetricFamily] = {f.name: f for f in BUILTIN}
    for f in algorithm.metric_families:
        out.setdefault(f.name, f)
    return tuple(out.values())


def known_families() -> tuple[MetricFamily, ...]:
    """The built-in families and every family a registered method declares."""
    from fedad.fl.algorithm import registry

    out: dict[str, MetricFamily] = {f.name: f for f in (*BUILTIN, NORMAL_POSITIVE)}
    for cls in registry().values():
        for f in cls.metric_families:
            out.setdefault(f.name, f)
    return tuple(out.values())


def column_spec(key: str, families: Iterable[MetricFamily] | None = None) -> Column:
    """How to show ``key``: the first family (or cost) column of that key, else a generic
    one (the key as header, numbers with 3 decimals, no better direction)."""
    fams = known_families() if families is None else families
    for f in fams:
        for c in f.columns:
            if c.key == key:
                return c
    for c in COST_COLUMNS:
        if c.key == key:
            return c
    return Column(key, key, "number", terminal=key)


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
            finite = [float(v) for v in per
                      if isinstance(v, int | float) and math.isfinite(v)]  # fmt: skip
            pooled[key] = float(np.mean(finite)) if finite else None
    return pooled, out


def monitor_metrics(
    evaluations: Mapping[int, Message], families: Sequence[MetricFamily] | None = None
) -> dict[str, Any]:
    """Test metrics of an intermediate model, for learning curves only (``eval_*`` keys).

    They are never used to choose a model or a threshold: the reported model is the last
    round's, thresholded on training data. ``families``: the method's
    (:func:`families_for`); by default the built-in ones and :data:`NORMAL_POSITIVE`.
    """
    ev = Pooled(evaluations)
    if len(ev.label) == 0:
        return {}
    out: dict[str, Any] = {}
    for fam in (*BUILTIN, NORMAL_POSITIVE) if families is None else families:
        if fam.applies(ev):
            out.update(fam.monitor(ev))
    return out


# -- the columns of a run ---------------------------------------------------------------------

SUMMARY = "summary"
PER_CLIENT = "per_client"


def run_columns(
    entries: Iterable[Mapping[str, Any]], families: Sequence[MetricFamily]
) -> dict[str, list[str]]:
    """``metrics.json``'s ``columns``: which metric columns this run's methods have.

    ``"summary"``: the results table (terminal and report): the columns of every family
    with ``in_summary`` that some method has (its ``keys`` are in the method's entry), then
    :data:`COST_COLUMNS`; ``"per_client"``: the report's per-client table; and for every
    other family some method has, ``family.name``: the columns of its own table.
    """
    listed = list(entries)

    def present(fam: MetricFamily) -> bool:
        return any(k in e for e in listed for k in fam.keys)

    summary: list[str] = []
    per_client: list[str] = []
    own: dict[str, list[str]] = {}
    for fam in families:
        if not present(fam):
            continue
        cols = [c.key for c in fam.columns]
        if fam.in_summary:
            summary += [k for k in cols if k not in summary]
        else:
            own[fam.name] = cols
        per_client += [k for k in fam.per_client_columns if k not in per_client]
    summary += [c.key for c in COST_COLUMNS]
    return {SUMMARY: summary, PER_CLIENT: per_client, **own}


def columns_of(metrics: Mapping[str, Any]) -> dict[str, list[str]]:
    """The ``columns`` of a metrics.json's data (untrusted: anything that is not a list of
    strings is dropped), or, for a run written before they were listed, the columns its
    entries have (:func:`run_columns` over the known families)."""
    raw = metrics.get("columns")
    if isinstance(raw, dict) and isinstance(raw.get(SUMMARY), list):
        out: dict[str, list[str]] = {}
        for name, cols in raw.items():
            if isinstance(name, str) and isinstance(cols, list):
                out[name] = list(dict.fromkeys(c for c in cols if isinstance(c, str)))
        out.setdefault(PER_CLIENT, [])
        return out
    methods = metrics.get("methods")
    entries = (
        [e for e in methods.values() if isinstance(e, dict)] if isinstance(methods, dict) else []
    )
    return run_columns(entries, known_families())


def family_named(name: str) -> MetricFamily | None:
    """The known family called ``name``, if any."""
    return next((f for f in known_families() if f.name == name), None)


# -- anomaly maps for the report --------------------------------------------------------------

MAPS_CAP = 16
"""At most this many test images per method are kept in ``maps.npz``."""
MAPS_ANOMALOUS = 12
"""Of which at most this many anomalous ones (the rest normal, when there are enough)."""


def sample_indices(
    label: np.ndarray, cap: int = MAPS_CAP, anomalous: int = MAPS_ANOMALOUS
) -> np.ndarray:
    """Positions (sorted) of at most ``cap`` samples: up to ``anomalous`` anomalies and the
    rest normal ones (more of either when the other runs short), each evenly spaced over
    the pooled order, so that every client's test set tends to be represented. Depends only
    on the labels: every method of a run shows the same images."""
    y = np.asarray(label).reshape(-1)
    pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y != 1)
    n_pos = min(len(pos), max(anomalous, cap - len(neg)))
    n_neg = min(len(neg), cap - n_pos)

    def spread(idx: np.ndarray, k: int) -> np.ndarray:
        if k <= 0:
            return idx[:0]
        at = np.linspace(0, len(idx) - 1, k).round().astype(np.int64)
        return idx[np.unique(at)]

    return np.sort(np.concatenate([spread(pos, n_pos), spread(neg, n_neg)]))


def client_sample_indices(label: np.ndarray, client: np.ndarray, cap: int = MAPS_CAP) -> np.ndarray:
    """Positions (sorted) of at most ``cap`` samples, a few from every client: ``per =
    max(2, cap // clients)`` of each (about three anomalies to one normal image, by
    :func:`sample_indices` within the client's own samples). With more than ``cap // 2``
    clients, ``cap // 2`` of them, evenly spaced over the sorted ids, give two each. Depends
    only on the labels and clients: every method of a run shows the same images."""
    y, c = np.asarray(label).reshape(-1), np.asarray(client).reshape(-1)
    ids = np.unique(c)
    if cap <= 0 or len(ids) == 0:
        return np.zeros(0, dtype=np.int64)
    if 2 * len(ids) > cap:
        ids = ids[np.unique(np.linspace(0, len(ids) - 1, max(1, cap // 2)).round().astype(int))]
    per = max(2, cap // len(ids))
    anomalous = per - max(1, per // 4)
    parts = []
    for cid in ids:
        own = np.flatnonzero(c == cid)
        parts.append(own[sample_indices(y[own], per, anomalous)])
    return np.sort(np.concatenate(parts))[:cap].astype(np.int64)


def map_sample(
    ev: Pooled,
    images: Mapping[int, Any],
    cap: int = MAPS_CAP,
) -> dict[str, np.ndarray]:
    """A capped sample of one method's anomaly maps for ``maps.npz`` (a few test images of
    every client, :func:`client_sample_indices`), or ``{}`` without maps.

    ``images[client]`` is that client's local test set (the images scored, in order; the
    harness's copy: test images never travel in a reply). Arrays: ``image`` ``(n, C, H, W)``
    float32 as the data hold them, ``map`` ``(n, H, W)`` float32, ``mask`` ``(n, H, W)``
    uint8, ``score`` float64, ``label`` int64, ``client`` int64 and ``index`` (the position
    in the client's test set) int64.
    """
    pairs = ev.maps
    if not pairs:
        return {}
    local = np.concatenate([np.arange(len(m)) for _, m, _ in pairs])
    maps = np.concatenate([m for _, m, _ in pairs])
    masks = np.concatenate([k for _, _, k in pairs])
    take = client_sample_indices(ev.label, ev.client, cap)
    picked = []
    for i in take:
        x = np.asarray(images[int(ev.client[i])][int(local[i])], dtype=np.float32)
        if x.ndim == 2:
            x = x[None]
        picked.append(x)
    if not picked or any(p.shape[1:] != maps.shape[1:] for p in picked):
        return {}
    return {
        "image": np.stack(picked).astype(np.float32),
        "map": maps[take].astype(np.float32),
        "mask": masks[take].astype(np.uint8),
        "score": ev.score[take].astype(np.float64),
        "label": ev.label[take].astype(np.int64),
        "client": ev.client[take].astype(np.int64),
        "index": local[take].astype(np.int64),
    }


# -- representations for the report's t-SNE ---------------------------------------------------

EMBED_PER_CLIENT = 200
"""At most this many test samples per client are represented in an evaluate reply."""
EMBED_CAP = 2000
"""At most this many represented test samples per method are kept in ``embeddings.npz``."""


def embedding_indices(label: np.ndarray, cap: int = EMBED_PER_CLIENT) -> np.ndarray:
    """Positions (sorted, int64) of the test samples a client represents: at most ``cap``,
    half of them anomalous when there are enough (:func:`sample_indices`: evenly spaced
    within each class, so both classes are kept). Depends only on the labels."""
    return sample_indices(label, cap, cap // 2).astype(np.int64)


def _reply_embedding(cid: int, reply: Message) -> tuple[np.ndarray, np.ndarray] | None:
    """``(embedding, index)`` of one reply when both are present and consistent with its
    scores; ``None`` (with a warning when they are present but wrong) otherwise."""
    a = reply.arrays
    if "embedding" not in a or "embedding_index" not in a:
        return None
    z, idx = np.asarray(a["embedding"]), np.asarray(a["embedding_index"])
    n = len(np.asarray(a["score"]).reshape(-1))
    ok = (
        z.ndim == 2
        and z.shape[1] >= 1
        and idx.ndim == 1
        and len(idx) == len(z)
        and np.issubdtype(z.dtype, np.floating)
        and np.issubdtype(idx.dtype, np.integer)
        and bool(np.all((idx >= 0) & (idx < n)))
        and len(np.unique(idx)) == len(idx)
    )
    if not ok:
        log.warning(
            "client %s's embedding (%s, indices %s) does not fit its %s test scores: left out",
            cid,
            z.shape,
            idx.shape,
            n,
        )
        return None
    return z, idx.astype(np.int64)


def embedding_sample(ev: Pooled, cap: int = EMBED_CAP) -> dict[str, np.ndarray]:
    """A capped, pooled sample of one method's test-sample representations for
    ``embeddings.npz``, or ``{}`` when no reply carries any.

    A reply's ``embedding`` ``(n, D)`` holds the representations of its test samples at
    ``embedding_index`` (:meth:`fedad.fl.algorithm.Algorithm.client_evaluate`). Replies whose
    arrays do not fit (or whose ``D`` differs from the first one's) are left out with a
    warning. At most ``cap`` rows are kept (:func:`sample_indices` over the pooled labels,
    half anomalous when there are enough). Arrays: ``embedding`` float32 ``(n, D)``,
    ``label`` int64, ``client`` int64, ``index`` (position in the client's test set) int64
    and ``score`` float64, all aligned row by row.
    """
    zs, labels, clients, indices, scores = [], [], [], [], []
    dim: int | None = None
    for cid in sorted(ev.replies):
        reply = ev.replies[cid]
        got = _reply_embedding(cid, reply)
        if got is None:
            continue
        z, idx = got
        if dim is not None and z.shape[1] != dim:
            log.warning(
                "client %s's embedding has %s columns, not %s: left out", cid, z.shape[1], dim
            )
            continue
        dim = z.shape[1]
        zs.append(z.astype(np.float32))
        labels.append(np.asarray(reply.arrays["label"]).reshape(-1)[idx].astype(np.int64))
        scores.append(np.asarray(reply.arrays["score"], np.float64).reshape(-1)[idx])
        clients.append(np.full(len(idx), cid, dtype=np.int64))
        indices.append(idx)
    if not zs:
        return {}
    label = np.concatenate(labels)
    take = sample_indices(label, cap, cap // 2)
    return {
        "embedding": np.concatenate(zs)[take],
        "label": label[take],
        "client": np.concatenate(clients)[take],
        "index": np.concatenate(indices)[take],
        "score": np.concatenate(scores)[take],
    }
