"""The closed-form heads of the detector (ours; the paper's head is the flow of [ProtoFL
Alg. 2]): the Gaussian with Ledoit-Wolf shrinkage and the kernel density's bandwidth, as
pure functions of the representations."""

from __future__ import annotations

import numpy as np

from fedad.components.detectors.pretrained import ShrinkageGaussian


def ledoit_wolf(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and precision of scikit-learn's Ledoit-Wolf Gaussian of the rows of ``z``,
    the precision built from the eigenvectors of the smaller Gram matrix
    (:class:`fedad.components.detectors.pretrained.ShrinkageGaussian`): with 1280 features and
    a few hundred samples (the efficientnet trunk) that is an ``n x n`` problem, not a
    ``p x p`` pseudo-inverse."""
    g = ShrinkageGaussian(z)
    precision = (g.vec * g.inv) @ g.vec.T
    if g.rest:  # outside the span of the data the covariance is c * I
        p = z.shape[1]
        precision += (np.eye(p) - g.vec @ g.vec.T) / g.c
    return np.asarray(g.mean, dtype=np.float64), np.asarray(precision, dtype=np.float64)


def scott_bandwidth(n: int, d: int) -> float:
    """Scott's rule bandwidth for standardised data: :math:`n^{-1/(d+4)}`."""
    return float(max(n, 1) ** (-1.0 / (d + 4)))
