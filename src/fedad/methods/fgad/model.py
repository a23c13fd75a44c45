"""FGAD's networks [FGAD Sec. 3.2-3.3]: the anomaly generator (a VGAE), and the detector
that teacher and student share (one GIN backbone, two heads).

* :class:`Generator`: :math:`\\boldsymbol\\mu = \\mathrm{GIN}_\\mu(X, A)`,
  :math:`\\log\\boldsymbol\\sigma = \\mathrm{GIN}_\\sigma(X, A)` per node [FGAD eq. 5]
  (``output = "linear"``: each followed by a linear layer, see below),
  :math:`\\tilde Z = \\boldsymbol\\mu + \\epsilon \\exp(\\log\\boldsymbol\\sigma)`,
  :math:`\\epsilon \\sim \\mathcal N(0, I)` [FGAD eq. 7], and per graph
  :math:`\\tilde A = \\mathrm{sigmoid}(\\tilde Z \\tilde Z^\\top)` [FGAD eq. 7] — one
  :math:`n_i \\times n_i` block per graph, never an entry between two graphs, zero on the
  diagonal (the graphs have no self-loops, so eq. 8 has no target there).
* :class:`FGADNet`: the backbone :math:`f_{w_g}` (:class:`~fedad.components.nn.gin.GIN`, shared by
  teacher and student [FGAD eq. 14]), the teacher head :math:`\\mathrm{Proj}_{w_t}` (4 linear
  layers) and the student head :math:`\\mathrm{Proj}_{w_s}` (3 linear layers), both ending in
  2 logits: index 1 "normal" (:math:`y = 1`), index 0 "generated" (:math:`\\tilde y = 0`)
  [FGAD eq. 9, 11].
"""

from __future__ import annotations

import math

import torch
from torch import nn

from fedad.components.nn.gin import GIN
from fedad.components.nn.mlp import MLP

__all__ = ["NORMAL", "FGADNet", "Generator", "pair_mask"]

NORMAL = 1
"""The logit index of the pseudo label of real (normal) graphs [FGAD eq. 9: y = 1]."""

LOGSTD_MAX = 10.0
""":math:`\\log\\sigma` is clamped to :math:`[-10, 10]`: a finite sample whatever the weights."""


def pair_mask(mask: torch.Tensor) -> torch.Tensor:
    """Node pairs :math:`(i, j)`, :math:`i \\ne j`, both real nodes of the same graph.

    Shapes:
        - mask: :math:`(B, N)` bool
        - output: :math:`(B, N, N)` bool
    """
    pair = mask.unsqueeze(2) & mask.unsqueeze(1)
    eye = torch.eye(mask.shape[1], dtype=torch.bool, device=mask.device)
    return pair & ~eye


