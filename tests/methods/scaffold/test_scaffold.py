"""SCAFFOLD: the update and control-variate math, the SGD loop, the protocol's bytes."""

from __future__ import annotations

import warnings
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest
import torch
from torch import nn

from fedad.components.detectors.neural import TorchDetector
from fedad.components.federated import client_rng
from fedad.components.train import iterate_batches
from fedad.core.algorithm import Setup, build_algorithm
from fedad.core.context import ServerContext
from fedad.core.errors import FedadError
from fedad.fl.drive import RunOutcome
from fedad.fl.engine import run_inprocess
from fedad.methods.scaffold.control import (
    client_deltas,
    corrected_step,
    option_two,
    server_update,
    zeros_like,
)
from fedad.methods.scaffold.federated import GRAPH_LR, Scaffold
from fedad.methods.scaffold.train import scaffold_epochs
from tests.conftest import make_federation


def _setup(kind: str, feature_shape: tuple[int, ...], clients: int, rounds: int = 1) -> Setup:
    return Setup(kind, feature_shape, rounds=rounds, seed=3, contamination=0.1,  # type: ignore[arg-type]
                 num_clients=clients)  # fmt: skip


def test_corrected_step_with_zero_controls_is_sgd() -> None:
    y = torch.tensor([1.0, -2.0, 3.0])
    g = torch.tensor([0.5, 0.5, -1.0])
    z = torch.zeros(3)
    corrected_step(y, g, z, z, 0.1)
    torch.testing.assert_close(y, torch.tensor([0.95, -2.05, 3.1]))
    # c_i - c shifts the gradient: y - lr (g - c_i + c)
    y2 = torch.tensor([1.0, -2.0, 3.0])
    corrected_step(y2, g, torch.ones(3), torch.full((3,), 0.5), 0.1)
    torch.testing.assert_close(y2, torch.tensor([1.0, -2.0, 3.15]))


def test_option_two_by_hand() -> None:
    """c_i+ = c_i - c + (x - y) / (K lr): 1 - 0.5 + (2 - 1.5) / (5 * 0.1) = 1.5."""
    one = {"w": np.array([1.0, 0.0])}
    got = option_two(one, {"w": np.array([0.5, 0.0])}, {"w": np.array([2.0, 1.0])},
                     {"w": np.array([1.5, 2.0])}, steps=5, lr=0.1)  # fmt: skip
    np.testing.assert_allclose(got["w"], [1.5, -2.0])
    dy, dc = client_deltas({"w": np.array([2.0, 1.0])}, {"w": np.array([1.5, 2.0])}, one, got)
    np.testing.assert_allclose(dy["w"], [-0.5, 1.0])
    np.testing.assert_allclose(dc["w"], [0.5, -2.0])


def test_full_participation_keeps_c_the_mean_of_the_client_controls() -> None:
    """With every client in every round, c stays the mean of the c_i (Algorithm 1's
    invariant c = (1/N) sum c_i), from c = c_i = 0, whatever the local models do."""
    rng = np.random.default_rng(0)
    n, shape = 4, (3, 2)
    x, c = {"w": rng.normal(size=shape)}, zeros_like({"w": np.zeros(shape)})
    cis = [zeros_like(c) for _ in range(n)]
    for _ in range(5):
        dys, dcs = [], []
        for i in range(n):
            y = {"w": x["w"] + rng.normal(size=shape)}
            new = option_two(cis[i], c, x, y, steps=int(rng.integers(1, 9)), lr=0.05)
            dy, dc = client_deltas(x, y, cis[i], new)
            cis[i] = new
            dys.append(dy["w"])
            dcs.append(dc["w"])
        x, c = server_update(x, c, {"w": np.mean(dys, 0)}, {"w": np.mean(dcs, 0)}, n, n)
        np.testing.assert_allclose(c["w"], np.mean([ci["w"] for ci in cis], 0), atol=1e-12)
    # |S| < N: the server scales the mean change by |S|/N
    x2, c2 = server_update(x, c, {"w": np.ones(shape)}, {"w": np.ones(shape)}, 1, 4, 2.0)
    np.testing.assert_allclose(x2["w"], x["w"] + 2.0)
    np.testing.assert_allclose(c2["w"], c["w"] + 0.25)


