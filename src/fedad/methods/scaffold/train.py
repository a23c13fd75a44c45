"""SCAFFOLD's local training loop: plain SGD with the control-variate correction.

``local_epochs`` passes over the client's training set in seeded shuffled batches of
``batch_size`` (the last one may be smaller), one step per batch, so
:math:`K = \\text{local\\_epochs} \\cdot \\lceil n_i / \\text{batch\\_size} \\rceil`. Each step
is :func:`.control.corrected_step` on the gradient of the detector's own objective (its
``loss``, plus the detector's L2 weight decay :math:`\\frac{\\lambda}{2}\\lVert y \\rVert^2`
when it has one, e.g. Deep SVDD's), at a constant step size ``lr``: the paper's analysis
and experiments use plain SGD, no momentum and no adaptive optimiser.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from fedad.components.train import device_of, fetcher, iterate_batches
from fedad.core.types import Features
from fedad.methods.scaffold.control import corrected_step


def scaffold_epochs(
    model: nn.Module,
    loss_fn: Callable[[Any], torch.Tensor],
    x: Features,
    epochs: int,
    batch_size: int,
    lr: float,
    rng: np.random.Generator,
    c: Mapping[str, np.ndarray],
    c_i: Mapping[str, np.ndarray],
    weight_decay: float = 0.0,
) -> tuple[float, int]:
    """Train ``model`` in place; return (mean loss of the last epoch, steps :math:`K`).

    Every step applies :math:`y \\leftarrow y - \\eta_l (g_i(y) - c_i + c)` to each trainable
    parameter (``(c_i - c)`` computed once, as it is fixed during local training).
    ``c`` and ``c_i`` hold a control variate per named parameter; a trainable parameter
    absent from them (a client's own input layer on graphs) is corrected by zero, i.e.
    trained by plain SGD.
    """
    device = device_of(model)
    params = {k: p for k, p in model.named_parameters() if p.requires_grad}
    corr = {
        k: torch.as_tensor(np.asarray(c_i[k]) - np.asarray(c[k]), dtype=p.dtype).to(device)
        for k, p in params.items()
        if k in c and k in c_i
    }
    zero = torch.zeros((), device=device)
    fetch = fetcher(x, device)
    model.train()
    last, steps = float("nan"), 0
    for _ in range(max(1, epochs)):
        total, count = 0.0, 0
        for idx in iterate_batches(len(x), batch_size, rng):
            loss = loss_fn(fetch(idx))
            objective = loss
            if weight_decay > 0:
                l2 = sum((p**2).sum() for p in params.values())
                objective = loss + 0.5 * weight_decay * l2
            for p in params.values():
                p.grad = None
            objective.backward()  # type: ignore[no-untyped-call]
            for k, p in params.items():
                grad = torch.zeros_like(p) if p.grad is None else p.grad  # unused: g = 0
                corrected_step(p.data, grad, corr.get(k, zero), zero, lr)
            steps += 1
            total += float(loss.detach()) * len(idx)
            count += len(idx)
        last = total / max(count, 1)
    model.eval()
    return last, steps
