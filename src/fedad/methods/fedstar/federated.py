"""FedStar ([FedStar]: Tan, Liu, Long, Jiang, Lu, Zhang, "Federated Learning on Non-IID Graphs
via Structural Knowledge Sharing", AAAI 2023) with Deep SVDD, method ``fedstar``.

Graphs from different domains (molecules, proteins, social networks) share little in their
node features but much in their structure. FedStar therefore splits each client's network
[FedStar Sec. 4] into

* a **structure encoder** over structural node features only (random-walk return
  probabilities and one-hot degrees, :func:`.model.structure_features`), whose input is the
  same for every domain: it is **shared**, FedAvg'd every round,
  :math:`W_s \\leftarrow \\sum_k n_k W_s^{(k)} / \\sum_k n_k`;
* a **feature encoder** over the client's node features (and the structure embedding,
  :mod:`.model`), which stays **personal**: never sent, never averaged. Its input width is
  the client's node-feature width, so clients of different sources run together.

Each round a sampled client loads the server's structure encoder into its own network,
trains ``local_epochs`` epochs of Deep SVDD (:mod:`.model`) on both encoders, keeps the
whole network in its state and replies with the structure encoder only; the server takes
the example-weighted mean (:meth:`~fedad.core.context.ServerContext.mean`, so SecAgg+ applies).
The first time a client trains it builds its network from the run's seed for its width (the
structure encoder's initial weights equal the server's) and fixes its **own** Deep SVDD
centre, the mean embedding of its graphs under the initial weights: the representation has a
personal half, so one global centre would mean nothing. At evaluation each client scores
with its own network and the final shared structure encoder (a client the sampling never
picked trains once first).

Reduced to: FedStar's classifier loss is replaced by Deep SVDD (as FGAD's "FedStar +
DeepSVDD" baseline), the structure embedding enters the feature encoder once, at its input,
instead of at every layer, and the optimiser is Adam rebuilt every round.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from fedad.core.algorithm import (
    Algorithm,
    ClientState,
    Handler,
    Params,
    Requirements,
    ServerResult,
    register,
)
from fedad.core.context import ServerContext
from fedad.core.detector import shared_field
from fedad.core.messages import Message, prefixed, unprefixed
from fedad.core.rng import rng as seeded_rng
from fedad.core.rounds import fedavg_rounds
from fedad.core.types import ClientData, GraphSet
from fedad.evaluation.families import MetricFamily
from fedad.methods.fedstar.detector import FedStarDetector, FedStarDetectorParams

TRAIN = "train"
OWN = "own"
"""State prefix of a client's whole network."""


class FedStarParams(Params):
    """``[methods.params]`` of ``fedstar``; every default works on any data set size."""

    local_epochs: int = Field(default=1, ge=1, le=10_000, description="epochs per round")
    batch_size: int = shared_field(FedStarDetectorParams, "batch_size")
    lr: float = shared_field(FedStarDetectorParams, "lr", description="Adam")
    weight_decay: float = shared_field(
        FedStarDetectorParams, "weight_decay", description="Deep SVDD lambda"
    )
    hidden: int = shared_field(
        FedStarDetectorParams, "hidden", description="GIN width (both encoders)"
    )
    layers: int = shared_field(
        FedStarDetectorParams, "layers", description="GIN depth (both encoders)"
    )
    n_rw: int = shared_field(FedStarDetectorParams, "n_rw", description="random-walk steps")
    n_dg: int = shared_field(FedStarDetectorParams, "n_dg", description="one-hot degree width")


@register
class FedStar(Algorithm):
    """FedStar: the structure encoder is shared, the feature encoder stays personal."""

    name = "fedstar"
    personalized = True
    ParamsModel = FedStarParams
    params: FedStarParams
    metric_families: ClassVar[tuple[MetricFamily, ...]] = ()

    @classmethod
    def requirements(cls, params: dict[str, Any]) -> Requirements:
        return Requirements(fields=("x", "graph"))

    def make_detector(self) -> FedStarDetector:
        p = self.params
        width = self.setup.feature_shape[-1] if self.setup.feature_shape else 1
        return FedStarDetector.configured(
            p,
            width=max(int(width), 1),
            epochs=p.local_epochs,
            contamination=self.contamination,
            seed=self.setup.seed,
            device=self.setup.device,
        )

    # -- client -----------------------------------------------------------------------------
    def handlers(self) -> dict[str, Handler]:
        return {**super().handlers(), TRAIN: self.client_train}

    def _local(
        self, state: ClientState, data: ClientData, msg: Message, round_no: int
    ) -> tuple[FedStarDetector, float]:
        """The client's network after this round's training."""
        graphs = data.x_train
        if not isinstance(graphs, GraphSet):
            raise TypeError("fedstar trains on graphs")
        det = self.make_detector()
        own = unprefixed(state, OWN)
        if own:
            det.set_arrays(own)
        else:
            det.build(int(graphs.shape[1]))
        if msg.arrays:
            det.set_shared(dict(msg.arrays))
        if not own:
            det.set_center(graphs)
        rng = seeded_rng(self.setup.seed, round_no, data.client_id, 0xF57)
        loss = det.train_epochs(graphs, self.params.local_epochs, rng)
        for key in [k for k in state if k.startswith(f"{OWN}/")]:
            del state[key]
        state.update(prefixed(det.model_arrays(), OWN))
        return det, loss

    def client_train(self, state: ClientState, data: ClientData, msg: Message) -> Message:
        """Train locally; reply with the structure encoder only."""
        det, loss = self._local(state, data, msg, int(msg.get("round", 0)))
        return Message(TRAIN, det.shared_arrays(), {"num_examples": data.n_train, "loss": loss})

    def client_detector(
        self, state: ClientState, data: ClientData, msg: Message
    ) -> FedStarDetector:
        """The client's own network with the server's final structure encoder."""
        own = unprefixed(state, OWN)
        if not own:  # never sampled: train as a first round would
            det, _ = self._local(state, data, Message(TRAIN), self.setup.rounds + 1)
        else:
            det = self.make_detector().set_arrays(own)
        return det.set_shared(dict(msg.arrays)) if msg.arrays else det

    # -- server -----------------------------------------------------------------------------
    def server(self, ctx: ServerContext) -> ServerResult:
        weights = self.make_detector().build(1).shared_arrays()
        weights = fedavg_rounds(
            ctx, weights, TRAIN, unchanged="the structure encoder is unchanged", eval_last=False
        )
        return ServerResult(dict(weights), {})