class Generator(nn.Module):
    """The VGAE anomaly generator :math:`\\mathcal G_{w_a}` [FGAD eq. 5-7].

    Args:
        in_dim: node feature width.
        hidden: width of the layers of :math:`\\mathrm{GIN}_\\mu` and :math:`\\mathrm{GIN}_\\sigma`.
        layers: their depth; the latent width is ``hidden * layers`` (concatenated layers).
        output: ``"gin"`` (the paper's eq. 5: :math:`\\boldsymbol\\mu` and
            :math:`\\log\\boldsymbol\\sigma` are the GINs' own outputs, which end in the
            activation of eq. 2, LeakyReLU, so :math:`\\log\\boldsymbol\\sigma \\gtrsim 0`:
            every latent coordinate carries noise of standard deviation at least about 1) or
            ``"linear"`` (ours: :math:`\\boldsymbol\\mu = W_\\mu \\mathrm{GIN}_\\mu(X, A) +
            b_\\mu`, likewise :math:`\\log\\boldsymbol\\sigma`: the linear output layers of the
            VGAE of Kipf & Welling 2016, which eq. 5 cites; the authors' code also ends both in
            a linear shortcut).
        logit_bias: a learnt scalar :math:`b` added to every logit (ours):
            :math:`\\tilde A = \\mathrm{sigmoid}(\\tilde Z \\tilde Z^\\top + b)`.
        scaled: divide the inner products by :math:`\\sqrt d` (ours; ``decoder = "scaled"``).

    Shapes:
        - :meth:`encode`: x :math:`(|V|, F)`, edge_index :math:`(2, |E|)` ->
          :math:`\\boldsymbol\\mu, \\log\\boldsymbol\\sigma` :math:`(|V|, d)`
        - :meth:`decode`: z :math:`(B, N, d)` -> inner products :math:`(B, N, N)`;
          :meth:`logits`: the same with the scale and bias applied
    """

    def __init__(
        self,
        in_dim: int,
        hidden: int = 32,
        layers: int = 2,
        *,
        output: str = "gin",
        logit_bias: bool = False,
        scaled: bool = False,
    ) -> None:
        super().__init__()
        if output not in ("gin", "linear"):
            raise ValueError(f"generator output must be 'gin' or 'linear', not {output!r}")
        self.gin_mu = GIN(in_dim, hidden, layers)
        self.gin_sigma = GIN(in_dim, hidden, layers)
        d = self.gin_mu.out_dim
        self.out_mu = nn.Linear(d, d) if output == "linear" else None
        self.out_sigma = nn.Linear(d, d) if output == "linear" else None
        self.logit_bias = nn.Parameter(torch.zeros(())) if logit_bias else None
        self.scaled = scaled

    def encode(
        self, x: torch.Tensor, edge_index: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:math:`(\\boldsymbol\\mu, \\log\\boldsymbol\\sigma)` per node [FGAD eq. 5]."""
        mu = self.gin_mu.node_features(x, edge_index)
        logstd = self.gin_sigma.node_features(x, edge_index)
        if self.out_mu is not None and self.out_sigma is not None:
            mu, logstd = self.out_mu(mu), self.out_sigma(logstd)
        return mu, logstd.clamp(-LOGSTD_MAX, LOGSTD_MAX)

    @staticmethod
    def sample(
        mu: torch.Tensor, logstd: torch.Tensor, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """The reparametrised :math:`\\tilde Z = \\boldsymbol\\mu + \\epsilon
        \\exp(\\log\\boldsymbol\\sigma)` [FGAD eq. 7]."""
        eps = torch.randn(mu.shape, generator=generator, dtype=mu.dtype).to(mu.device)
        return mu + eps * torch.exp(logstd)

    @staticmethod
    def decode(z: torch.Tensor) -> torch.Tensor:
        """The inner products :math:`\\tilde Z \\tilde Z^\\top` of every graph's node pairs
        (the sigmoid of eq. 7 is applied by :meth:`adjacency`, or inside the loss)."""
        return torch.bmm(z, z.transpose(1, 2))

    def logits(self, z: torch.Tensor) -> torch.Tensor:
        """Eq. 7's logits as configured: :math:`\\tilde Z \\tilde Z^\\top`, divided by
        :math:`\\sqrt d` when ``scaled``, plus :math:`b` with ``logit_bias``."""
        out = self.decode(z)
        if self.scaled:
            out = out / math.sqrt(z.shape[-1])
        if self.logit_bias is not None:
            out = out + self.logit_bias
        return out

    @staticmethod
    def adjacency(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """:math:`\\tilde A = \\mathrm{sigmoid}(\\tilde Z \\tilde Z^\\top)` on each graph's node
        pairs, zero on the diagonal and outside the graph [FGAD eq. 7]."""
        return torch.sigmoid(logits) * pair_mask(mask).to(logits.dtype)


class FGADNet(nn.Module):
    """GIN backbone with the teacher and student heads [FGAD eq. 9, 11, 14].

    The paper's sizes: GIN of 3 layers of 64 (representation 192), student 192-128-64-2,
    teacher of 4 layers. The paper writes the teacher as 256-192-128-64-2, which does not
    fit a 192-wide representation as its input; we keep its 4 layers and last three widths
    and read the input as 192: 192-192-128-64-2.

    Shapes:
        - representation :math:`(B, K \\cdot \\mathrm{hidden})`; each head's logits
          :math:`(B, 2)`
    """

    def __init__(self, in_dim: int, hidden: int = 64, layers: int = 3) -> None:
        super().__init__()
        self.backbone = GIN(in_dim, hidden, layers)
        d = self.backbone.out_dim
        self.teacher = MLP([d, d, 2 * hidden, hidden, 2], act=nn.LeakyReLU)
        self.student = MLP([d, 2 * hidden, hidden, 2], act=nn.LeakyReLU)

    def represent(
        self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor, num_graphs: int
    ) -> torch.Tensor:
        """:math:`Z = f_{w_g}(X, A)` of real graphs (the sparse path) [FGAD eq. 14]."""
        out: torch.Tensor = self.backbone(x, edge_index, batch, num_graphs)
        return out
