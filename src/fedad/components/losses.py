"""Contrastive losses in torch, shared by FADngs (CRAD, SimCLR and CSI losses) and the
``contrastive`` detector (CSI's shifted-instance loss).

:func:`contrastive_loss` is [FADngs eq. 7] over any pairs given as boolean masks;
:func:`shifted_instance_mask` gives CSI's pairs (Tack et al. 2020); :func:`collapsed_loss`
and :func:`mean_pairwise_cosine` are the collapse monitors. Every function cites [FADngs eq. N]
(Dong et al., IEEE TNNLS 2024) where it follows the paper.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

ConForm = Literal["eq7", "mean-log"]
"""How :func:`contrastive_loss` combines the positives of an anchor."""


def contrastive_loss(
    z: torch.Tensor,
    pos: torch.Tensor,
    neg: torch.Tensor,
    temperature: float = 0.5,
    form: ConForm = "eq7",
) -> torch.Tensor:
    """The contrastive loss [FADngs eq. 7], averaged over the anchors (rows with a positive):

    .. math::
        \\mathcal{L}_{con} = -\\frac{1}{|\\{x_+\\}|} \\log
            \\frac{\\sum_{x' \\in \\{x_+\\}} \\exp(\\mathrm{sim}(z(x), z(x'))/\\tau)}
                 {\\sum_{x' \\in \\{x_+\\} \\cup \\{x_-\\}} \\exp(\\mathrm{sim}(z(x), z(x'))/\\tau)}

    ``form = "eq7"``: as the paper writes it (and CSI's eq. 1 before it): one log of a *sum*
    over the positives, scaled by :math:`1/|\\{x_+\\}|`. With one positive per anchor (SimCLR,
    CSI) the scale is 1; with CRAD's positives (every normal view of every predicted normal of
    the batch, about :math:`2 \\cdot 0.95 B`) it divides the loss and its gradient by about
    60 at batch size 32.

    ``form = "mean-log"``: the mean over the positives of the log-probability of each,

    .. math::
        -\\frac{1}{|\\{x_+\\}|} \\sum_{x' \\in \\{x_+\\}} \\log
            \\frac{\\exp(\\mathrm{sim}(z(x), z(x'))/\\tau)}
                 {\\sum_{x'' \\in \\{x_+\\} \\cup \\{x_-\\}}
                  \\exp(\\mathrm{sim}(z(x), z(x''))/\\tau)}

    which is what CSI's reference code computes (its ``Supervised_NT_xent``, the SupCon
    :math:`\\mathcal L_{out}` form); it equals ``"eq7"`` with one positive.

    ``sim`` is the cosine similarity; ``z`` is normalised here again (a no-op on normalised
    input). Without any anchor the loss is a zero that keeps the graph.

    Shapes:
        - z: :math:`(N, D)`
        - pos, neg: :math:`(N, N)` bool
        - output: scalar
    """
    zn = F.normalize(z, dim=1)
    logits = zn @ zn.T / temperature
    n_pos = pos.sum(dim=1)
    anchors = n_pos > 0
    if not bool(anchors.any()):
        return (z * 0.0).sum()
    neg_inf = torch.finfo(logits.dtype).min
    lse_pos = torch.logsumexp(logits.masked_fill(~pos, neg_inf), dim=1)
    lse_all = torch.logsumexp(logits.masked_fill(~(pos | neg), neg_inf), dim=1)
    count = n_pos.clamp(min=1).to(logits.dtype)
    if form == "eq7":
        per_anchor = -(lse_pos - lse_all) / count
    elif form == "mean-log":
        log_prob = (logits - lse_all[:, None]).masked_fill(~pos, 0.0)
        per_anchor = -log_prob.sum(dim=1) / count
    else:
        raise ValueError(f"unknown form {form!r}")
    return per_anchor[anchors].mean()


def collapsed_loss(pos: torch.Tensor, neg: torch.Tensor, form: ConForm = "eq7") -> float:
    """The value :func:`contrastive_loss` takes when every pair has the same similarity: the
    collapsed value, where every representation points the same way (or the similarities
    carry no information). With :math:`P_a` positives and :math:`N_a` negatives of anchor
    :math:`a`, each anchor contributes :math:`\\log(P_a + N_a)` under ``"mean-log"`` and
    :math:`(\\log(P_a + N_a) - \\log P_a) / P_a` under ``"eq7"``; the mean over the anchors.
    For SimCLR's pairs (two views, batch :math:`B`) it is :math:`\\log(2B - 1)`. A loss that
    stays at this value means the encoder is not learning (docs/methods/fadngs.md).

    Shapes:
        - pos, neg: :math:`(N, N)` bool
        - output: a float (``nan`` without any anchor)
    """
    n_pos = pos.sum(dim=1).to(torch.float64)
    anchors = n_pos > 0
    if not bool(anchors.any()):
        return float("nan")
    n_all = (pos | neg).sum(dim=1).to(torch.float64)[anchors]
    n_pos = n_pos[anchors]
    if form == "mean-log":
        per_anchor = torch.log(n_all)
    elif form == "eq7":
        per_anchor = (torch.log(n_all) - torch.log(n_pos)) / n_pos
    else:
        raise ValueError(f"unknown form {form!r}")
    return float(per_anchor.mean())


def mean_pairwise_cosine(z: torch.Tensor) -> float:
    """:math:`\\frac{1}{N(N-1)} \\sum_{i \\neq j} \\cos(z_i, z_j)`: near 1 when the
    representations of different samples all point the same way (collapse), near 0 when
    they spread over the sphere.

    Shapes:
        - z: :math:`(N, D)`, :math:`N \\geq 2`
        - output: a float (``nan`` for :math:`N < 2`)
    """
    n = z.shape[0]
    if n < 2:
        return float("nan")
    zn = F.normalize(z.detach().to(torch.float64), dim=1)
    total = zn.sum(dim=0)
    # sum over all pairs i != j of <z_i, z_j> = ||sum_i z_i||^2 - sum_i ||z_i||^2
    off = float(total @ total) - float((zn * zn).sum())
    return off / (n * (n - 1))


def shifted_instance_mask(
    batch: int, n_views: int, n_shifts: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """CSI's pairs (Tack et al. 2020, :math:`\\mathcal L_{\\text{con-SI}}`): every rotation of
    every sample is an instance of its own, seen through ``n_views`` views. Every view is
    an anchor; its positives are the other views of the same instance (same sample, same
    rotation); its negatives every other view, the other rotations of its own sample
    included. View ``(s B + i) V + v`` is view ``v`` of rotation ``s`` of sample ``i``
    (:func:`~fedad.components.augment.shifted_views`).

    Shapes:
        - output: ``pos``, ``neg``: :math:`(N, N)` bool, :math:`N = B S V`
    """
    if batch < 1 or n_views < 2 or n_shifts < 1:
        raise ValueError(
            f"need batch >= 1, n_views >= 2, n_shifts >= 1, got {batch}, {n_views}, {n_shifts}"
        )
    instance = torch.arange(n_shifts * batch).repeat_interleave(n_views)
    not_self = ~torch.eye(instance.shape[0], dtype=torch.bool)
    pos = (instance[:, None] == instance[None, :]) & not_self
    return pos, not_self & ~pos
