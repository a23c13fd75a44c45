"""The generic baselines as federated algorithms: local, centralized, FedAvg, FedProx.

Each combines with a detector from :mod:`.detectors` (``autoencoder`` or ``deepsvdd``) or
``contrastive`` (:mod:`.contrastive`, square images only);
``local`` and ``centralized`` also take ``pretrained`` (:mod:`.pretrained`, images only):
frozen pretrained features scored by k-NN or a shrinkage Gaussian, nothing trained; and
``ocsvm`` (:mod:`.ocsvm`): scikit-learn's RBF one-class SVM on flattened inputs.

* ``local``: every client trains alone for ``rounds x local_epochs`` epochs; nothing is sent
  but round numbers. The lower reference: what a party gets without federation.
* ``centralized``: clients upload their training data once, the server trains one model on
  the pooled data for ``rounds x local_epochs`` epochs. The privacy-violating upper
  reference; its ``bytes_up`` is the size of the data set.
* ``fedavg``: McMahan et al. (2017): clients start from the global weights, train
  ``local_epochs`` epochs, the server takes the example-weighted mean.
* ``fedprox``: FedAvg with the proximal term :math:`\\frac{\\mu}{2}\\lVert w-w^t\\rVert^2` in
  every client objective (Li et al., 2020).

For Deep SVDD the centre is computed once before round 1: in ``fedavg``/``fedprox`` clients
send their mean embedding :math:`\\bar\\phi_k` and :math:`n_k` under the initial global
weights and the server takes the example-weighted mean, which is the pooled-data centre;
``local`` clients use their own data; ``centralized`` uses the pooled data.

The ``contrastive`` detector (CSI's contrastive loss with shifted instances, the CSI
baseline of FADngs's Table I) scores a sample by minus its largest cosine similarity to a
*bank*, the normalised projections of training images. Rounds exchange the network only.
In ``fedavg``/``fedprox`` each client's final detector is the global network with a bank of
**its own** training images, computed on the client when it evaluates and never part of a
round; every client's detector thus differs, so these methods are ``personalized`` with
this detector: in a simulation the evaluate reply carries the detector, bank included, to
save the run (as for every personalised method); on a Flower deployment it stays on its
node. ``local``: each
client's own network and bank. ``centralized``: the server computes the bank of the pooled
uploads and sends it down with the network (the privacy-violating reference anyway).

On graph data (``local``, ``fedavg``, ``fedprox``; ``deepsvdd`` only, FGAD's Self-train,
FedAvg+DeepSVDD and FedProx+DeepSVDD baselines) Deep SVDD's network is a bias-free GIN
(:mod:`.model`), and graphs are batched with torch-geometric. Where sources' feature widths
differ, the baselines keep a per-client input layer and share the rest: in ``fedavg`` and
``fedprox`` the first linear map of the GIN's first layer (``(64, width)``, the one tensor
whose shape is the node-feature width) never leaves its client and is never averaged;
everything else, the centre included, is FedAvg'd as above. The server cannot know whether
all widths are equal (a client's width is its own), so this holds on every graph
federation, a single-width one too: there the input layers start equal (seeded) and drift
apart, a ``width x 64`` matrix per client. Each client's detector is thus its own, and
``fedavg``/``fedprox`` are ``personalized`` on graphs (saved per client, like the
``contrastive`` detector below). ``local`` builds each client's network for its own width;
``centralized`` does not take graphs (one network cannot read several widths).

The ``patchcore`` detector (:mod:`.patchcore`, images only: FedDyMem's "all parameters
aggregated" baseline) works like ``contrastive``: rounds exchange its projection only (a
1x1 convolution on frozen EfficientNet-Lite0 patch features), and each client's final
detector is the global projection with a coreset bank of its own training patches,
computed on the client; ``centralized`` builds the bank of the pooled uploads. With it the
parameters keep their meaning (``lr``, ``local_epochs``, ``weight_decay``: its default 5e-4,
``mu``), except ``batch_size``, 10 images unless the config sets it, and ``latent_dim``,
ignored (the projection keeps the feature width); and it takes keys of its own,
``backbone``, ``backbone_path``, ``coreset`` and ``image_size``
(:class:`~fedad.components.detectors.patchcore.PatchCoreOptions`, refused with other
detectors); docs/methods/baselines.md.

``fedavg`` and ``fedprox`` aggregate through :meth:`ServerContext.mean
<fedad.fl.context.ServerContext.mean>`, so both their phases run under SecAgg+ when
``privacy.secagg`` is on.
"""

