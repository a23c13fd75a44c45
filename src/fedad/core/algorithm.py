"""Federated algorithms: client handlers + a server program, no networking.

An :class:`Algorithm` owns both sides of a method. Client handlers are named functions
``(state, data, message) -> message``; the server program is plain Python that drives a
:class:`~fedad.core.grid.Grid` through a :class:`~fedad.core.context.ServerContext` and reduces
replies with the pure functions of :mod:`fedad.core.aggregate`. Engines (in-process, Flower)
deliver the messages.

Every algorithm also answers the ``"evaluate"`` phase the same way: the client builds its
final detector from its state and the server's last message, sets the threshold from its own
*training* scores (unless the server sent one), scores its local test set and replies with
the scores (and, for a detector that localises on images with defect masks, its per-pixel
anomaly maps with the masks). The test data never leave the client except as scores and maps.
Which metrics are computed from the replies: :mod:`fedad.evaluation.families`.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, cast

import numpy as np
from pydantic import ConfigDict, Field, ValidationError

from fedad.core.as_written import AsWritten
from fedad.core.catalog import import_method, method_entries
from fedad.core.context import ServerContext
from fedad.core.detector import BaseDetector, Localizer, flag, localizes, quantile_threshold
from fedad.core.errors import ConfigError
from fedad.core.messages import Message, prefixed
from fedad.core.sampling import embedding_indices
from fedad.core.types import ClientData, DataKind

ClientState = dict[str, np.ndarray]
Handler = Callable[[ClientState, ClientData, Message], Message]

EVALUATE = "evaluate"

log = logging.getLogger("fedad")


class Params(AsWritten):
    """Base of every method's ``[methods.params]`` model: frozen, unknown keys are errors.

    A field the method shares with its detector is declared once, in the detector's
    :class:`~fedad.core.detector.DetectorParams`, and taken here with
    :func:`~fedad.core.detector.shared_field`; ``make_detector`` forwards the shared fields with
    :meth:`~fedad.core.detector.BaseDetector.configured`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    forwarded: ClassVar[frozenset[str]] = frozenset()
    """Fields forwarded to the detector that are not :func:`~fedad.core.detector.shared_field`
    copies: the detector's parameter of the same name and meaning, with the method's own
    default (the FGAD that works, SCAFFOLD's SGD step)."""

    contamination: float | None = Field(
        default=None,
        ge=0.0,
        lt=1.0,
        description="threshold quantile; default: partition.contamination, else 0.05",
    )


@dataclass(frozen=True)
class Setup:
    """Facts about the run an algorithm is built for."""

    kind: DataKind
    feature_shape: tuple[int, ...]
    rounds: int
    seed: int
    contamination: float
    num_clients: int
    device: str = "cpu"
    """``[engine] device`` as configured; resolve it where torch work runs
    (:func:`fedad.devices.resolve_device`), so that ``"auto"`` means each machine's own."""


SampleField = Literal["x", "mask", "graph"]
"""What a sample may carry: dense features ``x``, a pixel ``mask``, a ``graph``."""


@dataclass(frozen=True)
class PublicRequest:
    """A public (auxiliary) data set for the server, unrelated to the clients' data.

    ``name`` is one of :func:`fedad.data.public.public_names` (a generated set, scikit-image's
    images, or a registered data set); ``n`` samples, drawn deterministically from the run's
    seed; ``shape`` ``(C, H, W)``, or ``None`` for the federation's own image shape.
    """

    name: str = "procedural"
    n: int = 256
    shape: tuple[int, int, int] | None = None


@dataclass(frozen=True)
class Requirements:
    """What a method needs beyond its clients, declared once (:meth:`Algorithm.requirements`).

    The runner resolves each before anything trains, on every engine: ``server_normal``
    held-out normal samples for the server (capped at a fifth of the normal pool), a
    ``public`` set generated or loaded by name, the named pretrained ``resources`` checked
    to be installed (:mod:`fedad.resources`), and the sample ``fields`` the method reads.
    ``update_phases`` are the phases whose replies are model updates: ``[privacy]`` and the
    model attacks of ``[attack]`` act on those and on no other phase.
    """

    server_normal: int = 0
    public: PublicRequest | None = None
    resources: tuple[str, ...] = ()
    fields: tuple[SampleField, ...] = ("x",)
    update_phases: tuple[str, ...] = ("train",)


@dataclass
class ServerResult:
    """What a server program hands to the evaluation phase."""

    arrays: dict[str, np.ndarray]
    scalars: dict[str, Any]


