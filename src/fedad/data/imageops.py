"""Small image helpers shared by the image loaders: scaling to [0, 1] and resizing."""

from __future__ import annotations

import numpy as np

__all__ = ["resize_images", "to_unit_float"]


def to_unit_float(images: np.ndarray, max_value: float = 255.0) -> np.ndarray:
    """Integer pixels ``0..max_value`` as ``float32`` in [0, 1] (a new array)."""
    out = np.empty(images.shape, dtype=np.float32)
    np.multiply(images, np.float32(1.0 / max_value), out=out)
    return out


def resize_images(images: np.ndarray, size: int, batch: int = 8192) -> np.ndarray:
    """Resize ``(N, C, H, W)`` float images to ``(N, C, size, size)``, bilinearly.

    Upsampling is plain bilinear interpolation (a smooth, MNIST-like look for 8x8 digits);
    downsampling uses antialiasing. Values stay in the input range (clipped to [0, 1] when
    the input is). Returns the input unchanged when it already has that size.
    """
    if images.ndim != 4:
        raise ValueError(f"expected images of shape (N, C, H, W), got {images.shape}")
    if images.shape[2] == size and images.shape[3] == size:
        return images
    import torch
    import torch.nn.functional as F

    down = size < max(images.shape[2], images.shape[3])
    out = np.empty((images.shape[0], images.shape[1], size, size), dtype=np.float32)
    with torch.no_grad():
        for start in range(0, images.shape[0], batch):
            chunk = torch.tensor(images[start : start + batch], dtype=torch.float32)
            res = F.interpolate(
                chunk, size=(size, size), mode="bilinear", align_corners=False, antialias=down
            )
            out[start : start + batch] = res.numpy()
    lo, hi = float(images.min(initial=0.0)), float(images.max(initial=0.0))
    np.clip(out, lo, hi, out=out)
    return out
