from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fedad.attacks import attacked_clients, client_handlers, gaussian_data, poison_update
from fedad.config import AttackConfig, parse_config
from fedad.data.federation import build_federation
from fedad.fl.messages import Message


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
    from fedad.errors import ConfigError

    with pytest.raises(ConfigError, match=r"attack\.clients"):
        _fed({"kind": "sign-flip", "clients": 9})
