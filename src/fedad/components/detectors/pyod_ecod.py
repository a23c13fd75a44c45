"""PyOD's ECOD (Li et al. 2022) scored one sample at a time, in closed form, vectorised.

PyOD's ``ECOD.decision_function(X)`` appends the whole batch ``X`` to the training data
``T`` and recomputes every column's empirical CDF and skewness over ``[T; X]``, so a
sample's score depends on the other samples of its batch. fedad's detector contract wants
one score per sample whatever the batch, so the ``pyod-ecod`` detector scores each row
``x`` as PyOD scores the one-row batch ``[x]``, which this module computes for all rows at
once. With ``n`` training rows, per column ``j``:

.. math::

    L_j = \\frac{\\#\\{i : T_{ij} \\le x_j\\} + 1}{n + 1}, \\qquad
    R_j = \\frac{\\#\\{i : T_{ij} \\ge x_j\\} + 1}{n + 1}

(PyOD's ``column_ecdf`` of ``[T; x]`` and of ``-[T; x]`` at ``x``: ties take the largest
probability), :math:`U^l_j = -\\log L_j`, :math:`U^r_j = -\\log R_j`, and with
:math:`s_j` the sign of the skewness of column ``j`` of ``[T; x]``,
:math:`U^s_j = U^l_j` if :math:`s_j < 0`, :math:`U^r_j` if :math:`s_j > 0`,
:math:`U^l_j + U^r_j` if :math:`s_j = 0` (PyOD's ``U_l * -sign(s - 1) + U_r * sign(s + 1)``).
The score is :math:`\\sum_j \\max(U^l_j, U^r_j, U^s_j)` [ECOD eq. 3-5, PyOD's code].

The sign of the skewness is the sign of the third central moment of ``[T; x]``, from the
training column's mean :math:`\\mu`, :math:`A_2 = \\sum_i (T_{ij} - \\mu)^2` and
:math:`A_3 = \\sum_i (T_{ij} - \\mu)^3` and :math:`\\delta = x_j - \\mu`, ``N = n + 1``
(Chan et al.'s update for one added point):

.. math::

    M_3 = A_3 + \\delta^3 \\frac{n (n - 1)}{N^2} - 3 \\delta \\frac{A_2}{N}.

A column that is constant over ``[T; x]`` has no skewness: SciPy gives NaN, which PyOD
turns into 0 (``np.nan_to_num``), and so does this module (SciPy's zero-variance rule);
there :math:`U^l_j = U^r_j = 0`, so the column adds nothing. Where :math:`M_3` is zero up
to rounding its sign may differ from SciPy's; elsewhere the scores equal PyOD's one-row
scores (``tests/components/detectors/test_pyod.py`` compares them).
"""

from __future__ import annotations

import numpy as np

BLOCK = 2048
"""Rows scored at a time (memory: a few ``BLOCK x D`` float64 arrays)."""


class RowECOD:
    """The training columns, sorted, and their moments: what :meth:`score` needs."""

    def __init__(self, t: np.ndarray) -> None:
        t = np.asarray(t, dtype=np.float64)
        if t.ndim != 2 or len(t) < 1:
            raise ValueError(f"ECOD needs a 2-d training matrix, got shape {t.shape}")
        self.n = len(t)
        self.sorted = np.sort(t, axis=0)
        self.mean = t.mean(axis=0)
        c = t - self.mean
        self.a2 = (c * c).sum(axis=0)
        self.a3 = (c * c * c).sum(axis=0)

    def score(self, x: np.ndarray) -> np.ndarray:
        """ECOD scores of the rows of ``x`` ``(m, D)``, each as a one-row batch."""
        q = np.asarray(x, dtype=np.float64)
        out = np.empty(len(q), dtype=np.float64)
        for i in range(0, len(q), BLOCK):
            out[i : i + BLOCK] = self._block(q[i : i + BLOCK])
        return out

    def _block(self, q: np.ndarray) -> np.ndarray:
        n, big_n = self.n, self.n + 1
        below = np.empty(q.shape, dtype=np.float64)  # #{T_ij <= x_j}
        above = np.empty(q.shape, dtype=np.float64)  # #{T_ij >= x_j}
        for j in range(q.shape[1]):
            col = self.sorted[:, j]
            below[:, j] = np.searchsorted(col, q[:, j], side="right")
            above[:, j] = n - np.searchsorted(col, q[:, j], side="left")
        u_l = -np.log((below + 1.0) / big_n)
        u_r = -np.log((above + 1.0) / big_n)
        s = self._skew_sign(q)
        u_s = np.where(s < 0, u_l, np.where(s > 0, u_r, u_l + u_r))
        return np.asarray(np.maximum(np.maximum(u_l, u_r), u_s).sum(axis=1), dtype=np.float64)

    def _skew_sign(self, q: np.ndarray) -> np.ndarray:
        """The sign of each column's skewness over ``[T; x]``, per row ``x`` of ``q``; 0 for
        a column constant over ``[T; x]`` (SciPy's ``skew`` zero-variance rule)."""
        n, big_n = self.n, self.n + 1
        d = q - self.mean
        m2 = (self.a2 + d * d * n / big_n) / big_n
        m3 = self.a3 + d**3 * n * (n - 1) / big_n**2 - 3.0 * d * self.a2 / big_n
        mean = self.mean + d / big_n
        flat = m2 <= (np.finfo(np.float64).resolution * mean) ** 2
        return np.where(flat, 0.0, np.sign(m3))
