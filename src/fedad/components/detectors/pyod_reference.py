"""The ``pyod-*`` detectors: PyOD's own detectors, with PyOD's defaults, as fedad detectors.

What a user who pooled the data would reach for first: the field's library, as a reference
row of the leaderboard. ``pyod-iforest`` (``pyod.models.iforest.IForest``, scikit-learn's
isolation forest), ``pyod-ecod`` (``ECOD``, Li et al. 2022), ``pyod-knn`` (``KNN``: the
distance to the 5th nearest training sample) and ``pyod-ocsvm`` (``OCSVM``: RBF kernel,
``gamma = 1 / D``, ``nu = 0.5``; not fedad's ``ocsvm``, whose ``nu`` is the contamination and
``gamma`` scikit-learn's ``"scale"``). Each takes PyOD's defaults; only what fedad decides is
set: ``random_state`` (the isolation forest's, from the run's seed), ``n_neighbors`` at most
``n - 1`` on fewer than 6 training samples, and ``contamination`` (PyOD's own threshold is
not used: fedad's is the same rule, the ``1 - c`` quantile of PyOD's training scores
``decision_scores_``, at the run's contamination).

Inputs: table rows as they are (after the run's preprocessing); images through the
``pretrained`` detector's feature extractor (:meth:`~.pretrained.PretrainedDetector.embed`:
a frozen EfficientNet-Lite0 by default, ``resource``, ``image_size``), so that PyOD is fitted
on the images' pooled features. Scores are PyOD's ``decision_function`` (higher = more
anomalous), except ECOD's: PyOD's depends on the whole batch, fedad's scores each sample as
PyOD scores a one-row batch (:mod:`.pyod_ecod`).

**Persistence without pickle.** A PyOD model holds scikit-learn objects (trees, a libsvm
model, a neighbour index) that cannot be written as plain arrays. The saved state is the
data PyOD was fitted on (``x_``: the rows, or the images' features) and ``threshold_``; the
model is refitted from them, deterministically, the first time it scores (isolation forest:
the same ``random_state``; ECOD, k-NN and the SVM have no randomness), so a loaded detector
scores as the one saved (tested to 1e-6). A process keeps its last two fitted models by
their data and arguments, so ``centralized``'s clients, which rebuild the server's detector
from its arrays to evaluate, do not fit it again in the same process. A checkpoint thus
holds its holder's training data (or features), as ``pretrained``'s does; ``fedad export``
refuses these detectors.

**Imported when used.** ``pyod`` (and numba, which it brings) is imported when a run is
built with a ``pyod-*`` detector, never by ``fedad --help`` or ``fedad list``; without the
extra that is one line naming ``pip install 'fedad[pyod]'``. Importing it writes nothing
into site-packages: PyOD 3.6 compiles its numba functions (ECOD's ECDF) without
``cache=True``, in memory, so no ``.nbi``/``.nbc`` files appear
(``tests/components/detectors/test_pyod.py`` imports and fits them twice in fresh processes
and compares the files); the price is about 1 s of compilation at the first ECOD fit of a
process.
"""

from __future__ import annotations

import hashlib
import importlib
import warnings
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Literal, Self

import numpy as np
from pydantic import ConfigDict, Field, field_validator

from fedad.components.detectors.fit_once import FitOnce
from fedad.components.detectors.pretrained import (
    DEFAULT_IMAGE_SIZE,
    DEFAULT_RESOURCE,
    PretrainedDetector,
)
from fedad.components.detectors.pyod_ecod import RowECOD
from fedad.core.detector import (
    DEFAULT_CONTAMINATION,
    BaseDetector,
    DetectorParams,
    quantile_threshold,
    register_detector,
)
from fedad.core.errors import ConfigError, FedadError
from fedad.core.rng import rng as seeded_rng
from fedad.core.types import DataKind
from fedad.resources import check_available, resource_info, resource_names

if TYPE_CHECKING:
    from fedad.core.algorithm import Setup

