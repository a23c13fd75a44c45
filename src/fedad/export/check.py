"""The checks every exported model passes before it is written.

1. ``onnx.checker`` (full check, with shape inference) accepts it.
2. onnxruntime scores a probe set as fedad does: a few rows drawn from the run's
   ``inputs.json`` (numbers around the training means, with missing cells when the run
   imputed them; every kept category, one never seen and, when imputed, empty ones) or
   random images in [0, 1]; fedad's scores come from the detector itself, on the probe
   preprocessed by :meth:`fedad.rundir.inputs.Inputs.table`. Every score must be within
   :data:`TOLERANCE` of fedad's, relative to the largest of the score's magnitude, the
   threshold's and the scale of the terms the score is a difference of
   (:attr:`fedad.export.registry.Core.scale`: a score near zero is compared at the scale
   its rounding and its decision are taken at), every decision equal, and the maps, for a
   detector that localises, within the same tolerance of the largest map value.
3. An empty batch (every input with no rows) gives empty outputs (``empty_batch``).

A decision can only be equal to within the scores' own agreement: a sample whose fedad score
lies within that tolerance of the threshold (a training sample that sets it, say) may fall
on either side in float32. Such samples are counted apart (``decisions_in_band``); every
other decision must be equal.

A model that fails is not written: a one-line error says by how much it differed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fedad.core.detector import BaseDetector, flag, localizes
from fedad.core.errors import FedadError
from fedad.data.table import _value
from fedad.export import deps
from fedad.export.preprocess import MISSING_TEXT

if TYPE_CHECKING:
    import onnx as onnx_t
    import pandas as pd

    from fedad.rundir.inputs import Inputs

__all__ = ["TOLERANCE", "Parity", "compare", "parity", "probe", "session"]

TOLERANCE = 1e-5
PROBE_ROWS = 24
UNSEEN = "fedad-export-probe-unseen"
"""A category value no run has: the probe's 'never seen' cell."""


@dataclass(frozen=True)
class Parity:
    """How onnxruntime's outputs compared with fedad's on ``samples`` inputs."""

    samples: int
    max_rel_diff: float
    decisions_differ: int
    max_map_diff: float | None = None
    decisions_in_band: int = 0
    """Decisions that differ where fedad's score is within the tolerance of the threshold."""
    empty_batch: bool = True
    """Whether an empty batch gave empty outputs."""

    @property
    def ok(self) -> bool:
        maps_ok = self.max_map_diff is None or self.max_map_diff <= TOLERANCE
        close = self.max_rel_diff <= TOLERANCE and self.decisions_differ == 0
        return close and maps_ok and self.empty_batch

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "samples": self.samples,
            "max_rel_diff": float(self.max_rel_diff),
            "decisions_differ": self.decisions_differ,
            "decisions_in_band": self.decisions_in_band,
            "tolerance": TOLERANCE,
            "empty_batch": self.empty_batch,
        }
        if self.max_map_diff is not None:
            out["max_map_rel_diff"] = float(self.max_map_diff)
        return out


def session(model: onnx_t.ModelProto | bytes) -> Any:
    """An onnxruntime CPU session of ``model`` (quiet: warnings are not the user's)."""
    ort = deps.onnxruntime()
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    data = model if isinstance(model, bytes) else model.SerializeToString()
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


def probe(
    inputs: Inputs, rng: np.random.Generator, n: int = PROBE_ROWS
) -> tuple[dict[str, np.ndarray], Any]:
    """The probe set: the exported model's feeds, and what fedad's detector scores (a
    DataFrame of raw rows for a table, else the same array)."""
    if inputs.kind == "vector" and inputs.columns:
        frame = _probe_table(inputs, rng, n)
        return table_feeds(frame, inputs), frame
    shape = (n, *inputs.feature_shape)
    if inputs.kind == "image":
        x = rng.random(shape, dtype=np.float32)
        x[0] = 0.0
        x[1] = 1.0
        return {"image": x}, x
    x = rng.standard_normal(shape).astype(np.float32)
    return {"x": x}, x


def _probe_table(inputs: Inputs, rng: np.random.Generator, n: int) -> pd.DataFrame:
    """Raw rows around the training statistics (module docstring)."""
    import pandas as pd

    impute = inputs.impute_means is not None
    data: dict[str, list[Any]] = {}
    j = 0  # the column's first encoded feature
    for column in inputs.columns:
        cats = inputs.categories.get(column)
        if cats is not None:
            pool: list[Any] = [*cats, UNSEEN] + ([None] if impute else [])
            data[column] = [pool[i % len(pool)] for i in rng.permutation(n)]
            j += len(cats)
            continue
        mean = 0.0 if inputs.mean is None else float(inputs.mean[j])
        std = 1.0 if inputs.std is None else float(inputs.std[j])
        values = (mean + 1.5 * std * rng.standard_normal(n)).astype(np.float64).tolist()
        if impute:
            values[int(rng.integers(n))] = float("nan")
        data[column] = values
        j += 1
    return pd.DataFrame(data)


def table_feeds(frame: pd.DataFrame, inputs: Inputs) -> dict[str, np.ndarray]:
    """A DataFrame's feature columns as an exported table model's feeds: numbers as
    float32 ``[N, 1]`` (through float64, as fedad reads them; missing: NaN), text as
    strings ``[N, 1]`` (:func:`text_cell`; missing: ``""``)."""
    import pandas as pd

    feeds: dict[str, np.ndarray] = {}
    for column in inputs.columns:
        s = frame[column]
        if column in inputs.categories:
            cats = inputs.categories[column]
            cells = ["" if _missing(v) else text_cell(v, cats) for v in s.tolist()]
            feeds[column] = np.array(cells, dtype=object).reshape(-1, 1)
        else:
            wide = pd.to_numeric(s).to_numpy(dtype=np.float64, na_value=np.nan)
            with np.errstate(over="ignore"):
                feeds[column] = wide.astype(np.float32).reshape(-1, 1)
    return feeds


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and np.isnan(v))


