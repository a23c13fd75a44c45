"""FedDyMem's metric loss [FedDyMem eq. 12].

.. math::
    \\ell(M, M') = \\frac{1}{HWK} \\sum_{h,w} \\sum_{k=1}^{K}
        \\max\\big(0, \\lVert m_{(h,w)} - m'_{k} \\rVert_2 - th\\big),

where :math:`m'_1, \\dots, m'_K` are the :math:`K` nearest entries of the bank :math:`M'` to
the patch feature :math:`m_{(h,w)}` (a kNN search, Euclidean), ``K = 3`` and ``th = 0.01``
in the paper. Averaged over the samples of a batch.

Shapes: memory features ``(B, C, H, W)``, bank ``(D, C)`` -> scalar.
"""

from __future__ import annotations

import torch

from fedad.nn.patchscore import knn_distances

__all__ = ["metric_loss"]


def metric_loss(
    memory: torch.Tensor, bank: torch.Tensor, k: int = 3, th: float = 0.01
) -> torch.Tensor:
    """[FedDyMem eq. 12] averaged over the batch (see the module docstring)."""
    c = int(memory.shape[1])
    patches = memory.permute(0, 2, 3, 1).reshape(-1, c)
    d = knn_distances(patches, bank, k)
    return torch.clamp(d - th, min=0.0).mean()
