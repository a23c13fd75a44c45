"""FedUV's protocol: the codes stay on their clients, runs are deterministic, detectors load."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fedad.core.algorithm import Algorithm, Setup, build_algorithm
from fedad.core.detector import detector_from_config
from fedad.core.errors import FedadError
from fedad.core.messages import Message
from fedad.fl.drive import RunOutcome
from fedad.fl.engine import run_inprocess
from fedad.methods.feduv.detector import FedUVDetector
from fedad.methods.feduv.federated import STATE_CODE, FedUV, client_code
from fedad.methods.feduv.model import secret_code
from tests.conftest import make_federation

L = 16


def _algo(seed: int = 3, **params: Any) -> FedUV:
    fed = make_federation("vector")
    setup = Setup(fed.kind, fed.feature_shape, rounds=2, seed=seed, contamination=0.1,
                  num_clients=3)  # fmt: skip
    algo = build_algorithm("feduv", {"code_length": L, **params}, setup)
    assert isinstance(algo, FedUV)
    return algo


Log = list[tuple[int, str, Message, Message]]


def _recording(algo: Algorithm, log: Log) -> None:
    """Wrap every client handler to log (client, phase, message in, reply)."""
    inner = algo.handlers()

    def wrap(phase: str, fn: Any) -> Any:
        def handler(state: Any, data: Any, msg: Message) -> Message:
            reply = fn(state, data, msg)
            log.append((data.client_id, phase, msg, reply))
            return reply

        return handler

    wrapped = {phase: wrap(phase, fn) for phase, fn in inner.items()}
    algo.handlers = lambda: wrapped  # type: ignore[method-assign]


def _run(algo: Algorithm, seed: int = 3) -> tuple[RunOutcome, Log]:
    log: Log = []
    _recording(algo, log)
    out = run_inprocess(algo, make_federation("vector"), rounds=2, seed=seed)
    return out, log


def _holds(arrays: Any, code: np.ndarray) -> list[str]:
    """Names of arrays that contain the code (or its negation) as a contiguous run."""
    found = []
    for name, a in arrays.items():
        flat = np.asarray(a, dtype=np.float64).reshape(-1)
        for c in (code, -code):
            if flat.size >= c.size and any(
                np.array_equal(flat[i : i + c.size], c) for i in range(flat.size - c.size + 1)
            ):
                found.append(name)
    return found


def test_codes_never_leave_their_clients() -> None:
    algo = _algo()
    out, log = _run(algo)
    codes = {k: client_code(3, k, L) for k in range(3)}
    assert len({c.tobytes() for c in codes.values()}) == 3
    phases = {p for _, p, _, _ in log}
    assert phases == {"train", "evaluate"}
    for cid, phase, msg, reply in log:
        for k, code in codes.items():
            # nothing the server sends carries any code: not the client's own, not another's
            assert _holds(msg.arrays, code) == [], (cid, phase)
            if phase == "train":
                assert _holds(reply.arrays, code) == [], (cid, k)
                assert set(reply.scalars) == {"num_examples", "loss"}
        if phase == "train":
            # the train reply is exactly the shared network's weights
            assert set(reply.arrays) == set(algo.make_detector().build().model_arrays())
        else:
            # evaluate: scores, and the personalised detector the simulation saves
            others = [c for k, c in codes.items() if k != cid]
            assert all(_holds(reply.arrays, c) == [] for c in others)
            assert _holds(reply.arrays, codes[cid]) == ["detector/code"]
    # the server's final state holds no code either
    for code in codes.values():
        assert _holds(out.result.arrays, code) == []


def test_each_client_scores_with_its_own_code() -> None:
    algo = _algo()
    out, _ = _run(algo)
    fed = make_federation("vector")
    for cid, m in out.evaluations.items():
        det = algo.client_detector(out.client_states[cid], fed.clients[cid],
                                   Message("evaluate", out.result.arrays))  # fmt: skip
        np.testing.assert_array_equal(det.get_arrays()["code"], client_code(3, cid, L))
        np.testing.assert_allclose(det.score(fed.clients[cid].x_test), m.arrays["score"])
        assert np.all(np.abs(m.arrays["score"]) <= 1.0 + 1e-6)


def test_same_seed_same_run_other_seed_other_codes() -> None:
    a, _ = _run(_algo())
    b, _ = _run(_algo())
    for cid in a.evaluations:
        np.testing.assert_array_equal(a.evaluations[cid].arrays["score"],
                                      b.evaluations[cid].arrays["score"])  # fmt: skip
    for k, v in a.result.arrays.items():
        np.testing.assert_array_equal(v, b.result.arrays[k])
    assert not np.array_equal(client_code(3, 0, L), client_code(4, 0, L))


def test_private_codes_come_from_the_client_and_stay_in_its_state() -> None:
    algo = _algo(codes="private")
    out, log = _run(algo)
    for cid, state in out.client_states.items():
        code = np.asarray(state[STATE_CODE])
        assert code.shape == (L,) and not np.array_equal(code, client_code(3, cid, L))
        for c, phase, msg, reply in log:
            assert _holds(msg.arrays, code) == []
            if phase == "train":
                assert _holds(reply.arrays, code) == []
            elif c == cid:
                np.testing.assert_array_equal(reply.arrays["detector/code"], code)


def test_detector_round_trip_and_hostile_checkpoints() -> None:
    x = make_federation("vector").clients[0].x_train
    det = FedUVDetector(input_shape=[6], code_length=L, hidden=8, epochs=2).fit(x)
    cfg, arrays = det.to_config(), det.get_arrays()
    again = detector_from_config(cfg, arrays)
    np.testing.assert_allclose(again.score(x), det.score(x))
    assert again.threshold_ == det.threshold_
    bad_code = dict(arrays, code=np.full(L, 0.5, np.float32))
    with pytest.raises(FedadError, match="-1 or \\+1"):
        detector_from_config(cfg, bad_code)
    with pytest.raises(FedadError, match="lack 'code'"):
        detector_from_config(cfg, {k: v for k, v in arrays.items() if k != "code"})
    with pytest.raises(FedadError, match="code_length"):
        detector_from_config({**cfg, "params": {**cfg["params"], "code_length": 10**9}}, arrays)
    with pytest.raises(FedadError, match="margin"):
        detector_from_config({**cfg, "params": {**cfg["params"], "margin": 2.0}}, arrays)


def test_training_raises_the_own_correlation() -> None:
    """Clients of different classes learn to point their samples at their own codes."""
    x0 = np.random.default_rng(0).normal(-2, 1, (60, 6)).astype(np.float32)
    x1 = np.random.default_rng(1).normal(2, 1, (60, 6)).astype(np.float32)
    c0 = secret_code(np.random.default_rng(10), L)
    c1 = secret_code(np.random.default_rng(11), L)
    d0 = FedUVDetector(input_shape=[6], code_length=L, hidden=16, lr=1e-2).build().set_code(c0)
    d1 = FedUVDetector(input_shape=[6], code_length=L, hidden=16, lr=1e-2).build().set_code(c1)
    before = d0.score(x0).mean()
    rng = np.random.default_rng(0)
    for _ in range(20):  # FedAvg of two clients, by hand
        d0.train_epochs(x0, 1, rng)
        d1.train_epochs(x1, 1, rng)
        w0, w1 = d0.model_arrays(), d1.model_arrays()
        avg = {k: (w0[k] + w1[k]) / 2 for k in w0}
        d0.set_model(avg)
        d1.set_model(avg)
    assert d0.score(x0).mean() < before
    # each client's own class is more normal to it than the other client's class
    assert d0.score(x0).mean() < d0.score(x1).mean()
    assert d1.score(x1).mean() < d1.score(x0).mean()
