"""OS-ELM autoencoder: the math of ONLAD (Tsukada et al. 2019) as in [ONLAD Sec. III-A].

A single hidden layer with fixed random input weights :math:`\\alpha` and bias :math:`b`,
sigmoid activation :math:`G`, and output weights :math:`\\beta` fitted in closed form:

* hidden layer: :math:`H = G(x\\alpha + b)`; output :math:`y = H\\beta` [ONLAD eq. 1];
* initial phase [ONLAD eq. 4]: :math:`P_0 = (H_0^T H_0 + \\delta I)^{-1}`,
  :math:`\\beta_0 = P_0 H_0^T t_0`. The ridge :math:`\\delta` (default ``1e-3``) is our
  addition for numerical safety when a chunk has fewer samples than hidden units or
  saturated units; with it the sequential solution equals batch ridge regression exactly;
* sequential phase [ONLAD eq. 5], chunk :math:`(x_i, t_i)` of any size :math:`k_i`:
  :math:`P_i = P_{i-1} - P_{i-1}H_i^T(I + H_iP_{i-1}H_i^T)^{-1}H_iP_{i-1}`,
  :math:`\\beta_i = \\beta_{i-1} + P_iH_i^T(t_i - H_i\\beta_{i-1})`; a chunk of one sample
  uses the scalar inverse :math:`1/(1 + hPh^T)`;
* optional forgetting factor :math:`\\lambda_f \\in (0, 1]` (an addition, not in
  [ONLAD]: exponential forgetting as in recursive least squares):
  :math:`P_i = \\frac{1}{\\lambda_f}[P_{i-1} - P_{i-1}H_i^T(\\lambda_f I + H_iP_{i-1}H_i^T)^{-1}
  H_iP_{i-1}]`; :math:`\\lambda_f = 1` is [ONLAD eq. 5].

As an autoencoder the target is the input, :math:`t = x`, and the anomaly score of a sample
is its mean squared reconstruction error :math:`\\lVert x - H\\beta \\rVert^2 / n`.
Everything is float64 numpy: the matrices are small (:math:`\\tilde N \\times \\tilde N`).
"""

from __future__ import annotations

import math

import numpy as np

from fedad.core.rng import rng as seeded_rng

MAX_DEFAULT_HIDDEN = 64


def _rows(x: np.ndarray) -> np.ndarray:
    """``x`` as float64 rows (samples) of flattened features; also for zero samples."""
    a = np.asarray(x, dtype=np.float64)
    return a.reshape(len(a), math.prod(a.shape[1:]))


def default_hidden(n_inputs: int) -> int:
    """Default hidden width :math:`\\tilde N = \\min(64, \\max(1, \\lfloor n/2 \\rfloor))`.

    ONLAD's autoencoder is *undercomplete* ([ONLAD Sec. III-A(2)]: :math:`\\tilde N < n`):
    with as many hidden units as inputs the OS-ELM can learn the identity map and
    reconstruct anomalies as well as normal data. Half the input width keeps a
    bottleneck on narrow tabular data (36 features: 18 units); 64 caps the
    :math:`\\tilde N \\times \\tilde N` matrix :math:`P` on wide inputs (784 pixels: 64, as
    before). A one-feature input gets one unit (no bottleneck is possible).
    """
    return min(MAX_DEFAULT_HIDDEN, max(1, int(n_inputs) // 2))


def standardizer(x: np.ndarray, floor: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature shift and scale of ``x`` (rows = samples): mean, and std floored.

    The scale is :math:`\\max(\\sigma_j, f \\cdot \\mathrm{rms}_j \\sigma_j)`, so a
    (nearly) constant feature — an image's always-dark border pixel — cannot blow a small
    deviation up into a huge input; all-constant data get scale 1.
    """
    xf = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    shift = xf.mean(axis=0)
    std = xf.std(axis=0)
    rms = float(np.sqrt(np.mean(std**2)))
    scale = np.maximum(std, floor * rms) if rms > 0 else np.ones_like(std)
    return shift, scale


def init_input_weights(
    n_inputs: int, n_hidden: int, seed: int, scale: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """:math:`\\alpha \\sim U(-s, s)^{n \\times \\tilde N}`, :math:`b \\sim U(-s, s)^{\\tilde N}`.

    Uniform on [-1, 1] is what the OS-ELM reference implementations draw.
    """
    rng = seeded_rng(seed, 0xE1)
    alpha = rng.uniform(-scale, scale, size=(n_inputs, n_hidden))
    bias = rng.uniform(-scale, scale, size=n_hidden)
    return alpha, bias


def hidden(x: np.ndarray, alpha: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """:math:`H = G(x\\alpha + b)` with the logistic sigmoid :math:`G`."""
    z = _rows(x) @ alpha + bias
    return np.asarray(0.5 * (1.0 + np.tanh(0.5 * z)))  # numerically stable sigmoid


def init_phase(
    h0: np.ndarray, t0: np.ndarray, ridge: float = 1e-3
) -> tuple[np.ndarray, np.ndarray]:
    """[ONLAD eq. 4] with a ridge: :math:`P_0 = (H_0^TH_0+\\delta I)^{-1}`,
    :math:`\\beta_0 = P_0H_0^Tt_0`."""
    n_hidden = h0.shape[1]
    p = np.linalg.inv(h0.T @ h0 + ridge * np.eye(n_hidden))
    p = 0.5 * (p + p.T)
    beta = p @ h0.T @ t0
    return beta, p


def sequential_phase(
    beta: np.ndarray,
    p: np.ndarray,
    h: np.ndarray,
    t: np.ndarray,
    forgetting: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """[ONLAD eq. 5] (with forgetting factor :math:`\\lambda_f`) for one chunk: new (β, P)."""
    return sequential_phase_residual(beta, p, h, t - h @ beta, forgetting)


def sequential_phase_residual(
    beta: np.ndarray,
    p: np.ndarray,
    h: np.ndarray,
    residual: np.ndarray,
    forgetting: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """[ONLAD eq. 5] given :math:`E = t_i - H_i\\beta_{i-1}`, computed when scoring the chunk.

    The same update as :func:`sequential_phase`; detect-then-learn reuses the hidden layer and
    residual of the detection step instead of computing them twice.
    """
    if len(h) == 0:
        return beta, p
    ph = p @ h.T
    if len(h) == 1:
        denom = forgetting + float(h[0] @ ph[:, 0])
        p_new = (p - np.outer(ph[:, 0], ph[:, 0]) / denom) / forgetting
    else:
        s = forgetting * np.eye(len(h)) + h @ ph
        p_new = (p - ph @ np.linalg.solve(s, ph.T)) / forgetting
    p_new = 0.5 * (p_new + p_new.T)
    return beta + (p_new @ h.T) @ residual, p_new


def reconstruction_error(x: np.ndarray, h: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """Per-sample :math:`\\lVert x - H\\beta \\rVert^2 / n`."""
    return np.asarray(np.mean((_rows(x) - h @ beta) ** 2, axis=1))


def batch_ridge(h: np.ndarray, t: np.ndarray, ridge: float = 1e-3) -> np.ndarray:
    """Batch ridge ELM: :math:`\\beta = (H^TH + \\delta I)^{-1}H^Tt`, [ONLAD eq. 3] regularised."""
    return np.linalg.solve(h.T @ h + ridge * np.eye(h.shape[1]), h.T @ t)
