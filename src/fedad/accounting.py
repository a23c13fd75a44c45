"""Privacy accounting for the Gaussian mechanism on client updates (client-level DP).

DP-FedAvg (McMahan et al., 2018): each round a client takes part with probability
:math:`q`, its update is clipped to L2 norm :math:`C` and the released aggregate carries
Gaussian noise of standard deviation :math:`\\sigma C` for that client's contribution
(:mod:`fedad.privacy` adds it on the client, so the guarantee holds against the server
too). Changing one client's whole data set changes its clipped update by at most :math:`C`
(add/remove adjacency), so each release is a Gaussian mechanism of noise multiplier
:math:`\\sigma`, amplified by the sampling, and :math:`T` releases compose:

.. math::
    \\mathcal M = \\big(\\mathrm{PoissonSample}_q \\circ \\mathrm{Gauss}_\\sigma\\big)^{\\otimes T}.

Its :math:`(\\varepsilon, \\delta)` comes from the privacy-loss-distribution (PLD) accountant
of Google's ``dp-accounting`` (tighter than RDP; both are available). fedad samples a fixed
number of clients per round without replacement; it is accounted as Poisson sampling with
the same rate :math:`q = k/n`, the usual practice for DP-FedAvg, and exact when
:math:`q = 1` (every client every round, no amplification).

:func:`default_delta` is :math:`\\delta = n^{-1.1}` for :math:`n` clients (McMahan et al.'s
rule: :math:`\\delta` below :math:`1/n`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import dp_accounting
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

__all__ = [
    "calibrate_noise_multiplier",
    "client_level_guarantee",
    "default_delta",
    "dp_epsilon",
]

Accountant = Literal["pld", "rdp"]
MIN_SIGMA = 0.3
"""Smallest noise multiplier the calibration returns (epsilon is tens or more below it)."""


def default_delta(num_clients: int) -> float:
    """:math:`\\delta = n^{-1.1}` (at most 0.5, for a federation of one client)."""
    if num_clients < 1:
        raise ValueError("num_clients must be at least 1")
    return float(min(0.5, float(num_clients) ** -1.1))


def _event(noise_multiplier: float, sampling_rate: float, releases: int) -> dp_accounting.DpEvent:
    one: dp_accounting.DpEvent = dp_accounting.GaussianDpEvent(noise_multiplier)
    if sampling_rate < 1.0:
        one = dp_accounting.PoissonSampledDpEvent(sampling_rate, one)
    return dp_accounting.SelfComposedDpEvent(one, releases)


def _accountant(kind: Accountant) -> dp_accounting.PrivacyAccountant:
    return PLDAccountant() if kind == "pld" else RdpAccountant()


def _check(sampling_rate: float, releases: int, delta: float) -> None:
    if not 0.0 < sampling_rate <= 1.0:
        raise ValueError(f"sampling_rate must be in (0, 1], got {sampling_rate}")
    if releases < 0:
        raise ValueError(f"releases must be >= 0, got {releases}")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")


def dp_epsilon(
    noise_multiplier: float,
    sampling_rate: float,
    releases: int,
    delta: float,
    accountant: Accountant = "pld",
) -> float:
    """The :math:`\\varepsilon` of ``releases`` Poisson-sampled Gaussian releases at
    :math:`\\delta` (see the module docstring). ``inf`` without noise, 0 without releases."""
    _check(sampling_rate, releases, delta)
    if releases == 0:
        return 0.0
    if noise_multiplier <= 0.0:
        return math.inf
    acc = _accountant(accountant)
    acc.compose(_event(noise_multiplier, sampling_rate, releases))
    return float(acc.get_epsilon(delta))


def calibrate_noise_multiplier(
    target_epsilon: float,
    sampling_rate: float,
    releases: int,
    delta: float,
    accountant: Accountant = "pld",
) -> float:
    """The smallest noise multiplier whose :math:`\\varepsilon` is at most ``target_epsilon``
    (found by ``dp_accounting.calibrate_dp_mechanism``, to 0.1% of the multiplier)."""
    _check(sampling_rate, releases, delta)
    if target_epsilon <= 0.0:
        raise ValueError(f"target_epsilon must be positive, got {target_epsilon}")
    if releases == 0:
        return 0.0

    def calibrate(kind: Accountant, bracket: dp_accounting.ExplicitBracketInterval | None) -> float:
        return float(
            dp_accounting.calibrate_dp_mechanism(
                lambda: _accountant(kind),
                lambda s: _event(float(s), sampling_rate, releases),
                target_epsilon,
                delta,
                bracket_interval=bracket or dp_accounting.LowerEndpointAndGuess(MIN_SIGMA, 1.0),
                tol=1e-4,
            )
        )

    # RDP is cheap at any noise and never below PLD, so its answer bounds PLD's from above;
    # the PLD search then stays clear of tiny multipliers, whose loss distributions are huge
    upper = calibrate("rdp", None)
    if accountant == "rdp" or upper <= MIN_SIGMA:
        return upper
    lower = max(MIN_SIGMA, upper / 4)
    if dp_epsilon(lower, sampling_rate, releases, delta) <= target_epsilon:
        return lower
    return calibrate("pld", dp_accounting.ExplicitBracketInterval(lower, upper))


EVALUATE_PHASE = "evaluate"


def client_level_guarantee(
    noise_multiplier: float,
    clip: float,
    delta: float,
    num_clients: int,
    releases: Mapping[str, Sequence[int]],
    privatised: Sequence[str],
    array_replies: Sequence[str],
    accountant: Accountant = "pld",
) -> dict[str, Any]:
    """The client-level :math:`(\\varepsilon, \\delta)` of one method's run, as measured.

    ``releases[phase]`` lists, for each time the server sent ``phase``, how many of the
    ``num_clients`` nodes got it; ``privatised`` are the phases ``[privacy]`` noised (the
    method's model-update phases); ``array_replies`` the phases whose replies carried
    arrays. The accounted mechanism is :math:`T` Gaussian releases with sampling rate
    :math:`q`, where :math:`T` counts every send of a privatised phase and :math:`q` is the
    largest share of nodes one of those sends reached (conservative when it varies).

    A method whose clients also send arrays in a phase that is not privatised (memory
    banks, density statistics, prototypes) gives the server un-noised data: it is **not**
    :math:`\\varepsilon`-DP, and ``epsilon`` is ``None`` with ``dp = False`` and the phases
    named, rather than a number. Scalars of the replies (example counts, losses) are sent in
    the clear by every method and are not covered; ``note`` says so.
    """
    sends = [n for p in privatised for n in releases.get(p, [])]
    t = len(sends)
    q = min(1.0, max(sends) / num_clients) if sends else 0.0
    leaks = [p for p in array_replies if p not in privatised and p != EVALUATE_PHASE]
    out: dict[str, Any] = {
        "mechanism": "gaussian",
        "noise_multiplier": noise_multiplier,
        "clip": clip,
        "delta": delta,
        "sampling_rate": q,
        "releases": t,
        "privatised_phases": [p for p in privatised if p in releases],
        "unprivatised_phases": leaks,
        "accountant": accountant,
    }
    if leaks:
        out |= {
            "epsilon": None,
            "dp": False,
            "note": f"not differentially private: the clients also send un-noised arrays "
            f"in {', '.join(leaks)}",
        }
        return out
    if t == 0:
        out |= {"epsilon": None, "dp": False,
                "note": "the method sent no model update for [privacy] to noise"}  # fmt: skip
        return out
    eps = dp_epsilon(noise_multiplier, q, t, delta, accountant)
    out |= {
        "epsilon": eps if math.isfinite(eps) else None,
        "dp": math.isfinite(eps),
        "note": (
            f"client-level ({eps:.3g}, {delta:.2g})-DP for the update arrays of "
            f"{', '.join(out['privatised_phases'])} over {t} releases at q = {q:.3g}; "
            "reply scalars (example counts, losses) are sent in the clear"
            if math.isfinite(eps)
            else "no noise (noise_multiplier = 0): no privacy guarantee"
        ),
    }
    return out