class Algorithm(ABC):
    """Base class of every federated method."""

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    detectors: ClassVar[tuple[str, ...]] = ()
    default_detector: ClassVar[str | None] = None
    kinds: ClassVar[tuple[DataKind, ...]] = ("vector", "image")
    personalized: ClassVar[bool] = False
    detector_kinds: ClassVar[dict[str, tuple[DataKind, ...]]] = {}
    """Detectors that take fewer data kinds than the method (default: all of ``kinds``)."""
    ParamsModel: ClassVar[type[Params]] = Params
    metric_families: ClassVar[tuple[Any, ...]] = ()
    """Metric families (:class:`fedad.evaluation.families.MetricFamily` instances: the core
    names no evaluation type) this method declares, computed beside the built-in ones (image
    level always, pixel level when the evaluate replies carry anomaly maps; see
    :mod:`fedad.evaluation.families`). Each adds its keys to ``metrics.json`` and its
    columns to the terminal table or the report, for this method only: ONLAD declares
    :data:`~fedad.evaluation.families.NORMAL_POSITIVE` (precision, recall and F1 with
    normal as the positive class, its paper's Table I convention); the default is none.
    """

    def __init__(self, params: Params, setup: Setup, detector: str | None = None) -> None:
        self.params = params
        self.setup = setup
        self.detector = detector

    @classmethod
    def kinds_for(cls, detector: str | None) -> tuple[DataKind, ...]:
        """The data kinds the method handles with ``detector``."""
        return cls.detector_kinds.get(detector or "", cls.kinds)

    @classmethod
    def detector_for(cls, kind: DataKind) -> str | None:
        """The detector used when the config names none: ``default_detector`` (else the
        first of ``detectors``), or the first of ``detectors`` that handles ``kind`` when
        that one does not."""
        default = cls.default_detector or (cls.detectors[0] if cls.detectors else None)
        if default is None or kind in cls.kinds_for(default):
            return default
        return next((d for d in cls.detectors if kind in cls.kinds_for(d)), default)

    @classmethod
    def requirements(cls, params: dict[str, Any]) -> Requirements:
        """What this method needs from the run for ``params`` (the raw ``[methods.params]``).

        The default asks for nothing beyond the clients and treats ``"train"`` as the only
        update phase. May raise :class:`pydantic.ValidationError` on bad params (reported,
        in one line, when the method is built).
        """
        return Requirements()

    @classmethod
    def server_samples(cls, params: dict[str, Any]) -> int:
        """Held-out normal samples the server asks for: ``requirements().server_normal``."""
        return cls.requirements(params).server_normal

    @property
    def contamination(self) -> float:
        c = self.params.contamination
        return self.setup.contamination if c is None else c

    # -- the two sides ---------------------------------------------------------------------
    def handlers(self) -> dict[str, Handler]:
        """Phase name -> client handler. Subclasses add their phases to this."""
        return {EVALUATE: self.client_evaluate}

    @abstractmethod
    def server(self, ctx: ServerContext) -> ServerResult:
        """The server program: run ``ctx.rounds`` rounds, return the final global state."""

    @abstractmethod
    def client_detector(self, state: ClientState, data: ClientData, msg: Message) -> BaseDetector:
        """The client's final detector, from its state and the evaluate message."""

    # -- evaluation ------------------------------------------------------------------------
    def client_evaluate(self, state: ClientState, data: ClientData, msg: Message) -> Message:
        """Score the local test set with the final detector; threshold from training data
        (:meth:`~fedad.core.detector.BaseDetector.training_scores`).

        The reply holds ``score`` (float64), ``label`` (int64), ``pred`` (0/1 int64) per test
        sample; when the detector localises (:func:`fedad.core.detector.localizes`) and the
        client's test images have masks (``data.mask_test``), also ``map``, the detector's
        ``score_maps`` as float32 ``(N, H, W)``, and ``mask``, the masks as uint8: the
        pixel-level metrics come from those. When the detector has ``represent(x) -> (N, D)``
        (e.g. FADngs's :math:`z(x)`), also ``embedding`` and ``embedding_index``
        (:meth:`embeddings`), for the report's t-SNE. Otherwise the reply is as it always was.
        """
        det = self.client_detector(state, data, msg)
        # a graph method's detector scores a GraphSet; BaseDetector is typed for arrays
        x_train, x_test = cast(np.ndarray, data.x_train), cast(np.ndarray, data.x_test)
        if "threshold" in msg.scalars:
            det.threshold_ = float(msg.scalars["threshold"])
        else:  # held-out scores where the detector keeps its training samples (training_scores)
            det.threshold_ = quantile_threshold(det.training_scores(x_train), self.contamination)
        scores = det.score(x_test)
        arrays: dict[str, np.ndarray] = {
            "score": scores.astype(np.float64),
            "label": data.y_test.astype(np.int64),
            "pred": flag(scores, det.threshold_),
        }
        if data.mask_test is not None and localizes(det):
            arrays.update(self.anomaly_maps(det, data))
        if callable(getattr(det, "represent", None)):
            arrays.update(self.embeddings(det, data))
        arrays.update(self.evaluation_arrays(det, data))
        if self.personalized:
            arrays.update(prefixed(det.get_arrays(), "detector"))
        return Message(
            EVALUATE,
            arrays,
            {"threshold": float(det.threshold_), "num_examples": data.n_train},
        )

    def evaluation_arrays(self, det: BaseDetector, data: ClientData) -> dict[str, np.ndarray]:
        """Method-specific arrays for the evaluate reply, from the same final detector that
        scored the test set (e.g. a second head's scores); ``{}`` by default."""
        return {}

    def anomaly_maps(self, det: BaseDetector, data: ClientData) -> dict[str, np.ndarray]:
        """``{"map", "mask"}`` of the client's test images: ``det.score_maps`` at the masks'
        resolution (a ValueError naming the detector otherwise)."""
        assert data.mask_test is not None
        assert isinstance(det, Localizer)
        maps = np.asarray(det.score_maps(cast(np.ndarray, data.x_test)), dtype=np.float32)
        mask = np.asarray(data.mask_test, dtype=np.uint8)
        if maps.shape != mask.shape:
            raise ValueError(
                f"{type(det).__name__}.score_maps gave maps of shape {maps.shape}; the test "
                f"images' masks have shape {mask.shape} (one (H, W) map per image, at the "
                "images' resolution)"
            )
        return {"map": maps, "mask": mask}

    def embeddings(self, det: BaseDetector, data: ClientData) -> dict[str, np.ndarray]:
        """``{"embedding", "embedding_index"}``: ``det.represent`` of a bounded sample of the
        client's test samples as float32 ``(n, D)``, and their positions in the test set
        (int64, sorted; :func:`fedad.evaluation.samples.embedding_indices`: at most 200, both
        classes kept, chosen from the labels only, so the same samples every time). Only for the
        report's figure: a detector whose ``represent`` fails or gives no finite ``(n, D)``
        array costs the figure (a warning), never the evaluation; ``{}`` then."""
        take = embedding_indices(data.y_test)
        if len(take) == 0:
            return {}
        try:
            x = cast(np.ndarray, data.x_test)[take]
            z = np.asarray(det.represent(x), dtype=np.float32)  # type: ignore[attr-defined]
        except Exception as err:  # a figure's input: never worth a failed evaluation
            log.warning("%s.represent failed (%s): no embedding", type(det).__name__, err)
            return {}
        if z.ndim != 2 or len(z) != len(take) or not np.all(np.isfinite(z)):
            log.warning(
                "%s.represent gave %s for %d samples (need finite (n, D)): no embedding",
                type(det).__name__,
                z.shape,
                len(take),
            )
            return {}
        return {"embedding": z, "embedding_index": take}

    def extra_metrics(self, evaluations: dict[int, Message]) -> dict[str, Any]:
        """Method-specific entries for metrics.json (from the evaluate replies)."""
        return {}

    def score_scale(self) -> str | None:
        """How this method puts different clients' scores on one scale before they are
        pooled, in one sentence (metrics.json's ``score_scale``, shown in the report), or
        ``None`` when its scores are used as the detectors give them."""
        return None

    def detector_config(self) -> dict[str, Any]:
        """How to rebuild this method's detectors
        (:func:`fedad.core.detector.detector_from_config`)."""
        return self.make_detector().to_config()

    @abstractmethod
    def make_detector(self) -> BaseDetector:
        """A fresh, unfitted detector as this method configures it."""


