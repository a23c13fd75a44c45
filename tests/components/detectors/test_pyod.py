"""The ``pyod-*`` detectors of ``local`` and ``centralized``: PyOD's own scores, fedad's
threshold, persistence by refitting from named arrays, the optional extra, imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("pyod")

from pyod.models.ecod import ECOD
from pyod.models.iforest import IForest
from pyod.models.knn import KNN
from pyod.models.ocsvm import OCSVM

from fedad.components.detectors.pyod_ecod import RowECOD
from fedad.components.detectors.pyod_reference import (
    _FITTED,
    DETECTOR_CLASSES,
    PYOD_DETECTORS,
    PyODDetector,
    PyODECOD,
    PyODIForest,
    PyODKNN,
    PyODOCSVM,
)
from fedad.core.algorithm import Setup, build_algorithm
from fedad.core.detector import detector_from_config, quantile_threshold
from fedad.core.errors import FedadError
from fedad.evaluation.metrics import auroc


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Training rows (float32, as fedad's tables), test rows and test labels."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(300, 5)).astype(np.float32)
    test = np.concatenate([rng.normal(size=(60, 5)), rng.normal(size=(60, 5)) * 3 + 2])
    return x, test.astype(np.float32), np.r_[np.zeros(60), np.ones(60)]


def _load(det: PyODDetector) -> PyODDetector:
    """``det`` through JSON params and named arrays, as ``fedad.load`` rebuilds it."""
    config = json.loads(json.dumps(det.to_config()))
    again = detector_from_config(config, {k: np.array(v) for k, v in det.get_arrays().items()})
    assert isinstance(again, PyODDetector)
    return again


@pytest.mark.parametrize(
    ("det", "ref"),
    [
        (PyODIForest(contamination=0.05, seed=4), None),
        (PyODKNN(contamination=0.05), KNN(contamination=0.05)),
        (PyODOCSVM(contamination=0.05), OCSVM(contamination=0.05)),
    ],
    ids=["iforest", "knn", "ocsvm"],
)
def test_scores_are_pyods_and_threshold_its_rule(det: PyODDetector, ref: Any) -> None:
    """Scores = PyOD's ``decision_function`` with its defaults; the threshold is PyOD's
    ``threshold_`` rule (the 1 - c quantile of ``decision_scores_``) at fedad's c."""
    x, test, y = _data()
    det.fit(x)
    if ref is None:  # the isolation forest: PyOD's with the detector's random_state
        ref = IForest(**det.estimator_args(len(x)))
    ref.fit(x.astype(np.float64))
    np.testing.assert_allclose(det.score(test), ref.decision_function(test), rtol=1e-12)
    assert det.threshold_ == pytest.approx(ref.threshold_)
    np.testing.assert_array_equal(det.predict(test), ref.predict(test))
    assert auroc(y, det.score(test)) > 0.9


@pytest.mark.filterwarnings("ignore:Precision loss:RuntimeWarning")  # PyOD's, constant column
def test_ecod_scores_each_row_as_pyod_scores_a_one_row_batch() -> None:
    rng = np.random.default_rng(1)
    t = rng.normal(size=(200, 6))
    t[:, 2] = np.round(t[:, 2])  # ties
    t[:, 3] = rng.exponential(size=200)  # skewed right
    t[:, 4] = -rng.exponential(size=200)  # skewed left
    t[:, 5] = 1.0  # constant: no skewness (PyOD: NaN -> 0)
    q = rng.normal(size=(25, 6)) * 2
    q[:, 2] = np.round(q[:, 2])
    q[:3] = t[:3]  # training rows themselves
    q[3:6, 5] = 1.0  # the constant value: the column stays constant over [T; x]
    model = ECOD().fit(t)
    ref = np.array([model.decision_function(q[i : i + 1])[0] for i in range(len(q))])
    np.testing.assert_allclose(RowECOD(t).score(q), ref, rtol=1e-12, atol=1e-12)
    # the detector: these scores; its threshold from PyOD's own training scores
    det = PyODECOD(contamination=0.1).fit(t.astype(np.float32))
    assert det.threshold_ == pytest.approx(quantile_threshold(model.decision_scores_, 0.1))
    # a sample's score does not depend on its batch (PyOD's batch scores do)
    np.testing.assert_allclose(det.score(q[:1]), det.score(q)[:1], rtol=1e-12)


