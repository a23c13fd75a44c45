"""``protofl`` with no params: on images the shipped EfficientNet-Lite0 trunk, frozen (no
phase 1), L2-normalised features and a Gaussian head per client; on vectors the paper's
form (MLP trunk, federated phase 1, flow). Each component is checked where it is used, so
a call site that drops one fails here."""

from __future__ import annotations

import numpy as np

from fedad.core.algorithm import Setup, build_algorithm
from fedad.core.messages import Message
from fedad.fl.engine import run_inprocess
from fedad.methods.protofl.detector import ProtoFLDetector
from fedad.methods.protofl.features import prefix_shape
from fedad.methods.protofl.federated import ProtoFL, ProtoFLParams
from tests.conftest import failures, make_federation


def _algo(kind: str, shape: tuple[int, ...]) -> ProtoFL:
    setup = Setup(kind, shape, rounds=1, seed=3, contamination=0.1, num_clients=3)  # type: ignore[arg-type]
    algo = build_algorithm("protofl", {}, setup)
    assert isinstance(algo, ProtoFL)
    return algo


def test_the_image_defaults_resolve_to_the_frozen_pretrained_trunk_and_gaussian_head() -> None:
    algo = _algo("image", (1, 28, 28))
    assert algo.params.trunk == algo.params.phase1 == algo.params.head == "auto"
    assert (algo.trunk, algo.phase1) == ("efficientnet", "none")
    det = algo.make_detector()
    assert det.params.trunk_input == "efficientnet"
    assert det.head == "gaussian" and det.l2 and not det.float64
    assert det.params.feature_size == ProtoFLParams().trunk_size
    assert det.trunk_shape == prefix_shape(det.params.tune_stages, det.params.feature_size)
    req = algo.requirements({})  # "auto" may be federated on vectors: the public set is kept
    assert req.public is not None and req.resources == ("efficientnet-lite0",)


def test_the_vector_defaults_stay_the_papers_form() -> None:
    algo = _algo("vector", (6,))
    assert (algo.trunk, algo.phase1) == ("cnn", "federated")
    det = algo.make_detector()
    assert det.params.trunk_input == "raw" and det.head == "flow" and not det.l2
    assert det.float64 and det.params.vector_norm == "none"


def test_a_default_image_run_sends_no_model_and_saves_gaussian_heads_on_the_shipped_trunk(
    delivered: list[tuple[int, Message]],
) -> None:
    fed = make_federation("image", clients=3)
    algo = _algo("image", fed.feature_shape)
    out = run_inprocess(algo, fed, rounds=1, seed=3)
    assert failures(out.events) == []
    assert {m.kind for _, m in delivered} == {"head", "evaluate"}
    shipped = algo.make_detector().make_trunk().state_dict()
    for m in out.evaluations.values():
        saved = {k[len("detector/") :]: v for k, v in m.arrays.items()
                 if k.startswith("detector/")}  # fmt: skip
        assert {"mean", "precision"} <= set(saved)
        assert not any(k.startswith("flow.") for k in saved)
        np.testing.assert_array_equal(saved["trunk.conv_head.weight"],
                                      shipped["conv_head.weight"].numpy())  # fmt: skip
        det = ProtoFLDetector(**algo.make_detector().get_params()).set_arrays(saved)
        assert det.head == "gaussian"


def test_a_default_table_run_trains_the_papers_phase_1(
    delivered: list[tuple[int, Message]],
) -> None:
    fed = make_federation("vector", clients=3)
    algo = _algo("vector", fed.feature_shape)
    out = run_inprocess(algo, fed, rounds=1, seed=3)
    assert failures(out.events) == []
    assert {m.kind for _, m in delivered} == {"prototype", "train", "evaluate"}
    for m in out.evaluations.values():
        assert any(k.startswith("detector/flow.") for k in m.arrays)


def test_a_default_image_run_has_no_model_update_for_privacy_to_act_on() -> None:
    from fedad.config import PrivacyConfig
    from fedad.core.algorithm import update_phases
    from fedad.fl.node import unapplied_note

    images, vectors = _algo("image", (1, 28, 28)), _algo("vector", (6,))
    assert update_phases(images) == () and update_phases(vectors) == ("train",)
    dp = PrivacyConfig(mechanism="gaussian", clip=1.0, noise_multiplier=1.0)
    assert "not applied" in (unapplied_note(images, None, dp) or "")
    assert unapplied_note(vectors, None, dp) is None
