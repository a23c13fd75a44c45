"""FADngs's privacy tools: the Gaussian mechanism on the statistics, its epsilon, dCor."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedad.methods.fadngs.density import shrinkage_covariance
from fedad.methods.fadngs.privacy import (
    _draw,
    _ratio,
    density_epsilon,
    distance_correlations,
    distances,
    double_centred,
    mean_product,
    noisy_gaussian,
    u_centred,
    u_product,
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


@pytest.fixture(scope="module")
def dcor() -> Iterator[Any]:
    """The ``dcor`` package, the oracle (the dev extra; fedad itself does not import it).
    Importing it resets torch's intra-op threads (numba's OpenMP runtime): put back, so
    later tests in this process sum as before."""
    import torch

    threads = torch.get_num_threads()
    module = pytest.importorskip("dcor", reason="dcor, the test oracle (the dev extra)")
    torch.set_num_threads(threads)
    yield module
    torch.set_num_threads(threads)


def _pair(seed: int, n: int, p: int, q: int, dependent: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, p)) * rng.uniform(0.1, 10.0)
    y = rng.normal(size=(n, q))
    if dependent:
        y[:, 0] += np.sin(x[:, 0]) * 3 + x[:, -1] ** 2
    return x, y


def _ours(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(dCor, dCor²_U) by this module's own functions."""
    a, b = distances(x), distances(y)
    biased = _ratio(mean_product, double_centred(a), double_centred(b))
    return math.sqrt(max(biased, 0.0)), _ratio(u_product, u_centred(a), u_centred(b))


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(4, 40),
    st.integers(1, 6),
    st.integers(1, 4),
    st.booleans(),
)
def test_numpy_distance_correlation_equals_dcors(
    dcor: Any, seed: int, n: int, p: int, q: int, dependent: bool
) -> None:
    """Double centring, U-centring and both products against ``dcor``'s own functions, and
    the statistics against ``dcor.distance_correlation`` and
    ``dcor.u_distance_correlation_sqr`` (the U-statistic form), on random samples."""
    x, y = _pair(seed, n, p, q, dependent)
    a = distances(x)
    np.testing.assert_allclose(double_centred(a), dcor.double_centered(a), atol=1e-12)
    np.testing.assert_allclose(u_centred(a), dcor.u_centered(a), atol=1e-12)
    b = distances(y)
    c, d = double_centred(a), double_centred(b)
    assert mean_product(c, d) == pytest.approx(float(dcor.mean_product(c, d)), abs=1e-12)
    c, d = u_centred(a), u_centred(b)
    assert u_product(c, d) == pytest.approx(float(dcor.u_product(c, d)), abs=1e-12)
    biased, unbiased = _ours(x, y)
    assert biased == pytest.approx(float(dcor.distance_correlation(x, y)), abs=1e-9)
    assert unbiased == pytest.approx(float(dcor.u_distance_correlation_sqr(x, y)), abs=1e-9)


def test_distance_correlation_tells_dependent_from_independent() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(200, 10))
    out = distance_correlations(x, np.zeros((1, 3)), np.eye(3)[None], rng)
    assert abs(out["dcor_shared_u"]) < 0.05 and abs(out["dcor_random_u"]) < 0.05
    _, dependent = _ours(x, x[:, :3] * 2 + 1)
    assert dependent > 0.3  # the measure itself sees a real dependence
    # a sample against itself: dCor = dCor²_U = 1; against a constant: 0 (no spread)
    assert _ours(x, x) == pytest.approx((1.0, 1.0))
    assert _ours(x, np.ones((200, 2))) == (0.0, 0.0)


def test_distance_correlations_equal_dcors_own_functions(dcor: Any) -> None:
    """The measure end to end: the same draws, in the order the function makes them, give
    dcor's statistics."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(60, 12))
    means, covs = np.zeros((1, 3)), np.eye(3)[None]
    out = distance_correlations(x, means, covs, np.random.default_rng(5))
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


def test_fedad_does_not_import_dcor() -> None:
    """The measure runs without the package (its numba code compiles on every import)."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np\n"
        "from fedad.methods.fadngs.privacy import distance_correlations\n"
        "x = np.random.default_rng(0).normal(size=(30, 4))\n"
        "out = distance_correlations(x, np.zeros((1, 2)), np.eye(2)[None],"
        " np.random.default_rng(1))\n"
        "assert len(out) == 4 and 'dcor' not in sys.modules and 'numba' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_the_shared_draws_come_from_the_shared_gaussians() -> None:
    rng = np.random.default_rng(3)
    means = np.array([[5.0, -5.0], [-5.0, 5.0]])
    covs = np.stack([np.eye(2) * 0.01] * 2)
    y = _draw(means, covs, 4000, rng)
    near = np.linalg.norm(y[:, None, :] - means[None], axis=2).min(axis=1)
    assert np.all(near < 1.0)  # every draw sits on one of the two Gaussians
    assert 0.4 < np.mean(y[:, 0] > 0) < 0.6  # both components used