def text_cell(v: Any, categories: tuple[str, ...]) -> str:
    """A DataFrame's (non-missing) text cell as the model takes it: as fedad compares it
    with the categories (stripped); a value the model would read as missing that is not a
    category gets a trailing space, which no category has, so that it reads as the unseen
    category fedad makes of it."""
    s = _value(v)
    return s + " " if s in MISSING_TEXT and s not in categories else s


def parity(
    model: onnx_t.ModelProto,
    det: BaseDetector,
    inputs: Inputs,
    thresholds: list[float],
    rng: np.random.Generator,
    scale: float = 0.0,
) -> Parity:
    """Check ``model`` with ``onnx.checker`` and compare it with ``det`` on a probe set
    (module docstring); ``thresholds``: the model's, one per client it serves."""
    onnx = deps.onnx()
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as err:
        reason = str(err).strip().splitlines()[0][:200]
        raise FedadError(f"the exported model is not valid ONNX: {reason}") from None
    feeds, raw = probe(inputs, rng)
    x = inputs.table(raw, "the probe rows") if not isinstance(raw, np.ndarray) else raw
    return compare(session(model), det, feeds, x, thresholds, rng, scale)


def compare(
    sess: Any,
    det: BaseDetector,
    feeds: dict[str, np.ndarray],
    x: np.ndarray,
    thresholds: list[float],
    rng: np.random.Generator,
    scale: float = 0.0,
) -> Parity:
    """onnxruntime's outputs on ``feeds`` against ``det``'s on the model inputs ``x``
    (rows of the same samples), each row at the threshold of a client drawn from
    ``thresholds`` when the model takes ``client``; ``scale``: the score's
    :attr:`~fedad.export.registry.Core.scale`."""
    n = len(x)
    names = {i.name for i in sess.get_inputs()}
    feeds = dict(feeds)
    if "client" in names:
        clients = rng.integers(0, len(thresholds), size=n)
        feeds["client"] = clients.astype(np.int64)
        thr = np.asarray(thresholds, dtype=np.float64)[clients]
    else:
        thr = np.full(n, thresholds[0], dtype=np.float64)
    outs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))
    want = np.asarray(det.score(x), dtype=np.float64)
    got = np.asarray(outs["score"], dtype=np.float64)
    rel = relative_difference(got, want, thr, scale)
    flags = np.array([flag(want[i : i + 1], t)[0] for i, t in enumerate(thr)], dtype=np.int64)
    wrong = np.asarray(outs["anomaly"]) != flags
    band = within_tolerance(want, thr, scale)
    differ, in_band = int(np.sum(wrong & ~band)), int(np.sum(wrong & band))
    map_diff = None
    if "map" in outs and localizes(det):
        fedad_maps = np.asarray(det.score_maps(x), dtype=np.float64)  # type: ignore[attr-defined]
        scale = max(float(np.nanmax(np.abs(fedad_maps))) if fedad_maps.size else 0.0, 1e-30)
        diff = np.abs(np.asarray(outs["map"], dtype=np.float64) - fedad_maps)
        map_diff = float(np.nanmax(diff) / scale) if diff.size else 0.0
    return Parity(n, rel, differ, map_diff, in_band, empty_batch(sess, feeds, outs))


def empty_batch(sess: Any, feeds: dict[str, np.ndarray], outs: dict[str, np.ndarray]) -> bool:
    """Whether ``sess`` gives outputs of no rows, each otherwise shaped as in ``outs``,
    for ``feeds`` cut to no rows."""
    empty = {name: value[:0] for name, value in feeds.items()}
    try:
        got = sess.run(None, empty)
    except Exception:  # onnxruntime's errors share no base class but Exception
        return False
    names = [o.name for o in sess.get_outputs()]
    return all(g.shape == (0, *outs[k].shape[1:]) for k, g in zip(names, got, strict=True))


def _scale(want: np.ndarray, thresholds: np.ndarray, scale: float) -> np.ndarray:
    """Per sample: the largest of ``|want|``, ``|threshold|`` and ``scale`` (at least 1e-30)."""
    out: np.ndarray = np.maximum(np.maximum(np.abs(want), np.abs(thresholds)), max(scale, 1e-30))
    return out


def relative_difference(
    got: np.ndarray, want: np.ndarray, thresholds: np.ndarray, scale: float = 0.0
) -> float:
    """The largest ``|got - want| / max(|want|, |threshold|, scale)`` (0 where both are
    NaN; inf where one only is)."""
    both = np.isnan(got) & np.isnan(want)
    one = np.isnan(got) ^ np.isnan(want)
    if one.any():
        return float("inf")
    with np.errstate(invalid="ignore"):
        rel = np.where(both, 0.0, np.abs(got - want) / _scale(want, thresholds, scale))
    return float(rel.max()) if rel.size else 0.0


def within_tolerance(want: np.ndarray, thresholds: np.ndarray, scale: float = 0.0) -> np.ndarray:
    """Whether each fedad score lies within :data:`TOLERANCE` of its threshold, at the
    scale :func:`relative_difference` measures (where a decision is not determined)."""
    with np.errstate(invalid="ignore"):
        gap = np.abs(want - thresholds) / _scale(want, thresholds, scale)
    out: np.ndarray = np.less_equal(gap, TOLERANCE)
    return out
