from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fedad.attacks import attacked_clients, client_handlers, gaussian_data, poison_update
from fedad.config import AttackConfig, parse_config
from fedad.core.messages import Message
from fedad.federation import build_federation


def test_attacked_clients_seeded_and_sized() -> None:
    a = AttackConfig(kind="sign-flip", clients=3)
    assert attacked_clients(a, 10, 1) == attacked_clients(a, 10, 1)
    assert len(attacked_clients(a, 10, 1)) == 3
    assert attacked_clients(AttackConfig(), 10, 1) == []


def test_poison_update_exact() -> None:
    sent = {"w": np.array([1.0, 1.0], np.float32), "only_sent": np.zeros(1)}
    reply = Message("train", {"w": np.array([2.0, 0.0], np.float32)}, {"num_examples": 5})
    flipped = poison_update("sign-flip", sent, reply, 10.0)
    np.testing.assert_array_equal(flipped.arrays["w"], [0.0, 2.0])  # w - u
    scaled = poison_update("scaled-update", sent, reply, 10.0)
    np.testing.assert_array_equal(scaled.arrays["w"], [11.0, -9.0])  # w + 10 u
    assert scaled.arrays["w"].dtype == np.float32 and scaled.scalars["num_examples"] == 5


def test_gaussian_data_replaces_a_fraction() -> None:
    x = np.ones((100, 4), np.float32)
    out, hit = gaussian_data(x, 0.3, np.random.default_rng(0))
    assert hit.sum() == 30
    np.testing.assert_array_equal(out[~hit], 1.0)
    assert abs(out[hit].mean()) < 0.3 and out.dtype == np.float32


def test_only_attacked_clients_train_handler_is_wrapped() -> None:
    calls: list[str] = []

    def train(state: Any, data: Any, msg: Message) -> Message:
        calls.append("t")
        return Message("train", {"w": msg.arrays["w"] + 1})

    a = AttackConfig(kind="sign-flip", clients=1)
    handlers = {"train": train}
    clean = client_handlers(handlers, a, client_id=0, attacked=[1])
    bad = client_handlers(handlers, a, client_id=1, attacked=[1])
    msg = Message("train", {"w": np.zeros(2)})
    np.testing.assert_array_equal(clean["train"]({}, None, msg).arrays["w"], [1, 1])
    np.testing.assert_array_equal(bad["train"]({}, None, msg).arrays["w"], [-1, -1])


def _fed(attack: dict[str, Any] | None) -> Any:
    raw: dict[str, Any] = {
        "seed": 2,
        "data": {"name": "digits", "normal": [0, 1, 2], "anomaly": [8, 9]},
        "partition": {"clients": 4},
        "methods": [{"name": "fedavg"}],
    }
    if attack:
        raw["attack"] = attack
    return build_federation(parse_config(raw))


@pytest.mark.parametrize("kind", ["contamination", "gaussian-data"])
def test_data_attacks_hit_only_attacked_clients_and_never_the_tests(kind: str) -> None:
    clean = _fed(None)
    attack = {"kind": kind, "clients": 1, "fraction": 0.5}
    fed = _fed(attack)
    (bad,) = attacked_clients(AttackConfig(**attack), 4, 2)
    for c0, c1 in zip(clean.clients, fed.clients, strict=True):
        np.testing.assert_array_equal(c0.x_test, c1.x_test)
        if c1.client_id == bad:
            assert c1.y_train.mean() == pytest.approx(0.5, abs=0.02)
        else:
            np.testing.assert_array_equal(c0.x_train, c1.x_train)
    assert fed.notes["attacked_clients"] == [bad]


def test_attack_clients_over_partition_is_a_config_error() -> None:
    from fedad.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"attack\.clients"):
        _fed({"kind": "sign-flip", "clients": 9})


# ------------------------------------------------------------------ update phases only

PHASES = ("train", "stats", "bank")


def _toy_handlers() -> dict[str, Any]:
    """Three phases that each return the received ``w`` plus one."""

    def handler(kind: str) -> Any:
        def h(state: Any, data: Any, msg: Message) -> Message:
            return Message(kind, {"w": msg.arrays["w"] + 1.0}, {"num_examples": 2})

        return h

    return {p: handler(p) for p in PHASES}


@pytest.mark.parametrize("kind", ["sign-flip", "scaled-update"])
def test_only_declared_update_phases_are_poisoned(kind: str) -> None:
    handlers = _toy_handlers()
    a = AttackConfig(kind=kind, clients=1, scale=4.0)
    bad = client_handlers(handlers, a, client_id=1, attacked=[1], phases=("train", "stats"))
    msg = Message("x", {"w": np.zeros(3)})
    expected = [-1.0] * 3 if kind == "sign-flip" else [4.0] * 3
    for phase in ("train", "stats"):
        np.testing.assert_array_equal(bad[phase]({}, None, msg).arrays["w"], expected)
    assert bad["bank"] is handlers["bank"]  # not an update: never poisoned
    # the same client unattacked, or no phases declared: all handlers as they are
    assert client_handlers(handlers, a, 0, [1], phases=PHASES) == handlers
    assert client_handlers(handlers, a, 1, [1], phases=()) == handlers
    # a repeated phase is poisoned once; a declared phase without a handler is skipped
    twice = client_handlers(handlers, a, 1, [1], phases=("train", "train", "missing"))
    np.testing.assert_array_equal(twice["train"]({}, None, msg).arrays["w"], expected)
    assert "missing" not in twice


