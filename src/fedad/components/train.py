"""The training loop shared by the baseline detectors (no model math, no federation).

FedProx (Li et al., MLSys 2020, eq. 2) adds the proximal term
:math:`\\frac{\\mu}{2} \\lVert w - w^t \\rVert^2` to each client's local objective, keeping
local models near the global model :math:`w^t` they started from; ``prox_mu = 0`` is plain
local SGD as in FedAvg.

Samples are dense arrays or graphs (a :class:`~fedad.core.types.GraphSet`): a batch of graphs
is the torch-geometric ``Batch`` of :meth:`GraphSet.batch <fedad.core.types.GraphSet.batch>`,
built inside the loop from the batch's ids.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from fedad.core.types import Features, GraphSet


def iterate_batches(n: int, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """A seeded shuffle of ``range(n)`` cut into batches (the last one may be smaller)."""
    order = rng.permutation(n)
    return [order[i : i + batch_size] for i in range(0, n, batch_size)]


def train_epochs(
    model: nn.Module,
    loss_fn: Callable[[Any], torch.Tensor],
    x: Features,
    epochs: int,
    batch_size: int,
    lr: float,
    rng: np.random.Generator,
    weight_decay: float = 0.0,
    prox_mu: float = 0.0,
) -> float:
    """Run ``epochs`` of Adam over ``x``; return the mean loss of the last epoch.

    ``loss_fn`` maps a batch (a tensor, or a torch-geometric ``Batch`` of graphs) to the mean
    loss of the detector's objective. With ``prox_mu > 0`` the FedProx term is taken around
    the parameters the model had on entry.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    anchor = [p.detach().clone() for p in params] if prox_mu > 0 else []
    opt = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    device = device_of(model)
    fetch = fetcher(x, device)
    model.train()
    last = float("nan")
    for _ in range(max(1, epochs)):
        total, count = 0.0, 0
        for idx in iterate_batches(len(x), batch_size, rng):
            loss = loss_fn(fetch(idx))
            objective = loss
            if prox_mu > 0:
                prox = sum(((p - a) ** 2).sum() for p, a in zip(params, anchor, strict=True))
                objective = loss + 0.5 * prox_mu * prox
            opt.zero_grad(set_to_none=True)
            objective.backward()  # type: ignore[no-untyped-call]
            opt.step()
            total += float(loss.detach()) * len(idx)
            count += len(idx)
        last = total / max(count, 1)
    model.eval()
    return last


def fetcher(x: Features, device: torch.device) -> Callable[[np.ndarray], Any]:
    """``ids -> batch`` on ``device``: rows of a dense array, or a graph batch."""
    if isinstance(x, GraphSet):
        graphs = x
        return lambda idx: graphs.batch(idx).to(device)
    xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    if device.type != "cpu" and xt.numel() * 4 <= ON_DEVICE_BYTES:
        xt = xt.to(device)  # small enough: move once, not per batch
    return lambda idx: xt[torch.from_numpy(idx).to(xt.device)].to(device, non_blocking=True)


GRAPH_SCORE_BATCH = 256
"""Graphs per forward pass when scoring (a graph batch costs more than a row)."""


@torch.no_grad()
def batched(fn: Callable[[Any], torch.Tensor], x: Features, batch_size: int = 1024) -> np.ndarray:
    """Apply ``fn`` to ``x`` in batches without gradients; concatenate as float64 numpy."""
    device = device_of(fn)
    if isinstance(x, GraphSet):
        step = min(batch_size, GRAPH_SCORE_BATCH)
        outs = [
            fn(x.batch(np.arange(i, min(i + step, len(x)))).to(device)).cpu()
            for i in range(0, len(x), step)
        ]
    else:
        xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
        outs = [fn(xt[i : i + batch_size].to(device)).cpu() for i in range(0, len(xt), batch_size)]
    if not outs:
        return np.zeros((0,), dtype=np.float64)
    return torch.cat(outs).double().numpy()


ON_DEVICE_BYTES = 1 << 30
"""Training data up to this size are copied to the model's device once per call."""


def device_of(fn: object) -> torch.device:
    """The device of a module, or of the module a bound method belongs to (CPU otherwise)."""
    owner = getattr(fn, "__self__", fn)
    if isinstance(owner, nn.Module):
        for p in owner.parameters():
            return p.device
        for b in owner.buffers():
            return b.device
    return torch.device("cpu")
