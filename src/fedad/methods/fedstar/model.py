"""FedStar's network with a Deep SVDD objective (the math, no training loop, no federation).

Structural node features [FedStar Sec. 4.1], computed from the edges alone, so the same for
every source whatever its node features:

.. math::
    \\mathbf s_v = \\big[\\, (P)_{vv}, (P^2)_{vv}, \\dots, (P^{n_{rw}})_{vv} \\,\\big\\|\\,
        \\mathrm{onehot}(\\min(\\deg v, n_{dg} - 1)) \\,\\big], \\qquad P = D^{-1} A

(random-walk return probabilities, as PyG's ``AddRandomWalkPE``, and the one-hot degree).

Two bias-free GINs (:class:`fedad.components.nn.gin.GIN`): the **structure encoder** over
:math:`\\mathbf s_v` (node embeddings :math:`H_s`, the part every client shares) and the
**feature encoder** over :math:`[\\mathbf x_v \\| H_{s,v}]` (personal; its input width follows
the client's node features). The graph representation is the sum readout of both:

.. math::
    \\phi(G) = \\sum_{v \\in G} \\big[ H_{s,v} \\,\\|\\, H_{f,v} \\big] \\in
        \\mathbb R^{2 K \\cdot \\mathrm{hidden}}

Reduced to: FedStar feeds the structure embedding into the feature encoder at every layer
(:math:`h_f^{(k)} = \\mathrm{GIN}_f([h_f^{(k-1)} \\| h_s^{(k-1)}])`); here it enters once, at
the input, so both encoders are plain :class:`~fedad.components.nn.gin.GIN` s.

Deep SVDD (Ruff et al. 2018) on :math:`\\phi`: bias-free layers, a centre :math:`c` fixed once
(buffer ``center``), score :math:`\\lVert \\phi(G) - c \\rVert^2`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from fedad.components.nn.gin import GIN

if TYPE_CHECKING:
    from torch_geometric.data import Batch

STRUCT = "struct"
"""Name of the structure encoder's module: every tensor under ``struct.`` is shared."""
FEATURE_INPUT_LAYER = "feat.convs.0.nn.0.weight"
"""The feature encoder's input layer, ``(hidden, width + K * hidden)``."""


def structure_features(
    edge_index: torch.Tensor, batch: torch.Tensor, num_graphs: int, n_rw: int, n_dg: int
) -> torch.Tensor:
    """:math:`\\mathbf s_v` of every node of a packed batch, ``(|V|, n_rw + n_dg)``: the
    return probabilities of :math:`1..n_{rw}`-step random walks and the one-hot degree
    (out-degree; both directions of an undirected edge are listed)."""
    from torch_geometric.utils import degree, to_dense_adj, to_dense_batch

    n = int(batch.numel())
    deg = degree(edge_index[0], n, dtype=torch.float32) if n else torch.zeros(0)
    onehot = nn.functional.one_hot(deg.long().clamp(max=n_dg - 1), n_dg).to(torch.float32)
    if n == 0:
        return torch.zeros(0, n_rw + n_dg, device=batch.device)
    _, mask = to_dense_batch(torch.zeros(n, 1, device=batch.device), batch, batch_size=num_graphs)
    adj = to_dense_adj(edge_index, batch, batch_size=num_graphs, max_num_nodes=mask.shape[1])
    adj = adj.clamp(max=1.0)
    walk = adj / adj.sum(-1, keepdim=True).clamp(min=1.0)
    power, diags = walk, []
    for k in range(n_rw):
        diags.append(torch.diagonal(power, dim1=1, dim2=2))
        if k + 1 < n_rw:
            power = torch.bmm(power, walk)
    rw = torch.stack(diags, -1)[mask]
    return torch.cat([rw, onehot.to(rw.device)], dim=1)


class FedStarNet(nn.Module):
    """Structure encoder ``struct`` (shared) and feature encoder ``feat`` (personal), both
    bias-free GINs, and the fixed Deep SVDD centre ``center``."""

    def __init__(self, width: int, hidden: int, layers: int, n_rw: int, n_dg: int) -> None:
        super().__init__()
        self.n_rw, self.n_dg = n_rw, n_dg
        self.struct = GIN(n_rw + n_dg, hidden, layers, bias=False)
        self.feat = GIN(width + self.struct.out_dim, hidden, layers, bias=False)
        self.register_buffer("center", torch.zeros(self.out_dim))

    @property
    def out_dim(self) -> int:
        """Width of :math:`\\phi(G)`: :math:`2 K \\cdot \\mathrm{hidden}`."""
        return self.struct.out_dim + self.feat.out_dim

    def embed(self, batch: Batch) -> torch.Tensor:
        """:math:`\\phi(G)` of a torch-geometric batch, ``(B, 2 K hidden)``."""
        from torch_geometric.nn import global_add_pool

        b = int(batch.num_graphs)
        s = structure_features(batch.edge_index, batch.batch, b, self.n_rw, self.n_dg)
        hs = self.struct.node_features(s, batch.edge_index)
        hf = self.feat.node_features(torch.cat([batch.x, hs], dim=1), batch.edge_index)
        out: torch.Tensor = global_add_pool(torch.cat([hs, hf], dim=1), batch.batch, b)
        return out

    def score(self, batch: Batch) -> torch.Tensor:
        """Squared distance to the centre."""
        center: torch.Tensor = self.center  # type: ignore[assignment]
        return (self.embed(batch) - center).pow(2).sum(1)