EXTRA = "pyod"
PYOD_IFOREST = "pyod-iforest"
PYOD_ECOD = "pyod-ecod"
PYOD_KNN = "pyod-knn"
PYOD_OCSVM = "pyod-ocsvm"
PYOD_DETECTORS = (PYOD_IFOREST, PYOD_ECOD, PYOD_KNN, PYOD_OCSVM)
PYOD_MODULES = {PYOD_IFOREST: "iforest", PYOD_ECOD: "ecod", PYOD_KNN: "knn", PYOD_OCSVM: "ocsvm"}
"""The ``pyod.models`` module of each detector."""
PYOD_CLASSES = {PYOD_IFOREST: "IForest", PYOD_ECOD: "ECOD", PYOD_KNN: "KNN", PYOD_OCSVM: "OCSVM"}
"""The PyOD class of each detector."""
PYOD_OPTIONS = ("resource", "image_size")
"""``[methods.params]`` of ``local``/``centralized`` that the ``pyod-*`` detectors take too
(on images: the feature extractor)."""
MAX_ENTRIES = 1 << 26
"""Most values (rows x features) a saved detector's ``x_`` may hold (256 MB as float32)."""
KNN_NEIGHBOURS = 5
"""PyOD's default ``n_neighbors``."""
PYOD_MAX_CONTAMINATION = 0.5
"""PyOD refuses a contamination outside (0, 0.5]; it only sets PyOD's own threshold."""


def import_pyod(detector: str) -> Any:
    """The ``pyod.models`` module of ``detector``, or a one-line :class:`FedadError` naming
    the extra that installs it."""
    try:
        return importlib.import_module(f"pyod.models.{PYOD_MODULES[detector]}")
    except ImportError as err:
        raise FedadError(
            f"detector '{detector}' needs the package pyod, which is not installed "
            f"or does not import ({str(err).splitlines()[0][:80]})",
            f"pip install 'fedad[{EXTRA}]'",
        ) from None


def _known_resource(name: str) -> str:
    if name not in resource_names():
        raise ValueError(f"unknown resource '{name}' (known: {', '.join(resource_names())})")
    return name


class PyODParams(DetectorParams):
    """The ``__init__`` arguments of a ``pyod-*`` detector, as a checkpoint may give them:
    the data kind and, on images, the feature extractor (``pretrained``'s)."""

    model_config = ConfigDict(allow_inf_nan=False)

    kind: Literal["vector", "image"] = "vector"
    resource: str = DEFAULT_RESOURCE
    image_size: int = Field(default=DEFAULT_IMAGE_SIZE, ge=32, le=1024)
    batch_size: int = Field(default=64, ge=1, le=1 << 16)
    contamination: float = Field(default=DEFAULT_CONTAMINATION, ge=0.0, lt=1.0)

    _resource = field_validator("resource")(_known_resource)


class PyODSeededParams(PyODParams):
    """With the seed of a randomised PyOD detector (its ``random_state``)."""

    seed: int = Field(default=0, ge=-(1 << 63), lt=1 << 63)


