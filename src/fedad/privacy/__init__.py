"""Differential privacy of what clients share, by job: :mod:`.mechanism` (the Gaussian
mechanism a client applies to its model updates), :mod:`.accounting` (the client-level
(epsilon, delta) of a run, with dp-accounting), :mod:`.budget` (the noise calibrated to a
target epsilon before a run, and the guarantee ``metrics.json`` reports after it). Secure
aggregation, the other protection: :mod:`fedad.core.secagg`.

The mechanism's names are importable from here as well (``from fedad.privacy import
privatize_reply``)."""

from fedad.privacy.mechanism import (
    DEFAULT_UPDATE_PHASES,
    NOISE_STREAM,
    TRAIN_PHASE,
    clip_l2,
    gaussian_mechanism,
    noise_rng,
    private_handler,
    private_handlers,
    private_rng,
    privatize_reply,
)

__all__ = [
    "DEFAULT_UPDATE_PHASES",
    "NOISE_STREAM",
    "TRAIN_PHASE",
    "clip_l2",
    "gaussian_mechanism",
    "noise_rng",
    "private_handler",
    "private_handlers",
    "private_rng",
    "privatize_reply",
]
