"""FGAD's losses [FGAD eq. 8-13], pure functions of tensors.

Conventions (stated where the paper leaves them open):

* Eq. 8 sums the binary cross-entropy over node pairs; we average it over each graph's
  off-diagonal pairs and then over the graphs, so that :math:`\\lambda` means the same for
  graphs of 10 and of 100 nodes. The VGAE's KL term (Kipf & Welling 2016, which the
  generator is; the paper's eq. 8 omits it, the authors' code adds it with weight 0.001) is
  :func:`kl_divergence`, weighted by ``kl_weight`` in :func:`total_loss`.
* ``reconstruction = "balanced"`` (ours) trains the generator with
  :func:`balanced_reconstruction_loss`, the VGAE's positive-edge weighting, and corrects its
  logits by :func:`edge_prior_shift` before they become :math:`\\tilde A`.
  :func:`constant_reconstruction_loss` and :func:`edge_auc` are training-only diagnostics: eq.
  8 of the best constant predictor, and how well the logits rank a graph's edges above its
  non-edges.
* Eq. 12's KL divergence is averaged over the batch, the teacher's distribution is a fixed
  target (detached: the student learns from the teacher, not the other way round).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from fedad.evaluation.metrics import auroc
from fedad.methods.fgad.model import NORMAL, pair_mask

__all__ = [
    "balanced_reconstruction_loss",
    "constant_reconstruction_loss",
    "detection_loss",
    "distillation_loss",
    "edge_auc",
    "edge_prior_shift",
    "kl_divergence",
    "reconstruction_loss",
    "total_loss",
]


def reconstruction_loss(
    logits: torch.Tensor, adj: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """:math:`\\ell_g = -\\sum_{i \\ne j} A^{ij} \\log \\tilde A^{ij} + (1 - A^{ij})
    \\log(1 - \\tilde A^{ij})` [FGAD eq. 8], with :math:`\\tilde A = \\mathrm{sigmoid}(`
    ``logits`` :math:`)`; the mean over each graph's pairs, then over the graphs.

    Shapes:
        - logits, adj: :math:`(B, N, N)`; mask: :math:`(B, N)` bool
        - output: scalar
    """
    pairs = pair_mask(mask).to(logits.dtype)
    bce = F.binary_cross_entropy_with_logits(logits, adj.to(logits.dtype), reduction="none")
    per_graph = (bce * pairs).sum((1, 2)) / pairs.sum((1, 2)).clamp(min=1.0)
    return per_graph.mean()


def _edge_counts(adj: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per graph: :math:`P`, its off-diagonal node pairs, and :math:`E`, those that are edges
    (each undirected edge counts twice, once per direction). Shapes: :math:`(B,)`, :math:`(B,)`."""
    pairs = pair_mask(mask).to(adj.dtype)
    return pairs.sum((1, 2)), (adj * pairs).sum((1, 2))


