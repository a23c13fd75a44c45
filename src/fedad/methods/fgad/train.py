"""FGAD's local training [FGAD Algorithm 1, lines 2 and 5-9]: one client, its own graphs.

:func:`train_epoch` runs one pass over the client's normal graphs. Per batch: the generator
encodes the real graphs and samples a soft adjacency per graph [FGAD eq. 5-7]; the shared
backbone represents the real graphs (sparse) and the generated ones (dense, same node
features, adjacency :math:`\\tilde A`) [FGAD eq. 14]; the teacher head separates them
[FGAD eq. 9]; with ``distill`` the student head matches the teacher's softened predictions on
the real graphs [FGAD eq. 12]. The step minimises [FGAD eq. 13] (or, in pre-training, eq.
10) over all of the client's parameters with one optimiser.

The generator learns from :math:`\\ell_g` (and its KL term) only: the detector sees
:math:`\\tilde A` detached. The paper assigns :math:`\\ell_g` to the generator ("generate
anomalous graphs that closely resemble normal ones") and :math:`\\ell_{ad}` to the detector
("identify those generated anomalous graphs"); letting :math:`\\ell_{ad}`'s gradient into
the generator (as one optimiser over eq. 10 would) teaches it to make its graphs *easier* to
tell apart, against that intent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from fedad.components.nn.gin import dense_graphs, dense_nodes
from fedad.components.train import iterate_batches
from fedad.methods.fgad.losses import (
    balanced_reconstruction_loss,
    constant_reconstruction_loss,
    detection_loss,
    distillation_loss,
    edge_auc,
    edge_prior_shift,
    kl_divergence,
    reconstruction_loss,
    total_loss,
)
from fedad.methods.fgad.model import NORMAL, FGADNet, Generator

if TYPE_CHECKING:
    from torch_geometric.data import Batch

    from fedad.core.types import GraphSet

__all__ = ["LOSS_KEYS", "degree_cap", "degree_features", "sample_adjacency", "train_epoch"]

LOSS_KEYS = (
    "loss",
    "loss_ad",
    "loss_g",
    "loss_kd",
    "student_flags_generated",
    "recon_constant",
    "recon_edge_auc",
)
"""The per-epoch means :func:`train_epoch` returns: the losses (``loss_kd`` is 0 without
``distill``; ``loss_g`` is eq. 8 of the adjacency the detector is shown, whatever the
generator is trained with) and three label-free checks on the training graphs: the share of
the batch's generated graphs that the student head classifies as generated (the teacher is
trained to flag them all; a student that never saw them during distillation may not), eq. 8
of the best constant predictor (``recon_constant``: a ``loss_g`` above it means the
generator has learnt nothing about which pairs are edges) and the AUROC of the generator's
logits for the real edges against the non-edges (``recon_edge_auc``; 0.5: no structure)."""


def sample_adjacency(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A symmetric 0/1 adjacency with edge ``(i, j)``, ``i < j``, drawn with probability
    ``probs[b, i, j]`` (zero where ``probs`` is, e.g. the diagonal and padding).

    Shapes: ``(B, N, N)`` -> ``(B, N, N)``.
    """
    u = torch.rand(probs.shape, generator=generator, dtype=probs.dtype).to(probs.device)
    upper = torch.triu((u < probs).to(probs.dtype), diagonal=1)
    return upper + upper.transpose(1, 2)


def degree_cap(graphs: GraphSet) -> int | None:
    """``c`` when every node's features are the one-hot of ``min(degree, c)`` (width
    ``c + 1``): graphs without node attributes, given degree features (the TU loaders,
    ``graphs_social``); else ``None``. A training-data-only check of a client's graphs."""
    w = int(graphs.shape[1])
    if w < 2 or len(graphs) == 0:
        return None
    x = graphs.x.reshape(-1, w)
    n = int(graphs.node_ptr[-1])
    if x.shape[0] != n or not np.all((x == 0) | (x == 1)) or not np.all(x.sum(1) == 1):
        return None
    offset = np.repeat(graphs.node_ptr[:-1], np.diff(graphs.edge_ptr))
    deg = np.bincount(graphs.edge_index[0] + offset, minlength=n)
    return w - 1 if np.array_equal(x.argmax(1), np.minimum(deg, w - 1)) else None


def degree_features(adj: torch.Tensor, mask: torch.Tensor, cap: int) -> torch.Tensor:
    """One-hot ``min(degree, cap)`` per node of dense adjacencies (rounded for a soft one),
    zero on padded nodes. Shapes: adj ``(B, N, N)``, mask ``(B, N)`` -> ``(B, N, cap + 1)``."""
    deg = adj.sum(-1).round().clamp(0, cap).long()
    out = torch.nn.functional.one_hot(deg, cap + 1).to(adj.dtype)
    return out * mask.unsqueeze(-1).to(adj.dtype)


