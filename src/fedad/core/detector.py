"""The detector contract, in the spirit of scikit-learn and PyOD.

``__init__`` only stores arguments; ``fit(X)`` returns ``self``; ``score(X)`` gives one float
per sample, higher = more anomalous; ``threshold_`` comes from *training* scores;
``predict(X)`` returns 0/1. Fitted attributes end in ``_``. A detector that *localises*
anomalies in images also has ``score_maps(X)``, one anomaly map per image
(:class:`Localizer`). A detector can be written to and rebuilt from named arrays plus a
JSON-able config, which is how runs are saved and loaded.

Loading is safe by construction: a saved config names a detector by its *registered name*
(:func:`register_detector`, applied where the class is defined), never by an import path,
and its parameters are validated by the class's own ``ParamsModel`` before ``__init__`` runs.
A checkpoint is untrusted input; it can pick one of the registered classes and nothing else.

Each hyperparameter is declared once, as a field of the detector's ``ParamsModel`` (a
:class:`DetectorParams`): ``__init__`` takes those fields as keyword arguments and stores them
in ``self.params``, and :meth:`BaseDetector.get_params` reads them back.
"""

from __future__ import annotations

import copy
import functools
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import (
    Any,
    ClassVar,
    Protocol,
    Self,
    TypeVar,
    cast,
    runtime_checkable,
)

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fedad.core.catalog import detector_entries, import_detector
from fedad.core.errors import FedadError

DEFAULT_CONTAMINATION = 0.05
"""Threshold quantile used when neither the config nor the method gives a contamination."""


def quantile_threshold(train_scores: np.ndarray, contamination: float) -> float:
    """The :math:`(1 - c)` quantile of the training scores: a share ``c`` of them lie above."""
    if not 0.0 <= contamination < 1.0:
        raise ValueError(f"contamination must be in [0, 1), got {contamination}")
    s = np.asarray(train_scores, dtype=np.float64)
    if s.size == 0:
        raise ValueError("no training scores to set a threshold from")
    return float(np.quantile(s, 1.0 - contamination))