def balanced_reconstruction_loss(
    logits: torch.Tensor, adj: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """The class-balanced form of [FGAD eq. 8] (ours; the VGAE's weighting): per graph
    :math:`\\frac12\\big(\\overline{\\ell}_{A^{ij}=1} + \\overline{\\ell}_{A^{ij}=0}\\big)`, the
    mean binary cross-entropy over the edges and over the non-edges, then the mean over the
    graphs.

    This is Kipf & Welling's (2016) reference loss,
    :math:`\\mathrm{norm} \\cdot \\frac1P \\sum_{i \\ne j} w^{A^{ij}} \\ell^{ij}` with
    ``pos_weight`` :math:`w = (P - E)/E` and :math:`\\mathrm{norm} = P / (2(P - E))` for
    :math:`P` pairs of which :math:`E` are edges, per graph: edges and non-edges weigh the
    same, so a sparse graph cannot be fitted by predicting "no edge" everywhere. A graph with
    no edges (or no non-edges) contributes its one present term.

    Shapes:
        - logits, adj: :math:`(B, N, N)`; mask: :math:`(B, N)` bool
        - output: scalar
    """
    pairs = pair_mask(mask).to(logits.dtype)
    a = adj.to(logits.dtype)
    bce = F.binary_cross_entropy_with_logits(logits, a, reduction="none") * pairs
    pos, neg = a * pairs, (1 - a) * pairs
    n_pos, n_neg = pos.sum((1, 2)), neg.sum((1, 2))
    mean_pos = (bce * pos).sum((1, 2)) / n_pos.clamp(min=1.0)
    mean_neg = (bce * neg).sum((1, 2)) / n_neg.clamp(min=1.0)
    terms = (n_pos > 0).to(logits.dtype) + (n_neg > 0).to(logits.dtype)
    return ((mean_pos + mean_neg) / terms.clamp(min=1.0)).mean()


def edge_prior_shift(adj: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """:math:`\\log w = \\log\\frac{P - E}{E}` per graph, shape :math:`(B, 1, 1)` (ours).

    A logit fitted with the balanced loss estimates :math:`\\mathrm{logit}\\,q + \\log w`
    for an edge probability :math:`q` (the minimiser of :math:`w q\\,\\ell(1) + (1-q)\\,\\ell(0)`),
    so ``logits - edge_prior_shift`` estimates :math:`\\mathrm{logit}\\,q`: the adjacency of eq.
    7 keeps the real graph's density instead of a balanced one's (a constant logit of 0 maps to
    the graph's density :math:`E/P`). :math:`E` and :math:`P - E` are taken as at least 1.
    """
    n_pairs, n_edges = _edge_counts(adj, mask)
    w = (n_pairs - n_edges).clamp(min=1.0) / n_edges.clamp(min=1.0)
    return torch.log(w).view(-1, 1, 1)


def constant_reconstruction_loss(adj: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Eq. 8 (as :func:`reconstruction_loss` averages it) of the best constant predictor: every
    pair of every graph given the probability :math:`c = \\frac1B \\sum_b E_b / P_b`, the mean
    density, which minimises that average over constants. A generator whose eq. 8 is not below
    this has learnt nothing about which pairs are edges (a training-only diagnostic).

    Shapes: adj :math:`(B, N, N)`, mask :math:`(B, N)` -> scalar.
    """
    n_pairs, n_edges = _edge_counts(adj, mask)
    d = n_edges / n_pairs.clamp(min=1.0)
    c = d.mean().clamp(1e-7, 1 - 1e-7)
    return (-(d * torch.log(c) + (1 - d) * torch.log1p(-c))).mean()


def edge_auc(logits: torch.Tensor, adj: torch.Tensor, mask: torch.Tensor) -> float | None:
    """AUROC of ``logits`` over all node pairs of the batch's graphs, edges positive: 0.5 for a
    decoder that cannot tell a graph's edges from its non-edges (a training-only diagnostic;
    ``None`` when there is no edge or no non-edge). Each unordered pair counts once (``i <
    j``): the decoder's logits and the adjacency are symmetric, so this is the AUROC over
    ordered pairs, at half the sorting."""
    sel = torch.triu(pair_mask(mask), diagonal=1)
    y = adj[sel].detach().cpu().numpy() > 0
    n1 = int(y.sum())
    if n1 in (0, len(y)):
        return None
    s = logits[sel].detach().cpu().numpy()
    order = np.argsort(s)
    if np.any(np.diff(s[order]) == 0):  # ties: the tie-averaged ranks of fedad.evaluation.metrics
        return auroc(y.astype(np.int64), s.astype(np.float64))
    ranks = np.flatnonzero(y[order]) + 1.0  # the edges' 1-based ranks
    return (float(ranks.sum()) - n1 * (n1 + 1) / 2.0) / (n1 * (len(y) - n1))


def kl_divergence(mu: torch.Tensor, logstd: torch.Tensor) -> torch.Tensor:
    """:math:`\\mathrm{KL}(\\mathcal N(\\boldsymbol\\mu, \\mathrm{diag}\\,\\boldsymbol\\sigma^2)
    \\,\\|\\, \\mathcal N(0, I))` per node, averaged over the nodes (the VGAE's prior term).

    Shapes:
        - mu, logstd: :math:`(|V|, d)`
        - output: scalar
    """
    kl = 0.5 * (mu.pow(2) + torch.exp(2 * logstd) - 1.0 - 2 * logstd).sum(1)
    return kl.mean()


def detection_loss(real_logits: torch.Tensor, fake_logits: torch.Tensor) -> torch.Tensor:
    """:math:`\\ell_{ad} = l_{ce}(y, \\mathrm{Proj}(f(X, A))) + l_{ce}(\\tilde y,
    \\mathrm{Proj}(f(X, \\tilde A)))` with :math:`y = 1` for real graphs and
    :math:`\\tilde y = 0` for generated ones [FGAD eq. 9]; each term a batch mean.

    Shapes:
        - real_logits: :math:`(B, 2)`; fake_logits: :math:`(B', 2)`
        - output: scalar
    """
    real = torch.full((len(real_logits),), NORMAL, dtype=torch.long, device=real_logits.device)
    fake = torch.full((len(fake_logits),), 1 - NORMAL, dtype=torch.long, device=fake_logits.device)
    return F.cross_entropy(real_logits, real) + F.cross_entropy(fake_logits, fake)


def distillation_loss(
    teacher_logits: torch.Tensor, student_logits: torch.Tensor, tau: float = 1.0
) -> torch.Tensor:
    """:math:`\\ell_{kd} = \\frac{1}{|D_c|}\\sum_i \\mathrm{KL}\\big(\\mathrm{softmax}(Q_t^{(i)}/
    \\tau) \\,\\|\\, \\mathrm{softmax}(Q_s^{(i)}/\\tau)\\big)` [FGAD eq. 12]; the teacher's side
    is detached.

    Shapes:
        - teacher_logits, student_logits: :math:`(B, 2)`
        - output: scalar
    """
    log_p = F.log_softmax(teacher_logits.detach() / tau, dim=1)
    log_q = F.log_softmax(student_logits / tau, dim=1)
    return (log_p.exp() * (log_p - log_q)).sum(1).mean()


def total_loss(
    ad: torch.Tensor,
    g: torch.Tensor,
    kd: torch.Tensor | None,
    lam: float,
    gamma: float,
    kl: torch.Tensor | None = None,
    kl_weight: float = 0.0,
) -> torch.Tensor:
    """One client's term of [FGAD eq. 13]: :math:`\\ell_{ad} + \\lambda \\ell_g + \\gamma
    \\ell_{kd}` (``kd = None``: the pre-training objective of eq. 10 with :math:`\\lambda`),
    plus ``kl_weight`` times the VGAE's KL term. The paper's outer
    :math:`\\frac1C\\sum_c \\frac{|D_c|}{|D|}` weights clients that each minimise their own
    term: it scales each client's step, not its direction, and is left out."""
    out = ad + lam * g
    if kd is not None:
        out = out + gamma * kd
    if kl is not None and kl_weight > 0:
        out = out + kl_weight * kl
    return out
