"""Privacy accounting for the Gaussian mechanism on client updates (client-level DP).

DP-FedAvg (McMahan et al., 2018): each round the server samples :math:`k` of the :math:`n`
clients, a sampled client clips its update to L2 norm :math:`C` and adds Gaussian noise of
standard deviation :math:`\\sigma C` (:mod:`fedad.privacy.mechanism`, on the client), and :math:`T`
such releases compose.

**Adjacency and sensitivity.** fedad samples a *fixed number* :math:`k` of clients per
round, uniformly without replacement (:meth:`fedad.core.context.ServerContext.sample`), so
the number of clients :math:`n` is public and neighbouring federations differ in one
client's whole data set, replaced by any other (replace-one). A client's clipped update
then moves by up to :math:`2C`: each release is a Gaussian mechanism of noise multiplier
:math:`\\sigma / 2` in units of that sensitivity, and the run is

.. math::
    \\mathcal M = (\\mathrm{WOR}_{k/n} \\circ \\mathrm{Gauss}_{\\sigma/2})^{\\otimes T}.

**Accountants** (Google's ``dp-accounting``, its own events; nothing here computes a
privacy loss by hand). Sampling without replacement under replace-one is
``SampledWithoutReplacementDpEvent`` in the RDP accountant (Wang, Balle and
Kasiviswanathan, AISTATS 2019, Theorem 27); the PLD accountant has no such event.
Sampling never costs privacy (every release is a mixture of the unsampled mechanism and a
release without the client), so the unsampled bound, :math:`T` Gaussian releases with
sensitivity :math:`2C` (the PLD accountant under ``REPLACE_ONE``, tight), holds too, and
:func:`dp_epsilon` reports the smaller of the two. At a large share :math:`k/n` Theorem 27
gives no gain and :math:`\\varepsilon` is that of full participation; at :math:`k = n` it
is exactly that (no sampling, no amplification).

This replaces accounting the fixed-size sample as Poisson sampling at rate :math:`k/n`
under add/remove adjacency (sensitivity :math:`C`), the common shortcut, which understates
:math:`\\varepsilon` for what fedad does: Poisson sampling would need a varying number of
clients per round, and add/remove adjacency a secret federation size.

**Who the guarantee holds against.** The noise is drawn on the client (privately unless
``privacy.noise_source = "seeded"``, see :mod:`fedad.privacy.mechanism`), so the mechanism holds
against the server as well as against anyone who sees the models. Amplification by
sampling, though, needs the sample to be secret, and the server chose it: against the
server a client's guarantee is that of the releases it took part in, at worst all
:math:`T` unsampled (``epsilon_server`` of :func:`client_level_guarantee`; equal to
``epsilon`` when every client takes part in every round).

:func:`default_delta` is :math:`\\delta = n^{-1.1}` for :math:`n` clients (McMahan et al.'s
rule: :math:`\\delta` below :math:`1/n`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import dp_accounting
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

__all__ = [
    "accounted_epsilon",
    "calibrate_noise_multiplier",
    "client_level_guarantee",
    "default_delta",
    "dp_epsilon",
]

Accountant = Literal["pld", "rdp"]
REPLACE_ONE = dp_accounting.NeighboringRelation.REPLACE_ONE
MIN_SIGMA = 0.3
"""Smallest noise multiplier the calibration returns (epsilon is tens or more below it)."""
PLD_PRECISION = 1e-3
"""The PLD accountant's loss grid, relative to the epsilon sought (at least 1e-3); its
epsilon errs upwards, by far less than the grid for the Gaussian."""


def default_delta(num_clients: int) -> float:
    """:math:`\\delta = n^{-1.1}` (at most 0.5, for a federation of one client)."""
    if num_clients < 1:
        raise ValueError("num_clients must be at least 1")
    return float(min(0.5, float(num_clients) ** -1.1))


def _sampled(noise_multiplier: float, k: int, n: int, releases: int) -> dp_accounting.DpEvent:
    """For the RDP accountant: ``releases`` samples of ``k`` of ``n`` without replacement,
    each a Gaussian of sensitivity :math:`2C` (this accountant takes the noise multiplier in
    units of the sensitivity: :math:`\\sigma C / 2C`). At ``k = n``: no sampling."""
    one = dp_accounting.GaussianDpEvent(noise_multiplier / 2.0)
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.SampledWithoutReplacementDpEvent(n, k, one), releases
    )


def _unsampled(noise_multiplier: float, releases: int) -> dp_accounting.DpEvent:
    """For the PLD accountant under ``REPLACE_ONE``: ``releases`` Gaussian releases (this
    accountant takes the noise in units of one client's norm bound :math:`C` and doubles
    the sensitivity itself)."""
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.GaussianDpEvent(noise_multiplier), releases
    )


def _rdp() -> dp_accounting.PrivacyAccountant:
    return RdpAccountant(neighboring_relation=REPLACE_ONE)


def _pld(scale: float) -> Callable[[], dp_accounting.PrivacyAccountant]:
    """PLD accountants whose loss grid is :data:`PLD_PRECISION` of ``scale`` (an epsilon
    at least the one sought): dp-accounting's fixed 1e-4 costs minutes at small noise."""
    interval = PLD_PRECISION * max(1.0, scale)
    return lambda: PLDAccountant(REPLACE_ONE, value_discretization_interval=interval)