def _generate(
    gen: Generator,
    b: Batch,
    nodes: int,
    adj: torch.Tensor,
    mask: torch.Tensor,
    noise: torch.Generator,
    reconstruction: str,
    fake_graphs: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The generator's part of one :func:`train_epoch` batch [FGAD eq. 5-8]: the logits the
    detector's adjacency comes from (shifted for ``reconstruction = "balanced"``), the loss
    the generator trains with, eq. 8 of the adjacency the detector is shown, the KL term,
    and the detached generated adjacency (``fake_graphs = "sampled"``: drawn 0/1 from it).
    ``noise`` is drawn from in this order: the latent sample, then the adjacency sample."""
    n = int(b.num_graphs)
    mu, logstd = gen.encode(b.x, b.edge_index)
    z = Generator.sample(mu, logstd, noise)
    logits = gen.logits(dense_nodes(z, b.batch, n, nodes))
    if reconstruction == "balanced":
        train_g = balanced_reconstruction_loss(logits, adj, mask)
        logits = logits - edge_prior_shift(adj, mask)
        loss_g = reconstruction_loss(logits.detach(), adj, mask)
    else:
        train_g = loss_g = reconstruction_loss(logits, adj, mask)
    kl = kl_divergence(mu, logstd)
    fake_adj = Generator.adjacency(logits, mask).detach()
    if fake_graphs == "sampled":
        fake_adj = sample_adjacency(fake_adj, noise)
    return logits, train_g, loss_g, kl, fake_adj


def _add(
    sums: dict[str, float],
    n: int,
    losses: tuple[torch.Tensor, ...],
    logits: torch.Tensor,
    adj: torch.Tensor,
    mask: torch.Tensor,
) -> int:
    """Add one batch of ``n`` graphs to :func:`train_epoch`'s sums: ``losses`` (the first
    five terms of :data:`LOSS_KEYS`), the constant predictor's eq. 8 and the edge AUC;
    returns how many graphs the edge AUC counted (0 when it is undefined)."""
    const = constant_reconstruction_loss(adj, mask)
    for key, value in zip(LOSS_KEYS[:-1], (*losses, const), strict=True):
        sums[key] += float(value.detach()) * n
    auc = edge_auc(logits, adj, mask)
    if auc is None:
        return 0
    sums["recon_edge_auc"] += auc * n
    return n


def train_epoch(
    net: FGADNet,
    gen: Generator,
    graphs: GraphSet,
    opt: torch.optim.Optimizer,
    *,
    batch_size: int,
    rng: np.random.Generator,
    lam: float,
    gamma: float,
    tau: float,
    kl_weight: float,
    distill: bool,
    distill_on: str = "normal",
    reconstruction: str = "eq8",
    fake_graphs: str = "soft",
    fake_degree_cap: int | None = None,
    student_ad: float = 0.0,
    device: torch.device | str = "cpu",
) -> dict[str, float]:
    """One epoch of [FGAD eq. 13] (``distill``) or eq. 10 (pre-training, without
    :math:`\\ell_{kd}`) on ``graphs``; returns the epoch's example-weighted mean of every
    term of :data:`LOSS_KEYS`. ``rng`` orders the batches and seeds the generator's noise.
    ``distill_on = "normal"`` distils on the real graphs only (the paper: "only normal graphs
    are considered in the knowledge distillation"); ``"all"`` also on the generated ones (a
    variant: the student then sees what the teacher flags). The generator's logits are
    :meth:`Generator.logits <fedad.methods.fgad.model.Generator.logits>` (eq. 7, with its
    optional scale and bias). ``reconstruction = "eq8"`` trains it with eq. 8;
    ``"balanced"`` with :func:`~fedad.methods.fgad.losses.balanced_reconstruction_loss`, the
    detector then seeing :math:`\\mathrm{sigmoid}` of the logits less
    :func:`~fedad.methods.fgad.losses.edge_prior_shift` (our variant);
    ``fake_graphs = "sampled"`` shows the detector a symmetric 0/1 adjacency drawn edge by
    edge from :math:`\\tilde A` instead of :math:`\\tilde A` itself (our variant: a real
    adjacency is 0/1, so a soft one is told apart by its values alone);
    ``fake_degree_cap`` (our variant, for graphs whose node features are one-hot degrees,
    :func:`degree_cap`) gives each generated graph the degree features of its own adjacency
    instead of the real graph's; ``student_ad`` (our variant) adds that multiple of eq. 9 on
    the student head (the pseudo labels the teacher learns) to the distillation."""
    net.train()
    gen.train()
    sums = dict.fromkeys(LOSS_KEYS, 0.0)
    count = 0
    auc_count = 0
    noise = torch.Generator().manual_seed(int(rng.integers(2**62)))
    for idx in iterate_batches(len(graphs), batch_size, rng):
        b = graphs.batch(idx).to(device)
        n = int(b.num_graphs)
        x, adj, mask = dense_graphs(b)
        logits, train_g, loss_g, kl, fake_adj = _generate(
            gen, b, x.shape[1], adj, mask, noise, reconstruction, fake_graphs
        )
        real_z = net.represent(b.x, b.edge_index, b.batch, n)
        fake_x = x if fake_degree_cap is None else degree_features(fake_adj, mask, fake_degree_cap)
        fake_z = net.backbone.forward_dense(fake_x, fake_adj, mask)
        real_t, fake_t = net.teacher(real_z), net.teacher(fake_z)
        loss_ad = detection_loss(real_t, fake_t)
        fake_s = net.student(fake_z)
        loss_kd = None
        real_s = net.student(real_z) if distill else None
        if real_s is not None:
            loss_kd = (
                distillation_loss(torch.cat([real_t, fake_t]), torch.cat([real_s, fake_s]), tau)
                if distill_on == "all"
                else distillation_loss(real_t, real_s, tau)
            )
        flagged = (fake_s.detach().argmax(1) != NORMAL).double().mean()
        loss = total_loss(loss_ad, train_g, loss_kd, lam, gamma, kl, kl_weight)
        if real_s is not None and student_ad > 0:
            loss = loss + student_ad * detection_loss(real_s, fake_s)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        kd = loss_kd if loss_kd is not None else loss.new_zeros(())
        count += n
        auc_count += _add(sums, n, (loss, loss_ad, loss_g, kd, flagged), logits, adj, mask)
    out = {k: v / max(count, 1) for k, v in sums.items()}
    out["recon_edge_auc"] = sums["recon_edge_auc"] / auc_count if auc_count else 0.5
    return out
