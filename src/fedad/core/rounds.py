"""Round loops for server programs: the FedAvg-shaped loop and the end of a round.

Most methods' server programs are the same loop (McMahan et al., 2017, Alg. 1): each round
send the global arrays to the sampled clients, replace them by the clients'
example-weighted mean (:meth:`~fedad.core.context.ServerContext.mean`, so SecAgg+ applies),
log the weighted mean of the replies' scalars, offer the round's state for a learning-curve
evaluation and close the round's history row. :func:`fedavg_rounds` is that loop, with hooks
for what differs between methods (the messages, the server's step from the mean, the state
a checkpoint evaluates); a loop with no arrays to average only sends and logs (``local``
training). Multi-phase methods (a warm-up, statistics then training, distillation on the
server) keep a free-form server program and end their rounds with :func:`close_round`;
:func:`log_weighted_scalars` is the logging step alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial

import numpy as np

from fedad.core.aggregate import weighted_mean
from fedad.core.algorithm import ServerResult
from fedad.core.context import ServerContext
from fedad.core.messages import Message
from fedad.core.validate import ArraySpec, spec_of

__all__ = ["Arrays", "Step", "close_round", "fedavg_rounds", "log_weighted_scalars"]

Arrays = dict[str, np.ndarray]
"""Named arrays: a global model (and whatever else the server keeps between rounds)."""
Step = Callable[[Arrays, Arrays, Mapping[int, Message]], Arrays]
"""The server's step ``(weights, mean, replies) -> weights``: from the round's global arrays,
the replies' weighted mean and the contributing replies (scalars only)."""


def log_weighted_scalars(
    ctx: ServerContext, replies: Mapping[int, Message], keys: Sequence[str]
) -> None:
    """Log each of ``keys`` as its ``num_examples``-weighted mean over ``replies``."""
    n = [float(m.scalars["num_examples"]) for m in replies.values()]
    for key in keys:
        vals = [np.asarray(m.scalars[key]) for m in replies.values()]
        ctx.log(**{key: float(weighted_mean(vals, n))})


def close_round(
    ctx: ServerContext,
    round_no: int,
    result: ServerResult | Callable[[], ServerResult],
    eval_last: bool = True,
) -> None:
    """End round ``round_no``: offer its global state for a learning-curve evaluation
    (:meth:`~fedad.core.context.ServerContext.checkpoint`, when ``engine.eval_every`` asks for
    this round), then close its history row (:meth:`~.ServerContext.end_round`).

    ``result`` is the state, or a function that builds it, called only when the evaluation
    happens (for states that cost a phase or a scoring pass). ``eval_last=False``: the last
    round offers nothing (methods whose final evaluation is that round's point).
    """
    if ctx.wants_checkpoint(round_no) and (eval_last or round_no < ctx.rounds):
        ctx.checkpoint(round_no, result() if callable(result) else result)
    ctx.end_round(round_no)


def _plain_result(weights: Arrays) -> ServerResult:
    """The global arrays as they are, for the evaluation."""
    return ServerResult(arrays=weights, scalars={})


def fedavg_rounds(
    ctx: ServerContext,
    weights: Arrays,
    phase: str = "train",
    scalars: Sequence[str] = ("loss",),
    *,
    spec: Mapping[str, ArraySpec] | None = None,
    messages: Callable[[int, Arrays], dict[int, Message]] | None = None,
    step: Step | None = None,
    replied: Callable[[Mapping[int, Message]], None] | None = None,
    result: Callable[[Arrays], ServerResult] = _plain_result,
    unchanged: str = "the global model is unchanged",
    eval_last: bool = True,
) -> Arrays:
    """``ctx.rounds`` FedAvg rounds from ``weights`` in ``phase``; the last global arrays.

    Each round sends ``messages(r, weights)`` (default: ``weights`` and the round number to
    ``ctx.sample()``), takes the mean of the replies' ``spec`` (default: that of
    ``weights``) and ``scalars`` (a ``loss`` at least), and moves to
    ``step(weights, mean, replies)`` (:data:`Step`; default: the mean itself); each scalar
    is logged as its example-weighted mean. A round without a usable reply keeps
    ``weights`` and says so in the events (``no valid replies; {unchanged}``). ``replied``
    sees each round's usable replies first (keyed by client id).

    With an empty ``spec`` (nothing to average: clients train on their own) a round only
    sends, logs the replies' scalars and leaves ``weights`` alone. Every round ends with
    :func:`close_round`, which evaluates ``result(weights)`` (default: ``weights``) where
    ``engine.eval_every`` asks for it (``eval_last``: in the last round too).
    """
    spec = spec_of(weights) if spec is None else spec
    keys = list(scalars)
    for r in range(1, ctx.rounds + 1):
        if messages is None:
            msgs = {i: Message(phase, weights, {"round": r}) for i in ctx.sample()}
        else:
            msgs = messages(r, weights)
        if not spec:
            replies = ctx.send(msgs, scalars=["num_examples", *keys])
            if replied is not None:
                replied(replies)
            if replies:
                log_weighted_scalars(ctx, replies, keys)
        else:
            weights = _mean_step(ctx, msgs, weights, spec, keys, step, replied, unchanged)
        close_round(ctx, r, partial(result, weights), eval_last)
    return weights


def _mean_step(
    ctx: ServerContext,
    msgs: dict[int, Message],
    weights: Arrays,
    spec: Mapping[str, ArraySpec],
    keys: list[str],
    step: Step | None,
    replied: Callable[[Mapping[int, Message]], None] | None,
    unchanged: str,
) -> Arrays:
    """One round's mean of the replies and the server's step from it (see
    :func:`fedavg_rounds`)."""
    avg = ctx.mean(msgs, arrays=spec, scalars=keys)
    if replied is not None:
        replied(avg.replies)
    if avg.arrays is None:
        ctx.event(f"no valid replies; {unchanged}")
        return weights
    weights = avg.arrays if step is None else step(weights, avg.arrays, avg.replies)
    log_weighted_scalars(ctx, avg.replies, keys)
    return weights
