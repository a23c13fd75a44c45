"""Client-level DP accounting for the Gaussian mechanism (``dp-accounting``)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from fedad.privacy.accounting import (
    accounted_epsilon,
    calibrate_noise_multiplier,
    default_delta,
    dp_epsilon,
)


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
    """k = n: no sampling. Replace-one adjacency moves a clipped update by up to 2C, so T
    releases of noise sigma C are one Gaussian of noise sigma / (2 sqrt(T)) per unit of
    sensitivity, whose exact epsilon is Balle and Wang's (hand-checkable)."""
    want = analytic_gaussian_epsilon(sigma / (2 * math.sqrt(rounds)), delta)
    got = dp_epsilon(sigma, 10, 10, rounds, delta)
    assert got == pytest.approx(want, rel=0.01)
    assert got <= dp_epsilon(sigma, 10, 10, rounds, delta, accountant="rdp")  # RDP is looser
    # the size of the federation does not matter without sampling
    assert dp_epsilon(sigma, 3, 3, rounds, delta) == pytest.approx(got)


def test_the_sampled_rdp_at_order_two_by_hand() -> None:
    """The RDP accountant's event for k of n without replacement, at order 2, against
    Wang, Balle and Kasiviswanathan's Theorem 27 worked by hand: with q = k/n and the
    Gaussian's RDP eps(2) = 2 / (2 s^2) = 1 / s^2 (s = sigma / 2: sensitivity 2C),
    RDP(2) = log(1 + q^2 min(4 (e^eps(2) - 1), 2 e^eps(2)))."""
    import numpy as np
    from dp_accounting.rdp import RdpAccountant

    from fedad.privacy.accounting import REPLACE_ONE, _sampled

    sigma, k, n = 3.0, 2, 10
    acc = RdpAccountant([2], REPLACE_ONE)
    acc.compose(_sampled(sigma, k, n, 1))
    e2 = 1.0 / (sigma / 2) ** 2
    want = math.log(1 + (k / n) ** 2 * min(4 * math.expm1(e2), 2 * math.exp(e2)))
    assert float(np.asarray(acc._rdp)[0]) == pytest.approx(want, rel=1e-9)


# TensorFlow Privacy's MNIST DP-SGD tutorial (tutorials/README.md, "Select Parameters"):
# N = 60,000, batches of 256 (q = 256/60,000, Poisson), delta = 1e-5, RDP accountant over
# the orders below with the basic RDP-to-DP conversion of its day: (noise, epochs, epsilon).
PUBLISHED = [(1.12, 60, 2.92), (0.6, 30, 9.74), (1.2, 10, 1.20)]
TUTORIAL_ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))


def _poisson_epsilon(sigma: float, q: float, steps: int, delta: float, orders: Any = None) -> float:
    """The Poisson-sampled Gaussian under add/remove adjacency (sensitivity C): what fedad
    reported before, and what DP-SGD's tutorials use."""
    import dp_accounting
    from dp_accounting.pld import PLDAccountant
    from dp_accounting.rdp import RdpAccountant

    acc = RdpAccountant(orders) if orders is not None else PLDAccountant()
    one = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma))
    acc.compose(dp_accounting.SelfComposedDpEvent(one, steps))
    return float(acc.get_epsilon(delta))


@pytest.mark.parametrize(("sigma", "epochs", "published"), PUBLISHED)
def test_the_poisson_reference_reproduces_published_epsilons(
    sigma: float, epochs: int, published: float
) -> None:
    """The Poisson reference the next test compares with is dp-accounting's event as
    published: the tutorial's epsilon under its RDP orders (rel. 0.5%)."""
    import dp_accounting
    import numpy as np
    from dp_accounting.rdp import RdpAccountant

    q, steps, delta = 256 / 60_000, int(epochs * 60_000 / 256), 1e-5
    acc = RdpAccountant(TUTORIAL_ORDERS)
    one = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma))
    acc.compose(dp_accounting.SelfComposedDpEvent(one, steps))
    rdp = np.asarray(acc._rdp)  # the RDP curve itself, before any conversion
    basic = float(np.min(rdp - math.log(delta) / (np.asarray(TUTORIAL_ORDERS) - 1)))
    assert basic == pytest.approx(published, rel=0.005)


