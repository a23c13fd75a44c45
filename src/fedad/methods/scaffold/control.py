"""SCAFFOLD's update and control-variate math, as pure functions on named arrays.

Karimireddy et al., "SCAFFOLD: Stochastic Controlled Averaging for Federated Learning"
(ICML 2020), Algorithm 1, lines numbered from "server input" (line 1) to the end of the
round loop (line 17). Notation: global model :math:`x`, server control variate :math:`c`,
client :math:`i`'s control variate :math:`c_i`, its local model :math:`y_i`, local step
size :math:`\\eta_l`, global step size :math:`\\eta_g`, :math:`K` local steps, sampled
clients :math:`S` out of :math:`N`.

Every function maps ``{name: array}`` dicts (one entry per model tensor) to new dicts and
changes none of its inputs; the training loop (:mod:`.train`) and the protocol
(:mod:`.federated`) call them.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

Arrays = Mapping[str, np.ndarray]


def zeros_like(arrays: Arrays) -> dict[str, np.ndarray]:
    """Zero control variates of the shapes of ``arrays``: where :math:`c` and every
    :math:`c_i` start (the server's input :math:`c` [SCAFFOLD Algorithm 1 line 1], set to
    0 here, as the paper's experiments do)."""
    return {k: np.zeros_like(v) for k, v in arrays.items()}


@torch.no_grad()
def corrected_step(
    y: torch.Tensor, grad: torch.Tensor, c_i: torch.Tensor, c: torch.Tensor, lr: float
) -> None:
    """One local step in place: :math:`y \\leftarrow y - \\eta_l (g_i(y) - c_i + c)`
    [SCAFFOLD Algorithm 1 line 9]. With :math:`c = c_i = 0` this is a plain SGD step."""
    y.sub_(lr * (grad - c_i + c))


def option_two(
    c_i: Arrays, c: Arrays, x: Arrays, y: Arrays, steps: int, lr: float
) -> dict[str, np.ndarray]:
    """The client's new control variate, option II:
    :math:`c_i^+ = c_i - c + \\frac{1}{K \\eta_l}(x - y_i)` [SCAFFOLD Algorithm 1 line 11,
    option (ii)]. ``steps`` is :math:`K \\ge 1`, ``lr``
    :math:`\\eta_l > 0`; the keys are those of ``c_i``."""
    if steps < 1 or lr <= 0:
        raise ValueError(f"option II needs K >= 1 and lr > 0, got K={steps}, lr={lr}")
    scale = 1.0 / (steps * lr)
    return {
        k: (c_i[k] - c[k] + scale * (x[k].astype(np.float64) - y[k])).astype(c_i[k].dtype)
        for k in c_i
    }


def client_deltas(
    x: Arrays, y: Arrays, c_i: Arrays, c_i_new: Arrays
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """What a client sends: :math:`(\\Delta y_i, \\Delta c_i) = (y_i - x, c_i^+ - c_i)`
    [SCAFFOLD Algorithm 1 line 12]; :math:`\\Delta y` over the keys of ``x``,
    :math:`\\Delta c` over those of ``c_i``."""
    dy = {k: (y[k] - x[k]).astype(x[k].dtype) for k in x}
    dc = {k: (c_i_new[k] - c_i[k]).astype(c_i[k].dtype) for k in c_i}
    return dy, dc


def server_update(
    x: Arrays,
    c: Arrays,
    mean_dy: Arrays,
    mean_dc: Arrays,
    sampled: int,
    total: int,
    server_lr: float = 1.0,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The server's step: :math:`x \\leftarrow x + \\eta_g \\Delta x` and
    :math:`c \\leftarrow c + \\frac{|S|}{N} \\Delta c`, with :math:`(\\Delta x, \\Delta c)`
    the mean of the replies' :math:`(\\Delta y_i, \\Delta c_i)` [SCAFFOLD Algorithm 1 lines
    15-16]. ``sampled`` is :math:`|S|`, ``total`` :math:`N`."""
    if not 0 < sampled <= total:
        raise ValueError(f"need 0 < |S| <= N, got |S|={sampled}, N={total}")
    x_new = {k: (x[k] + server_lr * mean_dy[k]).astype(x[k].dtype) for k in x}
    share = sampled / total
    c_new = {k: (c[k] + share * mean_dc[k]).astype(c[k].dtype) for k in c}
    return x_new, c_new
