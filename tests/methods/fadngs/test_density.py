"""FADngs's density math: shrinkage [eq. 3], weak k-means [eq. 4-5], score [eq. 6]."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import mahalanobis

from fedad.methods.fadngs.density import (
    fit_gaussians,
    mahalanobis_sq,
    min_mahalanobis,
    sample_covariance,
    shrinkage_covariance,
    stable_cholesky,
    weak_kmeans,
)


def test_shrinkage_matches_a_hand_computation_on_3x2() -> None:
    x = np.array([[1.0, 2.0], [3.0, 0.0], [5.0, 4.0]])
    # mean (3, 2); deviations (-2, 0), (0, -2), (2, 2)
    # biased covariance [eq. 2]: [[8, 4], [4, 8]] / 3; trace 16/3, trace / D = 8/3
    sigma = np.array([[8.0, 4.0], [4.0, 8.0]]) / 3.0
    np.testing.assert_allclose(sample_covariance(x), sigma)
    rho = 0.25
    expected = np.array([[0.75 * 8 / 3 + 0.25 * 8 / 3, 0.75 * 4 / 3], [1.0, 8 / 3]])
    np.testing.assert_allclose(shrinkage_covariance(x, rho), expected)
    np.testing.assert_allclose(shrinkage_covariance(x, 0.0), sigma)
    np.testing.assert_allclose(shrinkage_covariance(x, 1.0), 8 / 3 * np.eye(2))


def test_shrinkage_keeps_the_trace_and_is_positive_definite_when_n_below_d() -> None:
    x = np.random.default_rng(0).normal(size=(3, 6))  # rank-2 sample covariance
    s = shrinkage_covariance(x, 0.1)
    np.testing.assert_allclose(np.trace(s), np.trace(sample_covariance(x)))
    assert np.linalg.eigvalsh(s).min() > 0
    with pytest.raises(ValueError):
        shrinkage_covariance(x, 1.5)


def test_mahalanobis_matches_scipy() -> None:
    rng = np.random.default_rng(1)
    means = rng.normal(size=(3, 4))
    covs = np.stack([shrinkage_covariance(rng.normal(size=(10, 4)), 0.1) for _ in range(3)])
    x = rng.normal(size=(7, 4))
    d2 = mahalanobis_sq(x, means, covs)
    ref = np.array(
        [
            [mahalanobis(xi, m, np.linalg.inv(c)) for m, c in zip(means, covs, strict=True)]
            for xi in x
        ]
    )
    np.testing.assert_allclose(np.sqrt(d2), ref, rtol=1e-10)
    np.testing.assert_allclose(min_mahalanobis(x, means, covs), (ref**2).min(axis=1), rtol=1e-10)
    np.testing.assert_allclose(min_mahalanobis(x, means, covs, squared=False), ref.min(axis=1))


def test_near_singular_covariance_gives_finite_scores() -> None:
    singular = np.array([[1.0, 1.0], [1.0, 1.0]])  # rank 1: plain Cholesky fails
    with pytest.raises(np.linalg.LinAlgError):
        np.linalg.cholesky(singular)
    chol, added = stable_cholesky(singular)
    assert added > 0 and np.all(np.isfinite(chol))
    zero = np.zeros((2, 2))  # all samples identical, rho = 0
    x = np.array([[0.0, 0.0], [1.0, -1.0], [2.0, 2.0]])
    s = min_mahalanobis(x, np.zeros((2, 2)), np.stack([singular, zero]))
    assert np.all(np.isfinite(s))
    assert s[2] < s[1]  # along the supported direction (1, 1) the distance stays small
    # rank-deficient sample covariance from N < D without shrinkage
    pts = np.random.default_rng(2).normal(size=(2, 5))
    cov = shrinkage_covariance(pts, 0.0)[None]
    assert np.all(np.isfinite(min_mahalanobis(pts, pts.mean(0, keepdims=True), cov)))


def _two_groups() -> tuple[np.ndarray, np.ndarray]:
    a = np.c_[np.linspace(-1.0, 1.0, 10), np.zeros(10)]
    return np.r_[a, a + np.array([10.0, 0.0])], np.r_[np.zeros(10, int), np.ones(10, int)]


def _mixed(labels: np.ndarray, truth: np.ndarray) -> bool:
    return any(len(set(truth[labels == j].tolist())) > 1 for j in np.unique(labels))


def test_one_lloyd_iteration_leaves_noise_that_many_iterations_remove() -> None:
    x, truth = _two_groups()
    noisy = []
    for seed in range(10):
        labels1, centres1 = weak_kmeans(x, 2, 1, np.random.default_rng(seed))
        labels20, _ = weak_kmeans(x, 2, 20, np.random.default_rng(seed))
        noisy.append(_mixed(labels1, truth))
        assert not _mixed(labels20, truth)  # converged: one cluster per true group
        for j in range(2):  # centres are the means of the returned clusters
            np.testing.assert_allclose(centres1[j], x[labels1 == j].mean(0))
    assert any(noisy)  # the noise of [FADngs eq. 4-5] really happens
    labels, _ = weak_kmeans(x, 2, 1, 0)  # an int seed is accepted and reproducible
    np.testing.assert_array_equal(labels, weak_kmeans(x, 2, 1, np.random.default_rng(0))[0])
    assert _mixed(labels, truth)


def test_the_default_two_iterations_leave_more_noise_than_converged_clusters() -> None:
    """At the default ``kmeans_iters = 2`` (FADngsParams), on four overlapping groups along a
    line: the clusters hold more members of other groups than converged k-means' do, over
    the same initial centres (mean minority share over 20 seeds)."""
    from fedad.methods.fadngs.federated import FADngsParams

    iters = FADngsParams().kmeans_iters
    rng = np.random.default_rng(0)
    sizes = [200, 60, 200, 60]
    x = np.concatenate(
        [rng.normal(size=(n, 16)) + np.r_[3.0 * g, np.zeros(15)] for g, n in enumerate(sizes)]
    )
    truth = np.repeat(np.arange(4), sizes)

    def minority(labels: np.ndarray) -> float:
        return sum(
            int((labels == j).sum() - np.bincount(truth[labels == j]).max())
            for j in np.unique(labels)
        ) / len(labels)

    early = np.mean([minority(weak_kmeans(x, 4, iters, s)[0]) for s in range(20)])
    done = np.mean([minority(weak_kmeans(x, 4, 50, s)[0]) for s in range(20)])
    assert early > done + 0.03, (early, done)


def test_k1_is_the_whole_set_and_fit_gaussians_agrees() -> None:
    x, _ = _two_groups()
    labels, centres = weak_kmeans(x, 1, 3, 0)
    assert np.all(labels == 0)
    np.testing.assert_allclose(centres, x.mean(0, keepdims=True))
    means, covs = fit_gaussians(x, labels, rho=0.1)
    assert means.shape == (1, 2) and covs.shape == (1, 2, 2)
    np.testing.assert_allclose(covs[0], shrinkage_covariance(x, 0.1))


def test_fit_gaussians_per_cluster_and_rejects_empty() -> None:
    x, truth = _two_groups()
    means, covs = fit_gaussians(x, truth, rho=0.2)
    np.testing.assert_allclose(means[1], x[10:].mean(0))
    np.testing.assert_allclose(covs[0], shrinkage_covariance(x[:10], 0.2))
    with pytest.raises(ValueError):
        fit_gaussians(x, np.where(truth == 1, 2, 0), rho=0.1)  # cluster 1 empty
    with pytest.raises(ValueError):
        weak_kmeans(x, 0, 1, 0)


def test_weak_kmeans_keeps_every_cluster_populated() -> None:
    x = np.r_[np.zeros((5, 2)), np.ones((1, 2))]  # duplicates force empty clusters
    for seed in range(5):
        labels, centres = weak_kmeans(x, 3, 5, seed)
        assert set(labels.tolist()) == {0, 1, 2}
        assert np.all(np.isfinite(centres))