from __future__ import annotations

from functools import partial
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from fedad.components.detectors.contrastive import CONTRASTIVE, ContrastiveDetector
from fedad.components.detectors.neural import (
    DETECTORS,
    AutoEncoderDetector,
    DeepSVDDDetector,
    TorchDetector,
    TorchDetectorParams,
)
from fedad.components.detectors.ocsvm import OCSVM, OCSVMDetector
from fedad.components.detectors.patchcore import (
    DEFAULT_CORESET,
    PATCHCORE,
    PATCHCORE_BATCH,
    SHARED_OPTIONS,
    PatchCoreDetector,
    PatchCoreOptions,
    check_patchcore,
)
from fedad.components.detectors.pretrained import (
    PRETRAINED,
    PretrainedDetector,
    PretrainedOptions,
    check_pretrained,
    make_pretrained,
)
from fedad.data.types import ClientData, DataKind, Features, dense
from fedad.detector import quantile_threshold, shared_field
from fedad.devices import resolve_device
from fedad.errors import ConfigError, RunError
from fedad.fl.algorithm import (
    Algorithm,
    ClientState,
    Handler,
    Params,
    ServerResult,
    Setup,
    register,
)
from fedad.fl.context import ServerContext
from fedad.fl.messages import Message, prefixed, unprefixed
from fedad.fl.rounds import close_round, fedavg_rounds
from fedad.fl.validate import ArraySpec
from fedad.seeding import rng as seeded_rng

TRAIN = "train"
CENTER = "center"
UPLOAD = "upload"
OWN = "own"
"""State prefix of a ``fedavg``/``fedprox`` client's own tensors (its graph input layer)."""


class TrainParams(Params, PatchCoreOptions):
    """Parameters shared by the baselines (and ``detector = "patchcore"``'s options)."""

    lr: float = shared_field(TorchDetectorParams, "lr")
    local_epochs: int = Field(default=1, ge=1, description="epochs per round")
    batch_size: int = Field(default=64, ge=1)
    latent_dim: int | None = Field(default=None, ge=1)
    weight_decay: float | None = shared_field(TorchDetectorParams, "weight_decay")


class BaselineParams(PretrainedOptions, TrainParams):
    """``local`` and ``centralized``: the training parameters plus the ``pretrained`` options."""


BaselineDetector = TorchDetector | PretrainedDetector | OCSVMDetector


class ProxParams(TrainParams):
    """FedProx adds the proximal coefficient."""

    mu: float = Field(default=0.01, ge=0.0, description="proximal term coefficient")


TORCH_DETECTORS: dict[str, type[TorchDetector]] = {
    **DETECTORS,
    CONTRASTIVE: ContrastiveDetector,
    PATCHCORE: PatchCoreDetector,
}
"""The trained detectors: the autoencoder, Deep SVDD, the contrastive and PatchCore-style
detectors."""
BANKED = (CONTRASTIVE, PATCHCORE)
"""Detectors scored against a bank of their holder's own training data."""


def client_rng(seed: int, round_no: int, client_id: int) -> np.random.Generator:
    """The generator a client uses in a round: a pure function of (seed, round, client)."""
    return seeded_rng(seed, round_no, client_id, 0xC11)


