"""FADngs's noisy density estimation and score, in numpy float64 (pure functions).

Noisy Global Density Estimation (NGDE, [FADngs Sec. III-A]): a client clusters its
projections :math:`z(x)` with a k-means *stopped early* (weak clustering), so each cluster
keeps members of other clusters (the noise of [FADngs eq. 4, 5]), fits one Gaussian per
cluster with a shrunk covariance [FADngs eq. 1-3] and shares it. The score of a sample is its
smallest Mahalanobis distance to the shared Gaussians [FADngs eq. 6].
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


def _as_matrix(x: ArrayLike) -> FloatArray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"expected an (N, D) array, got shape {arr.shape}")
    return arr


def sample_covariance(x: ArrayLike) -> FloatArray:
    """:math:`\\hat\\Sigma = \\frac1N \\sum_i (z_i - \\hat\\mu)(z_i - \\hat\\mu)^\\top`
    [FADngs eq. 2]: the biased (maximum-likelihood) estimate, divided by :math:`N` as the
    paper writes it, not :math:`N - 1`.

    Shapes:
        - x: :math:`(N, D)`, :math:`N \\geq 1`
        - output: :math:`(D, D)`
    """
    z = _as_matrix(x)
    if z.shape[0] < 1:
        raise ValueError("need at least one sample")
    d = z - z.mean(axis=0)
    out: FloatArray = d.T @ d / z.shape[0]
    return out


def shrinkage_covariance(x: ArrayLike, rho: float = 0.1) -> FloatArray:
    """The shrunk covariance [FADngs eq. 3]:

    .. math::
        \\hat\\Sigma_{shrink} = (1 - \\rho)\\hat\\Sigma
            + \\rho \\frac{\\mathrm{tr}(\\hat\\Sigma)}{D} I_D

    with :math:`\\hat\\Sigma` the biased sample covariance [FADngs eq. 2] and :math:`\\rho` the
    shrinkage intensity (0.1 in the paper, [FADngs Sec. IV]). For :math:`\\rho > 0` and a
    non-zero trace the result is positive definite.

    Shapes:
        - x: :math:`(N, D)`
        - output: :math:`(D, D)`
    """
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"rho must lie in [0, 1], got {rho}")
    sigma = sample_covariance(x)
    dim = sigma.shape[0]
    out: FloatArray = (1.0 - rho) * sigma + rho * (np.trace(sigma) / dim) * np.eye(dim)
    return out


def _assign(z: FloatArray, centres: FloatArray) -> IntArray:
    d2 = ((z[:, None, :] - centres[None, :, :]) ** 2).sum(axis=2)
    labels: IntArray = d2.argmin(axis=1).astype(np.int64)
    return labels


def weak_kmeans(
    x: ArrayLike, k: int, iters: int, rng: np.random.Generator | int
) -> tuple[IntArray, FloatArray]:
    """Weak clustering [FADngs Sec. III-A, eq. 4, 5]: Lloyd's k-means from ``k`` distinct
    samples drawn by ``rng`` as initial centres, stopped after ``iters`` iterations (each an
    assignment to the nearest centre, then a re-estimate of the centres as cluster means).
    Stopped early, a cluster keeps samples that belong to other clusters: the noise that
    makes the shared density private ([FADngs eq. 4, 5]: :math:`\\hat\\mu_k = \\hat\\mu_k^t +
    \\hat\\mu_k^n`). ``k = 1`` returns the whole set as one cluster (the paper's setting,
    :math:`K_c = 1`).

    A cluster left empty by an iteration takes the sample farthest from its nearest centre
    (our choice; the paper does not discuss it), so that every label in ``0..k-1`` has
    members and :func:`fit_gaussians` can fit each of them.

    Returns ``(labels, centres)``: the last assignment and the means of its clusters.

    Shapes:
        - x: :math:`(N, D)`, :math:`N \\geq k`
        - labels: :math:`(N,)` int64 in :math:`[0, k)`
        - centres: :math:`(k, D)`
    """
    z = _as_matrix(x)
    n = z.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= N, got k={k}, N={n}")
    if iters < 1:
        raise ValueError(f"need at least one iteration, got {iters}")
    if k == 1:
        return np.zeros(n, dtype=np.int64), z.mean(axis=0, keepdims=True)
    gen = np.random.default_rng(rng) if isinstance(rng, int) else rng
    centres = z[gen.choice(n, size=k, replace=False)].copy()
    labels = np.zeros(n, dtype=np.int64)
    for _ in range(iters):
        labels = _assign(z, centres)
        for j in range(k):
            if not np.any(labels == j):
                dist = ((z - centres[labels]) ** 2).sum(axis=1)
                # only take from clusters that keep a member afterwards
                counts = np.bincount(labels, minlength=k)
                dist[counts[labels] <= 1] = -np.inf
                labels[int(dist.argmax())] = j
        centres = np.stack([z[labels == j].mean(axis=0) for j in range(k)])
    return labels, centres


def fit_gaussians(
    x: ArrayLike, labels: ArrayLike, rho: float = 0.1
) -> tuple[FloatArray, FloatArray]:
    """One Gaussian per cluster: means [FADngs eq. 1] and shrunk covariances [FADngs eq. 2, 3].
    Fitted on weak clusters these are the noisy densities of [FADngs eq. 4, 5].

    Shapes:
        - x: :math:`(N, D)`
        - labels: :math:`(N,)` integers in :math:`[0, K)`, every cluster non-empty
        - output: means :math:`(K, D)`, covariances :math:`(K, D, D)`
    """
    z = _as_matrix(x)
    lab = np.asarray(labels)
    if lab.shape != (z.shape[0],):
        raise ValueError(f"labels must have shape ({z.shape[0]},), got {lab.shape}")
    if lab.size == 0 or lab.min() < 0:
        raise ValueError("labels must be non-negative and non-empty")
    k = int(lab.max()) + 1
    means = np.empty((k, z.shape[1]))
    covs = np.empty((k, z.shape[1], z.shape[1]))
    for j in range(k):
        members = z[lab == j]
        if members.shape[0] == 0:
            raise ValueError(f"cluster {j} has no members")
        means[j] = members.mean(axis=0)
        covs[j] = shrinkage_covariance(members, rho)
    return means, covs


def stable_cholesky(
    cov: ArrayLike, jitter: float = 1e-10, max_tries: int = 10
) -> tuple[FloatArray, float]:
    """Lower Cholesky factor :math:`L` of :math:`\\Sigma` (:math:`\\Sigma = L L^\\top`).

    If :math:`\\Sigma` is not numerically positive definite, :math:`\\epsilon I` is added to
    it and the factorisation retried, with :math:`\\epsilon` = ``jitter`` times the mean
    absolute diagonal (1 if that is 0), multiplied by 10 at each retry, at most
    ``max_tries`` retries; :class:`numpy.linalg.LinAlgError` if it still fails. Never a
    pseudo-inverse: a singular direction gets a large but finite distance, not a zero one.
    Returns :math:`L` and the jitter that was added (0.0 if none).

    Shapes:
        - cov: :math:`(D, D)`, symmetric
        - output: :math:`(D, D)` lower triangular
    """
    sigma = _as_matrix(cov)
    if sigma.shape[0] != sigma.shape[1]:
        raise ValueError(f"covariance must be square, got {sigma.shape}")
    if not np.all(np.isfinite(sigma)):
        raise ValueError("covariance has non-finite entries")
    scale = float(np.abs(np.diag(sigma)).mean()) if sigma.size else 1.0
    scale = scale if scale > 0.0 else 1.0
    added = 0.0
    eye = np.eye(sigma.shape[0])
    for attempt in range(max_tries + 1):
        try:
            chol = np.asarray(np.linalg.cholesky(sigma + added * eye), dtype=np.float64)
            if np.all(np.isfinite(chol)):
                return chol, added
        except np.linalg.LinAlgError:
            pass
        if attempt < max_tries:
            added = jitter * scale * 10.0**attempt
    raise np.linalg.LinAlgError(f"covariance not positive definite even with jitter {added}")


def mahalanobis_sq(x: ArrayLike, means: ArrayLike, covs: ArrayLike) -> FloatArray:
    """Squared Mahalanobis distances :math:`(z - \\hat\\mu_k)^\\top \\hat\\Sigma_k^{-1}
    (z - \\hat\\mu_k)` of every sample to every Gaussian (the terms of [FADngs eq. 6]), as
    :math:`\\lVert L_k^{-1}(z - \\hat\\mu_k) \\rVert^2` with :math:`L_k` the Cholesky factor
    of :math:`\\hat\\Sigma_k` (see :func:`stable_cholesky`) and a triangular solve, no
    explicit inverse.

    Shapes:
        - x: :math:`(N, D)`
        - means: :math:`(M, D)`
        - covs: :math:`(M, D, D)`
        - output: :math:`(N, M)`
    """
    z = _as_matrix(x)
    mu = _as_matrix(means)
    sig = np.asarray(covs, dtype=np.float64)
    m, dim = mu.shape
    if z.shape[1] != dim or sig.shape != (m, dim, dim):
        raise ValueError(f"shapes disagree: x {z.shape}, means {mu.shape}, covs {sig.shape}")
    out = np.empty((z.shape[0], m))
    for k in range(m):
        chol, _ = stable_cholesky(sig[k])
        y = scipy.linalg.solve_triangular(chol, (z - mu[k]).T, lower=True)
        out[:, k] = (y**2).sum(axis=0)
    return out


def min_mahalanobis(
    x: ArrayLike, means: ArrayLike, covs: ArrayLike, squared: bool = True
) -> FloatArray:
    """The anomaly score [FADngs eq. 6]:

    .. math::
        s(x) = \\min_{1 \\le k \\le M} (z(x) - \\hat\\mu_k)^\\top \\hat\\Sigma_k^{-1}
            (z(x) - \\hat\\mu_k)

    The paper's score is the *squared* distance (``squared=True``, the default);
    ``squared=False`` returns its square root, the Mahalanobis distance proper. Both rank
    samples identically. Higher means more anomalous.

    Shapes:
        - x: :math:`(N, D)`
        - means: :math:`(M, D)`
        - covs: :math:`(M, D, D)`
        - output: :math:`(N,)`
    """
    d2 = mahalanobis_sq(x, means, covs).min(axis=1)
    out: FloatArray = d2 if squared else np.sqrt(d2)
    return out
