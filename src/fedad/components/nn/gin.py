"""Graph isomorphism network (GIN; Xu et al., ICLR 2019) for graph-level representations.

The backbone of FGAD and of the generic baselines on graph data. Per layer :math:`k`
[FGAD eq. 1-2]:

.. math::
    \\mathbf h_v^{(k)} = \\sigma\\Big(\\mathrm{MLP}_k\\big((1+\\epsilon)\\,\\mathbf h_v^{(k-1)}
        + \\textstyle\\sum_{u \\in N(v)} a_{vu}\\, \\mathbf h_u^{(k-1)}\\big)\\Big),
    \\qquad \\mathbf h_v^{(0)} = \\mathbf x_v

with :math:`a_{vu} = 1` on the graph's edges (the sparse path, PyG's ``GINConv``) or any
weight in [0, 1] (the dense path, a generated soft adjacency; the same parameters, the same
sum: PyG's ``DenseGINConv``). The graph's representation is the sum readout of the
concatenated layer outputs [FGAD eq. 3]:

.. math::
    \\mathbf h_G = \\sum_{v \\in G} \\big[\\mathbf h_v^{(1)} \\,\\|\\, \\dots \\,\\|\\,
        \\mathbf h_v^{(K)}\\big]

No normalisation layer: batch statistics would differ between batches of real and generated
graphs (a teacher could tell them apart by those alone) and cannot be averaged across
clients; a per-node layer norm would erase the neighbourhood sizes that the sum aggregation
is there to count. Node features should therefore be of unit scale (one-hot or
standardised), which the graph data sets give.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import torch
from torch import nn

if TYPE_CHECKING:
    from torch_geometric.data import Batch

__all__ = ["GIN", "dense_graphs", "dense_nodes"]


class GIN(nn.Module):
    """``layers`` GIN layers of width ``hidden`` on ``in_dim`` node features.

    Args:
        in_dim: node feature width :math:`F`.
        hidden: width of every layer (the paper's 64).
        layers: :math:`K` (the paper's 3).
        bias: linear layers with bias (Deep SVDD needs a bias-free network).

    Shapes:
        - sparse: x :math:`(|V|, F)`, edge_index :math:`(2, |E|)`, batch :math:`(|V|,)`
          -> :math:`(B, K \\cdot \\mathrm{hidden})`
        - dense: x :math:`(B, N, F)`, adj :math:`(B, N, N)`, mask :math:`(B, N)`
          -> :math:`(B, K \\cdot \\mathrm{hidden})`
    """

    def __init__(self, in_dim: int, hidden: int = 64, layers: int = 3, bias: bool = True) -> None:
        super().__init__()
        from torch_geometric.nn import GINConv

        if in_dim < 1 or hidden < 1 or layers < 1:
            raise ValueError("GIN needs in_dim, hidden and layers of at least 1")
        self.in_dim, self.hidden, self.layers = in_dim, hidden, layers
        self.convs = nn.ModuleList(
            GINConv(
                nn.Sequential(
                    nn.Linear(in_dim if k == 0 else hidden, hidden, bias=bias),
                    nn.LeakyReLU(),
                    nn.Linear(hidden, hidden, bias=bias),
                ),
                eps=0.0,
                train_eps=False,
            )
            for k in range(layers)
        )
        self.act = nn.LeakyReLU()

    @property
    def out_dim(self) -> int:
        """Width of the graph representation: :math:`K \\cdot \\mathrm{hidden}`."""
        return self.layers * self.hidden

    def node_features(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        """The concatenated layer outputs per node, :math:`(|V|, K \\cdot \\mathrm{hidden})`."""
        outs = []
        for conv in self.convs:
            x = self.act(conv(x, edge_index))
            outs.append(x)
        return torch.cat(outs, dim=1)

    def forward(
        self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor, num_graphs: int
    ) -> torch.Tensor:
        """Graph representations :math:`\\mathbf h_G` of a packed batch [FGAD eq. 3]."""
        from torch_geometric.nn import global_add_pool

        out: torch.Tensor = global_add_pool(self.node_features(x, edge_index), batch, num_graphs)
        return out

    def dense_node_features(
        self, x: torch.Tensor, adj: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """The dense path's concatenated layer outputs, :math:`(B, N, K \\cdot \\mathrm{hidden})`;
        padded nodes (``mask`` False) are zero and take no part in any sum."""
        m = mask.unsqueeze(-1).to(x.dtype)
        adj = adj * m * m.transpose(1, 2)
        h = x * m
        outs = []
        for conv in self.convs:
            eps, mlp = cast(torch.Tensor, conv.eps), cast(nn.Module, conv.nn)
            agg = (1.0 + float(eps)) * h + torch.bmm(adj, h)
            h = self.act(mlp(agg)) * m
            outs.append(h)
        return torch.cat(outs, dim=-1)

    def forward_dense(self, x: torch.Tensor, adj: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Graph representations from per-graph (soft) adjacencies [FGAD eq. 1-3]."""
        return self.dense_node_features(x, adj, mask).sum(dim=1)


def dense_graphs(batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A packed torch-geometric batch as dense per-graph blocks: node features
    :math:`(B, N, F)`, the 0/1 adjacency :math:`(B, N, N)` of each graph (entry
    :math:`(b, i, j)` is 1 iff graph :math:`b` has the edge :math:`i \\to j`; no entry ever
    links two graphs), and the node mask :math:`(B, N)`, :math:`N` the largest graph."""
    from torch_geometric.utils import to_dense_adj, to_dense_batch

    b = int(batch.num_graphs)
    x, mask = to_dense_batch(batch.x, batch.batch, batch_size=b)
    adj = to_dense_adj(batch.edge_index, batch.batch, batch_size=b, max_num_nodes=x.shape[1])
    return x, adj.clamp_(max=1.0), mask


def dense_nodes(h: torch.Tensor, batch: torch.Tensor, num_graphs: int, n: int) -> torch.Tensor:
    """Packed node rows :math:`(|V|, d)` as :math:`(B, N, d)` blocks, zero-padded (the
    layout of :func:`dense_graphs` for ``n`` = its :math:`N`)."""
    from torch_geometric.utils import to_dense_batch

    dense: tuple[torch.Tensor, torch.Tensor] = to_dense_batch(
        h, batch, batch_size=num_graphs, max_num_nodes=n
    )
    return dense[0]
