"""Pieces the image detectors' exporters share: a frozen backbone's input preparation and
features, kNN distances to a bank, and the patch-level anomaly maps.

Each is a torch module that computes exactly what fedad computes, written so that torch's
TorchScript exporter can trace it:

* :class:`Prepare` is :meth:`fedad.resources.base.Backbone.prepare` for images of one size:
  the resize to the backbone's side is a product with two fixed matrices, ``A_h x A_w^T``,
  read off torch's own ``F.interpolate`` (bilinear, antialiased when shrinking, as fedad
  calls it; :func:`resize_matrices`), so that it is torch's resize to rounding (torch's
  antialiased resize has no ONNX counterpart that matches it: ONNX ``Resize`` with
  ``antialias = 1`` differs by up to 0.05 on [0, 1] images, measured);
* :class:`BankDistances` is ``torch.cdist`` against a fixed bank, in the matrix-product form
  cdist itself uses above 25 rows (``[-2x, |x|^2, 1] @ [y, 1, |y|^2]^T``, clamped at 1e-30,
  square root);
* :class:`PatchMaps` is :func:`fedad.components.nn.patchscore.anomaly_maps`.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedad.resources.base import Backbone
from fedad.resources.multilevel import fuse_levels

CDIST_MM_ROWS = 25
"""``torch.cdist`` (p = 2) uses the matrix-product form when either side has more rows."""


def resize_matrices(
    h: int, w: int, side: int, antialias: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """``A_h`` ``(side, h)`` and ``A_w`` ``(side, w)`` float32 with ``resize(x) = A_h x
    A_w^T``: torch's bilinear resize (``align_corners=False``) of ``(h, w)`` images to
    ``(side, side)``, read off images whose one row (column) is all ones: the resize is
    separable and its weights on an axis sum to one, so each gives a column of ``A_h``
    (``A_w``). Full-size images, not unit vectors: torch resizes a one-pixel-wide image
    with other antialiasing weights (measured: up to 0.43 apart)."""

    def axis(n: int, rows: bool) -> torch.Tensor:
        cols = []
        for start in range(0, n, 16):  # at most 16 images of (h, w) at a time
            idx = torch.arange(start, min(start + 16, n))
            basis = torch.zeros(len(idx), 1, h, w)
            if rows:
                basis[torch.arange(len(idx)), 0, idx, :] = 1.0
            else:
                basis[torch.arange(len(idx)), 0, :, idx] = 1.0
            out = F.interpolate(
                basis, size=(side, side), mode="bilinear", align_corners=False, antialias=antialias
            )
            cols.append(out[:, 0, :, 0] if rows else out[:, 0, 0, :])
        return torch.cat(cols).T.contiguous()

    return axis(h, True), axis(w, False)


class Prepare(nn.Module):
    """:meth:`Backbone.prepare` of images ``(N, C, H, W)`` to side ``size`` (see the module
    docstring): clamp to [0, 1], grey replicated, resized, normalised."""

    a_h: torch.Tensor
    a_w: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, net: Backbone, shape: tuple[int, ...], size: int | None) -> None:
        super().__init__()
        spec = net.input_spec
        c, h, w = (int(s) for s in shape)
        if c not in (1, spec.channels):
            raise ValueError(f"images have {c} channels; the backbone takes 1 or {spec.channels}")
        self.grey = c == 1 and spec.channels != 1
        self.channels = spec.channels
        side = spec.size if size is None else int(size)
        self.resize = (h, w) != (side, side)
        shrink = side < max(h, w)  # fedad's antialias rule: one flag for both axes
        a_h, a_w = resize_matrices(h, w, side, shrink)
        self.register_buffer("a_h", a_h)
        self.register_buffer("a_w", a_w.T.contiguous())
        self.register_buffer("mean", torch.tensor(spec.mean).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(spec.std).view(1, -1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.clamp(0.0, 1.0)
        if self.grey:
            x = x.expand(-1, self.channels, -1, -1)
        if self.resize:
            x = torch.matmul(torch.matmul(self.a_h, x), self.a_w)
        return (x - self.mean) / self.std


class PooledFeatures(nn.Module):
    """:meth:`Backbone.embed`: global-pooled features ``(N, D)`` float32 of images."""

    def __init__(self, net: Backbone, shape: tuple[int, ...], size: int | None) -> None:
        super().__init__()
        self.prepare = Prepare(net, shape, size)
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net.features(self.prepare(x))


class StageFeatures(nn.Module):
    """:class:`fedad.resources.multilevel.MultiLevelFeatures`: the fused feature maps of
    ``stages`` ``(N, sum C_l, h, w)``."""

    def __init__(
        self, net: Backbone, stages: tuple[int, ...], shape: tuple[int, ...], size: int
    ) -> None:
        super().__init__()
        self.prepare = Prepare(net, shape, size)
        self.net = net
        self.stages = tuple(stages)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fuse_levels(self.net.stage_maps(self.prepare(x), self.stages))


class BankDistances(nn.Module):
    """``torch.cdist(x, bank)`` ``(P, D)`` for rows ``x`` ``(P, C)`` (module docstring).
    ``mm``: the matrix-product form (what cdist uses when either side has more than
    :data:`CDIST_MM_ROWS` rows), else the direct differences."""

    bank: torch.Tensor
    right: torch.Tensor

    def __init__(self, bank: np.ndarray | torch.Tensor, mm: bool = True) -> None:
        super().__init__()
        b = torch.as_tensor(np.asarray(bank, dtype=np.float32)).contiguous()
        self.mm = mm
        self.register_buffer("bank", b)
        norm = b.pow(2).sum(-1, keepdim=True)
        self.register_buffer("right", torch.cat([b, torch.ones_like(norm), norm], -1).T.clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.mm:
            return (x[:, None, :] - self.bank[None, :, :]).pow(2).sum(-1).sqrt()
        norm = x.pow(2).sum(-1, keepdim=True)
        left = torch.cat([x.mul(-2), norm, torch.ones_like(norm)], -1)
        return left.matmul(self.right).clamp_min(1e-30).sqrt()


class PatchMaps(nn.Module):
    """:func:`fedad.components.nn.patchscore.anomaly_maps`: each patch's distance to its nearest
    bank entry, upsampled bilinearly to ``size``, smoothed by a Gaussian of ``sigma`` (kornia,
    reflected borders, or replicated when the image is smaller than half the kernel).
    ``patches``: an image's patch count (with the bank's size, which form cdist takes)."""

    def __init__(self, bank: np.ndarray, patches: int, size: tuple[int, int], sigma: float) -> None:
        super().__init__()
        mm = len(bank) > CDIST_MM_ROWS or patches > CDIST_MM_ROWS
        self.distances = BankDistances(bank, mm)
        self.size = (int(size[0]), int(size[1]))
        self.sigma = float(sigma)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        import kornia

        _, c, h, w = features.shape
        patches = features.permute(0, 2, 3, 1).reshape(-1, c)
        dist = self.distances(patches).min(dim=1).values.reshape(-1, 1, h, w)
        maps = F.interpolate(dist, size=self.size, mode="bilinear", align_corners=False)
        if self.sigma > 0:
            k = 2 * math.ceil(4 * self.sigma) + 1
            border = "reflect" if k // 2 < min(self.size) else "replicate"
            maps = kornia.filters.gaussian_blur2d(
                maps, (k, k), (self.sigma, self.sigma), border_type=border
            )
        return maps[:, 0]