class TorchBaseline(Algorithm):
    """Shared parts of the baselines: detector construction and the deep SVDD centre."""

    detectors = (*DETECTORS, CONTRASTIVE, PATCHCORE)
    default_detector = "autoencoder"
    detector_kinds: ClassVar[dict[str, tuple[DataKind, ...]]] = {
        PRETRAINED: ("image",),
        OCSVM: ("vector", "image"),
        CONTRASTIVE: ("image",),
        PATCHCORE: ("image",),
        AutoEncoderDetector.name: ("vector", "image"),
    }
    """Detectors that take fewer data kinds than the method (checked when it is built)."""
    params: TrainParams

    def __init__(self, params: Params, setup: Setup, detector: str | None = None) -> None:
        super().__init__(params, setup, detector)
        if detector == PATCHCORE and "batch_size" not in self.params.model_fields_set:
            # FedDyMem's batches of 10 images, unless the config sets its own (the resolved
            # config then says 10, so a rerun of it trains alike)
            self.params = self.params.model_copy(update={"batch_size": PATCHCORE_BATCH})
        check_patchcore(self.name, detector, tuple(self.detectors), self.params)
        also = SHARED_OPTIONS if detector == PATCHCORE else ()
        check_pretrained(self.name, detector, setup.kind, self.params, also)
        shape = tuple(setup.feature_shape)
        if detector == CONTRASTIVE and (len(shape) != 3 or shape[1] != shape[2]):
            raise ConfigError(
                f"detector '{CONTRASTIVE}' of method '{self.name}' needs square images "
                f"(its negatives are rotations), not shape {shape}",
                "use another detector: autoencoder or deepsvdd",
            )

    def make_detector(self) -> BaselineDetector:
        """The configured detector; on graphs for the run's node-feature width (clients
        rebuild it for their own: :meth:`TorchDetector.build_for`)."""
        device = resolve_device(self.setup.device)  # this machine's, for "auto"
        if self.detector == PRETRAINED:
            return make_pretrained(self.params, self.contamination, device)
        if self.detector == OCSVM:
            return OCSVMDetector(contamination=self.contamination)
        cls = TORCH_DETECTORS[self.detector or "autoencoder"]
        shape = [int(s) for s in self.setup.feature_shape]
        if self.setup.kind == "graph":
            shape = [max(shape[-1] if shape else 1, 1)]  # -1: widths differ
        extra: dict[str, Any] = {}
        if cls is PatchCoreDetector:
            p = self.params
            extra = {
                "backbone": p.backbone or "efficientnet-lite0",
                "backbone_path": p.backbone_path,
                "coreset": DEFAULT_CORESET if p.coreset is None else p.coreset,
                "stages": p.stages,
                # by default the backbone reads images at their own side, kept in 64..224
                "image_size": p.image_size or min(224, max(64, max(shape[1:], default=64))),
            }
        # latent_dim, lr, batch_size, weight_decay (None: the detector's own default) by name
        return cls.configured(
            self.params,
            **extra,
            kind=self.setup.kind,
            input_shape=shape,
            epochs=self.params.local_epochs,
            contamination=self.contamination,
            seed=self.setup.seed,
            device=device,
        )

    def _global_detector(self, arrays: dict[str, np.ndarray]) -> BaselineDetector:
        det = self.make_detector().build()
        return det.set_arrays(dict(arrays)) if arrays else det

    @staticmethod
    def _with_bank(det: BaselineDetector, x: Features) -> BaselineDetector:
        """``det`` ready to score: the contrastive detector's bank := ``x`` (the training
        images of whoever holds the detector); other detectors as they are."""
        if isinstance(det, ContrastiveDetector | PatchCoreDetector):
            det.set_bank(dense(x))
        return det

    @staticmethod
    def _shared_arrays(det: BaselineDetector) -> dict[str, np.ndarray]:
        """What the server hands to the evaluate phase: the model, and the contrastive
        detector's bank when it has one (``centralized``: the pooled data's)."""
        out = det.model_arrays()
        if isinstance(det, ContrastiveDetector | PatchCoreDetector) and hasattr(det, "bank_"):
            out["bank_"] = det.bank_
        return out


