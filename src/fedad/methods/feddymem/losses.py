"""FedDyMem's metric loss [FedDyMem eq. 12], and a scale floor against feature collapse.

.. math::
    \\ell(M, M') = \\frac{1}{HWK} \\sum_{h,w} \\sum_{k=1}^{K}
        \\max\\big(0, \\lVert m_{(h,w)} - m'_{k} \\rVert_2 - th\\big),

where :math:`m'_1, \\dots, m'_K` are the :math:`K` nearest entries of the bank :math:`M'` to
the patch feature :math:`m_{(h,w)}` (a kNN search, Euclidean), ``K = 3`` and ``th = 0.01``
in the paper. Averaged over the samples of a batch.

Eq. 12 alone has no repulsive term: its minimum is a collapsed feature space, and the
memory features (and the bank built from them) shrink over rounds, each client at its own
rate. :func:`scale_floor` (not in FedDyMem; ``keep_scale`` times it is added to eq. 12) is
a hinge on the batch's feature spread :math:`s = (\\frac{1}{BHW} \\sum \\lVert m - \\bar m
\\rVert^2)^{1/2}` (:math:`\\bar m` the batch's mean patch feature) below the client's
reference spread :math:`s_0` (its memory features' spread before any training):

.. math::
    \\ell_{scale} = \\max(0, s_0 - s),

in the units of eq. 12 (distances), zero while the features keep their initial spread.
The spread, not the norm: a norm floor is met by a constant offset (a bias) while the
features around it still collapse.
Shrinking every feature by a factor :math:`1 - \\epsilon` lowers eq. 12 by at most
:math:`\\epsilon` times the mean distance to the bank and raises :math:`\\ell_{scale}` by
:math:`\\epsilon s_0`; the nearest bank entries are closer to a feature than the
features' mean typically is, so with weight 1 uniform shrinking no longer pays.
Off by default (``keep_scale = 0``): on a development federation it kept the spread but
ruined detection (docs/methods/feddymem.md).

Shapes: memory features ``(B, C, H, W)``, bank ``(D, C)`` -> scalar.
"""

from __future__ import annotations

import torch

from fedad.components.nn.patchscore import knn_distances

__all__ = ["metric_loss", "scale_floor"]


def metric_loss(
    memory: torch.Tensor, bank: torch.Tensor, k: int = 3, th: float = 0.01
) -> torch.Tensor:
    """[FedDyMem eq. 12] averaged over the batch (see the module docstring)."""
    c = int(memory.shape[1])
    patches = memory.permute(0, 2, 3, 1).reshape(-1, c)
    d = knn_distances(patches, bank, k)
    return torch.clamp(d - th, min=0.0).mean()


def scale_floor(memory: torch.Tensor, reference: float) -> torch.Tensor:
    """``max(0, reference - s)`` with ``s`` the root mean square distance of the batch's
    patch features from their mean (see the module docstring). Shapes: ``(B, C, H, W)`` ->
    scalar."""
    c = int(memory.shape[1])
    patches = memory.permute(0, 2, 3, 1).reshape(-1, c)
    s = (patches - patches.mean(dim=0)).pow(2).sum(dim=1).mean().clamp_min(1e-24).sqrt()
    return torch.clamp(reference - s, min=0.0)
