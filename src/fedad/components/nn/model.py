"""The networks of the generic baseline detectors (the math, no training loop).

* :class:`AutoEncoder`: reconstruction :math:`\\hat x = g(f(x))`; anomaly score
  :math:`\\lVert x - \\hat x \\rVert_2^2 / d` (mean squared reconstruction error).
* :class:`DeepSVDDNet`: bias-free encoder :math:`\\phi(\\cdot; W)`; one-class Deep SVDD
  (Ruff et al., ICML 2018, eq. 4) minimises
  :math:`\\frac{1}{n} \\sum_i \\lVert \\phi(x_i; W) - c \\rVert^2
  + \\frac{\\lambda}{2} \\lVert W \\rVert^2`
  with the centre :math:`c` fixed to the mean of :math:`\\phi` over the training data after
  an initial forward pass; the score is :math:`\\lVert \\phi(x; W^*) - c \\rVert^2` (eq. 5).

The backbone follows the data: an MLP for vectors, a small CNN for images, and for graphs
(Deep SVDD only) a bias-free GIN (:class:`fedad.components.nn.gin.GIN`, 3 layers of 64, sum
readout of the concatenated layers: :math:`\\phi(G) \\in \\mathbb R^{192}`, as OCGIN, Zhao &
Akoglu 2021),
followed by a bias-free linear map to ``latent_dim`` only when one is configured. The first
linear map of the GIN's first layer (:data:`GRAPH_INPUT_LAYER`) is the only tensor whose
shape depends on the node-feature width.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from fedad.components.nn.cnn import ConvDecoder, ConvEncoder
from fedad.components.nn.gin import GIN
from fedad.components.nn.mlp import MLP, default_latent, flatten

if TYPE_CHECKING:
    from torch_geometric.data import Batch

IMAGE_LATENT = 32
GRAPH_HIDDEN = 64
"""Width of every GIN layer of the graph encoder (FGAD's 64)."""
GRAPH_LAYERS = 3
"""GIN depth of the graph encoder (FGAD's 3)."""
GRAPH_INPUT_LAYER = "phi.gin.convs.0.nn.0.weight"
"""The (bias-free) input layer of :class:`DeepSVDDNet` on graphs, ``(hidden, width)``: the
one tensor whose shape is the node-feature width."""


def latent_size(kind: str, shape: tuple[int, ...], latent: int | None) -> int:
    """The bottleneck size: the user's, else 32 for images, the GIN readout's
    ``layers * hidden`` for graphs, else :func:`default_latent`."""
    if latent is not None:
        return latent
    if kind == "image":
        return IMAGE_LATENT
    if kind == "graph":
        return GRAPH_LAYERS * GRAPH_HIDDEN
    return default_latent(math.prod(shape))


class GraphEncoder(nn.Module):
    """Bias-free GIN with sum readout, then a bias-free linear map to ``latent`` unless
    ``latent`` is the readout's own width; maps a torch-geometric batch to ``(B, latent)``."""

    def __init__(self, width: int, latent: int) -> None:
        super().__init__()
        self.gin = GIN(width, GRAPH_HIDDEN, GRAPH_LAYERS, bias=False)
        out = self.gin.out_dim
        self.proj: nn.Module = nn.Identity() if latent == out else nn.Linear(out, latent, False)

    def forward(self, batch: Batch) -> torch.Tensor:
        h = self.gin(batch.x, batch.edge_index, batch.batch, int(batch.num_graphs))
        out: torch.Tensor = self.proj(h)
        return out


class AutoEncoder(nn.Module):
    """An autoencoder whose backbone follows the data kind."""

    def __init__(self, kind: str, shape: tuple[int, ...], latent: int) -> None:
        super().__init__()
        self.kind = kind
        self.shape = tuple(shape)
        if kind == "image":
            c, h, w = self.shape
            self.encoder: nn.Module = ConvEncoder((c, h, w), latent)
            self.decoder: nn.Module = ConvDecoder(latent, (c, h, w))
        else:
            d = math.prod(self.shape)
            hidden = max(2 * latent, min(128, 2 * d))
            self.encoder = MLP([d, hidden, latent])
            self.decoder = MLP([latent, hidden, d])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "image":
            out: torch.Tensor = self.decoder(self.encoder(x))
            return out
        flat: torch.Tensor = self.decoder(self.encoder(flatten(x)))
        return flat.view_as(x)

    def score(self, x: torch.Tensor) -> torch.Tensor:
        """Mean squared reconstruction error per sample."""
        err: torch.Tensor = (self(x) - x).pow(2).flatten(1).mean(1)
        return err


class DeepSVDDNet(nn.Module):
    """Bias-free encoder :math:`\\phi` with a fixed centre buffer ``center``; on graphs
    ``shape`` is ``(width,)``, the node-feature width."""

    def __init__(self, kind: str, shape: tuple[int, ...], latent: int) -> None:
        super().__init__()
        self.kind = kind
        if kind == "image":
            c, h, w = shape
            self.phi: nn.Module = ConvEncoder((c, h, w), latent, bias=False)
        elif kind == "graph":
            (width,) = shape
            self.phi = GraphEncoder(int(width), latent)
        else:
            d = math.prod(tuple(shape))
            hidden = max(2 * latent, min(128, 2 * d))
            self.phi = MLP([d, hidden, latent], bias=False, act=nn.LeakyReLU)
        self.register_buffer("center", torch.zeros(latent))

    def embed(self, x: Any) -> torch.Tensor:
        """:math:`\\phi(x)`, ``(B, latent)``; ``x`` a tensor, or a torch-geometric batch on
        graphs."""
        out: torch.Tensor = self.phi(x if self.kind in ("image", "graph") else flatten(x))
        return out

    def score(self, x: Any) -> torch.Tensor:
        """Squared distance to the centre (eq. 5)."""
        center: torch.Tensor = self.center  # type: ignore[assignment]
        return (self.embed(x) - center).pow(2).sum(1)


def fix_center(center: torch.Tensor, eps: float = 0.1) -> torch.Tensor:
    """Push near-zero centre coordinates to :math:`\\pm\\epsilon`.

    A coordinate of :math:`c` at zero can be matched trivially by zero weights; Ruff et al.'s
    reference implementation moves coordinates with :math:`|c_j| < \\epsilon` to
    :math:`\\pm\\epsilon`, and so do we.
    """
    c = center.clone()
    c[(c.abs() < eps) & (c < 0)] = -eps
    c[(c.abs() < eps) & (c >= 0)] = eps
    return c
