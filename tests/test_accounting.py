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


# TensorFlow Privacy's MNIST DP-SGD tutorial (tutorials/README.md, "Select Parameters"):
# N = 60,000, batches of 256 (q = 256/60,000, Poisson), delta = 1e-5, RDP accountant over
# the orders below with the basic RDP-to-DP conversion of its day: (noise, epochs, epsilon).
PUBLISHED = [(1.12, 60, 2.92), (0.6, 30, 9.74), (1.2, 10, 1.20)]
TUTORIAL_ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))


@pytest.mark.parametrize(("sigma", "epochs", "published"), PUBLISHED)
def test_the_sampled_gaussian_reproduces_published_epsilons(
    sigma: float, epochs: int, published: float
) -> None:
    """Our event (Poisson-sampled Gaussian, composed ``steps`` times) gives the published
    epsilon under the tutorial's RDP orders and conversion (eps = min over orders of
    rdp - log(delta) / (order - 1)); ``dp_epsilon``, with dp-accounting's tighter
    conversion (RDP) or PLD, stays at or below it."""
    import numpy as np
    from dp_accounting.rdp import RdpAccountant

    from fedad.accounting import _event

    q, steps, delta = 256 / 60_000, int(epochs * 60_000 / 256), 1e-5
    acc = RdpAccountant(TUTORIAL_ORDERS)
    acc.compose(_event(sigma, q, steps))
    rdp = np.asarray(acc._rdp)  # the RDP curve itself, before any conversion
    basic = float(np.min(rdp - math.log(delta) / (np.asarray(TUTORIAL_ORDERS) - 1)))
    assert basic == pytest.approx(published, rel=0.005)
    tight = dp_epsilon(sigma, q, steps, delta, accountant="rdp")
    assert 0.75 * published < tight <= published
    assert dp_epsilon(sigma, q, steps, delta) <= tight  # PLD is tighter still


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


def test_guarantee_counts_the_releases_it_was_given() -> None:
    from fedad.accounting import client_level_guarantee

    g = client_level_guarantee(
        1.2, 1.0, 1e-3, 10, {"train": [5, 5, 4], "evaluate": [10]}, ("train",),
        ["train", "evaluate"],
    )  # fmt: skip
    assert g["releases"] == 3 and g["sampling_rate"] == 0.5 and g["dp"]
    assert g["epsilon"] == pytest.approx(dp_epsilon(1.2, 0.5, 3, 1e-3))
    assert g["privatised_phases"] == ["train"] and "in the clear" in g["note"]


def test_unnoised_arrays_mean_no_epsilon() -> None:
    from fedad.accounting import client_level_guarantee

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
    from fedad.errors import ConfigError

    base = {"data": {"name": "digits", "normal": [0], "anomaly": [1]},
            "methods": [{"name": "fedavg", "detector": "autoencoder"}]}  # fmt: skip
    with pytest.raises(ConfigError, match="not both"):
        parse_config(base | {"privacy": {"mechanism": "gaussian", "target_epsilon": 1.0,
                                         "noise_multiplier": 1.0}})  # fmt: skip
    with pytest.raises(ConfigError, match="needs mechanism"):
        parse_config(base | {"privacy": {"mechanism": "none", "target_epsilon": 1.0}})
