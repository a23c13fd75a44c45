"""FGAD's losses [FGAD eq. 8-13], pure functions of tensors.

Conventions (stated where the paper leaves them open):

* Eq. 8 sums the binary cross-entropy over node pairs; we average it over each graph's
  off-diagonal pairs and then over the graphs, so that :math:`\\lambda` means the same for
  graphs of 10 and of 100 nodes. The VGAE's KL term (Kipf & Welling 2016, which the
  generator is; the paper's eq. 8 omits it, the authors' code adds it with weight 0.001) is
  :func:`kl_divergence`, weighted by ``kl_weight`` in :func:`total_loss`.
* Eq. 12's KL divergence is averaged over the batch, the teacher's distribution is a fixed
  target (detached: the student learns from the teacher, not the other way round).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedad.methods.fgad.model import NORMAL, pair_mask

__all__ = [
    "detection_loss",
    "distillation_loss",
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