# -- registry ----------------------------------------------------------------------------------

_REGISTRY: dict[str, type[Algorithm]] = {}


CATALOG_FIELDS = frozenset({"summary", "kinds", "detectors"})
"""What a declared method's catalog entry says and its class does not."""


def register(cls: type[Algorithm]) -> type[Algorithm]:
    """Class decorator adding an algorithm to the registry under ``cls.name``.

    A method declared in the catalog (:func:`fedad.core.catalog.declare_method`, its folder's
    ``__init__.py``) takes its ``summary``, ``kinds`` and ``detectors`` from that
    declaration, the one place they are written; such a class must not set them itself. A
    class registered without a declaration (a test's, a user's) keeps its own."""
    if cls.name in _REGISTRY:
        raise ValueError(f"method '{cls.name}' registered twice")
    entry = method_entries().get(cls.name)
    if entry is not None and entry.module == cls.__module__:
        own = sorted(CATALOG_FIELDS & set(vars(cls)))
        if own:
            raise TypeError(
                f"method '{cls.name}' sets {', '.join(own)} itself: a declared method takes "
                "them from its declaration (fedad.core.catalog.declare_method), written once"
            )
        cls.summary = entry.summary
        cls.kinds = cast("tuple[DataKind, ...]", entry.kinds)
        cls.detectors = entry.detectors
    _REGISTRY[cls.name] = cls
    return cls