def _epsilon(
    fresh: Callable[[], dp_accounting.PrivacyAccountant], event: Any, delta: float
) -> float:
    acc = fresh()
    acc.compose(event)
    return float(acc.get_epsilon(delta))


def _check(sample_size: int, num_clients: int, releases: int, delta: float) -> None:
    if num_clients < 1:
        raise ValueError(f"num_clients must be at least 1, got {num_clients}")
    if not 0 < sample_size <= num_clients:
        raise ValueError(f"sample_size must be in [1, {num_clients}], got {sample_size}")
    if releases < 0:
        raise ValueError(f"releases must be >= 0, got {releases}")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")


def accounted_epsilon(
    noise_multiplier: float,
    sample_size: int,
    num_clients: int,
    releases: int,
    delta: float,
    accountant: Accountant = "pld",
) -> tuple[float, Accountant]:
    """:func:`dp_epsilon` and the accountant whose bound it is.

    The RDP accountant bounds the sampled mechanism; with ``accountant = "pld"`` the PLD
    accountant bounds it without sampling (a valid bound too, tight, and the only one at
    ``sample_size = num_clients``); the smaller wins."""
    _check(sample_size, num_clients, releases, delta)
    if releases == 0:
        return 0.0, accountant
    if noise_multiplier <= 0.0:
        return math.inf, accountant
    k, n, t = sample_size, num_clients, releases
    full_rdp = _epsilon(_rdp, _sampled(noise_multiplier, n, n, t), delta)  # closed form
    found: list[tuple[float, Accountant]] = []
    if accountant == "rdp" or k < n:
        found.append((_epsilon(_rdp, _sampled(noise_multiplier, k, n, t), delta), "rdp"))
    if accountant == "pld":
        found.append((_epsilon(_pld(full_rdp), _unsampled(noise_multiplier, t), delta), "pld"))
    return min(found)


def dp_epsilon(
    noise_multiplier: float,
    sample_size: int,
    num_clients: int,
    releases: int,
    delta: float,
    accountant: Accountant = "pld",
) -> float:
    """The :math:`\\varepsilon` at :math:`\\delta` of ``releases`` Gaussian releases, each
    to ``sample_size`` of ``num_clients`` clients sampled without replacement
    (:func:`accounted_epsilon`, the module docstring). ``inf`` without noise, 0 without
    releases."""
    eps, _ = accounted_epsilon(
        noise_multiplier, sample_size, num_clients, releases, delta, accountant
    )
    return eps


