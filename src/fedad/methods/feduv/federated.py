"""FedUV's protocol: FedAvg over the shared network, a secret code on every client.

Server: sends the global network's weights (and the round number), takes the
example-weighted mean of the returned weights (through :meth:`ServerContext.mean
<fedad.core.context.ServerContext.mean>`, so SecAgg+ applies with ``privacy.secagg``).
Nothing else ever goes to a client.

Client k: its code :math:`c_k` is drawn on the client (:func:`client_code`) and kept
there; each round it loads the global weights, trains ``local_epochs`` epochs of the
positive loss :math:`\\max(0, m - \\rho_k(x))` on its own data and replies with the weights,
``num_examples`` and the mean loss, never the code. Its final detector is the global network
with its own code (``personalized``): the score is :math:`-\\rho_k(x)`, thresholded on its
own training scores.

``codes = "seeded"`` (default) draws :math:`c_k` from the stream ``(seed, client id,
salt)`` so that a run is reproducible; the server never computes it and no message
carries it, but whoever knows the run's seed could recompute it. ``codes = "private"`` draws
it from the operating system's entropy on the client and keeps it in the client's state:
unreproducible, and unknowable to anyone else (what a deployment wants).

In a simulation the platform collects each personalised detector (network, code and
threshold) in the evaluate reply to save the run for :func:`fedad.load`; in a Flower
deployment it stays on the node (``node_models``).
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from fedad.core.algorithm import (
    Algorithm,
    ClientState,
    Handler,
    Params,
    ServerResult,
    register,
)
from fedad.core.context import ServerContext
from fedad.core.detector import shared_field
from fedad.core.messages import Message
from fedad.core.rng import rng as seeded_rng
from fedad.core.rounds import fedavg_rounds
from fedad.core.types import ClientData, dense
from fedad.devices import resolve_device
from fedad.methods.feduv.detector import FedUVDetector, FedUVDetectorParams
from fedad.methods.feduv.model import secret_code

TRAIN = "train"
CODE_SALT = 0xFED0C0DE
ROUND_SALT = 0xFEDC11
STATE_CODE = "feduv/code"
"""Client-state key of a ``"private"`` code (kept between rounds by every engine)."""


class FedUVParams(Params):
    """``[methods.params]`` of ``feduv``; every field has a small default."""

    forwarded: ClassVar[frozenset[str]] = frozenset({"batch_size"})

    lr: float = shared_field(FedUVDetectorParams, "lr")
    local_epochs: int = Field(default=1, ge=1, le=10_000, description="epochs per round")
    batch_size: int = Field(default=64, ge=1, le=1 << 20)
    code_length: int = shared_field(
        FedUVDetectorParams, "code_length", description="L, the code's length"
    )
    hidden: int = shared_field(FedUVDetectorParams, "hidden", description="width of the encoder")
    margin: float = shared_field(FedUVDetectorParams, "margin", description="hinge margin m")
    codes: Literal["seeded", "private"] = Field(
        default="seeded",
        description="'seeded': from (seed, client id), reproducible; 'private': OS entropy",
    )


def client_code(seed: int, client_id: int, length: int) -> np.ndarray:
    """Client ``client_id``'s ``"seeded"`` code: a pure function of the run's seed."""
    return secret_code(seeded_rng(seed, client_id, CODE_SALT), length)


@register
class FedUV(Algorithm):
    """FedUV (Hosseini et al., ICML 2021), reduced: secret codes, positive loss, FedAvg."""

    name = "feduv"
    personalized = True
    metric_families = ()
    ParamsModel = FedUVParams
    params: FedUVParams

    def make_detector(self) -> FedUVDetector:
        return FedUVDetector.configured(
            self.params,
            kind=self.setup.kind,
            input_shape=list(self.setup.feature_shape),
            epochs=self.params.local_epochs,
            contamination=self.contamination,
            seed=self.setup.seed,
            device=resolve_device(self.setup.device),
        )

    def handlers(self) -> dict[str, Handler]:
        return {**super().handlers(), TRAIN: self.client_train}

    # -- client side ------------------------------------------------------------------------
    def own_code(self, state: ClientState, data: ClientData) -> np.ndarray:
        """This client's secret code (drawn on first use; never sent)."""
        length = self.params.code_length
        if self.params.codes == "seeded":
            return client_code(self.setup.seed, data.client_id, length)
        if STATE_CODE not in state:
            state[STATE_CODE] = secret_code(np.random.default_rng(), length)
        return np.asarray(state[STATE_CODE])

    def _detector(self, state: ClientState, data: ClientData, msg: Message) -> FedUVDetector:
        det = self.make_detector().build()
        if msg.arrays:
            det.set_model(dict(msg.arrays))
        return det.set_code(self.own_code(state, data))

    def client_train(self, state: ClientState, data: ClientData, msg: Message) -> Message:
        det = self._detector(state, data, msg)
        rng = seeded_rng(self.setup.seed, int(msg.get("round", 0)), data.client_id, ROUND_SALT)
        loss = det.train_epochs(dense(data.x_train, self.name), self.params.local_epochs, rng)
        return Message(TRAIN, det.model_arrays(), {"num_examples": data.n_train, "loss": loss})

    def client_detector(self, state: ClientState, data: ClientData, msg: Message) -> FedUVDetector:
        return self._detector(state, data, msg)

    # -- server side ------------------------------------------------------------------------
    def server(self, ctx: ServerContext) -> ServerResult:
        weights = fedavg_rounds(ctx, self.make_detector().build().model_arrays(), TRAIN)
        return ServerResult(arrays=weights, scalars={})