def test_scaffold_epochs_with_zero_controls_is_plain_sgd() -> None:
    torch.manual_seed(0)
    a, b = nn.Linear(3, 2), nn.Linear(3, 2)
    b.load_state_dict(a.state_dict())
    x = np.random.default_rng(1).normal(size=(10, 3)).astype(np.float32)

    def loss(m: nn.Module):  # type: ignore[no-untyped-def]
        return lambda batch: (m(batch) ** 2).mean()

    zero = {k: np.zeros(tuple(p.shape), np.float32) for k, p in a.named_parameters()}
    _, steps = scaffold_epochs(a, loss(a), x, 2, 4, 0.1, np.random.default_rng(5), zero, zero)
    assert steps == 2 * 3  # ceil(10 / 4) batches per epoch
    opt = torch.optim.SGD(b.parameters(), lr=0.1)
    rng = np.random.default_rng(5)
    xt = torch.from_numpy(x)
    for _ in range(2):
        for idx in iterate_batches(10, 4, rng):
            opt.zero_grad()
            loss(b)(xt[torch.from_numpy(idx)]).backward()
            opt.step()
    for (k, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(p, q, msg=k)


def test_one_client_first_round_is_local_sgd() -> None:
    """One client, c = c_i = 0, server_lr = 1: the global model after round 1 is the
    client's model after plain SGD from the initial weights."""
    fed = make_federation("vector", clients=1, n=150)
    algo = build_algorithm("scaffold", {"batch_size": 32}, _setup("vector", fed.feature_shape, 1))
    out = run_inprocess(algo, fed, rounds=1, seed=3)
    det = algo.make_detector().build()
    assert isinstance(det, TorchDetector)
    opt = torch.optim.SGD(det.model_.parameters(), lr=algo.params.lr)  # type: ignore[attr-defined]
    xt = torch.from_numpy(fed.clients[0].x_train)
    det.model_.train()
    for idx in iterate_batches(len(xt), 32, client_rng(3, 1, 0)):
        opt.zero_grad()
        det.loss(xt[torch.from_numpy(idx)]).backward()  # type: ignore[no-untyped-call]
        opt.step()
    for k, v in det.model_arrays().items():
        np.testing.assert_allclose(out.result.arrays[k], v, rtol=1e-5, atol=1e-6, err_msg=k)
    c_i = {k[3:]: v for k, v in out.client_states[0].items() if k.startswith("ci/")}
    assert c_i.keys() == det.model_arrays().keys()  # the autoencoder's state: all parameters


def _pair(kind: str, det: str, rounds: int = 2) -> tuple[RunOutcome, RunOutcome, int]:
    fed = make_federation(kind)
    setup = _setup(kind, fed.feature_shape, len(fed.clients), rounds)
    outs = [
        run_inprocess(build_algorithm(m, {}, setup, det), fed, rounds=rounds, seed=3)
        for m in ("fedavg", "scaffold")
    ]
    model = build_algorithm("fedavg", {}, setup, det).make_detector().build()
    assert isinstance(model, TorchDetector)
    return outs[0], outs[1], sum(int(v.nbytes) for v in model.shared_arrays().values())


def test_upload_is_twice_the_model() -> None:
    """Each reply carries Delta y and Delta c: one model more than fedavg's, up and down."""
    avg, sc, model_bytes = _pair("vector", "autoencoder")
    assert not sc.events
    extra = 2 * 3 * model_bytes  # rounds x clients x one more model
    assert sc.bytes_up - avg.bytes_up == extra
    assert sc.bytes_down - avg.bytes_down == extra


def test_graph_default_lr_and_runs() -> None:
    fed = make_federation("graph")
    setup = _setup("graph", fed.feature_shape, 3)
    algo = build_algorithm("scaffold", {}, setup, "deepsvdd")
    assert isinstance(algo, Scaffold) and algo.params.lr == GRAPH_LR
    assert build_algorithm("scaffold", {"lr": 0.01}, setup, "deepsvdd").params.lr == 0.01
    assert build_algorithm("scaffold", {}, _setup("vector", (6,), 3)).params.lr == 0.01
    out = run_inprocess(algo, fed, rounds=2, seed=3)
    assert not out.events and all(np.isfinite(h.get("loss", 0.0)) for h in out.history)


def test_reply_carries_y_as_a_model_update() -> None:
    """The reply holds y_i under the model's names (what [privacy] and [attack] act on) and
    Delta c_i under dc/; the client keeps c_i+ in its state."""
    from fedad.config import PrivacyConfig
    from fedad.core.messages import Message, prefixed
    from fedad.privacy import privatize_reply

    fed = make_federation("vector")
    algo = build_algorithm("scaffold", {}, _setup("vector", fed.feature_shape, 3))
    det = algo.make_detector().build()
    assert isinstance(det, TorchDetector)
    x = det.shared_arrays()
    msg = Message("train", {**x, **prefixed(zeros_like(x), "c")}, {"round": 1})
    state: dict[str, np.ndarray] = {}
    reply = algo.client_train(state, fed.clients[0], msg)
    assert set(reply.arrays) == set(x) | {f"dc/{k}" for k in x}
    assert set(state) == {f"ci/{k}" for k in x}
    for k in x:  # first round, c = c_i = 0: Delta c_i = c_i+ = (x - y) / (K lr)
        np.testing.assert_array_equal(reply.arrays[f"dc/{k}"], state[f"ci/{k}"])
    cfg = PrivacyConfig(mechanism="gaussian", clip=0.1, noise_multiplier=1.0)
    noisy = privatize_reply(msg.arrays, reply, cfg, np.random.default_rng(0))
    assert all(not np.array_equal(noisy.arrays[k], reply.arrays[k]) for k in x)


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"lr": 1e300}, "less than or equal to 10"),
        ({"server_lr": 1e300}, "less than or equal to 100"),
        ({"lr": 0.0}, "greater than 0"),
    ],
)
def test_step_sizes_are_bounded(params: dict[str, float], needle: str) -> None:
    setup = _setup("vector", (6,), 2)
    with pytest.raises(FedadError, match=needle):
        build_algorithm("scaffold", params, setup, "autoencoder")
    assert "server_lr" in Scaffold.ParamsModel.model_fields
    assert Scaffold.ParamsModel.model_fields["lr"].description.startswith(  # type: ignore[union-attr]
        "local SGD step size eta_l in (0, 10]"
    )


