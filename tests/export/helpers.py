"""Export one fitted detector and compare onnxruntime's outputs with fedad's."""

from __future__ import annotations

import numpy as np

from fedad.core.detector import BaseDetector
from fedad.export.api import build
from fedad.export.check import Parity, compare, session
from fedad.rundir.inputs import Inputs


def parity_on(det: BaseDetector, x: np.ndarray, seed: int = 0) -> Parity:
    """Export ``det`` for model inputs shaped like ``x`` (images: ``image``, else ``x``)
    and compare on ``x``."""
    kind = "image" if x.ndim == 4 else "vector"
    inputs = Inputs(kind, tuple(int(s) for s in x.shape[1:]), "test")
    model, core = build(det, inputs, [float(det.threshold_)], "test")
    feeds = {"image" if kind == "image" else "x": x}
    return compare(session(model), det, feeds, x, [float(det.threshold_)],
                   np.random.default_rng(seed), core.scale)  # fmt: skip


def near_threshold(det: BaseDetector, x: np.ndarray) -> np.ndarray:
    """``x`` with its rows reordered so that the ones scored nearest the threshold come
    first (where a decision could flip)."""
    s = np.asarray(det.score(x))
    return x[np.argsort(np.abs(s - det.threshold_))]