class _GlobalModel(TorchBaseline):
    """FedAvg-style algorithms: one global model, example-weighted mean each round."""

    prox_mu: float = 0.0

    def handlers(self) -> dict[str, Handler]:
        return {**super().handlers(), TRAIN: self.client_train, CENTER: self.client_center}

    # client side
    def _client_model(
        self, state: ClientState, data: ClientData, arrays: dict[str, np.ndarray]
    ) -> TorchDetector:
        """The global model as this client holds it: on dense data the server's ``arrays``;
        on graphs built for the client's node-feature width, with its own input layer (the
        seeded initial one until it has trained) and the server's shared rest."""
        if self.setup.kind != "graph":
            det = self._global_detector(arrays)
            assert isinstance(det, TorchDetector)
            return det
        det = self.make_detector()
        assert isinstance(det, TorchDetector)
        det.build_for(data.x_train)
        own = unprefixed(state, OWN)
        if own:
            return det.set_arrays({**arrays, **own})
        return det.set_shared(arrays) if arrays else det

    def client_center(self, state: ClientState, data: ClientData, msg: Message) -> Message:
        det = self._client_model(state, data, dict(msg.arrays))
        assert isinstance(det, DeepSVDDDetector)
        mean = det.embedding_sum(data.x_train) / max(data.n_train, 1)
        return Message(CENTER, {"mean": mean}, {"num_examples": data.n_train})

    def client_train(self, state: ClientState, data: ClientData, msg: Message) -> Message:
        det = self._client_model(state, data, dict(msg.arrays))
        rng = client_rng(self.setup.seed, int(msg.get("round", 0)), data.client_id)
        loss = det.train_epochs(data.x_train, self.params.local_epochs, rng, self.prox_mu)
        arrays = det.model_arrays()
        state.update(prefixed({k: arrays[k] for k in det.width_keys()}, OWN))
        scalars = {"num_examples": data.n_train, "loss": loss, **det.train_monitor()}
        return Message(TRAIN, det.shared_arrays(), scalars)

    def client_detector(
        self, state: ClientState, data: ClientData, msg: Message
    ) -> BaselineDetector:
        """The global model (on graphs with the client's own input layer); with
        ``contrastive``, plus the bank of this client's own training images, computed here
        (not part of any round)."""
        return self._with_bank(self._client_model(state, data, dict(msg.arrays)), data.x_train)

    @property
    def personalized(self) -> bool:  # type: ignore[override]
        """With ``contrastive`` every client's detector differs (its own bank), and on graphs
        (its own input layer), so it is saved per client like a personalised method's;
        otherwise all share the global model."""
        return self.detector in BANKED or self.setup.kind == "graph"

    # server side
    def _center_round(self, ctx: ServerContext, det: TorchDetector) -> None:
        weights = det.shared_arrays()
        ids = ctx.grid.get_node_ids()
        latent = det.model_.center.shape[0]  # type: ignore[index]
        center = ctx.mean(
            {i: Message(CENTER, weights) for i in ids},
            arrays={"mean": ArraySpec((int(latent),), "float64")},
        )
        if center.arrays is None:
            raise RunError(
                f"{self.name}: no client answered the Deep SVDD centre phase",
                "see the events logged above",
            )
        assert isinstance(det, DeepSVDDDetector)
        det.set_center(center.arrays["mean"])
        ctx.end_round(0)

    def server(self, ctx: ServerContext) -> ServerResult:
        det = self.make_detector().build()
        assert isinstance(det, TorchDetector)
        if isinstance(det, DeepSVDDDetector):
            self._center_round(ctx, det)
        weights = fedavg_rounds(ctx, det.shared_arrays(), TRAIN, ("loss", *det.monitor_keys))
        return ServerResult(arrays=weights, scalars={})


@register
class FedAvg(_GlobalModel):
    """FedAvg (McMahan et al., 2017) over a baseline detector."""

    name = "fedavg"
    summary = "FedAvg: example-weighted mean of client models each round"
    kinds = ("vector", "image", "graph")
    ParamsModel = TrainParams


@register
class FedProx(_GlobalModel):
    """FedProx (Li et al., 2020): FedAvg plus a proximal term on the client side."""

    name = "fedprox"
    summary = "FedProx: FedAvg with a proximal term mu/2 ||w - w_global||^2 on clients"
    kinds = ("vector", "image", "graph")
    ParamsModel = ProxParams
    params: ProxParams

    @property
    def prox_mu(self) -> float:  # type: ignore[override]
        return self.params.mu


