"""The federated protocol of the trained torch detectors, shared by several methods.

:class:`TorchBaseline` builds the configured detector (``autoencoder``, ``deepsvdd``,
``contrastive``, ``patchcore``; the Deep SVDD centre; the bank of a banked detector) and
:class:`GlobalModel` is the FedAvg-shaped protocol over it: one global model, the clients'
example-weighted mean each round (with ``prox_mu`` FedProx's proximal term). The generic
baselines (:mod:`fedad.methods.baselines.federated`), FedBN, SCAFFOLD and GCFL build on them.
"""

from __future__ import annotations

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
    check_pretrained,
    make_pretrained,
)
from fedad.components.detectors.pyod_reference import (
    PYOD_DETECTORS,
    PYOD_OPTIONS,
    PyODDetector,
    check_pyod,
    make_pyod,
)
from fedad.core.algorithm import (
    Algorithm,
    ClientState,
    Handler,
    Params,
    ServerResult,
    Setup,
)
from fedad.core.context import ServerContext
from fedad.core.detector import shared_field
from fedad.core.errors import ConfigError, RunError
from fedad.core.messages import Message, prefixed, unprefixed
from fedad.core.rng import rng as seeded_rng
from fedad.core.rounds import fedavg_rounds
from fedad.core.types import ClientData, DataKind, Features, dense
from fedad.core.validate import ArraySpec
from fedad.devices import resolve_device

TRAIN = "train"


CENTER = "center"


UPLOAD = "upload"


OWN = "own"
"""State prefix of a ``fedavg``/``fedprox`` client's own tensors (its graph input layer)."""


class TrainParams(Params, PatchCoreOptions):
    """Parameters shared by the baselines (and ``detector = "patchcore"``'s options)."""

    lr: float = shared_field(TorchDetectorParams, "lr")
    local_epochs: int = Field(default=1, ge=1, le=100_000, description="epochs per round")
    batch_size: int = shared_field(TorchDetectorParams, "batch_size")
    latent_dim: int | None = shared_field(TorchDetectorParams, "latent_dim")
    weight_decay: float | None = shared_field(TorchDetectorParams, "weight_decay")


BaselineDetector = TorchDetector | PretrainedDetector | OCSVMDetector | PyODDetector


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
        **dict.fromkeys(PYOD_DETECTORS, ("vector", "image")),
    }
    """Detectors that take fewer data kinds than the method (checked when it is built)."""
    params: TrainParams

    def __init__(self, params: Params, setup: Setup, detector: str | None = None) -> None:
        super().__init__(params, setup, detector)
        if detector == PATCHCORE and "batch_size" not in self.params.model_fields_set:
            # FedDyMem's batches of 10 images, unless the config sets its own (the resolved
            # config then says 10, so a rerun of it trains alike)
            self.params = self.params.model_copy(update={"batch_size": PATCHCORE_BATCH})
        also: tuple[str, ...] = SHARED_OPTIONS if detector == PATCHCORE else ()
        own = self.params
        if detector in PYOD_DETECTORS:  # image_size: the feature extractor's, as pretrained's
            also, own = PYOD_OPTIONS, own.model_copy(update={"image_size": None})
        check_patchcore(self.name, detector, tuple(self.detectors), own)
        check_pretrained(self.name, detector, setup.kind, self.params, also)
        check_pyod(self.name, detector, setup.kind, self.params)
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
        if self.detector in PYOD_DETECTORS:
            return make_pyod(self.detector, self.params, self.setup, self.contamination, device)
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


class GlobalModel(TorchBaseline):
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