class PyODDetector(FitOnce, BaseDetector):
    """A PyOD detector fitted on ``x_`` (rows, or image features), refitted from it on load.

    ``device`` is where the image feature extractor runs (not saved).
    """

    ParamsModel = PyODParams
    params: PyODParams
    fitted_attr = "x_"
    x_: np.ndarray
    """The inputs PyOD is fitted on, float32 ``(N, D)``: flattened rows or image features."""

    def __init__(self, *, device: str = "cpu", **params: Any) -> None:
        """``params``: fields of ``ParamsModel``; ``device``: where images are embedded."""
        super().__init__(**params)
        self.device = device
        self._model: Any = None

    # -- the PyOD model ---------------------------------------------------------------------
    def estimator_args(self, n: int) -> dict[str, Any]:
        """Keyword arguments of the PyOD class for ``n`` training samples (its defaults
        otherwise)."""
        c = min(max(self.contamination, 1e-6), PYOD_MAX_CONTAMINATION)
        return {"contamination": c}

    def model(self) -> Any:
        """The PyOD model fitted on ``x_``: fitted the first time it is needed (after
        ``fit`` or a load alike), or the one this process fitted last on the same data and
        arguments (:func:`_fitted`)."""
        self._check_fitted()
        if self._model is None:
            self._model = _fitted(self.registry_name, self.estimator_args(len(self.x_)), self.x_)
        return self._model

    # -- inputs -----------------------------------------------------------------------------
    def inputs(self, x: np.ndarray) -> np.ndarray:
        """What PyOD reads, float32 ``(N, D)``: rows flattened, or the images' features."""
        if self.params.kind == "image":
            f = PretrainedDetector(
                resource=self.params.resource,
                image_size=self.params.image_size,
                batch_size=self.params.batch_size,
                device=self.device,
            ).embed(x)
            return np.ascontiguousarray(f, dtype=np.float32)
        a = np.asarray(x, dtype=np.float32)
        return np.ascontiguousarray(a.reshape(len(a), -1))

    def set_inputs(self, f: np.ndarray) -> Self:
        """Use ``f`` ``(N, D)`` as the data PyOD is fitted on (the model is refitted when it
        next scores)."""
        f = np.ascontiguousarray(f, dtype=np.float32)
        if f.ndim != 2 or len(f) < 2 or f.shape[1] < 1:
            raise ValueError(f"x_ must have shape (N >= 2, D >= 1), got {f.shape}")
        if f.size > MAX_ENTRIES:
            raise ValueError(f"x_ holds {f.size} values, more than a detector holds")
        if self.params.kind == "image":
            dim = resource_info(self.params.resource).feature_dim
            if f.shape[1] != dim:
                raise ValueError(f"x_ must hold {dim} features per image, got {f.shape[1]}")
        if not np.all(np.isfinite(f)):
            raise ValueError("x_ holds NaN or infinite values")
        self.x_ = f
        self._model = None
        return self

    def _check_fitted(self) -> None:
        if not self.fitted:
            raise RuntimeError(f"{type(self).__name__} is not fitted: call fit first")

    # -- fitting ----------------------------------------------------------------------------
    def fit(self, x: np.ndarray) -> Self:
        self.fit_data(x)
        self.threshold_ = quantile_threshold(self.model().decision_scores_, self.contamination)
        return self

    def fit_data(self, x: np.ndarray) -> None:
        """Keep ``x``'s inputs (no threshold); PyOD fits on them when it first scores, so
        that ``local``, which keeps them as the client's state and rebuilds its detector to
        evaluate, fits once."""
        self.set_inputs(self.inputs(x))

    def model_arrays(self) -> dict[str, np.ndarray]:
        """The data PyOD was fitted on (what the baselines keep or send as the model)."""
        return {"x_": self.x_.copy()} if self.fitted else {}

    # -- scoring ----------------------------------------------------------------------------
    def expected_input(self) -> tuple[str, tuple[int, ...]] | None:
        """Once fitted on rows: samples with as many values as ``x_``'s rows (flattened)."""
        if self.fitted and self.params.kind == "vector":
            return ("flat", (int(self.x_.shape[1]),))
        return None

    def score(self, x: np.ndarray) -> np.ndarray:
        self._check_fitted()
        return self.score_inputs(self.inputs(x))

    def score_inputs(self, f: np.ndarray) -> np.ndarray:
        """PyOD's scores of inputs ``f`` ``(N, D)`` (what :meth:`score` does after
        :meth:`inputs`)."""
        if f.shape[1] != self.x_.shape[1]:
            raise ValueError(f"inputs have {f.shape[1]} values, the detector {self.x_.shape[1]}")
        if len(f) == 0:
            return np.zeros(0, dtype=np.float64)
        s = self.model().decision_function(np.asarray(f, dtype=np.float64))
        return np.asarray(s, dtype=np.float64).reshape(-1)

    def training_scores(self, x_train: np.ndarray) -> np.ndarray:
        """PyOD's own training scores (``decision_scores_``: k-NN leaves each sample out of
        its neighbours) when ``x_train`` is the data the detector was fitted on; the scores of
        :meth:`score` otherwise."""
        f = self.inputs(x_train)
        if f.shape == self.x_.shape and np.allclose(f, self.x_, rtol=1e-5, atol=1e-6):
            return np.asarray(self.model().decision_scores_, dtype=np.float64)
        return self.score_inputs(f)

    # -- persistence ------------------------------------------------------------------------
    def set_arrays(self, arrays: dict[str, np.ndarray]) -> Self:
        self.check_names(arrays, {"x_"})
        self.set_inputs(np.asarray(arrays["x_"]))
        if "threshold_" in arrays:
            self.threshold_ = float(np.asarray(arrays["threshold_"]))
        return self


@register_detector(PYOD_IFOREST)
class PyODIForest(PyODDetector):
    """PyOD's ``IForest`` (100 trees, ``max_samples = min(256, n)``), ``random_state``
    from ``seed``."""

    ParamsModel = PyODSeededParams
    params: PyODSeededParams

    def estimator_args(self, n: int) -> dict[str, Any]:
        state = int(seeded_rng(self.params.seed, 0x1F0).integers(1 << 31))
        return {**super().estimator_args(n), "random_state": state}


