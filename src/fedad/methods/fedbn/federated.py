"""FedBN (Li et al., ICLR 2021): FedAvg, except that normalisation layers stay local.

"FedBN: Federated Learning on Non-IID Features via Local Batch Normalization", Algorithm 1:
each client trains the model it received for ``local_epochs`` epochs; the server averages
every tensor **except** those of the normalisation layers, whose parameters and running
statistics each client keeps and never sends (:func:`.norms.norm_keys`: batch, group,
layer, instance normalisation, identified from the torch modules). Each client's model is
thus the global model with its own normalisation layers: the method is personalised
whenever the network has such a layer, and each client's detector is saved per client (as
for ``fedavg`` with the ``contrastive`` detector or on graphs).

Same detectors, parameters and phases as ``fedavg`` (:mod:`fedad.methods.baselines.federated`):
the Deep SVDD centre is averaged once before round 1; on graphs the input layer is local as
well. The average is example-weighted, through :meth:`ServerContext.mean
<fedad.core.context.ServerContext.mean>`, so SecAgg+ applies; only the shared tensors travel
and are counted in the run's bytes.

Where the network has **no** normalisation layer, the shared set is the whole model and
``fedbn`` is ``fedavg`` exactly (same arrays, scores and bytes). The generic detectors'
networks (the MLP and CNN autoencoder, Deep SVDD's bias-free encoders, the GIN) have none
today; the ``contrastive`` detector's ResNet-style encoder uses group normalisation, which
``fedbn`` keeps local. A client that is never sampled keeps the seeded initial
normalisation parameters.
"""

from __future__ import annotations

import numpy as np

from fedad.components.detectors.neural import DeepSVDDDetector, TorchDetector
from fedad.components.federated import (
    CENTER,
    OWN,
    TRAIN,
    GlobalModel,
    TrainParams,
    client_rng,
)
from fedad.core.algorithm import ClientState, ServerResult, register
from fedad.core.context import ServerContext
from fedad.core.errors import RunError
from fedad.core.messages import Message, prefixed, unprefixed
from fedad.core.rounds import fedavg_rounds
from fedad.core.types import ClientData
from fedad.core.validate import ArraySpec
from fedad.methods.fedbn.norms import norm_keys


def local_keys(det: TorchDetector) -> frozenset[str]:
    """The tensors of ``det``'s network that never leave the client: its normalisation
    layers' (:func:`norm_keys`) and, on graphs, the input layer (:meth:`width_keys`)."""
    return norm_keys(det.model_) | frozenset(det.width_keys())


def shared_arrays(det: TorchDetector) -> dict[str, np.ndarray]:
    """What a FedBN client sends and the server averages: the model without
    :func:`local_keys`."""
    own = local_keys(det)
    return {k: v for k, v in det.model_arrays().items() if k not in own}


@register
class FedBN(GlobalModel):
    """FedAvg with local normalisation layers (Li et al., 2021) over a baseline detector."""

    name = "fedbn"
    ParamsModel = TrainParams
    _has_norm: bool | None = None

    # client side
    def _client_model(
        self, state: ClientState, data: ClientData, arrays: dict[str, np.ndarray]
    ) -> TorchDetector:
        """The seeded network (on graphs for the client's width), overlaid with the
        client's own local tensors once it has trained, then the server's shared ones."""
        det = self.make_detector()
        assert isinstance(det, TorchDetector)
        det.build_for(data.x_train)
        full = {**det.model_arrays(), **unprefixed(state, OWN), **arrays}
        return det.set_arrays(full)

    def client_train(self, state: ClientState, data: ClientData, msg: Message) -> Message:
        det = self._client_model(state, data, dict(msg.arrays))
        rng = client_rng(self.setup.seed, int(msg.get("round", 0)), data.client_id)
        loss = det.train_epochs(data.x_train, self.params.local_epochs, rng, self.prox_mu)
        arrays = det.model_arrays()
        state.update(prefixed({k: arrays[k] for k in local_keys(det)}, OWN))
        scalars = {"num_examples": data.n_train, "loss": loss, **det.train_monitor()}
        return Message(TRAIN, shared_arrays(det), scalars)

    @property
    def personalized(self) -> bool:  # type: ignore[override]
        """As ``fedavg``'s, and whenever the network has a normalisation layer."""
        return bool(super().personalized) or self.has_norm

    @property
    def has_norm(self) -> bool:
        """Whether the configured detector's network has a normalisation layer."""
        if self._has_norm is None:
            det = self.make_detector().build()
            assert isinstance(det, TorchDetector)
            self._has_norm = bool(norm_keys(det.model_))
        return self._has_norm

    # server side
    def _center_round(self, ctx: ServerContext, det: TorchDetector) -> None:
        """``fedavg``'s Deep SVDD centre phase, sending only the shared tensors."""
        assert isinstance(det, DeepSVDDDetector)
        weights = shared_arrays(det)
        latent = int(det.model_.center.shape[0])  # type: ignore[index]
        center = ctx.mean(
            {i: Message(CENTER, weights) for i in ctx.grid.get_node_ids()},
            arrays={"mean": ArraySpec((latent,), "float64")},
        )
        if center.arrays is None:
            raise RunError(
                f"{self.name}: no client answered the Deep SVDD centre phase",
                "see the events logged above",
            )
        det.set_center(center.arrays["mean"])
        ctx.end_round(0)

    def server(self, ctx: ServerContext) -> ServerResult:
        det = self.make_detector().build()
        assert isinstance(det, TorchDetector)
        if isinstance(det, DeepSVDDDetector):
            self._center_round(ctx, det)
        weights = fedavg_rounds(ctx, shared_arrays(det), TRAIN, ("loss", *det.monitor_keys))
        return ServerResult(arrays=weights, scalars={})
