"""Patch-level scoring against a memory bank: anomaly maps and image scores.

The scoring shared by the memory-bank detectors (PatchCore, Roth et al. 2022; FedDyMem,
Chen et al. 2025, Sec. IV and Fig. 9): every patch feature's Euclidean distance to its
nearest entry of the memory bank is the patch's anomaly score,

.. math::
    s(h, w) = \\min_{m \\in \\mathcal{M}} \\lVert f(h, w) - m \\rVert_2 ,

the patch map is upsampled bilinearly to the image, smoothed by a Gaussian of standard
deviation :math:`\\sigma = 4` pixels (kornia), and the image score is the map's maximum.

Shapes: patch features ``(N, C, h, w)``, bank ``(D, C)`` -> maps ``(N, H, W)``, scores
``(N,)``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["anomaly_maps", "image_scores", "knn_distances", "nearest_distances"]

CHUNK = 4096
"""Patches per distance block (bounds memory at CHUNK x D floats)."""


def knn_distances(patches: torch.Tensor, bank: torch.Tensor, k: int) -> torch.Tensor:
    """The ``k`` smallest Euclidean distances of each patch to the bank, ascending.

    Shapes: ``(P, C)``, ``(D, C)`` -> ``(P, min(k, D))``. Differentiable in both inputs.
    """
    k = min(int(k), int(bank.shape[0]))
    parts = [
        torch.cdist(patches[i : i + CHUNK], bank).topk(k, dim=1, largest=False).values
        for i in range(0, int(patches.shape[0]), CHUNK)
    ]
    return torch.cat(parts) if parts else patches.new_zeros((0, k))


def nearest_distances(patches: torch.Tensor, bank: torch.Tensor) -> torch.Tensor:
    """Distance of each patch to its nearest bank entry: ``(P, C)``, ``(D, C)`` -> ``(P,)``."""
    return knn_distances(patches, bank, 1)[:, 0]


def anomaly_maps(
    features: torch.Tensor, bank: torch.Tensor, size: tuple[int, int], sigma: float = 4.0
) -> torch.Tensor:
    """Pixel anomaly maps of patch features against ``bank`` (see the module docstring).

    Shapes: ``(N, C, h, w)``, ``(D, C)`` -> ``(N, H, W)`` with ``(H, W) = size``.
    ``sigma = 0`` skips the smoothing.
    """
    n, c, h, w = (int(s) for s in features.shape)
    patches = features.permute(0, 2, 3, 1).reshape(-1, c)
    dist = nearest_distances(patches, bank).reshape(n, 1, h, w)
    maps = F.interpolate(dist, size=size, mode="bilinear", align_corners=False)
    if sigma > 0:
        k = 2 * math.ceil(4 * sigma) + 1  # the kernel anomalib uses for PatchCore's maps
        # reflect at the borders, as anomalib does; images smaller than half the kernel
        # cannot be reflected that far and replicate their border pixels instead
        border = "reflect" if k // 2 < min(size) else "replicate"
        import kornia  # imported here: a run without anomaly maps never loads kornia

        maps = kornia.filters.gaussian_blur2d(maps, (k, k), (sigma, sigma), border_type=border)
    return maps[:, 0]


def image_scores(maps: torch.Tensor) -> torch.Tensor:
    """The image score: the maximum of each map, ``(N, H, W)`` -> ``(N,)``."""
    return maps.flatten(1).amax(dim=1)