@register
class Local(TorchBaseline):
    """Each client trains its own detector; no model is shared."""

    name = "local"
    summary = "Local: each client trains alone (no federation), lower reference"
    kinds = ("vector", "image", "graph")
    personalized = True
    detectors = (*DETECTORS, CONTRASTIVE, PATCHCORE, PRETRAINED, OCSVM)
    ParamsModel = BaselineParams

    def handlers(self) -> dict[str, Handler]:
        return {**super().handlers(), TRAIN: self.client_train}

    def _own_detector(self, state: ClientState, data: ClientData) -> BaselineDetector:
        det = self.make_detector()
        own = unprefixed(state, "model")
        if own:
            return det.build().set_arrays(own)  # on graphs: for the arrays' width
        if isinstance(det, TorchDetector):  # on graphs: for the client's width
            return det.build_for(data.x_train).prepare(data.x_train)
        return det.build().prepare(dense(data.x_train))

    def client_train(self, state: ClientState, data: ClientData, msg: Message) -> Message:
        det = self._own_detector(state, data)
        rng = client_rng(self.setup.seed, int(msg.get("round", 0)), data.client_id)
        monitor: dict[str, float] = {}
        if isinstance(det, TorchDetector):
            loss = det.train_epochs(data.x_train, self.params.local_epochs, rng)
            monitor = det.train_monitor()
        else:
            loss = det.train_epochs(dense(data.x_train), self.params.local_epochs, rng)
        state.update(prefixed(det.model_arrays(), "model"))
        return Message(TRAIN, {}, {"num_examples": data.n_train, "loss": loss, **monitor})

    def client_detector(
        self, state: ClientState, data: ClientData, msg: Message
    ) -> BaselineDetector:
        return self._with_bank(self._own_detector(state, data), data.x_train)

    def server(self, ctx: ServerContext) -> ServerResult:
        torch_cls = TORCH_DETECTORS.get(self.detector or "autoencoder")
        keys = ["loss", *(torch_cls.monitor_keys if torch_cls is not None else ())]
        fedavg_rounds(ctx, {}, TRAIN, keys)  # nothing to average: the clients train alone
        return ServerResult(arrays={}, scalars={})


@register
class Centralized(TorchBaseline):
    """All training data pooled on the server: the privacy-violating upper reference."""

    name = "centralized"
    summary = "Centralized: clients upload their data, one model on the pool (upper reference)"
    detectors = (*DETECTORS, CONTRASTIVE, PATCHCORE, PRETRAINED, OCSVM)
    ParamsModel = BaselineParams

    def handlers(self) -> dict[str, Handler]:
        return {**super().handlers(), UPLOAD: self.client_upload}

    def client_upload(self, state: ClientState, data: ClientData, msg: Message) -> Message:
        x = np.ascontiguousarray(data.x_train, dtype=np.float32)
        return Message(UPLOAD, {"x": x}, {"num_examples": data.n_train})

    def client_detector(
        self, state: ClientState, data: ClientData, msg: Message
    ) -> BaselineDetector:
        return self._global_detector(dict(msg.arrays))

    def server(self, ctx: ServerContext) -> ServerResult:
        replies = ctx.send(
            {i: Message(UPLOAD) for i in ctx.grid.get_node_ids()}, scalars=["num_examples"]
        )
        shape = tuple(self.setup.feature_shape)
        parts = []
        for nid, m in replies.items():
            x = m.arrays.get("x")
            if x is None or tuple(x.shape[1:]) != shape or x.dtype != np.float32:
                ctx.event(f"rejected upload of node {nid}: wrong shape or dtype")
                continue
            parts.append(x)
        if not parts:
            raise RunError(
                f"{self.name}: no client uploaded usable data", "see the events logged above"
            )
        pooled = np.concatenate(parts)
        det = self.make_detector().build()
        det.prepare(pooled)
        for r in range(1, ctx.rounds + 1):
            rng = seeded_rng(self.setup.seed, r, 0xCE7)
            ctx.log(loss=det.train_epochs(pooled, self.params.local_epochs, rng))
            if isinstance(det, TorchDetector):
                ctx.log(**det.train_monitor())
            close_round(ctx, r, partial(self._pooled_result, det, pooled))
        return self._pooled_result(det, pooled)

    def _pooled_result(self, det: BaselineDetector, pooled: np.ndarray) -> ServerResult:
        """The model trained on the pooled data, ready to score, with the threshold of its
        scores on that data."""
        self._with_bank(det, pooled)
        threshold = quantile_threshold(det.score(pooled), self.contamination)
        return ServerResult(arrays=self._shared_arrays(det), scalars={"threshold": threshold})
