"""The Gaussian mechanism on what clients share.

Client-side update privatisation as in DP-FedAvg (McMahan et al., 2018; Abadi et al., 2016):
a client's update :math:`u = w_k - w` (returned minus received arrays of a model-update
phase) is clipped to L2 norm :math:`C` over all its arrays together,
:math:`\\tilde u = u \\cdot \\min(1, C / \\lVert u \\rVert_2)`, then noised,
:math:`\\hat u = \\tilde u + \\mathcal N(0, \\sigma^2 C^2 I)` with noise multiplier
:math:`\\sigma`, and the client returns :math:`w + \\hat u`. Each client adds its own noise
(local DP). Configured by the ``[privacy]`` section.

The mechanism acts on the phases the method declares as model updates
(:attr:`Requirements.update_phases <fedad.core.algorithm.Requirements.update_phases>`, passed
in as ``phases``) and on no other: a memory bank or a density statistic is not a model
update.

**Where the noise comes from** (``privacy.noise_source``). The guarantee holds against the
server only if the server cannot know the noise: a server that could regenerate
:math:`\\mathcal N(0, \\sigma^2 C^2 I)` would subtract it and see the clipped update
:math:`\\tilde u` itself.

- ``"private"`` (the default): every reply draws fresh noise from the operating system's
  entropy on the client (:func:`private_rng`), which nobody else holds. Two runs of one
  config then differ wherever the noise reaches.
- ``"seeded"``: the noise comes from the run's seed, keyed by (seed, round, client, phase)
  (:func:`noise_rng`): reproducible, bit for bit, across runs and engines. Whoever holds
  the config holds the seed, and the server does: seeded noise **assumes an honest server**
  (a simulation, a benchmark) and gives no protection against it. The ``train`` phase keeps
  the stream it always had; every other phase mixes in the CRC-32 of its name (stable
  across processes, unlike :func:`hash`), so two phases never share noise.

A server that asks for the same round twice gets fresh private noise each time: every
answer is a release, counted as one by :func:`fedad.privacy.accounting.client_level_guarantee`.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from fedad.config import PrivacyConfig
from fedad.core.messages import Message
from fedad.core.rng import rng as seeded_rng

if TYPE_CHECKING:  # fedad.core.algorithm imports fedad.data, which imports fedad.attacks
    from fedad.core.algorithm import ClientState, Handler
    from fedad.core.types import ClientData

TRAIN_PHASE = "train"
DEFAULT_UPDATE_PHASES = (TRAIN_PHASE,)
NOISE_STREAM = 0xD9
"""Key of the privacy noise streams (beside seed, round and client)."""


def clip_l2(update: Mapping[str, np.ndarray], clip: float) -> dict[str, np.ndarray]:
    """Scale all arrays together so their joint L2 norm is at most ``clip``."""
    norm = float(np.sqrt(sum(np.sum(np.square(u, dtype=np.float64)) for u in update.values())))
    factor = min(1.0, clip / norm) if norm > 0 else 1.0
    return {k: np.asarray(u, dtype=np.float64) * factor for k, u in update.items()}


def gaussian_mechanism(
    update: Mapping[str, np.ndarray],
    clip: float,
    noise_multiplier: float,
    rng: np.random.Generator,
) -> dict[str, np.ndarray]:
    """Clip to norm ``clip`` and add :math:`\\mathcal N(0, (\\sigma C)^2)` to every entry."""
    clipped = clip_l2(update, clip)
    std = noise_multiplier * clip
    return {k: u + rng.normal(0.0, std, size=u.shape) for k, u in clipped.items()}


def privatize_reply(
    sent: Mapping[str, np.ndarray], reply: Message, cfg: PrivacyConfig, rng: np.random.Generator
) -> Message:
    """Apply the mechanism to the float arrays an update reply shares with its request."""
    names = [
        k
        for k, w_k in reply.arrays.items()
        if k in sent and sent[k].shape == w_k.shape and np.issubdtype(w_k.dtype, np.floating)
    ]
    if not names:
        return reply
    update = {k: reply.arrays[k].astype(np.float64) - sent[k].astype(np.float64) for k in names}
    noisy = gaussian_mechanism(update, cfg.clip, cfg.noise_multiplier, rng)
    arrays = dict(reply.arrays)
    # noise beyond the dtype's range (noise_multiplier = 1e300) becomes inf here, without a
    # warning: the server rejects the reply as non-finite, and says so
    with np.errstate(over="ignore"):
        for k in names:
            arrays[k] = (sent[k].astype(np.float64) + noisy[k]).astype(reply.arrays[k].dtype)
    return Message(reply.kind, arrays, reply.scalars)


def noise_rng(seed: int, round_no: int, client_id: int, phase: str) -> np.random.Generator:
    """The seeded noise stream of ``client_id``'s ``phase`` reply in round ``round_no``
    (``noise_source = "seeded"``: anyone with the seed regenerates it).

    ``train`` keeps the stream of earlier versions (bit-identical results); any other phase
    adds the CRC-32 of its name as a key, so phases never share noise.
    """
    keys = [seed, round_no, client_id, NOISE_STREAM]
    if phase != TRAIN_PHASE:
        keys.append(zlib.crc32(phase.encode("utf-8")))
    return seeded_rng(*keys)


def private_rng() -> np.random.Generator:
    """A noise stream from fresh operating-system entropy (128 bits through
    :class:`numpy.random.SeedSequence`): nothing the server holds reproduces it."""
    return np.random.default_rng(np.random.SeedSequence())


def private_handler(
    handler: Handler, phase: str, cfg: PrivacyConfig, seed: int, client_id: int
) -> Handler:
    """Wrap the handler of the update phase ``phase`` so that its replies are privatised,
    with noise from ``cfg.noise_source`` (see the module docstring)."""
    seeded = cfg.noise_source == "seeded"

    def private(state: ClientState, data: ClientData, msg: Message) -> Message:
        if seeded:
            rng = noise_rng(seed, int(msg.get("round", 0)), client_id, phase)
        else:
            rng = private_rng()
        return privatize_reply(msg.arrays, handler(state, data, msg), cfg, rng)

    return private


def private_handlers(
    handlers: Mapping[str, Handler],
    cfg: PrivacyConfig,
    seed: int,
    client_id: int,
    phases: Sequence[str] = DEFAULT_UPDATE_PHASES,
) -> dict[str, Handler]:
    """The handlers with every update phase of ``phases`` privatised.

    Phases not in ``phases`` are returned as they are, and so is everything when
    ``mechanism`` is none; a phase of ``phases`` without a handler is skipped.
    """
    out = dict(handlers)
    if cfg.mechanism == "none":
        return out
    for phase in dict.fromkeys(phases):  # each phase once: never noised twice
        if phase in out:
            out[phase] = private_handler(out[phase], phase, cfg, seed, client_id)
    return out