class DetectorParams(BaseModel):
    """Base of every detector's ``ParamsModel``: its hyperparameters, declared once.

    Frozen, and unknown keys are errors. The fields are the detector's keyword arguments,
    what :meth:`BaseDetector.get_params` gives and what a checkpoint stores (in field order);
    their bounds are tight enough that a crafted checkpoint cannot make ``__init__`` or
    ``set_arrays`` do anything but build that detector. A method's params reuse a field with
    :func:`shared_field` rather than declaring it again.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)


class ContaminationParams(DetectorParams):
    """The parameters of a detector that declares none of its own: the contamination."""

    contamination: float = Field(default=DEFAULT_CONTAMINATION, ge=0.0, lt=1.0)


def shared_field(model: type[BaseModel], name: str, description: str | None = None) -> Any:
    """A copy of field ``name`` of ``model`` (its default, bounds, description and the
    validators of its ``Annotated`` type), with its own ``description`` where given: a
    method's params declare ``hidden: int = shared_field(FGADDetectorParams, "hidden")``
    and so take the detector's declaration instead of writing it again (the contract test
    checks that the types agree). A ``field_validator`` of ``model`` is not part of the
    field: write such a check into the field's type (``Annotated[int,
    AfterValidator(f)]``) so that it travels with the copy."""
    info = copy.deepcopy(model.model_fields[name])
    if description is not None:
        info.description = description
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    info.json_schema_extra = {**extra, SHARED_MARK: True}
    return info


SHARED_MARK = "fedad_shared"
"""The mark :func:`shared_field` leaves on its copy (in the field's JSON-schema extras): what
:meth:`BaseDetector.configured` forwards."""


def _is_shared(field: Any) -> bool:
    extra = getattr(field, "json_schema_extra", None)
    return isinstance(extra, dict) and bool(extra.get(SHARED_MARK))


class RawRows(Protocol):
    """What turns raw table rows into model inputs: a run's :class:`fedad.rundir.inputs.Inputs`."""

    def table(self, frame: Any, where: str = ...) -> np.ndarray:
        """The rows of the DataFrame ``frame`` as model inputs, preprocessed as in training."""
        ...


class BaseDetector(ABC):
    """Base class of every detector.

    ``registry_name`` is set by :func:`register_detector`; ``ParamsModel`` (a
    :class:`DetectorParams`) declares the hyperparameters: the keyword arguments of
    ``__init__``, stored as given (not validated, as in scikit-learn) in ``self.params``
    with the model's defaults for the rest, and validated when a saved detector is rebuilt
    (:func:`detector_from_config`).

    Optional: ``score_maps(x) -> (N, H, W)`` float, a per-pixel anomaly map of each image of
    ``x`` ``(N, C, H, W)`` at the images' resolution, higher = more anomalous
    (:class:`Localizer`). A detector that defines it localises: on data with defect masks
    its maps are evaluated with pixel AUROC and PRO and a sample is kept for the report's
    overlays (:meth:`fedad.core.algorithm.Algorithm.client_evaluate`). The base class does not
    define it, so ``localizes(det)`` tells.
    """

    threshold_: float
    inputs_: RawRows | None = None
    """The run's preprocessing, set by :func:`fedad.load` (:class:`fedad.rundir.inputs.Inputs`):
    with it, ``score`` and ``predict`` also accept a pandas DataFrame of raw table rows,
    which are preprocessed exactly as the run's training data were."""
    registry_name: ClassVar[str] = ""
    ParamsModel: ClassVar[type[BaseModel]] = ContaminationParams
    params: BaseModel
    """The hyperparameters, an instance of ``ParamsModel`` (replace it, never mutate it)."""

    def __init__(self, contamination: float | None = None, /, **params: Any) -> None:
        """Store ``params``, keyword arguments named as the fields of ``ParamsModel`` (its
        defaults for the others), in ``self.params``; a ``TypeError`` for any other name.
        ``contamination`` may also be given positionally."""
        model = type(self).ParamsModel
        if contamination is not None:
            params["contamination"] = contamination
        for key in params:
            if key not in model.model_fields:
                raise TypeError(
                    f"{type(self).__name__}() got an unexpected keyword argument '{key}'"
                )
        self.params = model.model_construct().model_copy(update=params)

    @classmethod
    def configured(cls, source: BaseModel, /, **values: Any) -> Self:
        """A detector with ``values`` and, for its other parameters, the fields ``source``
        (a method's validated params) shares with it, its defaults for the rest: how a
        method's ``make_detector`` forwards what it shares with its detector.

        A field is shared when the method declares it with :func:`shared_field`, or lists it
        in its params' ``forwarded`` (the same name and meaning with a default of the
        method's own). A method field with a detector field's name that is neither is an
        error, never forwarded silently: declare it shared, list it, or rename it.
        ``contamination`` is never taken: give the resolved one."""
        fields = cls.ParamsModel.model_fields
        listed: frozenset[str] = getattr(type(source), "forwarded", frozenset())
        own = type(source).model_fields
        shared: dict[str, Any] = {}
        for k, v in source:
            if k not in fields or k in values or k == "contamination":
                continue
            if not (_is_shared(own.get(k)) or k in listed):
                raise TypeError(
                    f"{type(source).__name__}.{k} has the name of a {cls.__name__} parameter "
                    "but is not declared shared: use shared_field(), list it in "
                    "'forwarded', or rename it"
                )
            shared[k] = v
        return cls(**shared, **values)

    @property
    def contamination(self) -> float:
        """The threshold quantile (:meth:`set_threshold`): ``params.contamination``."""
        return cast(float, getattr(self.params, "contamination", DEFAULT_CONTAMINATION))

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Every detector's own ``score`` accepts raw table rows once ``inputs_`` is set.
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("score")
        if callable(own) and not getattr(own, "_fedad_raw", False):
            cls.score = _accepting_raw(own)  # type: ignore[method-assign]

    @abstractmethod
    def fit(self, x: np.ndarray) -> Self:
        """Train on (mostly normal) data and set ``threshold_`` from its scores."""

    @abstractmethod
    def score(self, x: np.ndarray) -> np.ndarray:
        """One anomaly score per sample, higher = more anomalous."""

    def expected_input(self) -> tuple[str, tuple[int, ...]] | None:
        """What :meth:`score` takes, where the detector declares it: ``("image", (C, H,
        W))``, images of exactly that shape; ``("vector", (D,))``, vectors (table rows) of
        ``D`` values; ``("flat", (D,))``, samples of any kind with ``D`` values each (they
        are flattened). An array's per-sample size is all :meth:`check_input` can check
        for the last two; ``fedad score`` also checks the kind against ``inputs.json``.
        ``None``: not declared (graphs, or a detector that takes any size); the base class
        declares nothing."""
        return None

    def check_input(self, x: Any) -> None:
        """Raise :class:`InputMismatch` (one line) when the array ``x`` does not have the
        per-sample shape :meth:`expected_input` declares; anything else passes. Every
        detector's ``score`` runs it first."""
        spec = self.expected_input()
        if spec is None or not isinstance(x, np.ndarray):
            return
        kind, shape = spec
        per_sample = tuple(int(n) for n in x.shape[1:])
        if kind == "image":
            if per_sample == shape:
                return
            takes = f"images of shape {shape}"
        else:
            if math.prod(per_sample) == math.prod(shape):
                return
            takes = f"samples of {math.prod(shape)} values"
        got = f"an array of shape {tuple(x.shape)}"
        raise InputMismatch(
            f"the {self.registry_name or type(self).__name__} detector takes {takes}, got {got}",
            "give data shaped as the run's training data (one sample per row)",
        )

    def check_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Raise ``ValueError`` when ``arrays`` (from an untrusted checkpoint) cannot be
        this detector's state, before :meth:`set_arrays` builds anything: a detector whose
        parameters size a network checks the arrays against that network's shapes
        (:func:`check_network_arrays`), so that parameters declaring a huge network are
        refused without allocating it. The base class checks nothing."""
        return None

    def training_scores(self, x_train: np.ndarray) -> np.ndarray:
        """The scores whose ``1 - contamination`` quantile is the threshold: by default
        :meth:`score` of the training data. A detector that keeps its training samples
        (a memory bank) scores them lower than unseen normal samples and overrides this with
        scores of samples held out of its memory (``patchcore``)."""
        return self.score(x_train)

    def set_threshold(self, x_train: np.ndarray) -> Self:
        """Set ``threshold_`` from the scores of training data (never test data):
        :meth:`training_scores`."""
        self.threshold_ = quantile_threshold(self.training_scores(x_train), self.contamination)
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        """1 where the score exceeds ``threshold_``, else 0 (see :func:`flag`)."""
        if not hasattr(self, "threshold_"):
            raise RuntimeError(f"{type(self).__name__} has no threshold_: call fit first")
        return flag(self.score(x), self.threshold_)

    # -- persistence ----------------------------------------------------------------------
    def get_params(self) -> dict[str, Any]:
        """The ``__init__`` arguments (JSON-able): the fields of ``self.params`` in their
        declared order, as given."""
        return dict(self.params)

    @abstractmethod
    def get_arrays(self) -> dict[str, np.ndarray]:
        """Fitted state as named arrays (including ``threshold_`` when set)."""

    @abstractmethod
    def set_arrays(self, arrays: dict[str, np.ndarray]) -> Self:
        """Restore the fitted state written by :meth:`get_arrays`."""

    def to_config(self) -> dict[str, Any]:
        """What :func:`detector_from_config` needs, besides the arrays."""
        cls = type(self)
        if not cls.registry_name or _DETECTORS.get(cls.registry_name) is not cls:
            raise TypeError(f"{cls.__qualname__} is not registered (use @register_detector)")
        return {"class": cls.registry_name, "params": self.get_params()}


@runtime_checkable
class Localizer(Protocol):
    """A detector that localises: ``score_maps(x)`` gives ``(N, H, W)`` anomaly maps of the
    images ``x`` ``(N, C, H, W)``, at their resolution, higher = more anomalous."""

    def score_maps(self, x: np.ndarray) -> np.ndarray: ...


def _accepting_raw(score: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """``score`` that first preprocesses a pandas DataFrame with the detector's ``inputs_``
    (arrays and graph sets pass through untouched), then checks the array against the
    detector's declared input (:meth:`BaseDetector.check_input`)."""

    @functools.wraps(score)
    def wrapper(self: BaseDetector, x: Any, *args: Any, **kwargs: Any) -> np.ndarray:
        if self.inputs_ is not None and type(x).__module__.startswith("pandas"):
            x = self.inputs_.table(x)
        self.check_input(x)
        return score(self, x, *args, **kwargs)

    wrapper._fedad_raw = True  # type: ignore[attr-defined]
    return wrapper


class InputMismatch(FedadError, ValueError):
    """Data that do not fit a detector's declared input (:meth:`BaseDetector.check_input`):
    a one-line user error, and a ``ValueError`` for code that catches those."""


def check_network_arrays(
    make: Callable[[], Any], arrays: Mapping[str, Any], prefix: str = ""
) -> None:
    """Raise ``ValueError`` unless ``arrays`` hold every tensor of the torch module that
    ``make()`` builds, named ``prefix + name``, with its shape.

    ``make`` runs on torch's meta device, which allocates nothing, so the network that a
    checkpoint's parameters declare is measured before it exists: parameters declaring a
    network far larger than the checkpoint's arrays (which the run-directory reader already
    bounds) are refused at no cost, and a network that is built holds no more than its
    arrays.
    """
    import torch

    with torch.device("meta"):
        module = make()
    for name, tensor in module.state_dict().items():
        got = arrays.get(prefix + name)
        if got is None:
            raise ValueError(f"the arrays lack '{prefix}{name}'")
        if tuple(np.shape(got)) != tuple(tensor.shape):
            raise ValueError(
                f"'{prefix}{name}' has shape {tuple(np.shape(got))}, the network's is "
                f"{tuple(tensor.shape)}"
            )


def localizes(det: object) -> bool:
    """Whether ``det`` has a callable ``score_maps`` (:class:`Localizer`)."""
    return callable(getattr(det, "score_maps", None))


def flag(scores: np.ndarray, threshold: float) -> np.ndarray:
    """0/1 decisions: 1 unless the score is at most the threshold.

    Fail closed: a sample the detector cannot score (NaN) and any sample under a NaN
    threshold is flagged, so a broken model raises alarms instead of passing everything.
    """
    s = np.asarray(scores, dtype=np.float64)
    return (~(s <= threshold)).astype(np.int64)


# -- registry of detector classes ---------------------------------------------------------------

_DETECTORS: dict[str, type[BaseDetector]] = {}
D = TypeVar("D", bound=type[BaseDetector])


def register_detector(name: str) -> Callable[[D], D]:
    """Class decorator: make a detector class loadable from checkpoints under ``name``.

    The class must define ``ParamsModel``, a pydantic model of its ``__init__`` arguments
    with bounds tight enough that a crafted checkpoint cannot make ``__init__`` or
    ``set_arrays`` do anything but build that detector.
    """

    def add(cls: D) -> D:
        if name in _DETECTORS and _DETECTORS[name] is not cls:
            raise ValueError(f"detector class '{name}' registered twice")
        if cls.ParamsModel is ContaminationParams and "ParamsModel" not in cls.__dict__:
            raise TypeError(f"{cls.__qualname__} needs a ParamsModel to be registered")
        cls.registry_name = name
        _DETECTORS[name] = cls
        return cls

    return add


def detector_classes() -> dict[str, type[BaseDetector]]:
    """Every detector class by name: each declared one imported (:mod:`fedad.core.catalog`), and
    those registered without a declaration."""
    for name in detector_entries():
        import_detector(name)
    return dict(sorted(_DETECTORS.items()))


def detector_class(name: str) -> type[BaseDetector] | None:
    """The detector class registered as ``name``, its module imported if it is only
    declared; ``None`` for an unknown name."""
    if name not in _DETECTORS:
        import_detector(name)
    return _DETECTORS.get(name)


# Detector modules moved since run directories named classes "module:qualname": old module ->
# new, so that such old names still resolve (only compared, never imported).
_MOVED_MODULES = {
    "fedad.methods.baselines.detectors": "fedad.components.detectors.neural",
    "fedad.methods.baselines.contrastive": "fedad.components.detectors.contrastive",
    "fedad.methods.baselines.ocsvm": "fedad.components.detectors.ocsvm",
    "fedad.methods.baselines.patchcore": "fedad.components.detectors.patchcore",
    "fedad.methods.baselines.pretrained": "fedad.components.detectors.pretrained",
}


def _lookup(name: object) -> type[BaseDetector]:
    if isinstance(name, str):
        cls = detector_class(name)
        if cls is not None:
            return cls
        # Run directories written before the registry named classes "module:qualname";
        # such a name is only compared with the classes of the declared modules, never
        # imported itself (a module moved since is compared under its new name).
        module, sep, qualname = name.partition(":")
        module = _MOVED_MODULES.get(module, module)
        wanted = f"{module}{sep}{qualname}"
        for entry in detector_entries().values():
            if entry.module == module:
                import_detector(entry.name)
        for cls in _DETECTORS.values():
            if wanted == f"{cls.__module__}:{cls.__qualname__}":
                return cls
    shown = repr(name)[:80]
    known = sorted({*detector_entries(), *_DETECTORS})
    raise FedadError(
        f"checkpoint names detector class {shown}, which is not a registered detector",
        f"known: {', '.join(known)}"
        if known
        else "no detector is declared: install fedad (its entry points declare them)",
    )


def detector_from_config(config: dict[str, Any], arrays: dict[str, np.ndarray]) -> BaseDetector:
    """Rebuild a detector from :meth:`BaseDetector.to_config` and its arrays.

    ``config`` and ``arrays`` are untrusted (they come from disk): the class is looked up in
    the registry, its parameters validated by its ``ParamsModel``, the arrays checked
    against what the parameters declare before anything is built
    (:meth:`BaseDetector.check_arrays`), and any mismatch between the arrays and the
    detector raises a one-line :class:`~fedad.core.errors.FedadError`.
    """
    if not isinstance(config, dict) or not isinstance(config.get("params"), dict):
        raise FedadError("checkpoint detector config is not {'class': ..., 'params': {...}}")
    cls = _lookup(config.get("class"))
    try:
        params = cls.ParamsModel.model_validate(config["params"])
    except ValidationError as err:
        e = err.errors()[0]
        key = ".".join(str(x) for x in e["loc"]) or "params"
        raise FedadError(
            f"checkpoint parameter '{key}' of detector '{cls.registry_name}' is invalid: {e['msg']}"
        ) from None
    det = cls(**params.model_dump())
    try:
        det.check_arrays(arrays)
        return det.set_arrays(arrays)
    except (KeyError, ValueError, TypeError, RuntimeError, IndexError) as err:
        reason = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
        raise FedadError(
            f"checkpoint arrays do not fit detector '{cls.registry_name}': {reason}"
        ) from None