@pytest.mark.parametrize(
    ("sigma", "k", "n", "rounds"),
    [(1.0, 5, 10, 10), (1.0, 1, 10, 10), (2.0, 10, 100, 50), (4.0, 30, 1000, 100)],
)
def test_fixed_size_sampling_costs_at_least_the_poisson_figure(
    sigma: float, k: int, n: int, rounds: int
) -> None:
    """What fedad does (k of n without replacement, replace-one) is never accounted below
    Poisson sampling at the same q = k/n under add/remove, the figure it used to report."""
    delta = 1e-5
    fixed = dp_epsilon(sigma, k, n, rounds, delta)
    assert fixed >= _poisson_epsilon(sigma, k / n, rounds, delta)
    assert fixed >= _poisson_epsilon(sigma, k / n, rounds, delta, TUTORIAL_ORDERS)
    # and never above full participation: sampling does not cost privacy
    assert fixed <= dp_epsilon(sigma, n, n, rounds, delta) * (1 + 1e-9)


def test_sampling_amplifies_and_more_rounds_cost_more() -> None:
    """Amplification shows where the sample is small (k/n = 0.01); at k/n = 0.5 the
    without-replacement bound gives none, and full participation's epsilon is reported."""
    full = dp_epsilon(2.0, 1000, 1000, 50, 1e-5)
    sampled = dp_epsilon(2.0, 10, 1000, 50, 1e-5)
    assert sampled < full / 3
    assert dp_epsilon(2.0, 10, 1000, 100, 1e-5) > sampled
    half, used = accounted_epsilon(1.0, 5, 10, 10, 10**-1.1)
    assert half == pytest.approx(dp_epsilon(1.0, 10, 10, 10, 10**-1.1)) and used == "pld"
    assert dp_epsilon(0.0, 1, 10, 10, 1e-5) == math.inf
    assert dp_epsilon(1.0, 1, 10, 0, 1e-5) == 0.0


@pytest.mark.parametrize(("target", "k", "n", "rounds"), [(1.0, 10, 100, 100), (8.0, 4, 4, 20)])
def test_calibration_lands_within_one_percent_of_the_target(
    target: float, k: int, n: int, rounds: int
) -> None:
    sigma = calibrate_noise_multiplier(target, k, n, rounds, 1e-5)
    eps = dp_epsilon(sigma, k, n, rounds, 1e-5)
    assert eps <= target * 1.0001
    assert eps >= 0.99 * target


def test_default_delta_and_bad_arguments() -> None:
    assert default_delta(10) == pytest.approx(10**-1.1)
    assert default_delta(1) == 0.5
    with pytest.raises(ValueError, match="sample_size"):
        dp_epsilon(1.0, 0, 10, 1, 1e-5)
    with pytest.raises(ValueError, match="sample_size"):
        dp_epsilon(1.0, 11, 10, 1, 1e-5)
    with pytest.raises(ValueError, match="delta"):
        dp_epsilon(1.0, 5, 10, 1, 1.0)
    with pytest.raises(ValueError, match="target_epsilon"):
        calibrate_noise_multiplier(0.0, 5, 10, 1, 1e-5)


