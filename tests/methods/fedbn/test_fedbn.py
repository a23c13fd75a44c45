"""FedBN: normalisation layers found from the modules, kept local, not counted, not averaged."""

from __future__ import annotations

import numpy as np
import pytest
from torch import nn

from fedad.components.detectors.neural import TorchDetector
from fedad.core.algorithm import Algorithm, Setup, build_algorithm
from fedad.core.types import Federation
from fedad.fl.drive import RunOutcome
from fedad.fl.engine import run_inprocess
from fedad.methods.fedbn.federated import local_keys, shared_arrays
from fedad.methods.fedbn.norms import norm_keys
from tests.conftest import make_federation

ROUNDS = 2


def _run(method: str, fed: Federation, det: str) -> tuple[Algorithm, RunOutcome]:
    setup = Setup(fed.kind, fed.feature_shape, rounds=ROUNDS, seed=3, contamination=0.1,
                  num_clients=len(fed.clients))  # fmt: skip
    algo = build_algorithm(method, {}, setup, det)
    return algo, run_inprocess(algo, fed, rounds=ROUNDS, seed=3)


def _scores(out: RunOutcome) -> np.ndarray:
    return np.concatenate([out.evaluations[i].arrays["score"] for i in sorted(out.evaluations)])


def test_norm_keys_come_from_the_modules_not_the_names() -> None:
    model = nn.Sequential()
    model.add_module("bn", nn.Linear(4, 4))  # named like a norm layer, is not one
    model.add_module("linear", nn.BatchNorm1d(4))  # named like a linear map, is a norm layer
    model.add_module("gn", nn.GroupNorm(2, 4))
    model.add_module("ln", nn.LayerNorm(4))
    model.add_module("inorm", nn.InstanceNorm1d(4, affine=True, track_running_stats=True))
    got = norm_keys(model)
    want = {
        "linear.weight", "linear.bias", "linear.running_mean", "linear.running_var",
        "linear.num_batches_tracked", "gn.weight", "gn.bias", "ln.weight", "ln.bias",
        "inorm.weight", "inorm.bias", "inorm.running_mean", "inorm.running_var",
        "inorm.num_batches_tracked",
    }  # fmt: skip
    assert got == want
    assert norm_keys(nn.Sequential(nn.Linear(3, 2), nn.ReLU())) == frozenset()


@pytest.mark.parametrize(("kind", "det"), [("vector", "autoencoder"), ("image", "deepsvdd")])
def test_without_norm_layers_fedbn_is_fedavg(kind: str, det: str) -> None:
    """No normalisation layer: everything is shared, and fedbn gives fedavg's results."""
    fed = make_federation(kind)
    algo, bn = _run("fedbn", fed, det)
    model = algo.make_detector().build()
    assert isinstance(model, TorchDetector)
    assert local_keys(model) == frozenset()
    assert shared_arrays(model).keys() == model.model_arrays().keys()
    assert not algo.personalized
    _, avg = _run("fedavg", fed, det)
    np.testing.assert_array_equal(_scores(bn), _scores(avg))
    assert bn.result.arrays.keys() == avg.result.arrays.keys()
    for k, v in avg.result.arrays.items():
        np.testing.assert_array_equal(bn.result.arrays[k], v)
    assert (bn.bytes_up, bn.bytes_down) == (avg.bytes_up, avg.bytes_down)


def test_norm_layers_stay_local_and_are_not_counted() -> None:
    """The contrastive detector's encoder has group normalisation: it never travels, each
    client keeps its own, and the upload is fedavg's minus exactly those tensors."""
    fed = make_federation("image")
    algo, bn = _run("fedbn", fed, "contrastive")
    _, avg = _run("fedavg", fed, "contrastive")
    model = algo.make_detector().build()
    assert isinstance(model, TorchDetector)
    local = norm_keys(model.model_)
    assert local and algo.personalized
    assert not local & set(bn.result.arrays)  # the server never holds them
    assert set(bn.result.arrays) | local == set(model.model_arrays())
    norm_bytes = sum(int(v.nbytes) for k, v in model.model_arrays().items() if k in local)
    n = len(fed.clients)
    assert avg.bytes_up - bn.bytes_up == ROUNDS * n * norm_bytes
    # every client's final model: the global shared tensors, its own normalisation layers
    from fedad.core.messages import Message

    msg = Message("evaluate", bn.result.arrays, bn.result.scalars)
    dets = [algo.client_detector(bn.client_states[i], fed.clients[i], msg) for i in range(n)]
    arrays = [d.model_arrays() for d in dets]
    for k in bn.result.arrays:
        for a in arrays:
            np.testing.assert_array_equal(a[k], bn.result.arrays[k])
    trained = [k for k in local if k.endswith("weight")]
    assert any(not np.array_equal(arrays[0][k], arrays[1][k]) for k in trained)
