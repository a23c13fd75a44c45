from __future__ import annotations

import numpy as np
import pytest
import torch

from fedad.components.detectors.neural import AutoEncoderDetector, DeepSVDDDetector
from fedad.components.nn.model import fix_center
from fedad.core.algorithm import Setup, build_algorithm
from fedad.core.types import Federation
from fedad.evaluation.metrics import auroc
from fedad.fl.engine import run_inprocess
from tests.conftest import make_federation


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    basis = rng.normal(size=(2, 8))
    train = (rng.normal(size=(300, 2)) @ basis).astype(np.float32)
    normal = (rng.normal(size=(100, 2)) @ basis).astype(np.float32)
    anomal = rng.normal(0, 3, size=(50, 8)).astype(np.float32)
    return train, np.concatenate([normal, anomal]), np.r_[np.zeros(100), np.ones(50)]


@pytest.mark.parametrize("cls", [AutoEncoderDetector, DeepSVDDDetector])
def test_detector_separates_off_manifold_anomalies(cls: type) -> None:
    train, x, y = _data()
    det = cls(kind="vector", input_shape=[8], epochs=30, lr=3e-3, seed=0).fit(train)
    assert auroc(y, det.score(x)) > 0.85
    # threshold from training scores: about contamination (5%) of them above it
    assert np.mean(det.score(train) > det.threshold_) <= 0.05 + 1e-9
    assert set(np.unique(det.predict(x))) <= {0, 1}


@pytest.mark.parametrize("kind,shape", [("vector", [6]), ("image", [1, 8, 8])])
def test_deepsvdd_network_is_bias_free(kind: str, shape: list[int]) -> None:
    det = DeepSVDDDetector(kind=kind, input_shape=shape).build()
    names = [n for n, _ in det.model_.named_parameters()]
    assert names and not any("bias" in n for n in names)


def test_fix_center_moves_small_coordinates() -> None:
    c = fix_center(torch.tensor([0.0, -0.01, 0.05, 0.5, -2.0]), eps=0.1)
    assert c.tolist() == pytest.approx([0.1, -0.1, 0.1, 0.5, -2.0])


def test_federated_center_equals_pooled_center() -> None:
    fed = make_federation("vector")
    setup = Setup("vector", (6,), rounds=1, seed=0, contamination=0.05, num_clients=3)
    algo = build_algorithm("fedavg", {}, setup, "deepsvdd")
    out = run_inprocess(algo, fed, rounds=1, seed=0)
    center_round = [r for r in out.history if r["round"] == 0]
    assert len(center_round) == 1 and center_round[0]["clients_replied"] == 3
    det = DeepSVDDDetector(kind="vector", input_shape=[6], seed=0).build()
    pooled = np.concatenate([c.x_train for c in fed.clients])
    det.prepare(pooled)
    np.testing.assert_allclose(
        out.result.arrays["center"], det.model_.center.numpy(), rtol=1e-5, atol=1e-6
    )


def _drift(mu: float, fed: Federation) -> float:
    setup = Setup("vector", (6,), rounds=1, seed=0, contamination=0.05, num_clients=3)
    algo = build_algorithm("fedprox", {"mu": mu, "local_epochs": 5}, setup, "autoencoder")
    det = algo.make_detector().build()
    start = det.model_arrays()
    out = run_inprocess(algo, fed, rounds=1, seed=0)
    return float(
        sum(np.sum((out.result.arrays[k] - start[k]) ** 2) for k in start if k in out.result.arrays)
    )


def test_fedprox_mu_keeps_models_near_global() -> None:
    fed = make_federation("vector")
    assert _drift(100.0, fed) < _drift(0.0, fed)


def test_unknown_params_and_detectors_are_one_line_errors() -> None:
    from fedad.core.errors import ConfigError

    setup = Setup("vector", (6,), rounds=1, seed=0, contamination=0.05, num_clients=3)
    with pytest.raises(ConfigError, match="unknown parameter 'lrr'"):
        build_algorithm("fedavg", {"lrr": 1}, setup)
    with pytest.raises(ConfigError, match="unknown detector 'svm'"):
        build_algorithm("fedavg", {}, setup, "svm")
    with pytest.raises(ConfigError, match="unknown method 'fedsgd'"):
        build_algorithm("fedsgd", {}, setup)
    with pytest.raises(ConfigError, match=r"params\.lr"):
        build_algorithm("fedavg", {"lr": -1}, setup)
