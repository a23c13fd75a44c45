"""FedAvg rounds of one shared model, for server programs (McMahan et al., 2017, Alg. 1).

:func:`fedavg_rounds` is the loop that the generic baselines and ``feduv`` share: send the
global arrays to the sampled clients, replace them by the clients' example-weighted mean
(:meth:`~fedad.fl.context.ServerContext.mean`, so SecAgg+ applies), log the weighted mean
of the replies' scalars. :func:`log_weighted_scalars` is that last step alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from fedad.fl.aggregate import weighted_mean
from fedad.fl.algorithm import ServerResult
from fedad.fl.context import ServerContext
from fedad.fl.messages import Message
from fedad.fl.validate import spec_of

__all__ = ["fedavg_rounds", "log_weighted_scalars"]


def log_weighted_scalars(
    ctx: ServerContext, replies: Mapping[int, Message], keys: Sequence[str]
) -> None:
    """Log each of ``keys`` as its ``num_examples``-weighted mean over ``replies``."""
    n = [float(m.scalars["num_examples"]) for m in replies.values()]
    for key in keys:
        vals = [np.asarray(m.scalars[key]) for m in replies.values()]
        ctx.log(**{key: float(weighted_mean(vals, n))})


def fedavg_rounds(
    ctx: ServerContext,
    weights: dict[str, np.ndarray],
    phase: str = "train",
    scalars: Sequence[str] = ("loss",),
) -> dict[str, np.ndarray]:
    """``ctx.rounds`` FedAvg rounds from ``weights`` in ``phase``; the last global arrays.

    Replies must carry the same arrays and the ``scalars`` (a ``loss`` at least), each
    logged per round as its example-weighted mean. A round without a usable reply keeps the
    model (and says so in the events); every round is checkpointable.
    """
    spec = spec_of(weights)
    for r in range(1, ctx.rounds + 1):
        msgs = {i: Message(phase, weights, {"round": r}) for i in ctx.sample()}
        avg = ctx.mean(msgs, arrays=spec, scalars=list(scalars))
        if avg.arrays is not None:
            weights = avg.arrays
            log_weighted_scalars(ctx, avg.replies, list(scalars))
        else:
            ctx.event("no valid replies; the global model is unchanged")
        ctx.checkpoint(r, ServerResult(arrays=weights, scalars={}))
        ctx.end_round(r)
    return weights
