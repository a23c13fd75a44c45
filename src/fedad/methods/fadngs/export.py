"""FADngs's detector: the encoder's representation and the minimum squared Mahalanobis
distance to the Gaussians [FADngs eq. 6], in float64 as fedad computes it.

fedad solves with each covariance's Cholesky factor :math:`L_k` (jittered as
:func:`fedad.methods.fadngs.density.stable_cholesky` does); the exported graph multiplies by
:math:`L_k^{-1}`, computed here in float64 from that same factor (ONNX has no triangular
solve): :math:`\\min_k \\lVert L_k^{-1}(z - \\mu_k) \\rVert^2`."""

from __future__ import annotations

import copy

import numpy as np
import scipy.linalg
import torch
from torch import nn

from fedad.core.detector import BaseDetector
from fedad.export.registry import Core, NotExportable, register_exporter
from fedad.methods.fadngs.density import stable_cholesky
from fedad.methods.fadngs.detector import FADngsDetector


class MinMahalanobis(nn.Module):
    """:math:`\\min_k \\lVert W_k (z - \\mu_k) \\rVert^2` of ``z`` float64 ``(N, D)``, with
    ``W_k = L_k^{-1}``."""

    means: torch.Tensor
    whiten_t: torch.Tensor

    def __init__(self, means: np.ndarray, covs: np.ndarray) -> None:
        super().__init__()
        inv = []
        for cov in np.asarray(covs, dtype=np.float64):
            chol, _ = stable_cholesky(cov)
            inv.append(scipy.linalg.solve_triangular(chol, np.eye(len(chol)), lower=True))
        self.register_buffer("means", torch.from_numpy(np.array(means, np.float64)))
        # (M, D, D) transposed, so that (z - mu_k) @ W_k^T is a batched product
        self.register_buffer("whiten_t", torch.from_numpy(np.stack(inv).transpose(0, 2, 1).copy()))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        centred = z[None, :, :] - self.means[:, None, :]  # (M, N, D)
        y = torch.matmul(centred, self.whiten_t)
        return (y * y).sum(-1).min(dim=0).values


class FADngsScore(nn.Module):
    """:math:`z(x)` (float32, then float64), unit-normalised when the detector's ``unit``,
    then :class:`MinMahalanobis`."""

    def __init__(self, encoder: nn.Module, unit: bool, head: MinMahalanobis) -> None:
        super().__init__()
        self.encoder = encoder
        self.unit = unit
        self.head = head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.encoder.project(x).double()  # type: ignore[operator]
        if self.unit:
            norm = z.norm(dim=1, keepdim=True)
            z = torch.where(norm > 0, z / torch.where(norm > 0, norm, 1.0), 0.0)
        out: torch.Tensor = self.head(z)
        return out


@register_exporter("fadngs")
def fadngs(det: BaseDetector, shape: tuple[int, ...]) -> Core:
    assert isinstance(det, FADngsDetector)
    if not hasattr(det, "means_"):
        raise NotExportable("the 'fadngs' detector has no densities to export")
    det._ensure_built()
    encoder = copy.deepcopy(det.encoder_).cpu().eval()
    head = MinMahalanobis(det.means_, det.covs_)
    return Core(FADngsScore(encoder, bool(det.params.unit), head), shape, "float64")