def test_knn_training_scores_leave_each_sample_out() -> None:
    x, _, _ = _data()
    det = PyODKNN(contamination=0.05).fit(x)
    own = det.training_scores(x)
    np.testing.assert_array_equal(own, det.model().decision_scores_)
    plain = det.score(x)  # each training sample among its own neighbours
    assert np.all(own >= plain) and np.any(own > plain)
    # other data: plain scores
    np.testing.assert_array_equal(det.training_scores(x[:50] + 1), det.score(x[:50] + 1))


@pytest.mark.parametrize("name", PYOD_DETECTORS)
def test_a_loaded_detector_refits_and_scores_alike(name: str) -> None:
    x, test, _ = _data(2)
    det = DETECTOR_CLASSES[name](contamination=0.05).fit(x)
    assert set(det.get_arrays()) == {"x_", "threshold_"}
    _FITTED.clear()  # refitted from the arrays, not the model this process kept
    again = _load(det)
    assert again.model() is not det.model()
    np.testing.assert_allclose(again.score(test), det.score(test), rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(again.predict(test), det.predict(test))
    assert again.threshold_ == det.threshold_


def test_the_forest_follows_its_seed() -> None:
    x, test, _ = _data(3)
    a = PyODIForest(seed=1).fit(x).score(test)
    _FITTED.clear()
    np.testing.assert_array_equal(PyODIForest(seed=1).fit(x).score(test), a)
    assert not np.allclose(PyODIForest(seed=2).fit(x).score(test), a)


def test_a_process_fits_the_same_data_once() -> None:
    """A detector rebuilt from the same arrays (``centralized``'s clients) reuses the model
    the process fitted; other data or other arguments fit anew."""
    x, _, _ = _data(6)
    _FITTED.clear()
    det = PyODIForest(seed=1).fit(x)
    assert _load(det).model() is det.model()
    assert PyODIForest(seed=2).fit(x).model() is not det.model()
    assert PyODIForest(seed=1).fit(x[:-1]).model() is not det.model()
    assert len(_FITTED) == 2  # the last two kept


def test_few_samples_and_crafted_arrays() -> None:
    x = np.random.default_rng(4).normal(size=(3, 2)).astype(np.float32)
    assert np.all(np.isfinite(PyODKNN().fit(x).score(x)))  # n_neighbors = n - 1
    config = PyODKNN().to_config()
    for bad in (
        {"x_": np.ones(4)},
        {"x_": np.ones((1, 2))},
        {"x_": np.full((4, 2), np.nan)},
        {"x_": np.ones((4, 2)), "extra": np.ones(1)},
        {"x_": np.array([["a", "b"], ["c", "d"]])},
        {},
    ):
        with pytest.raises(FedadError, match="do not fit detector 'pyod-knn'"):
            detector_from_config(config, bad)
    with pytest.raises(FedadError, match="parameter 'kind'"):
        detector_from_config({**config, "params": {"kind": "graph"}}, {"x_": np.ones((4, 2))})


def test_images_are_scored_on_the_pretrained_features() -> None:
    """On images PyOD is fitted on ``pretrained``'s features (its feature extractor)."""
    from fedad.components.detectors.pretrained import PretrainedDetector

    rng = np.random.default_rng(5)
    imgs = rng.uniform(size=(12, 3, 32, 32)).astype(np.float32)
    det = PyODKNN(kind="image", image_size=32, contamination=0.1).fit(imgs[:10])
    feats = PretrainedDetector(image_size=32).embed(imgs)
    ref = KNN(n_neighbors=5).fit(feats[:10].astype(np.float64))
    np.testing.assert_allclose(det.score(imgs[10:]), ref.decision_function(feats[10:]), rtol=1e-5)
    assert det.x_.shape == (10, feats.shape[1]) and det.expected_input() is None
    np.testing.assert_allclose(_load(det).score(imgs[10:]), det.score(imgs[10:]), rtol=1e-6)


def _hide_pyod(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "pyod" or m.startswith("pyod.")]:
        monkeypatch.setitem(sys.modules, name, None)  # type: ignore[arg-type]
    monkeypatch.setitem(sys.modules, "pyod", None)  # type: ignore[arg-type]


def test_without_the_extra_a_run_stops_in_one_line_before_training(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from fedad.cli.app import app

    _hide_pyod(monkeypatch)
    setup = Setup("vector", (5,), rounds=1, seed=0, contamination=0.1, num_clients=2)
    with pytest.raises(FedadError, match=r"pip install 'fedad\[pyod\]'"):
        build_algorithm("centralized", {}, setup, "pyod-ecod")
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        'rounds = 1\n[data]\nname = "breast_cancer"\n[engine]\nprogress = false\n'
        '[[methods]]\nname = "local"\ndetector = "autoencoder"\n'
        '[[methods]]\nname = "centralized"\ndetector = "pyod-knn"\n'
    )
    res = CliRunner().invoke(app, ["run", str(cfg), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2, res.output
    assert "pip install 'fedad[pyod]'" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "out" / "metrics.json").exists()


LIST_THEN_MODULES = """
import sys
from fedad.cli.app import main
for argv in (["fedad", "--help"], ["fedad", "list", "methods"]):
    sys.argv = argv
    try:
        main()
    except SystemExit as done:
        assert not done.code, done.code
heavy = sorted(m for m in ("pyod", "numba", "llvmlite") if m in sys.modules)
sys.stderr.write("HEAVY=" + ",".join(heavy) + "\\n")
"""


def test_help_and_list_import_no_pyod() -> None:
    p = subprocess.run(
        [sys.executable, "-c", LIST_THEN_MODULES], capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert "pyod-ocsvm" in p.stdout
    assert p.stderr.splitlines()[-1] == "HEAVY="


IMPORT_AND_FIT = """
import numpy as np
from pyod.models.ecod import ECOD
from pyod.models.iforest import IForest
from pyod.models.knn import KNN
from pyod.models.ocsvm import OCSVM
from fedad.components.detectors.pyod_reference import DETECTOR_CLASSES
x = np.random.default_rng(0).normal(size=(40, 3)).astype(np.float32)
for cls in (ECOD, IForest, KNN, OCSVM):
    cls().fit(x).decision_function(x)
for cls in DETECTOR_CLASSES.values():
    cls().fit(x).score(x)
"""


def _files(roots: set[str]) -> set[str]:
    out: set[str] = set()
    for root in roots:
        for folder, _, names in os.walk(root):
            out.update(os.path.join(folder, n) for n in names)
    return out


@pytest.mark.slow
def test_importing_and_fitting_leaves_no_files_in_site_packages() -> None:
    """numba writes ``__pycache__/*.nbi``/``*.nbc`` beside a module whose functions are
    compiled with ``cache=True``; PyOD 3.6's are not, so two fresh processes that import
    PyOD's detectors and fit each (ECOD compiles its ECDF) add no file to site-packages
    (Python's own bytecode cache is switched off to see numba's alone)."""
    roots = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    before = _files(roots)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("NUMBA_CACHE_DIR", None)
    for _ in range(2):
        p = subprocess.run(
            [sys.executable, "-c", IMPORT_AND_FIT], env=env, capture_output=True, text=True
        )
        assert p.returncode == 0, p.stderr[-2000:]
        assert sorted(_files(roots) - before) == []


@pytest.mark.parametrize("name", PYOD_DETECTORS)
def test_export_refuses_in_one_line(name: str) -> None:
    import fedad.export.detectors  # noqa: F401  (registers the exporters and refusals)
    from fedad.export.registry import NotExportable, exporter_for

    with pytest.raises(NotExportable, match=f"detector '{name}' cannot be exported.*PyOD's model"):
        exporter_for(DETECTOR_CLASSES[name](), "m")