@register_detector(PYOD_ECOD)
class PyODECOD(PyODDetector):
    """PyOD's ``ECOD``; each sample scored as PyOD scores a one-row batch (:mod:`.pyod_ecod`)."""

    _rows: RowECOD | None = None

    def set_inputs(self, f: np.ndarray) -> Self:
        super().set_inputs(f)
        self._rows = None
        return self

    def score_inputs(self, f: np.ndarray) -> np.ndarray:
        if f.shape[1] != self.x_.shape[1]:
            raise ValueError(f"inputs have {f.shape[1]} values, the detector {self.x_.shape[1]}")
        if self._rows is None:
            self._rows = RowECOD(self.x_.astype(np.float64))
        return self._rows.score(f)


@register_detector(PYOD_KNN)
class PyODKNN(PyODDetector):
    """PyOD's ``KNN``: the distance to the 5th nearest training sample (``n - 1``-th on
    fewer than 6 samples)."""

    def estimator_args(self, n: int) -> dict[str, Any]:
        return {**super().estimator_args(n), "n_neighbors": min(KNN_NEIGHBOURS, n - 1)}


@register_detector(PYOD_OCSVM)
class PyODOCSVM(PyODDetector):
    """PyOD's ``OCSVM``: RBF kernel, ``gamma = "auto"`` (``1 / D``), ``nu = 0.5``."""


FITTED_KEPT = 2
"""PyOD models a process keeps, by their data and arguments (:func:`_fitted`)."""
_FITTED: OrderedDict[tuple[str, str, str], Any] = OrderedDict()


def _fitted(detector: str, args: dict[str, Any], x: np.ndarray) -> Any:
    """PyOD's ``detector`` with ``args`` fitted on ``x`` (float32, converted to float64).

    The last :data:`FITTED_KEPT` models are kept in memory by (detector, arguments, SHA-256
    of ``x``'s shape and bytes): ``centralized`` fits the pooled data on the server and
    every client rebuilds the same detector from the same arrays to evaluate, and in one
    process that is one fit. A fit is deterministic, so a kept model is the one a fit would
    give; nothing is written anywhere.
    """
    digest = hashlib.sha256(repr(x.shape).encode() + x.tobytes()).hexdigest()
    key = (detector, repr(sorted(args.items())), digest)
    if key in _FITTED:
        _FITTED.move_to_end(key)
        return _FITTED[key]
    cls = getattr(import_pyod(detector), PYOD_CLASSES[detector])
    with warnings.catch_warnings():
        # ECOD on a constant column: SciPy's NaN skewness, which PyOD makes 0
        warnings.filterwarnings("ignore", "Precision loss", RuntimeWarning)
        model = cls(**args).fit(x.astype(np.float64))
    _FITTED[key] = model
    while len(_FITTED) > FITTED_KEPT:
        _FITTED.popitem(last=False)
    return model


DETECTOR_CLASSES: dict[str, type[PyODDetector]] = {
    PYOD_IFOREST: PyODIForest,
    PYOD_ECOD: PyODECOD,
    PYOD_KNN: PyODKNN,
    PYOD_OCSVM: PyODOCSVM,
}


# -- the generic methods' side ------------------------------------------------------------------


def check_pyod(method: str, detector: str | None, kind: DataKind, params: Any) -> None:
    """Before anything trains: a one-line error when PyOD does not import (the extra is
    missing) or, on images, the feature extractor is not installed."""
    if detector not in PYOD_DETECTORS:
        return
    if kind not in ("vector", "image"):
        raise ConfigError(
            f"detector '{detector}' of method '{method}' needs vector or image data, not {kind}"
        )
    import_pyod(detector)
    if kind == "image":
        check_available(getattr(params, "resource", None) or DEFAULT_RESOURCE)


def make_pyod(
    detector: str, params: Any, setup: Setup, contamination: float, device: str = "cpu"
) -> PyODDetector:
    """The ``pyod-*`` detector a method's params ask for, for the run's data kind and seed
    (unset options take the detector's defaults)."""
    cls = DETECTOR_CLASSES[detector]
    extra: dict[str, Any] = {"seed": setup.seed} if "seed" in cls.ParamsModel.model_fields else {}
    return cls(
        kind="image" if setup.kind == "image" else "vector",
        resource=getattr(params, "resource", None) or DEFAULT_RESOURCE,
        image_size=getattr(params, "image_size", None) or DEFAULT_IMAGE_SIZE,
        batch_size=int(getattr(params, "batch_size", 64)),
        contamination=contamination,
        device=device,
        **extra,
    )