def calibrate_noise_multiplier(
    target_epsilon: float,
    sample_size: int,
    num_clients: int,
    releases: int,
    delta: float,
    accountant: Accountant = "pld",
) -> float:
    """The smallest noise multiplier whose :func:`dp_epsilon` is at most ``target_epsilon``
    (found by ``dp_accounting.calibrate_dp_mechanism``, to 0.1% of the multiplier).

    :func:`dp_epsilon` is the smaller of bounds that each fall as the noise grows, so the
    answer is the smaller of the multipliers calibrated to each bound."""
    _check(sample_size, num_clients, releases, delta)
    if target_epsilon <= 0.0:
        raise ValueError(f"target_epsilon must be positive, got {target_epsilon}")
    if releases == 0:
        return 0.0
    k, n, t = sample_size, num_clients, releases
    # the unsampled RDP bound: cheap at any noise, never below PLD's, so it brackets PLD's
    best = upper = _calibrate(_rdp, lambda s: _sampled(s, n, n, t), target_epsilon, delta)
    if accountant == "pld" and upper > MIN_SIGMA:
        # the PLD search stays clear of tiny multipliers, whose loss distributions are huge
        lower = max(MIN_SIGMA, upper / 4)
        pld = _pld(target_epsilon)
        if _epsilon(pld, _unsampled(lower, t), delta) <= target_epsilon:
            best = lower
        else:
            bracket = dp_accounting.ExplicitBracketInterval(lower, upper)
            best = _calibrate(pld, lambda s: _unsampled(s, t), target_epsilon, delta, bracket)
    # the sampled bound (0.3 s an evaluation) lowers the noise only where it is below the
    # target at ``best``; then the answer lies in [MIN_SIGMA, best]
    if k == n or _epsilon(_rdp, _sampled(best, k, n, t), delta) >= target_epsilon:
        return best
    if _epsilon(_rdp, _sampled(MIN_SIGMA, k, n, t), delta) <= target_epsilon:
        return MIN_SIGMA
    bracket = dp_accounting.ExplicitBracketInterval(MIN_SIGMA, best)
    event = lambda s: _sampled(s, k, n, t)  # noqa: E731
    return _calibrate(_rdp, event, target_epsilon, delta, bracket, tol=1e-3 * best)


def _calibrate(
    fresh: Callable[[], dp_accounting.PrivacyAccountant],
    event: Callable[[float], dp_accounting.DpEvent],
    target_epsilon: float,
    delta: float,
    bracket: dp_accounting.ExplicitBracketInterval
    | dp_accounting.LowerEndpointAndGuess
    | None = None,
    tol: float = 1e-4,
) -> float:
    return float(
        dp_accounting.calibrate_dp_mechanism(
            fresh,
            lambda s: event(float(s)),
            target_epsilon,
            delta,
            bracket_interval=bracket or dp_accounting.LowerEndpointAndGuess(MIN_SIGMA, 1.0),
            tol=tol,
        )
    )


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
    arrays. The accounted mechanism is :math:`T` Gaussian releases to :math:`k` of the
    :math:`n` clients sampled without replacement (:func:`dp_epsilon`), where :math:`T`
    counts every send of a privatised phase and :math:`k` is the most nodes one of those
    sends reached (conservative when it varies). ``epsilon_server`` is the guarantee
    against the server, which knows whom it sampled: :math:`T` releases without sampling.

    A method whose clients also send arrays in a phase that is not privatised (memory
    banks, density statistics, prototypes) gives the server un-noised data: it is **not**
    :math:`\\varepsilon`-DP, and ``epsilon`` is ``None`` with ``dp = False`` and the phases
    named, rather than a number. Scalars of the replies (example counts, losses) are sent in
    the clear by every method and are not covered; ``note`` says so.
    """
    sends = [n for p in privatised for n in releases.get(p, [])]
    t = len(sends)
    k = min(num_clients, max(sends)) if sends else 0
    leaks = [p for p in array_replies if p not in privatised and p != EVALUATE_PHASE]
    out: dict[str, Any] = {
        "mechanism": "gaussian",
        "noise_multiplier": noise_multiplier,
        "clip": clip,
        "delta": delta,
        "sampling_rate": k / num_clients,
        "sampling": "fixed size without replacement",
        "neighbouring": "replace one client's data",
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
        out |= {
            "epsilon": None,
            "dp": False,
            "note": "the method sent no model update for [privacy] to noise",
        }
        return out
    eps, used = accounted_epsilon(noise_multiplier, k, num_clients, t, delta, accountant)
    server = eps if k == num_clients else dp_epsilon(noise_multiplier, 1, 1, t, delta, accountant)
    finite = math.isfinite(eps)
    out |= {
        "epsilon": eps if finite else None,
        "epsilon_server": server if finite else None,
        "accountant": used,
        "dp": finite,
        "note": (
            f"client-level ({eps:.3g}, {delta:.2g})-DP for the update arrays of "
            f"{', '.join(out['privatised_phases'])} over {t} releases to {k} of "
            f"{num_clients} clients (against the server, which chose them: "
            f"{server:.3g}); reply scalars (example counts, losses) are sent in the clear"
            if finite
            else "no noise (noise_multiplier = 0): no privacy guarantee"
        ),
    }
    return out
