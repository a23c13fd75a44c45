"""FADngs's privacy options and measures: the Gaussian mechanism on the shared statistics,
its (epsilon, delta), and the distance-correlation measure of [FADngs Fig. 9, eq. 18].

**Gaussian mechanism** (optional, ``density_noise`` :math:`\\sigma > 0`, one cluster per
client). The representations are normalised to the unit sphere, :math:`\\lVert z_i \\rVert
= 1` (so the clipping norm is :math:`C = 1` and nothing is lost to clipping but the norm);
the client releases the mean :math:`\\mu = \\frac1n \\sum_i z_i` and the second moment
:math:`S = \\frac1n \\sum_i z_i z_i^\\top`, each plus Gaussian noise calibrated to its L2
sensitivity under the replacement of one sample (:math:`n` fixed):

.. math::
    \\Delta_\\mu = \\frac{2C}{n}, \\quad \\Delta_S = \\frac{2C^2}{n}, \\qquad
    \\tilde\\mu = \\mu + \\mathcal N(0, \\sigma^2\\Delta_\\mu^2 I), \\quad
    \\tilde S = S + \\mathrm{sym}(\\mathcal N(0, \\sigma^2 \\Delta_S^2))

(the noise drawn on the upper triangle and mirrored). The covariance
:math:`\\tilde S - \\tilde\\mu\\tilde\\mu^\\top` is shrunk [FADngs eq. 3] and projected onto the
positive-definite matrices (eigenvalues floored); both are post-processing. Each density phase
is two Gaussian mechanisms with noise multiplier :math:`\\sigma`; the (epsilon, delta) of
all of a client's releases over the run comes from the RDP accountant of
``dp-accounting`` (:func:`density_epsilon`), without amplification by sampling (a client
may take part in every phase). It covers the density statistics only: the model updates a
client also sends are not privatised by it (``[privacy]`` acts on those), and the report
says so.

With several clusters (:math:`K_c > 1`) the cluster memberships depend on every sample and
the per-cluster sensitivity has no such bound: the mechanism is refused there.

**Distance correlation** [FADngs eq. 18, Fig. 9]: between a client's raw training samples
:math:`X` (flattened) and :math:`n` draws :math:`Y` from the Gaussians it shared, paired by
index, beside the same measure for draws from a random Gaussian of the same shape. As in
the paper, :math:`Y` is drawn independently of the rows of :math:`X`, so the (biased) sample
dCor of eq. 18 measures chiefly its own small-sample bias; the bias-corrected
:math:`\\mathrm{dCor}^2_U` (``u``) is also given (about 0 for independent samples). Similar
values for shared and random parameters are the paper's evidence; they are no privacy
guarantee. Both statistics are computed here in numpy (Székely, Rizzo and Bakirov 2007;
Székely and Rizzo 2014): :func:`double_centred`, :func:`u_centred`, :func:`mean_product`,
:func:`u_product`, checked against the ``dcor`` package in the tests (which fedad does not
import: its numba code compiles on every import and resets torch's threads).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

EIG_FLOOR = 1e-6
"""Smallest eigenvalue kept, relative to the mean eigenvalue, after the noise."""


def unit_rows(z: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (zero rows stay zero)."""
    norm = np.linalg.norm(z, axis=1, keepdims=True)
    out: np.ndarray = np.divide(z, norm, out=np.zeros_like(z), where=norm > 0)
    return out