def test_train_phase_poisoning_is_unchanged() -> None:
    """``train`` (the default update phase) gets exactly the old poisoned reply."""
    handlers = _toy_handlers()
    a = AttackConfig(kind="scaled-update", clients=1, scale=2.5)
    msg = Message("train", {"w": np.linspace(0.0, 1.0, 5, dtype=np.float32)})
    old = poison_update(a.kind, msg.arrays, handlers["train"]({}, None, msg), a.scale)
    for phases in (("train",), PHASES):
        new = client_handlers(handlers, a, 1, [1], phases=phases)["train"]({}, None, msg)
        np.testing.assert_array_equal(new.arrays["w"], old.arrays["w"])
    default = client_handlers(handlers, a, 1, [1])["train"]({}, None, msg)
    np.testing.assert_array_equal(default.arrays["w"], old.arrays["w"])


def test_no_update_phase_note() -> None:
    from fedad.config import PrivacyConfig
    from fedad.core.algorithm import Setup, build_algorithm
    from fedad.fl.node import unapplied_note

    setup = Setup("vector", (6,), rounds=1, seed=0, contamination=0.1, num_clients=3)
    central = build_algorithm("centralized", {}, setup)
    flip = AttackConfig(kind="sign-flip", clients=1)
    noise = PrivacyConfig(mechanism="gaussian")
    assert unapplied_note(central, flip, None) == (
        "method 'centralized' has no model-update phase: [attack] sign-flip not applied"
    )
    assert unapplied_note(central, flip, noise) == (
        "method 'centralized' has no model-update phase: "
        "[privacy] and [attack] sign-flip not applied"
    )
    # nothing configured that acts on updates, or a method with one: no note
    assert unapplied_note(central, AttackConfig(kind="gaussian-data"), PrivacyConfig()) is None
    assert unapplied_note(central, AttackConfig(kind="sign-flip", clients=0), None) is None
    assert unapplied_note(build_algorithm("fedavg", {}, setup), flip, noise) is None


def test_a_model_attack_on_centralized_says_it_is_not_applied() -> None:
    from fedad.core.algorithm import Setup, build_algorithm
    from fedad.fl.engine import run_inprocess
    from tests.conftest import make_federation

    setup = Setup("vector", (6,), rounds=1, seed=0, contamination=0.1, num_clients=3)
    algo = build_algorithm("centralized", {"local_epochs": 1}, setup)
    fed = make_federation(clients=3)
    out = run_inprocess(algo, fed, rounds=1, seed=0, attack=AttackConfig(kind="sign-flip"))
    assert (
        "method 'centralized' has no model-update phase: [attack] sign-flip not applied"
        in out.events
    )


def test_contamination_attack_with_one_vs_rest_refused_before_loading() -> None:
    """The attack step's own check runs before the planner loads anything."""
    from fedad.core.errors import ConfigError

    raw: dict[str, Any] = {
        "data": {"name": "no_such_data_set", "normal": [0, 1]},
        "partition": {"scheme": "one-vs-rest", "clients": 2},
        "attack": {"kind": "contamination", "clients": 1},
        "methods": [{"name": "fedavg"}],
    }
    with pytest.raises(ConfigError, match=r"not supported with partition\.scheme"):
        build_federation(parse_config(raw))


def test_poison_plan_notes_keep_their_place() -> None:
    """``attack`` and ``attacked_clients`` follow ``unused_classes`` as when the planner
    wrote them, and only the attacked clients' training data change."""
    from fedad.federation import plan_federation

    raw: dict[str, Any] = {
        "seed": 2,
        "data": {"name": "digits", "normal": [0, 1, 2], "anomaly": [8, 9]},
        "partition": {"clients": 4},
        "attack": {"kind": "contamination", "clients": 1, "fraction": 0.5},
        "methods": [{"name": "fedavg"}],
    }
    plan = plan_federation(parse_config(raw))
    keys = list(plan.notes)
    at = keys.index("unused_classes")
    assert keys[at + 1 : at + 3] == ["attack", "attacked_clients"]
    (k,) = plan.notes["attacked_clients"]  # type: ignore[misc]
    clean = plan_federation(parse_config({**raw, "attack": {"kind": "none"}}))
    for j in range(4):
        same = np.array_equal(plan.train_ids[j], clean.train_ids[j])
        assert same != (j == k)
    assert int(plan.train_anomaly[k].sum()) == round(0.5 * len(plan.train_ids[k]))
