"""Every registered method's server program survives any finite update.

A hostile grid replaces the arrays of chosen clients' replies (every phase but ``evaluate``)
by finite values of magnitude 1e-300 .. 1e300 (clamped to the largest finite value of the
array's dtype). The server program must finish, the evaluation and the metrics must be
computed, and nothing may raise: the engine rejects absurd updates of a model-update phase
(:func:`fedad.core.validate.outlying_updates`), excluding or discarding the rest is the
methods' job; when every client is hostile and every update is rejected, the run ends in a
one-line :class:`~fedad.core.errors.RunError`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedad.attacks import attacked_clients
from fedad.config import AttackConfig, PrivacyConfig
from fedad.core.algorithm import EVALUATE, Setup, build_algorithm, registry
from fedad.core.errors import RunError
from fedad.core.messages import Message
from fedad.fl.drive import drive
from fedad.fl.engine import InProcessGrid, run_inprocess
from fedad.runner import summarize
from tests.conftest import make_federation

CASES = [
    (name, det)
    for name, cls in registry().items()
    for det in (cls.detectors or (None,))
    if "vector" in cls.kinds_for(det)
]


class HostileGrid(InProcessGrid):
    """Replies of ``hostile`` clients carry arrays of magnitude ``10**exponent``."""

    def __init__(self, *args: Any, hostile: set[int], exponent: int, sign: float, **kw: Any):
        super().__init__(*args, **kw)
        self.hostile, self.exponent, self.sign = hostile, exponent, sign
        self._noise = np.random.default_rng(exponent + 1000)

    def send_and_receive(
        self, messages: Mapping[int, Message], timeout: float | None = None
    ) -> dict[int, Message]:
        replies = super().send_and_receive(messages, timeout)
        for nid, reply in replies.items():
            if reply.kind == EVALUATE or nid not in self.hostile:
                continue
            arrays = {}
            for k, a in reply.arrays.items():
                if np.issubdtype(a.dtype, np.floating):
                    big = min(10.0**self.exponent, float(np.finfo(a.dtype).max) / 4)
                    u = 1.0 + self._noise.random(a.shape)
                    a = (self.sign * big * u).astype(a.dtype)
                    assert np.all(np.isfinite(a))
                arrays[k] = a
            replies[nid] = Message(reply.kind, arrays, reply.scalars)
        return replies


@pytest.mark.parametrize(("name", "detector"), CASES, ids=[f"{n}-{d}" for n, d in CASES])
@settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    exponent=st.integers(-300, 300),
    hostile=st.sets(st.integers(0, 2), min_size=1, max_size=3),
    sign=st.sampled_from([1.0, -1.0]),
)
def test_server_survives_any_finite_update(
    name: str, detector: str | None, exponent: int, hostile: set[int], sign: float
) -> None:
    fed = make_federation("vector", clients=3, n=30)
    setup = Setup("vector", fed.feature_shape, rounds=2, seed=0, contamination=0.05,
                  num_clients=3)  # fmt: skip
    params: dict[str, Any] = {"local_epochs": 1} if registry()[name].detectors else {}
    if name.startswith("onlad"):
        params = {"init_samples": 10, "observed": 40}
    alg = build_algorithm(name, params, setup, detector)
    grid = HostileGrid(alg, fed, seed=0, hostile=hostile, exponent=exponent, sign=sign)
    try:
        outcome = drive(alg, grid, rounds=2, seed=0, server_data=fed.server_normal)
    except RunError as err:  # every client hostile, every update rejected: said in one line
        assert hostile == {0, 1, 2} and "rejected every reply" in str(err), str(err)
        assert "\n" not in str(err)
        return
    assert sorted(outcome.evaluations) == [0, 1, 2]
    metrics, _ = summarize(name, alg, outcome)
    assert metrics["auroc"] is None or 0.0 <= metrics["auroc"] <= 1.0
    if name == "onlad-selective" and len(hostile) == 1 and exponent >= 10:
        (h,) = hostile  # one client of three sends a huge model: the engine's norm bound
        for row in outcome.history:  # rejects it, or selective aggregation drops it
            assert f"{h}:" not in row["client_weights"] or f"{h}:0.0000" in row["client_weights"]


def test_a_scaled_update_of_scale_1e30_is_rejected_with_an_event() -> None:
    """Finite but absurd: it passed the finite check and broke every mean."""
    fed = make_federation("vector", clients=3, n=30)
    setup = Setup("vector", fed.feature_shape, rounds=2, seed=0, contamination=0.0, num_clients=3)
    alg = build_algorithm("fedavg", {"local_epochs": 1}, setup, "autoencoder")
    attack = AttackConfig(kind="scaled-update", clients=1, scale=1e30)
    (bad,) = attacked_clients(attack, 3, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        outcome = run_inprocess(alg, fed, rounds=2, seed=0, attack=attack)
    rejected = [e for e in outcome.events if f"rejected reply of node {bad}: its update's" in e]
    assert [e.split(":")[0] for e in rejected] == ["round 1", "round 2"]
    assert all(np.isfinite(a).all() for a in outcome.result.arrays.values())
    assert [r["clients_replied"] for r in outcome.history] == [2, 2]
    metrics, _ = summarize("fedavg", alg, outcome)
    assert metrics["auroc"] is not None and metrics["auroc"] > 0.7


def test_noise_that_overflows_every_reply_says_so() -> None:
    fed = make_federation("vector", clients=2, n=30)
    setup = Setup("vector", fed.feature_shape, rounds=1, seed=0, contamination=0.0, num_clients=2)
    alg = build_algorithm("fedavg", {"local_epochs": 1}, setup, "autoencoder")
    privacy = PrivacyConfig(mechanism="gaussian", noise_multiplier=1e300)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(RunError, match=r"rejected every reply .*holds NaN or Inf") as err:
            run_inprocess(alg, fed, rounds=1, seed=0, privacy=privacy)
    assert "lower privacy.noise_multiplier, now 1e+300" in str(err.value)
    assert "no client answered" not in str(err.value) and "\n" not in str(err.value)
