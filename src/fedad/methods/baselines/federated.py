"""The generic baselines as federated algorithms: local, centralized, FedAvg, FedProx.

Each combines with a detector from :mod:`fedad.components.detectors.neural` (``autoencoder``
or ``deepsvdd``) or ``contrastive`` (:mod:`fedad.components.detectors.contrastive`, square
images only); ``local`` and ``centralized`` also take ``pretrained``
(:mod:`fedad.components.detectors.pretrained`, images only): frozen pretrained features
scored by k-NN or a shrinkage Gaussian, nothing trained; and ``ocsvm``
(:mod:`fedad.components.detectors.ocsvm`): scikit-learn's RBF one-class SVM on flattened
inputs; and PyOD's own detectors with PyOD's defaults, ``pyod-iforest``, ``pyod-ecod``,
``pyod-knn``, ``pyod-ocsvm`` (:mod:`fedad.components.detectors.pyod_reference`: the reference
row of what pooling the data and reaching for PyOD gives; on images on ``pretrained``'s
features). ``fedavg`` and ``fedprox`` are :class:`fedad.components.federated.GlobalModel`.

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
<fedad.core.context.ServerContext.mean>`, so both their phases run under SecAgg+ when
``privacy.secagg`` is on.
"""

from __future__ import annotations

from functools import partial

import numpy as np
from pydantic import Field

from fedad.components.detectors.neural import (
    TorchDetector,
)
from fedad.components.detectors.pretrained import (
    PretrainedOptions,
)
from fedad.components.federated import (
    TORCH_DETECTORS,
    TRAIN,
    UPLOAD,
    BaselineDetector,
    GlobalModel,
    TorchBaseline,
    TrainParams,
    client_rng,
)
from fedad.core.algorithm import (
    ClientState,
    Handler,
    ServerResult,
    register,
)
from fedad.core.context import ServerContext
from fedad.core.detector import quantile_threshold
from fedad.core.errors import RunError
from fedad.core.messages import Message, prefixed, unprefixed
from fedad.core.rng import rng as seeded_rng
from fedad.core.rounds import close_round, fedavg_rounds
from fedad.core.types import ClientData, dense


class BaselineParams(PretrainedOptions, TrainParams):
    """``local`` and ``centralized``: the training parameters plus the ``pretrained`` options."""


class ProxParams(TrainParams):
    """FedProx adds the proximal coefficient."""

    mu: float = Field(default=0.01, ge=0.0, description="proximal term coefficient")


@register
class FedAvg(GlobalModel):
    """FedAvg (McMahan et al., 2017) over a baseline detector."""

    name = "fedavg"
    ParamsModel = TrainParams


@register
class FedProx(GlobalModel):
    """FedProx (Li et al., 2020): FedAvg plus a proximal term on the client side."""

    name = "fedprox"
    ParamsModel = ProxParams
    params: ProxParams

    @property
    def prox_mu(self) -> float:  # type: ignore[override]
        return self.params.mu


@register
class Local(TorchBaseline):
    """Each client trains its own detector; no model is shared."""

    name = "local"
    personalized = True
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
        training scores on that data (:meth:`~fedad.core.detector.BaseDetector.training_scores`:
        held-out scores for a detector that keeps its training samples)."""
        self._with_bank(det, pooled)
        threshold = quantile_threshold(det.training_scores(pooled), self.contamination)
        return ServerResult(arrays=self._shared_arrays(det), scalars={"threshold": threshold})
