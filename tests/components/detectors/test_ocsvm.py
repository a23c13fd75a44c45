"""The ``ocsvm`` detector of ``local`` and ``centralized``."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.svm import OneClassSVM

from fedad.components.detectors.ocsvm import OCSVMDetector
from fedad.core.algorithm import Setup, build_algorithm
from fedad.core.detector import detector_from_config
from fedad.core.errors import ConfigError
from fedad.evaluation.metrics import auroc
from fedad.fl.engine import run_inprocess
from tests.conftest import make_federation


def test_scores_are_minus_sklearns_decision_function() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 2, 3))
    q = rng.normal(size=(50, 2, 3)) * 2
    det = OCSVMDetector(contamination=0.1).fit(x)
    z = x.reshape(200, -1)
    ref = OneClassSVM(kernel="rbf", gamma=1.0 / (6 * z.var()), nu=0.1).fit(z)
    np.testing.assert_allclose(det.score(q), -ref.decision_function(q.reshape(50, -1)), atol=1e-8)
    # the threshold flags about the contamination share of the training data
    assert 0.05 <= float(np.mean(det.score(x) > det.threshold_)) <= 0.15


def test_separates_and_round_trips_through_named_arrays() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 4))
    test = np.concatenate([rng.normal(size=(100, 4)), rng.normal(size=(100, 4)) + 4.0])
    det = OCSVMDetector(contamination=0.05).fit(x)
    assert auroc(np.r_[np.zeros(100), np.ones(100)], det.score(test)) > 0.95
    again = detector_from_config(det.to_config(), det.get_arrays())
    np.testing.assert_array_equal(again.score(test), det.score(test))
    assert again.threshold_ == det.threshold_


def test_zero_contamination_still_fits() -> None:
    x = np.random.default_rng(2).normal(size=(50, 3))
    assert OCSVMDetector(contamination=0.0).fit(x).nu == pytest.approx(1e-3)


def test_crafted_arrays_are_refused() -> None:
    det = OCSVMDetector()
    ok = {"sv": np.ones((3, 2)), "coef": np.ones(3), "intercept": np.array(0.0),
          "gamma": np.array(1.0)}  # fmt: skip
    det.set_arrays(ok)
    for bad in (
        {**ok, "coef": np.ones(2)},
        {**ok, "gamma": np.array(-1.0)},
        {**ok, "sv": np.full((3, 2), np.nan)},
        {**ok, "extra": np.ones(1)},
    ):
        with pytest.raises((ValueError, KeyError)):
            OCSVMDetector().set_arrays(bad)


@pytest.mark.parametrize("method", ["local", "centralized"])
@pytest.mark.parametrize("kind", ["vector", "image"])
def test_federated_run(method: str, kind: str) -> None:
    fed = make_federation(kind, clients=3)
    setup = Setup(fed.kind, fed.feature_shape, rounds=2, seed=0, contamination=0.1,
                  num_clients=3)  # fmt: skip
    algo = build_algorithm(method, {}, setup, "ocsvm")
    out = run_inprocess(algo, fed, rounds=2, seed=0)
    assert out.events == []
    assert sorted(out.evaluations) == [0, 1, 2]
    for m in out.evaluations.values():
        assert np.all(np.isfinite(m.arrays["score"]))


def test_fedavg_refuses_it() -> None:
    setup = Setup("vector", (6,), rounds=1, seed=0, contamination=0.1, num_clients=3)
    with pytest.raises(ConfigError, match="ocsvm"):
        build_algorithm("fedavg", {}, setup, "ocsvm")
