"""FedUV's math: secret codes, the correlation with a code, the positive-only loss.

Paper label ``FedUV``: Hosseini, Park, Yun, Louizos, Soriaga, Welling, *Federated Learning of
User Verification Models Without Sharing Embeddings* (ICML 2021). Reduced to its core idea
(see ``docs/methods/feduv.md`` for what is kept and what is not):

* client k holds a secret code :math:`c_k \\in \\{-1, +1\\}^L` (:func:`secret_code`);
* a shared network :math:`f` maps a sample to :math:`f(x) \\in \\mathbb{R}^L`
  (:class:`FedUVNet`: an encoder :math:`g` and a linear head :math:`W`, the "set of vectors
  users learn jointly", :math:`f(x) = W g(x)`);
* the correlation :math:`\\rho_k(x) = c_k^\\top f(x) / (\\lVert c_k \\rVert \\lVert f(x)
  \\rVert)` (:func:`correlation`, the cosine between output and code);
* each client minimises only a positive loss, the hinge
  :math:`\\ell_k(x) = \\max(0, m - \\rho_k(x))` with margin :math:`m`
  (:func:`feduv_loss`); no negative term, so no client needs another's embeddings or code;
* the anomaly score is :math:`-\\rho_k(x)` (:func:`feduv_score`): a sample whose output
  points away from the client's own code is anomalous.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from fedad.components.nn.cnn import ConvEncoder
from fedad.components.nn.mlp import MLP, flatten

EPS = 1e-8


def secret_code(rng: np.random.Generator, length: int) -> np.ndarray:
    """A uniformly random :math:`\\pm 1` vector of ``length`` (float32), drawn from ``rng``.

    Two independent codes have cosine :math:`\\approx 0 \\pm 1/\\sqrt{L}`: for large ``L``
    they are nearly orthogonal, the property FedUV gets exactly from an error-correcting
    code's minimum distance.
    """
    if length < 1:
        raise ValueError(f"code length must be positive, got {length}")
    bits = rng.integers(0, 2, size=length)
    return (2.0 * bits - 1.0).astype(np.float32)


def correlation(out: torch.Tensor, code: torch.Tensor) -> torch.Tensor:
    """Cosine :math:`c^\\top f / (\\lVert c \\rVert \\lVert f \\rVert)` of each row of ``out``
    ``(N, L)`` with ``code`` ``(L,)``; in [-1, 1] (0 for an all-zero output)."""
    num = out @ code
    den = out.norm(dim=1) * code.norm() + EPS
    rho: torch.Tensor = num / den
    return rho


def feduv_loss(out: torch.Tensor, code: torch.Tensor, margin: float) -> torch.Tensor:
    """Mean positive hinge :math:`\\max(0, m - \\rho(x))` over a batch."""
    loss: torch.Tensor = torch.relu(margin - correlation(out, code)).mean()
    return loss


def feduv_score(out: torch.Tensor, code: torch.Tensor) -> torch.Tensor:
    """Anomaly score :math:`-\\rho(x)`: higher = further from the client's code."""
    return -correlation(out, code)


class FedUVNet(nn.Module):
    """:math:`f(x) = W g(x)`: an encoder :math:`g` following the data kind (an MLP for vectors,
    :class:`~fedad.components.nn.cnn.ConvEncoder` for images) and a linear head :math:`W` to ``L``
    outputs. Everything here is shared (FedAvg); the code is not part of it."""

    def __init__(self, kind: str, shape: tuple[int, ...], hidden: int, length: int) -> None:
        super().__init__()
        self.kind = kind
        if kind == "image":
            c, h, w = shape
            self.g: nn.Module = nn.Sequential(ConvEncoder((c, h, w), hidden), nn.ReLU())
        else:
            d = int(np.prod(shape))
            self.g = nn.Sequential(MLP([d, hidden, hidden]), nn.ReLU())
        self.head = nn.Linear(hidden, length)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.g(x if self.kind == "image" else flatten(x))
        out: torch.Tensor = self.head(z)
        return out
