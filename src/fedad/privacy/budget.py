"""A run's privacy budget: the noise calibrated to ``privacy.target_epsilon`` before the
methods train, and each method's guarantee after (``metrics.json``'s ``privacy``), both
from :mod:`fedad.privacy.accounting` (dp-accounting, imported only by runs that use privacy)."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fedad.config import ExperimentConfig, PrivacyConfig
from fedad.core.algorithm import Algorithm, update_phases

__all__ = ["privacy_guarantee", "with_calibrated_noise"]


def _planned_releases(
    cfg: ExperimentConfig, algorithms: Iterable[Algorithm], n: int
) -> tuple[float, int]:
    """Sampling rate and the most releases any method may make: what calibration assumes."""
    k = min(n, max(cfg.engine.min_clients, math.ceil(cfg.engine.fraction * n)))
    t = max((cfg.rounds * len(update_phases(a)) for a in algorithms), default=0)
    return k / n, t


def with_calibrated_noise(
    cfg: ExperimentConfig, algorithms: Iterable[Algorithm], n: int
) -> ExperimentConfig:
    """``cfg`` with ``privacy.noise_multiplier`` set from ``privacy.target_epsilon``: the
    smallest noise that keeps every method's planned releases (``rounds`` x its privatised
    phases, at the sampling rate of ``engine.fraction``) within the target at
    ``privacy.delta`` (default :func:`~fedad.privacy.accounting.default_delta`). The result names
    the noise and delta and no target, so that the resolved config runs again as written."""
    p = cfg.privacy
    if p.target_epsilon is None:
        return cfg
    # dp-accounting (with scipy.signal and absl) is imported only by runs that use privacy
    from fedad.privacy.accounting import calibrate_noise_multiplier, default_delta

    q, t = _planned_releases(cfg, list(algorithms), n)
    delta = p.delta if p.delta is not None else default_delta(n)
    sigma = calibrate_noise_multiplier(p.target_epsilon, round(q * n), n, t, delta)
    logging.getLogger("fedad").info(
        "privacy: noise_multiplier %.4g for epsilon %g, delta %.3g", sigma, p.target_epsilon, delta
    )
    data = p.model_dump(exclude={"target_epsilon"}) | {"noise_multiplier": sigma, "delta": delta}
    return cfg.model_copy(update={"privacy": PrivacyConfig(**data)})


def privacy_guarantee(
    cfg: ExperimentConfig,
    algorithm: Algorithm,
    releases: Mapping[str, list[int]],
    array_replies: Sequence[str],
    n: int,
) -> dict[str, Any]:
    """``metrics.json``'s ``privacy`` of one method whose run made ``releases`` (per phase,
    the node count of each send) and got arrays back in ``array_replies`` (a run's
    :class:`~fedad.fl.drive.RunOutcome` holds both;
    :func:`fedad.privacy.accounting.client_level_guarantee`)."""
    from fedad.privacy.accounting import client_level_guarantee, default_delta

    p = cfg.privacy
    return client_level_guarantee(
        p.noise_multiplier,
        p.clip,
        p.delta if p.delta is not None else default_delta(n),
        n,
        releases,
        update_phases(algorithm),
        array_replies,
    )
