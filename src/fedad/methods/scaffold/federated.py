"""SCAFFOLD (Karimireddy et al., ICML 2020) over the generic baseline detectors.

"SCAFFOLD: Stochastic Controlled Averaging for Federated Learning", Algorithm 1 with
option II. The server holds the global model :math:`x` and a control variate :math:`c`;
client :math:`i` holds its control variate :math:`c_i` in its state. Both start at 0.
Each round (:mod:`.control` for the equations):

1. the server sends :math:`(x, c)` to the sampled clients :math:`S`;
2. a client starts from :math:`y_i = x` and takes :math:`K` corrected SGD steps
   :math:`y_i \\leftarrow y_i - \\eta_l (g_i(y_i) - c_i + c)` (:mod:`.train`: plain SGD at
   the constant step size ``lr``, default 0.01, 0.001 on graphs; ``local_epochs`` passes
   in batches of ``batch_size``, so
   :math:`K = \\text{local\\_epochs} \\cdot \\lceil n_i/\\text{batch\\_size} \\rceil`);
3. it sets :math:`c_i^+ = c_i - c + (x - y_i)/(K \\eta_l)` (option II), keeps it, and
   sends :math:`(\\Delta y_i, \\Delta c_i) = (y_i - x, c_i^+ - c_i)`: :math:`\\Delta y_i` in
   the form of :math:`y_i` itself (the same bytes; the server, which knows :math:`x`, takes
   the mean of the :math:`\\Delta y_i` as :math:`\\overline{y} - x`), so that ``[privacy]``
   and the model attacks of ``[attack]`` act on it as on any model update.
   :math:`\\Delta c_i` travels as it is; it is a function of the update,
   :math:`\\Delta c_i = -\\Delta y_i / (K \\eta_l) - c`, so the Gaussian mechanism of
   ``[privacy]`` protects nothing with SCAFFOLD;
4. the server sets :math:`x \\leftarrow x + \\eta_g \\overline{\\Delta y}` (``server_lr``
   :math:`\\eta_g = 1` by default) and :math:`c \\leftarrow c + \\frac{|S|}{N}
   \\overline{\\Delta c}`, :math:`N` the number of clients.
   A step that would make :math:`x` or :math:`c` non-finite is skipped with an event
   (``lr`` is at most :data:`MAX_LR`, ``server_lr`` at most :data:`MAX_SERVER_LR`).

The means are taken through :meth:`ServerContext.mean
<fedad.core.context.ServerContext.mean>` (so SecAgg+ applies), which weights replies by their
number of training examples, as ``fedavg`` does; with equally large clients this is the
paper's plain mean over :math:`S`. The control variates cover the trainable parameters;
buffers (Deep SVDD's fixed centre) travel in :math:`\\Delta y` only. A round therefore
uploads twice the parameters (and downloads :math:`x` and :math:`c`, twice the model too).

Detectors: the autoencoder, Deep SVDD (on graphs too, with a per-client input layer that is
trained by uncorrected SGD and never sent, as in ``fedavg``) and ``contrastive`` (each
client's detector then uses a bank of its own training images, as in ``fedavg``). The Deep
SVDD centre is averaged once before round 1, as in ``fedavg``. Not ``patchcore``: it runs
its own Adam loop on frozen backbone features.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, cast

import numpy as np
from pydantic import Field

from fedad.components.detectors.contrastive import ContrastiveDetector
from fedad.components.detectors.neural import DeepSVDDDetector, TorchDetector
from fedad.components.federated import OWN, TRAIN, GlobalModel, TrainParams, client_rng
from fedad.core.algorithm import ClientState, Handler, Params, ServerResult, Setup, register
from fedad.core.context import ServerContext
from fedad.core.messages import Message, prefixed, unprefixed
from fedad.core.rounds import Arrays, fedavg_rounds
from fedad.core.types import ClientData
from fedad.core.validate import spec_of
from fedad.methods.scaffold.control import client_deltas, option_two, server_update, zeros_like
from fedad.methods.scaffold.train import scaffold_epochs

C = "c"
"""Message prefix of the server control variate :math:`c`."""
CI = "ci"
"""State prefix of the client control variate :math:`c_i`."""
DC = "dc"
"""Reply prefix of :math:`\\Delta c_i`."""


GRAPH_LR = 1e-3
"""The default ``lr`` on graphs: the GIN's sum readout gives large gradients, and plain SGD
at 0.01 diverges there."""


MAX_LR = 10.0
"""Largest ``lr``: plain SGD on these detectors diverges well below it."""
MAX_SERVER_LR = 100.0
"""Largest ``server_lr``: the paper's global step size is 1, or sqrt(|S|) (10 for 100
sampled clients)."""


class ScaffoldParams(TrainParams):
    """The baselines' training parameters, with SGD's step size and the global one."""

    forwarded: ClassVar[frozenset[str]] = frozenset({"lr"})

    lr: float = Field(
        default=0.01,
        gt=0.0,
        le=MAX_LR,
        description=f"local SGD step size eta_l in (0, {MAX_LR:g}]; default 0.01, {GRAPH_LR} "
        "on graphs",
    )
    server_lr: float = Field(
        default=1.0,
        gt=0.0,
        le=MAX_SERVER_LR,
        description=f"global step size eta_g in (0, {MAX_SERVER_LR:g}]; the paper uses 1 "
        "(or sqrt(|S|))",
    )


def control_keys(det: TorchDetector) -> list[str]:
    """The shared tensors that get control variates: the trainable parameters."""
    shared = det.shared_arrays()
    return [k for k, p in det.model_.named_parameters() if p.requires_grad and k in shared]


def split(arrays: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """A train message's arrays as :math:`(x, c)`."""
    x = {k: v for k, v in arrays.items() if not k.startswith(C + "/")}
    return x, unprefixed(arrays, C)


