"""Export/score parity per exportable detector, over small random fits: onnxruntime's
scores within 1e-5 (relative to the larger of the score and the threshold) of fedad's,
the same decisions, and the same anomaly maps for a detector that localises."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedad.export.check import TOLERANCE
from fedad.export.registry import NotExportable, exporter_for, exporters
from fedad.methods.baselines.detectors import AutoEncoderDetector, DeepSVDDDetector
from fedad.methods.baselines.ocsvm import OCSVMDetector
from fedad.methods.onlad.detector import OSELMAutoEncoder
from fedad.methods.onlad.model import standardizer
from tests.export.helpers import parity_on

FAST = settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def data(seed: int, kind: str, n: int = 48) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "image":
        return rng.random((n, 1, 8, 8), dtype=np.float32)
    return (rng.normal(0, 1, (n, 5)) * rng.uniform(0.5, 3, 5)).astype(np.float32)


def assert_same(p: object) -> None:
    assert p.ok, p  # type: ignore[attr-defined]


@FAST
@given(st.integers(0, 2**16), st.sampled_from(["vector", "image"]))
def test_autoencoder(seed: int, kind: str) -> None:
    x = data(seed, kind)
    shape = x.shape[1:]
    det = AutoEncoderDetector(kind=kind, input_shape=shape, epochs=2, seed=seed).fit(x[:32])
    p = parity_on(det, x)
    assert_same(p)
    assert (p.max_map_diff is not None) == (kind == "image")


@FAST
@given(st.integers(0, 2**16), st.sampled_from(["vector", "image"]))
def test_deepsvdd(seed: int, kind: str) -> None:
    x = data(seed, kind)
    det = DeepSVDDDetector(kind=kind, input_shape=x.shape[1:], epochs=2, seed=seed).fit(x[:32])
    assert_same(parity_on(det, x))


@FAST
@given(st.integers(0, 2**16), st.floats(0.01, 0.3))
def test_ocsvm_in_float64(seed: int, contamination: float) -> None:
    x = data(seed, "vector")
    det = OCSVMDetector(contamination=contamination).fit(x[:32])
    p = parity_on(det, x)
    assert_same(p)
    assert p.max_rel_diff < 1e-7  # float64 throughout: only the float32 output rounds


@FAST
@given(st.integers(0, 2**16), st.booleans())
def test_oselm_in_float64(seed: int, scaled: bool) -> None:
    x = data(seed, "vector")
    det = OSELMAutoEncoder(n_hidden=3, seed=seed)
    if scaled:
        det.set_scaling(*standardizer(x[:32]))
    det.fit(x[:32])
    p = parity_on(det, x)
    assert_same(p)
    assert p.max_rel_diff < 1e-7


def test_tolerance_is_the_issues() -> None:
    assert TOLERANCE == 1e-5


def test_graph_detectors_say_they_cannot_be_exported() -> None:
    from fedad.methods.fgad.detector import FGADDetector

    with pytest.raises(NotExportable, match="'fgad' cannot be exported to ONNX: it scores graphs"):
        exporter_for(FGADDetector(), "fgad")
    det = DeepSVDDDetector(kind="graph", input_shape=[3])
    with pytest.raises(NotExportable, match="on graphs cannot be exported"):
        exporters()["deepsvdd"](det, (3,))
