"""Client-level DP accounting for the Gaussian mechanism (``dp-accounting``)."""

from __future__ import annotations

import math

import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from fedad.accounting import calibrate_noise_multiplier, default_delta, dp_epsilon


def analytic_gaussian_epsilon(sigma: float, delta: float) -> float:
    """The exact epsilon of one Gaussian mechanism of sensitivity 1 and noise sigma at delta
    (Balle & Wang, ICML 2018, Theorem 8):
    delta(eps) = Phi(1/(2 sigma) - eps sigma) - e^eps Phi(-1/(2 sigma) - eps sigma)."""

    def gap(eps: float) -> float:
        a = norm.cdf(1 / (2 * sigma) - eps * sigma)
        b = math.exp(eps) * norm.cdf(-1 / (2 * sigma) - eps * sigma)
        return a - b - delta

    return float(brentq(gap, 0.0, 100.0))


@pytest.mark.parametrize(
    ("sigma", "rounds", "delta"), [(1.0, 1, 1e-5), (2.0, 16, 1e-6), (5.0, 100, 1e-5)]
)
def test_full_participation_matches_the_analytic_gaussian(
    sigma: float, rounds: int, delta: float
) -> None:
    # T Gaussian releases without sampling = one Gaussian of noise sigma / sqrt(T)
    want = analytic_gaussian_epsilon(sigma / math.sqrt(rounds), delta)
    got = dp_epsilon(sigma, 1.0, rounds, delta)
    assert got == pytest.approx(want, rel=0.01)
    assert got <= dp_epsilon(sigma, 1.0, rounds, delta, accountant="rdp")  # RDP is looser


def test_sampling_amplifies_and_more_rounds_cost_more() -> None:
    full = dp_epsilon(1.0, 1.0, 50, 1e-5)
    sampled = dp_epsilon(1.0, 0.1, 50, 1e-5)
    assert sampled < full
    assert dp_epsilon(1.0, 0.1, 100, 1e-5) > sampled
    assert dp_epsilon(0.0, 0.1, 10, 1e-5) == math.inf
    assert dp_epsilon(1.0, 0.1, 0, 1e-5) == 0.0


@pytest.mark.parametrize(
    ("target", "q", "rounds"), [(1.0, 0.1, 100), (8.0, 1.0, 20), (3.0, 0.3, 50)]
)
def test_calibration_lands_within_one_percent_of_the_target(
    target: float, q: float, rounds: int
) -> None:
    sigma = calibrate_noise_multiplier(target, q, rounds, 1e-5)
    eps = dp_epsilon(sigma, q, rounds, 1e-5)
    assert eps <= target * 1.0001
    assert eps >= 0.99 * target


def test_default_delta_and_bad_arguments() -> None:
    assert default_delta(10) == pytest.approx(10**-1.1)
    assert default_delta(1) == 0.5
    with pytest.raises(ValueError, match="sampling_rate"):
        dp_epsilon(1.0, 0.0, 1, 1e-5)
    with pytest.raises(ValueError, match="delta"):
        dp_epsilon(1.0, 0.5, 1, 1.0)
    with pytest.raises(ValueError, match="target_epsilon"):
        calibrate_noise_multiplier(0.0, 0.5, 1, 1e-5)