@register
class Scaffold(GlobalModel):
    """SCAFFOLD (Karimireddy et al., 2020), option II, over a baseline detector."""

    name = "scaffold"
    ParamsModel = ScaffoldParams
    params: ScaffoldParams

    def __init__(self, params: Params, setup: Setup, detector: str | None = None) -> None:
        if setup.kind == "graph" and "lr" not in params.model_fields_set:
            params = params.model_copy(update={"lr": GRAPH_LR})
        super().__init__(params, setup, detector)

    def handlers(self) -> dict[str, Handler]:
        return {**super().handlers(), TRAIN: self.client_train}

    # client side
    def client_train(self, state: ClientState, data: ClientData, msg: Message) -> Message:
        x, c = split(dict(msg.arrays))
        det = self._client_model(state, data, x)
        c_i = unprefixed(state, CI) or zeros_like(c)
        rng = client_rng(self.setup.seed, int(msg.get("round", 0)), data.client_id)
        if isinstance(det, ContrastiveDetector):  # as its train_epochs does
            det.aug_rng_ = np.random.default_rng(int(rng.integers(0, 2**63)))
            det.drop_bank()
        wd = (
            det.default_weight_decay if det.params.weight_decay is None else det.params.weight_decay
        )
        loss, steps = scaffold_epochs(
            det.model_,
            det.loss,
            det._inputs(data.x_train),
            self.params.local_epochs,
            self.params.batch_size,
            self.params.lr,
            rng,
            c,
            c_i,
            wd,
        )
        arrays = det.model_arrays()
        y = det.shared_arrays()
        c_new = option_two(c_i, c, x, y, steps, self.params.lr) if steps else dict(c_i)
        _, dc = client_deltas(x, y, c_i, c_new)
        state.update(prefixed(c_new, CI))
        state.update(prefixed({k: arrays[k] for k in det.width_keys()}, OWN))
        # y_i itself under the model's names, not y_i - x: the server forms the mean of
        # Delta y as mean(y_i) - x, and [privacy] and [attack] see a model update
        return Message(
            TRAIN, {**y, **prefixed(dc, DC)}, {"num_examples": data.n_train, "loss": loss}
        )

    # server side
    def server(self, ctx: ServerContext) -> ServerResult:
        det = cast(TorchDetector, self.make_detector().build())
        if isinstance(det, DeepSVDDDetector):
            self._center_round(ctx, det)
        x = det.shared_arrays()
        c = zeros_like({k: x[k] for k in control_keys(det)})
        total = len(ctx.grid.get_node_ids())

        def step(down: Arrays, mean: Arrays, replies: Mapping[int, Message]) -> Arrays:
            x_new, c_new = self._step(ctx, *split(down), mean, len(replies), total)
            return {**x_new, **prefixed(c_new, C)}

        # the server's state (x, c) is what it sends: (x, c) down, (y_i, Delta c_i) up
        down = fedavg_rounds(
            ctx,
            {**x, **prefixed(c, C)},
            TRAIN,
            spec=spec_of({**x, **prefixed(c, DC)}),
            step=step,
            result=lambda down: ServerResult(arrays=split(down)[0], scalars={}),
            unchanged="the global model and c are unchanged",
        )
        return ServerResult(arrays=split(down)[0], scalars={})

    def _step(
        self,
        ctx: ServerContext,
        x: dict[str, np.ndarray],
        c: dict[str, np.ndarray],
        mean: dict[str, np.ndarray],
        replied: int,
        total: int,
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """The server's step from the replies' ``mean``; the old ``(x, c)`` with an event
        when the step would make either non-finite (a large ``server_lr`` on a large mean)."""
        mean_y = {k: v for k, v in mean.items() if not k.startswith(DC + "/")}
        with np.errstate(over="ignore", invalid="ignore"):  # checked just below
            x_new, c_new = server_update(
                x,
                c,
                {k: mean_y[k] - x[k] for k in x},  # mean of Delta y_i = mean(y_i) - x
                unprefixed(mean, DC),
                sampled=replied,
                total=max(total, replied),
                server_lr=self.params.server_lr,
            )
        stepped = {**x_new, **prefixed(c_new, C)}
        bad = sorted(k for k, v in stepped.items() if not np.all(np.isfinite(v)))
        if not bad:
            return x_new, c_new
        ctx.event(
            f"the server step (server_lr = {self.params.server_lr:g}) makes {bad[0]} "
            "non-finite; the global model and c are unchanged (lower server_lr or lr)"
        )
        return x, c
