"""FADngs's privacy tools: the Gaussian mechanism on the statistics, its epsilon, dCor."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedad.methods.fadngs.density import shrinkage_covariance
from fedad.methods.fadngs.privacy import (
    _draw,
    density_epsilon,
    distance_correlations,
    noisy_gaussian,
    unit_rows,
)


def _rdp_bound(sigma: float, steps: int, delta: float) -> float:
    """Mironov (2017): the Gaussian mechanism's RDP alpha / (2 sigma^2) per release,
    composed ``steps`` times, converted with epsilon = rdp + log(1/delta) / (alpha - 1)."""
    alphas = np.linspace(1.01, 512, 200_000)
    return float(np.min(steps * alphas / (2 * sigma**2) + math.log(1 / delta) / (alphas - 1)))


@pytest.mark.parametrize(("sigma", "steps"), [(1.0, 10), (4.0, 42), (0.8, 2)])
def test_epsilon_matches_the_closed_form_rdp_bound(sigma: float, steps: int) -> None:
    eps = density_epsilon(sigma, steps, 1e-5)
    bound = _rdp_bound(sigma, steps, 1e-5)
    # dp-accounting uses a tighter RDP-to-DP conversion: never above the classical bound
    assert eps <= bound + 1e-6 and eps >= 0.8 * bound


def test_epsilon_falls_with_noise_and_rises_with_releases() -> None:
    assert density_epsilon(2.0, 10, 1e-5) < density_epsilon(1.0, 10, 1e-5)
    assert density_epsilon(1.0, 20, 1e-5) > density_epsilon(1.0, 10, 1e-5)
    assert density_epsilon(0.0, 10, 1e-5) == math.inf


def test_noisy_gaussian_without_noise_is_the_shrunk_covariance() -> None:
    rng = np.random.default_rng(0)
    z = unit_rows(rng.normal(size=(50, 4)))
    mean, cov = noisy_gaussian(z, 0.0, 0.1, rng)
    np.testing.assert_allclose(mean, z.mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(cov, shrinkage_covariance(z, 0.1), atol=1e-10)


def test_noisy_gaussian_noise_has_the_calibrated_scale_and_stays_positive_definite() -> None:
    rng = np.random.default_rng(1)
    z = unit_rows(rng.normal(size=(40, 6)))
    sigma, n = 3.0, 40
    means = np.stack(
        [noisy_gaussian(z, sigma, 0.1, np.random.default_rng(s))[0] for s in range(400)]
    )
    # the mean's noise: standard deviation sigma * 2 / n per coordinate
    np.testing.assert_allclose(means.std(axis=0), sigma * 2 / n, rtol=0.15)
    _, cov = noisy_gaussian(z, 50.0, 0.1, rng)  # heavy noise
    assert np.all(np.linalg.eigvalsh(cov) > 0) and np.allclose(cov, cov.T)


def test_distance_correlation_tells_dependent_from_independent() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(200, 10))
    out = distance_correlations(x, np.zeros((1, 3)), np.eye(3)[None], rng)
    assert abs(out["dcor_shared_u"]) < 0.05 and abs(out["dcor_random_u"]) < 0.05
    import dcor

    dependent = float(dcor.u_distance_correlation_sqr(x, x[:, :3] * 2 + 1))
    assert dependent > 0.3  # the measure itself sees a real dependence


def test_distance_correlations_equal_dcors_own_functions() -> None:
    """The centred matrices are computed once per sample; the statistics are dcor's."""
    import dcor

    rng = np.random.default_rng(4)
    x = rng.normal(size=(60, 12))
    means, covs = np.zeros((1, 3)), np.eye(3)[None]
    out = distance_correlations(x, means, covs, np.random.default_rng(5))
    # the same draws, in the order the function makes them
    draw_rng = np.random.default_rng(5)
    shared = _draw(means, covs, len(x), draw_rng)
    a = draw_rng.standard_normal((3, 3))
    random = _draw(draw_rng.standard_normal((1, 3)), (a @ a.T / 3 + np.eye(3))[None], len(x),
                   draw_rng)  # fmt: skip
    for name, y in (("shared", shared), ("random", random)):
        assert out[f"dcor_{name}"] == pytest.approx(float(dcor.distance_correlation(x, y)))
        assert out[f"dcor_{name}_u"] == pytest.approx(
            float(dcor.u_distance_correlation_sqr(x, y)), abs=1e-12
        )


def test_the_shared_draws_come_from_the_shared_gaussians() -> None:
    rng = np.random.default_rng(3)
    means = np.array([[5.0, -5.0], [-5.0, 5.0]])
    covs = np.stack([np.eye(2) * 0.01] * 2)
    y = _draw(means, covs, 4000, rng)
    near = np.linalg.norm(y[:, None, :] - means[None], axis=2).min(axis=1)
    assert np.all(near < 1.0)  # every draw sits on one of the two Gaussians
    assert 0.4 < np.mean(y[:, 0] > 0) < 0.6  # both components used
