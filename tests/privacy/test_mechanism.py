from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedad.config import PrivacyConfig
from fedad.core.algorithm import Requirements, Setup, build_algorithm, registry, update_phases
from fedad.core.messages import Message
from fedad.core.rng import rng as seeded_rng
from fedad.evaluation.metrics import auroc
from fedad.fl.engine import run_inprocess
from fedad.methods.baselines.federated import FedAvg
from fedad.privacy import (
    clip_l2,
    gaussian_mechanism,
    noise_rng,
    private_handlers,
    privatize_reply,
)
from tests.conftest import make_federation


@given(st.floats(0.01, 10.0), st.integers(0, 1000))
def test_clipping_bounds_the_joint_norm(clip: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    u = {"a": rng.normal(size=(3, 4)) * 5, "b": rng.normal(size=7)}
    out = clip_l2(u, clip)
    norm = np.sqrt(sum(np.sum(v**2) for v in out.values()))
    original = np.sqrt(sum(np.sum(v**2) for v in u.values()))
    assert norm <= clip * (1 + 1e-9)
    # the direction is kept, and short updates are untouched
    np.testing.assert_allclose(out["a"] / norm, u["a"] / original, atol=1e-9)
    small = {"a": np.full(2, 1e-3)}
    np.testing.assert_array_equal(clip_l2(small, 1.0)["a"], small["a"])


def test_noise_has_the_stated_scale() -> None:
    update = {"w": np.zeros(200_000)}
    noisy = gaussian_mechanism(update, clip=2.0, noise_multiplier=0.5, rng=np.random.default_rng(0))
    assert noisy["w"].std() == pytest.approx(1.0, rel=0.01)  # sigma * C = 0.5 * 2
    assert abs(noisy["w"].mean()) < 0.01


def test_privatize_reply_only_touches_shared_float_arrays() -> None:
    sent = {"w": np.zeros(4, np.float32)}
    reply = Message("train", {"w": np.full(4, 3.0, np.float32), "n": np.arange(2)}, {"k": 1})
    cfg = PrivacyConfig(mechanism="gaussian", clip=1.0, noise_multiplier=0.0)
    out = privatize_reply(sent, reply, cfg, np.random.default_rng(0))
    np.testing.assert_allclose(out.arrays["w"], np.full(4, 0.5), rtol=1e-6)  # clipped to norm 1
    np.testing.assert_array_equal(out.arrays["n"], [0, 1])
    assert out.arrays["w"].dtype == np.float32 and out.scalars == {"k": 1}


SEEDED = PrivacyConfig(mechanism="gaussian", noise_source="seeded")


def _auroc(privacy: PrivacyConfig | None) -> float:
    fed = make_federation(clients=3, n=80)
    setup = Setup("vector", (6,), rounds=5, seed=0, contamination=0.1, num_clients=3)
    algo = build_algorithm("fedavg", {"local_epochs": 2}, setup)
    out = run_inprocess(algo, fed, rounds=5, seed=0, privacy=privacy)
    y = np.concatenate([m.arrays["label"] for m in out.evaluations.values()])
    s = np.concatenate([m.arrays["score"] for m in out.evaluations.values()])
    return float(auroc(y, s))


def test_results_stay_within_tolerance_under_mild_noise() -> None:
    clean = _auroc(None)
    # seeded: the same noise on every run of the test (private noise would make it a draw)
    mild = _auroc(SEEDED.model_copy(update={"clip": 5.0, "noise_multiplier": 0.01}))
    heavy = _auroc(SEEDED.model_copy(update={"clip": 5.0, "noise_multiplier": 50.0}))
    assert abs(mild - clean) <= 0.02
    assert heavy < clean - 0.1  # the mechanism is really applied


# ------------------------------------------------------------------------- SecAgg+

SECAGG_CFG: dict = {
    "seed": 1,
    "rounds": 3,
    "data": {
        "name": "digits",
        "normal": [0, 1, 2, 3, 4],
        "anomaly": [7, 8, 9],
        "max_train_per_client": 80,
        "max_test": 300,
    },
    "partition": {"scheme": "dirichlet", "clients": 5},
}


def _fedavg(detector: str, secagg: bool) -> tuple[float, dict[str, np.ndarray]]:
    from fedad.config import parse_config
    from fedad.federation import build_federation
    from fedad.resolve import build_algorithms
    from fedad.runner import run_method

    raw = {
        **SECAGG_CFG,
        "privacy": {"secagg": secagg},
        "methods": [{"name": "fedavg", "detector": detector}],
    }
    cfg = parse_config(raw)
    fed = build_federation(cfg)
    out = run_method(cfg, build_algorithms(cfg, fed)["fedavg"], fed)
    s = np.concatenate([m.arrays["score"] for m in out.evaluations.values()])
    y = np.concatenate([m.arrays["label"] for m in out.evaluations.values()])
    return float(auroc(y, s)), out.result.arrays


@pytest.mark.parametrize("detector", ["autoencoder", "deepsvdd"])
def test_secagg_results_stay_within_tolerance(detector: str) -> None:
    """docs/config.md states it: under SecAgg+ the model after 3 rounds is within 1e-5 of
    plain FedAvg's, parameter by parameter, and the AUROC within 1e-3."""
    pytest.importorskip("flwr", reason="SecAgg+ is Flower's")
    plain_auc, plain = _fedavg(detector, False)
    secure_auc, secure = _fedavg(detector, True)
    assert plain.keys() == secure.keys()
    diffs = [float(np.max(np.abs(secure[k] - plain[k]))) for k in plain]
    assert max(diffs) <= 1e-5
    assert max(diffs) > 0  # the quantized sum is really used
    assert abs(secure_auc - plain_auc) <= 1e-3


def test_secagg_on_a_method_without_a_mean_phase_says_so() -> None:
    pytest.importorskip("flwr", reason="SecAgg+ is Flower's")
    from fedad.config import parse_config
    from fedad.federation import build_federation
    from fedad.resolve import build_algorithms
    from fedad.runner import run_method

    raw = {**SECAGG_CFG, "rounds": 1, "privacy": {"secagg": True}, "methods": [{"name": "local"}]}
    cfg = parse_config(raw)
    fed = build_federation(cfg)
    out = run_method(cfg, build_algorithms(cfg, fed)["local"], fed)
    assert any(
        "privacy.secagg is on, but 'local'" in e and "without SecAgg+" in e for e in out.events
    )


# ------------------------------------------------------------------ update phases only

PHASES = ("train", "stats", "bank")


def _toy_handlers() -> dict[str, Any]:
    """Three phases that each return the received ``w`` plus a fixed step."""

    def handler(kind: str) -> Any:
        def h(state: Any, data: Any, msg: Message) -> Message:
            return Message(kind, {"w": msg.arrays["w"] + 0.25}, {"num_examples": 3})

        return h

    return {p: handler(p) for p in PHASES}


def _msg(kind: str, round_no: int = 4) -> Message:
    return Message(kind, {"w": np.linspace(-1.0, 1.0, 50)}, {"round": round_no})


NOISY = SEEDED.model_copy(update={"clip": 1.0, "noise_multiplier": 0.5})


def test_only_declared_update_phases_are_privatised() -> None:
    handlers = _toy_handlers()
    out = private_handlers(handlers, NOISY, seed=3, client_id=2, phases=("train", "stats"))
    assert out["bank"] is handlers["bank"]  # not an update: untouched
    for phase in ("train", "stats"):
        assert out[phase] is not handlers[phase]
        noisy = out[phase]({}, None, _msg(phase)).arrays["w"]
        assert not np.array_equal(noisy, handlers[phase]({}, None, _msg(phase)).arrays["w"])
    # a declared phase without a handler is skipped; repeats are noised once
    once = private_handlers(handlers, NOISY, 3, 2, phases=("train", "missing"))
    twice = private_handlers(handlers, NOISY, 3, 2, phases=("train", "train"))
    assert "missing" not in once
    np.testing.assert_array_equal(
        once["train"]({}, None, _msg("train")).arrays["w"],
        twice["train"]({}, None, _msg("train")).arrays["w"],
    )
    # no phases: nothing privatised; mechanism none: nothing privatised
    assert private_handlers(handlers, NOISY, 3, 2, phases=()) == handlers
    assert private_handlers(handlers, PrivacyConfig(), 3, 2, phases=PHASES) == handlers


def test_train_phase_is_bit_identical_to_the_old_stream() -> None:
    """``train`` keeps the noise stream (seed, round, client, 0xD9) of earlier versions."""
    handlers = _toy_handlers()
    seed, client, round_no = 7, 1, 3
    msg = _msg("train", round_no)
    old = privatize_reply(
        msg.arrays,
        handlers["train"]({}, None, msg),
        NOISY,
        seeded_rng(seed, round_no, client, 0xD9),
    )
    for phases in (("train",), PHASES):
        new = private_handlers(handlers, NOISY, seed, client, phases=phases)["train"]
        np.testing.assert_array_equal(new({}, None, msg).arrays["w"], old.arrays["w"])
    default = private_handlers(handlers, NOISY, seed, client)["train"]  # phases=("train",)
    np.testing.assert_array_equal(default({}, None, msg).arrays["w"], old.arrays["w"])


def test_each_phase_has_its_own_stable_noise_stream() -> None:
    out = private_handlers(_toy_handlers(), NOISY, seed=5, client_id=0, phases=PHASES)
    # identical raw updates in every phase: only the noise tells them apart
    noisy = {p: out[p]({}, None, _msg(p)).arrays["w"] for p in PHASES}
    assert not np.array_equal(noisy["train"], noisy["stats"])
    assert not np.array_equal(noisy["stats"], noisy["bank"])
    assert not np.array_equal(noisy["train"], noisy["bank"])
    # seeded by the CRC-32 of the name (stable across processes), not by hash()
    a = noise_rng(5, 4, 0, "stats").normal(size=8)
    b = seeded_rng(5, 4, 0, 0xD9, zlib.crc32(b"stats")).normal(size=8)
    np.testing.assert_array_equal(a, b)
    again = private_handlers(_toy_handlers(), NOISY, seed=5, client_id=0, phases=PHASES)
    np.testing.assert_array_equal(
        again["stats"]({}, None, _msg("stats")).arrays["w"], noisy["stats"]
    )


class _Declares(FedAvg):
    """FedAvg declaring its centre phase, the harness's evaluate and a phase it lacks."""

    @classmethod
    def requirements(cls, params: dict[str, Any]) -> Requirements:
        return Requirements(update_phases=("center", "train", "evaluate", "missing", "train"))


class _NoUpdates(FedAvg):
    """FedAvg that declares no model-update phase."""

    @classmethod
    def requirements(cls, params: dict[str, Any]) -> Requirements:
        return Requirements(update_phases=())


SETUP = Setup("vector", (6,), rounds=2, seed=0, contamination=0.1, num_clients=3)


def test_update_phases_are_the_declared_handled_ones() -> None:
    algo = _Declares(FedAvg.ParamsModel(), SETUP, "autoencoder")
    assert update_phases(algo) == ("center", "train")  # evaluate never, missing skipped
    image = Setup("image", (1, 8, 8), rounds=2, seed=0, contamination=0.1, num_clients=3)
    graph = Setup("graph", (3,), rounds=2, seed=0, contamination=0.1, num_clients=3)
    setups = {"vector": SETUP, "image": image, "graph": graph}
    got = {
        name: update_phases(build_algorithm(name, {}, setups[cls.kinds[0]]))
        for name, cls in registry().items()
    }
    assert got["centralized"] == ()
    assert got["fedavg"] == got["onlad"] == got["fadngs"] == ("train",)
    # fadngs's density phase is not a model update; with density = "none" nothing is shared
    none = build_algorithm("fadngs-nosed", {"density": "none"}, image)
    assert update_phases(none) == ()
    # fgad's train replies are the student head; without collaboration nothing is shared
    assert got["fgad"] == ("train",)
    assert update_phases(build_algorithm("fgad", {"collaboration": "none"}, graph)) == ()


def _scores(algo: Any, privacy: PrivacyConfig | None) -> tuple[np.ndarray, list[str]]:
    out = run_inprocess(algo, make_federation(clients=3, n=40), rounds=2, seed=0, privacy=privacy)
    s = np.concatenate([out.evaluations[k].arrays["score"] for k in sorted(out.evaluations)])
    return s, out.events


def test_a_method_without_update_phases_runs_unprivatised_and_says_so() -> None:
    heavy = PrivacyConfig(mechanism="gaussian", clip=1.0, noise_multiplier=50.0)
    algo = _NoUpdates(FedAvg.ParamsModel(), SETUP, "autoencoder")
    clean, quiet = _scores(algo, None)
    private, events = _scores(algo, heavy)
    np.testing.assert_array_equal(clean, private)
    assert not any("model-update" in e for e in quiet)
    assert "method 'fedavg' has no model-update phase: [privacy] not applied" in events
    # a method with an update phase says nothing and is noised
    fedavg = build_algorithm("fedavg", {}, SETUP)
    noised, events = _scores(fedavg, heavy)
    assert not any("model-update" in e for e in events)
    assert not np.array_equal(clean, noised)


def test_centralized_under_privacy_says_it_is_not_applied() -> None:
    algo = build_algorithm("centralized", {"local_epochs": 1}, SETUP)
    _, events = _scores(algo, NOISY)
    assert "method 'centralized' has no model-update phase: [privacy] not applied" in events


# ------------------------------------------------------------------ where the noise comes from

PRIVATE = NOISY.model_copy(update={"noise_source": "private"})


def _server_recovers_the_update(cfg: PrivacyConfig) -> bool:
    """The attack of a server that holds the run's seed: regenerate a client's seeded noise
    and subtract it from the client's reply. True when that yields the clipped update."""
    seed, client, round_no = 11, 2, 3
    msg = _msg("train", round_no)
    reply = private_handlers(_toy_handlers(), cfg, seed, client)["train"]({}, None, msg)
    clipped = clip_l2({"w": np.full(50, 0.25)}, cfg.clip)["w"]  # what the client really sent
    std = cfg.noise_multiplier * cfg.clip
    regenerated = noise_rng(seed, round_no, client, "train").normal(0.0, std, size=50)
    recovered = reply.arrays["w"] - msg.arrays["w"] - regenerated
    return bool(np.allclose(recovered, clipped, atol=1e-12))


def test_private_noise_is_the_default_and_the_server_cannot_regenerate_it() -> None:
    assert PrivacyConfig().noise_source == "private"
    assert PrivacyConfig(mechanism="gaussian").noise_source == "private"
    # seeded noise: the server subtracts it and sees the clipped update itself
    assert _server_recovers_the_update(NOISY)
    assert not _server_recovers_the_update(PRIVATE)
    # private noise: two replies to one request differ; seeded ones are equal
    for cfg, same in ((PRIVATE, False), (NOISY, True)):
        train = private_handlers(_toy_handlers(), cfg, 3, 1)["train"]
        a, b = (train({}, None, _msg("train")).arrays["w"] for _ in range(2))
        assert np.array_equal(a, b) is same
        # the scale is the configured one either way: sigma * C = 0.5 on the clipped update
        noise = a - _msg("train").arrays["w"] - 1.0 / np.sqrt(50)
        assert 0.3 < float(np.std(noise)) < 0.75


def _final(engine: str, privacy: PrivacyConfig) -> dict[str, np.ndarray]:
    """The global model after two FedAvg rounds of one seed on ``engine``."""
    from fedad.config import parse_config
    from fedad.federation import build_federation
    from fedad.resolve import build_algorithms
    from fedad.runner import run_method

    raw = {
        "seed": 3, "rounds": 2,
        "data": {"name": "digits", "normal": [0, 1, 2], "anomaly": [7, 8],
                 "max_train_per_client": 40, "max_test": 60},
        "partition": {"scheme": "iid", "clients": 3},
        "engine": {"progress": False, "workers": 2 if engine == "workers" else 1},
        "privacy": privacy.model_dump(),
        "methods": [{"name": "fedavg", "detector": "autoencoder", "params": {"batch_size": 16}}],
    }  # fmt: skip
    cfg = parse_config(raw)
    fed = build_federation(cfg)
    alg = build_algorithms(cfg, fed)["fedavg"]
    if engine != "flower":
        return run_method(cfg, alg, fed).result.arrays
    from fedad.fl.flower.server import serve
    from fedad.fl.flower.spec import RunSpec
    from tests.fl.flower.fake_flower import FakeFlowerGrid

    spec = RunSpec.build(cfg, alg)  # the nodes take [privacy] from the run's spec
    return serve(FakeFlowerGrid(spec), spec, alg, poll_interval=0.0).result.arrays


@pytest.mark.parametrize("engine", ["inprocess", "flower"])
def test_two_runs_carry_different_noise_unless_seeded(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deployment-shaped run: the same config and seed twice. Under private noise (the
    default) the models differ, so nothing the server holds fixes the noise; under seeded
    noise they are equal, bit for bit."""
    if engine == "flower":
        pytest.importorskip("flwr", reason="the flower extra")
        from tests.fl.flower.fake_flower import as_server_app

        as_server_app(monkeypatch)
    base = PrivacyConfig(mechanism="gaussian", clip=1.0, noise_multiplier=0.5)
    one, two = _final(engine, base), _final(engine, base)
    assert any(not np.array_equal(one[k], two[k]) for k in one)
    seeded = base.model_copy(update={"noise_source": "seeded"})
    one, two = _final(engine, seeded), _final(engine, seeded)
    for k in one:
        np.testing.assert_array_equal(one[k], two[k], err_msg=k)


@pytest.mark.slow
def test_worker_processes_draw_private_noise() -> None:
    """Clients in worker processes (``engine.workers``) get the noise source too: with
    seeded noise they equal one process bit for bit (tests/fl/test_workers.py), with private
    noise they differ from that seeded run."""
    base = PrivacyConfig(mechanism="gaussian", clip=1.0, noise_multiplier=0.5)
    seeded = _final("inprocess", base.model_copy(update={"noise_source": "seeded"}))
    private = _final("workers", base)
    assert any(not np.array_equal(seeded[k], private[k]) for k in seeded)


def test_the_resolved_config_records_the_noise_source() -> None:
    """``--resume`` compares resolved configs: a run resumed with the other noise source is
    refused, naming the key."""
    from fedad.config import dump_toml, parse_config
    from fedad.rundir.claim import config_difference

    raw = {"data": {"name": "digits", "normal": [0], "anomaly": [1]},
           "privacy": {"noise_multiplier": 1.0},
           "methods": [{"name": "fedavg", "detector": "autoencoder"}]}  # fmt: skip
    private = parse_config(raw).model_dump(mode="json", exclude_none=True)
    assert 'noise_source = "private"' in dump_toml(private)
    seeded = parse_config(raw | {"privacy": {"noise_multiplier": 1.0, "noise_source": "seeded"}})
    diff = config_difference(private, seeded.model_dump(mode="json", exclude_none=True))
    assert diff is not None and "privacy.noise_source" in diff
