"""Selective aggregation of ONLAD models (Qin et al., Sec. III-B, Algorithm 1): pure functions.

* FedAvg weights (eq. 6): :math:`c_k = n_k / N`.
* Credit scores (Algorithm 1, line 8):
  :math:`c_k = \\frac{(n_k/N)(1/\\ell_k)/M}{\\sum_j (n_j/N)(1/\\ell_j)/M}` with
  :math:`M = \\sum_j 1/\\ell_j`; :math:`M` and :math:`N` cancel, so
  :math:`c_k \\propto n_k / \\ell_k`, where :math:`\\ell_k` is the loss of client
  :math:`k`'s :math:`\\beta_k` on the server's observed set (eq. 7).
* Thresholded (lines 5-6): a client with :math:`\\ell_k > \\lambda` gets :math:`c_k = 0`. The
  paper states :math:`\\sum_k c_k = 1`; we normalise over the clients that pass, which is the
  only reading under which that holds once some are excluded.
* Adaptive threshold (Sec. IV-B(5)): :math:`\\lambda` decreases linearly over the rounds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def fedavg_weights(n: Sequence[float]) -> np.ndarray:
    """Eq. 6: :math:`n_k / N`."""
    w = np.asarray(n, dtype=np.float64)
    return w / w.sum()


def credit_scores(
    losses: Sequence[float], n: Sequence[float], lam: float | None = None
) -> np.ndarray:
    """Algorithm 1: credit scores, zero above ``lam``; all zeros when every client is above."""
    ell = np.asarray(losses, dtype=np.float64)
    nk = np.asarray(n, dtype=np.float64)
    if ell.shape != nk.shape or ell.ndim != 1 or ell.size == 0:
        raise ValueError("need one loss and one size per client")
    if np.any(ell <= 0) or not np.all(np.isfinite(ell)):
        raise ValueError("losses must be finite and positive")
    keep = np.ones_like(ell, dtype=bool) if lam is None else ell <= lam
    raw = np.where(keep, (nk / nk.sum()) / ell, 0.0)
    total = raw.sum()
    return raw / total if total > 0 else raw


def adaptive_lambda(lam: float, round_no: int, rounds: int, decay: float) -> float:
    """Linearly decreasing :math:`\\lambda_t = \\lambda (1 - d\\,(t-1)/(T-1))` for rounds 1..T."""
    if rounds <= 1:
        return lam
    return lam * (1.0 - decay * (round_no - 1) / (rounds - 1))