def update_phases(algorithm: Algorithm) -> tuple[str, ...]:
    """The phases whose replies are ``algorithm``'s model updates.

    Those its :meth:`~fedad.core.algorithm.Algorithm.requirements` declare
    (``update_phases``) that it has a client handler for, in declared order, each once.
    ``evaluate`` is the harness's scoring phase and never counts as an update.
    """
    declared = type(algorithm).requirements(algorithm.params.model_dump()).update_phases
    handled = algorithm.handlers()
    return tuple(p for p in dict.fromkeys(declared) if p in handled and p != EVALUATE)


def registry() -> dict[str, type[Algorithm]]:
    """Every method by name: each declared one imported (:mod:`fedad.core.catalog`), and those
    registered without a declaration (a test's, a user's). Imports every method module:
    for listing or checking them all; a run looks its methods up by name
    (:func:`method_class`)."""
    for name in method_entries():
        import_method(name)
    return dict(sorted(_REGISTRY.items()))


def method_names() -> list[str]:
    """The names of every declared or registered method, sorted, importing none."""
    return sorted({*method_entries(), *_REGISTRY})


def method_class(name: str) -> type[Algorithm] | None:
    """The method registered as ``name``, its module imported if it is only declared;
    ``None`` for an unknown name."""
    if name not in _REGISTRY and import_method(name) and name not in _REGISTRY:
        raise TypeError(f"method '{name}' is declared but its module does not register it")
    return _REGISTRY.get(name)


def build_algorithm(
    name: str,
    params: dict[str, Any],
    setup: Setup,
    detector: str | None = None,
    where: str = "methods",
) -> Algorithm:
    """Instantiate a registered method, with one-line errors for every user mistake."""
    cls = method_class(name)
    if cls is None:
        raise ConfigError(
            f"unknown method '{name}' at {where}.name",
            f"available: {', '.join(method_names())}; see `fedad list methods`",
        )
    if setup.kind not in cls.kinds:
        raise ConfigError(
            f"method '{name}' does not handle {setup.kind} data",
            f"it handles {', '.join(cls.kinds)}",
        )
    if cls.detectors:
        detector = detector or cls.detector_for(setup.kind)
        if detector not in cls.detectors:
            raise ConfigError(
                f"unknown detector '{detector}' at {where}.detector for method '{name}'",
                f"choose one of: {', '.join(cls.detectors)}",
            )
    elif detector is not None:
        raise ConfigError(
            f"method '{name}' has its own detector; remove {where}.detector",
        )
    if setup.kind not in cls.kinds_for(detector):
        raise ConfigError(
            f"detector '{detector}' of method '{name}' needs "
            f"{' or '.join(cls.kinds_for(detector))} data, not {setup.kind} data",
            "use another detector: "
            + ", ".join(
                d for d in cls.detectors if d != detector and setup.kind in cls.kinds_for(d)
            ),
        )
    try:
        p = cls.ParamsModel.model_validate(params)
    except ValidationError as err:
        e = err.errors()[0]
        key = ".".join(str(x) for x in e["loc"])
        if e["type"] == "extra_forbidden":
            known = ", ".join(cls.ParamsModel.model_fields)
            raise ConfigError(
                f"unknown parameter '{key}' at {where}.params for method '{name}'",
                f"known: {known}",
            ) from None
        raise ConfigError(
            f"invalid {where}.params.{key} for method '{name}': "
            f"{e['msg'].removeprefix('Value error, ')} (got {e.get('input')!r})"
        ) from None
    return cls(p, setup, detector)