def test_guarantee_counts_the_releases_it_was_given() -> None:
    from fedad.privacy.accounting import client_level_guarantee

    g = client_level_guarantee(
        1.2, 1.0, 1e-3, 10, {"train": [5, 5, 4], "evaluate": [10]}, ("train",),
        ["train", "evaluate"],
    )  # fmt: skip
    assert g["releases"] == 3 and g["sampling_rate"] == 0.5 and g["dp"]
    assert g["epsilon"] == pytest.approx(dp_epsilon(1.2, 5, 10, 3, 1e-3))
    # against the server, which chose the sample: three releases without sampling
    assert g["epsilon_server"] == pytest.approx(dp_epsilon(1.2, 10, 10, 3, 1e-3))
    assert g["epsilon_server"] >= g["epsilon"]
    assert g["privatised_phases"] == ["train"] and "in the clear" in g["note"]
    everyone = client_level_guarantee(1.2, 1.0, 1e-3, 4, {"train": [4] * 3}, ("train",), [])
    assert everyone["epsilon"] == everyone["epsilon_server"] and everyone["accountant"] == "pld"


def test_unnoised_arrays_mean_no_epsilon() -> None:
    from fedad.privacy.accounting import client_level_guarantee

    g = client_level_guarantee(
        1.0, 1.0, 1e-3, 4, {"train": [4], "bank": [4]}, ("train",), ["bank", "train"]
    )
    assert g["epsilon"] is None and not g["dp"]
    assert g["unprivatised_phases"] == ["bank"] and "not differentially private" in g["note"]
    none = client_level_guarantee(1.0, 1.0, 1e-3, 4, {"bank": [4]}, (), [])
    assert none["epsilon"] is None and none["releases"] == 0
    free = client_level_guarantee(0.0, 1.0, 1e-3, 4, {"train": [4]}, ("train",), ["train"])
    assert free["epsilon"] is None and "no privacy guarantee" in free["note"]


def test_target_epsilon_calibrates_the_run(tmp_path: object) -> None:
    """A run with privacy.target_epsilon: metrics.json's epsilon is the target (within 1%),
    counted from the releases made; the resolved config runs again as written."""
    import json
    from pathlib import Path

    from fedad.config import load_config, parse_config
    from fedad.runner import run_experiment

    root = Path(str(tmp_path))
    raw = {
        "seed": 1, "rounds": 3,
        "data": {"name": "odds_ionosphere", "max_train_per_client": 20},
        "partition": {"scheme": "iid", "clients": 4},
        "engine": {"fraction": 0.5, "progress": False},
        "privacy": {"mechanism": "gaussian", "target_epsilon": 3.0, "delta": 1e-3,
                    "noise_source": "seeded"},  # the second run must draw the same noise
        "methods": [{"name": "fedavg", "detector": "autoencoder", "params": {"local_epochs": 1}}],
    }  # fmt: skip
    data = run_experiment(parse_config(raw), root / "a")
    p = data["methods"]["fedavg"]["privacy"]
    assert p["releases"] == 3 and p["sampling_rate"] == 0.5 and p["delta"] == 1e-3
    assert p["epsilon"] == pytest.approx(3.0, rel=0.01) and p["epsilon"] <= 3.0 + 1e-9
    again = load_config(root / "a" / "config.toml")
    assert again.privacy.target_epsilon is None
    assert again.privacy.noise_multiplier == pytest.approx(p["noise_multiplier"])
    second = run_experiment(again, root / "b")
    assert second["methods"]["fedavg"]["auroc"] == data["methods"]["fedavg"]["auroc"]
    assert json.loads((root / "b" / "metrics.json").read_text())["methods"]["fedavg"]["privacy"][
        "epsilon"
    ] == pytest.approx(p["epsilon"])


def test_target_epsilon_config_errors() -> None:
    from fedad.config import parse_config
    from fedad.core.errors import ConfigError

    base = {"data": {"name": "digits", "normal": [0], "anomaly": [1]},
            "methods": [{"name": "fedavg", "detector": "autoencoder"}]}  # fmt: skip
    with pytest.raises(ConfigError, match="not both"):
        parse_config(base | {"privacy": {"mechanism": "gaussian", "target_epsilon": 1.0,
                                         "noise_multiplier": 1.0}})  # fmt: skip
    with pytest.raises(ConfigError, match="needs mechanism"):
        parse_config(base | {"privacy": {"mechanism": "none", "target_epsilon": 1.0}})