def test_a_server_step_that_overflows_keeps_the_model_with_an_event() -> None:
    alg = build_algorithm(
        "scaffold", {"server_lr": 100.0}, _setup("vector", (6,), 2), "autoencoder"
    )
    assert isinstance(alg, Scaffold)
    ctx = ServerContext(cast(Any, SimpleNamespace(bytes_up=0, bytes_down=0)), rounds=1, seed=0)
    x = {"w": np.ones(3, np.float32)}
    c = {"w": np.zeros(3, np.float32)}
    huge = {"w": np.full(3, 3e37, np.float32), "dc/w": np.ones(3, np.float32)}
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        x2, c2 = alg._step(ctx, x, c, huge, replied=2, total=2)
    assert x2 is x and c2 is c
    assert ctx.events == [
        "round 1: the server step (server_lr = 100) makes w non-finite; the global model and c "
        "are unchanged (lower server_lr or lr)"
    ]
    fine = {"w": np.full(3, 1.5, np.float32), "dc/w": np.ones(3, np.float32)}
    x3, c3 = alg._step(ctx, x, c, fine, replied=2, total=2)
    np.testing.assert_allclose(x3["w"], 51.0)
    np.testing.assert_allclose(c3["w"], 1.0)
    assert len(ctx.events) == 1