def noisy_gaussian(
    z: np.ndarray, noise_multiplier: float, rho: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """One Gaussian of unit-norm representations released under the Gaussian mechanism (see
    the module docstring), shrunk [FADngs eq. 3] and made positive definite.

    Shapes:
        - z: :math:`(n, D)`, rows of norm at most 1
        - output: mean :math:`(D,)`, covariance :math:`(D, D)`
    """
    n, d = z.shape
    if n < 1:
        raise ValueError("need at least one sample")
    mean = z.mean(axis=0)
    second = z.T @ z / n
    mean = mean + rng.normal(0.0, noise_multiplier * 2.0 / n, size=d)
    noise = np.triu(rng.normal(0.0, noise_multiplier * 2.0 / n, size=(d, d)))
    second = second + noise + np.triu(noise, 1).T
    cov = second - np.outer(mean, mean)
    trace = max(float(np.trace(cov)), 0.0)
    cov = (1.0 - rho) * cov + rho * (trace / d) * np.eye(d)
    vals, vecs = np.linalg.eigh((cov + cov.T) / 2.0)
    floor = EIG_FLOOR * max(float(np.abs(vals).mean()), 1e-12)
    cov = (vecs * np.maximum(vals, floor)) @ vecs.T
    return mean, (cov + cov.T) / 2.0


def density_epsilon(noise_multiplier: float, releases: int, delta: float) -> float:
    """The epsilon of ``releases`` Gaussian mechanisms of noise multiplier
    ``noise_multiplier`` (std / L2 sensitivity) at ``delta``: ``dp-accounting``'s RDP
    accountant, composition without sampling."""
    from dp_accounting import dp_event, rdp

    if noise_multiplier <= 0:
        return float("inf")
    acc = rdp.RdpAccountant()
    acc.compose(dp_event.GaussianDpEvent(noise_multiplier), max(int(releases), 0))
    return float(acc.get_epsilon(delta))


DCOR_MAX = 512
"""Samples used by :func:`distance_correlations` (a seeded subset of larger sets)."""


def _draw(means: np.ndarray, covs: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    comp = rng.integers(0, len(means), size=n)
    out = np.empty((n, means.shape[1]))
    for k in range(len(means)):
        rows = comp == k
        if rows.any():
            out[rows] = rng.multivariate_normal(means[k], covs[k], size=int(rows.sum()))
    return out


def distance_correlations(
    x: np.ndarray, means: np.ndarray, covs: np.ndarray, rng: np.random.Generator
) -> dict[str, float]:
    """[FADngs eq. 18, Fig. 9]: dCor between the raw samples ``x`` and draws from the shared
    Gaussians (``dcor_shared``), and from a random Gaussian of the same shape
    (``dcor_random``: mean :math:`\\mathcal N(0, I)`, covariance :math:`A A^\\top / D + I`
    with :math:`A` standard normal); ``*_u``: the bias-corrected squared versions.

    Shapes:
        - x: :math:`(N, \\dots)`, flattened to :math:`(N, P)`
        - means: :math:`(K, D)`; covs: :math:`(K, D, D)`
    """
    flat = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    if len(flat) > DCOR_MAX:
        flat = flat[np.sort(rng.choice(len(flat), DCOR_MAX, replace=False))]
    n = len(flat)
    if n < 4:
        return {}
    d = means.shape[1]
    shared = _draw(means, covs, n, rng)
    a = rng.standard_normal((d, d))
    random = _draw(rng.standard_normal((1, d)), (a @ a.T / d + np.eye(d))[None], n, rng)
    cx = _Centred(flat)
    out: dict[str, float] = {}
    for name, y in (("shared", shared), ("random", random)):
        cy = _Centred(y)
        out[f"dcor_{name}"] = math.sqrt(max(_ratio(mean_product, cx.double, cy.double), 0))
        out[f"dcor_{name}_u"] = _ratio(u_product, cx.u, cy.u)
    return out


def distances(x: np.ndarray) -> np.ndarray:
    """The Euclidean distance matrix :math:`a_{ij} = \\lVert x_i - x_j \\rVert_2` of the rows
    of ``x`` (scipy's ``cdist``), :math:`(n, n)`."""
    from scipy.spatial.distance import cdist

    out: np.ndarray = cdist(x, x)
    return out


def double_centred(a: np.ndarray) -> np.ndarray:
    """The double-centred distance matrix (Székely, Rizzo and Bakirov 2007, Ann. Statist. 35):

    .. math::
        A_{ij} = a_{ij} - \\bar a_{i\\cdot} - \\bar a_{\\cdot j} + \\bar a_{\\cdot\\cdot},

    with :math:`\\bar a_{i\\cdot}` the mean of row :math:`i`, :math:`\\bar a_{\\cdot j}` of
    column :math:`j` and :math:`\\bar a_{\\cdot\\cdot}` of the whole matrix."""
    out: np.ndarray = a - a.mean(axis=1)[:, None] - a.mean(axis=0)[None, :] + a.mean()
    return out


def u_centred(a: np.ndarray) -> np.ndarray:
    """The U-centred distance matrix (Székely and Rizzo 2014, Ann. Statist. 42), :math:`n > 3`:

    .. math::
        \\tilde A_{ij} = a_{ij} - \\frac{1}{n-2} \\sum_{l} a_{il}
        - \\frac{1}{n-2} \\sum_{k} a_{kj} + \\frac{1}{(n-1)(n-2)} \\sum_{k,l} a_{kl}
        \\quad (i \\ne j), \\qquad \\tilde A_{ii} = 0."""
    n = a.shape[0]
    rows, cols = a.sum(axis=1) / (n - 2), a.sum(axis=0) / (n - 2)
    out: np.ndarray = a - rows[:, None] - cols[None, :] + a.sum() / ((n - 1) * (n - 2))
    np.fill_diagonal(out, 0.0)
    return out


def mean_product(a: np.ndarray, b: np.ndarray) -> float:
    """:math:`\\frac{1}{n^2} \\sum_{i,j} A_{ij} B_{ij}` of double-centred matrices: the
    (biased) squared distance covariance :math:`\\mathrm{dCov}^2_n` (Székely, Rizzo and
    Bakirov 2007)."""
    return float(np.mean(a * b))


def u_product(a: np.ndarray, b: np.ndarray) -> float:
    """:math:`(\\tilde A \\cdot \\tilde B) = \\frac{1}{n(n-3)} \\sum_{i \\ne j} \\tilde
    A_{ij} \\tilde B_{ij}` of U-centred matrices: the unbiased estimator of
    :math:`\\mathrm{dCov}^2` (Székely and Rizzo 2014), :math:`n > 3`."""
    n = a.shape[0]
    return float(np.sum(a * b) / (n * (n - 3)))


class _Centred:
    """A sample's distance matrix (once), double-centred and U-centred: four statistics per
    client reuse them."""

    def __init__(self, x: np.ndarray) -> None:
        d = distances(x)
        self.double = double_centred(d)
        self.u = u_centred(d)


def _ratio(
    product: Callable[[np.ndarray, np.ndarray], float], a: np.ndarray, b: np.ndarray
) -> float:
    """dCor² from centred matrices: :math:`\\langle A, B\\rangle /
    \\sqrt{\\langle A, A\\rangle \\langle B, B\\rangle}` under ``product``
    (:func:`mean_product`: the biased statistic of eq. 18; :func:`u_product`: the
    bias-corrected one), 0 when a sample has no spread (the denominator is not positive)."""
    denominator = product(a, a) * product(b, b)
    if denominator <= 0.0:
        return 0.0
    return product(a, b) / math.sqrt(denominator)
