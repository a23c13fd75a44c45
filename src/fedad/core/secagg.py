"""SecAgg+ as both engines share it: the settings, what a client's reply must be, and its
size on the wire.

Secure aggregation (SecAgg+, Bell et al., CCS 2020) lets the server learn the weighted mean
of the clients' vectors without seeing any single one; the server context asks a
:class:`~fedad.core.grid.SecureGrid` for it with these settings. How the mean is computed
(Flower's quantisation, the modulus, the choice of :math:`R` and the error bound):
:mod:`fedad.fl.secagg`; the Flower workflow that masks it: :mod:`fedad.fl.flower.secagg`.

Because the server sees only the sum, it cannot check single replies: each client checks
its own (:func:`check_secure_reply`) before masking, and a client that fails the check
drops out, which SecAgg+ tolerates down to the reconstruction threshold.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from fedad.core.errors import ConfigError
from fedad.core.messages import SCALAR_BYTES, Message, Scalar, payload_nbytes
from fedad.core.rng import rng as seeded_rng
from fedad.core.validate import ArraySpec, check_reply

if TYPE_CHECKING:
    from fedad.config import PrivacyConfig

MIN_DEGREE = 15
"""With ``secagg_shares = "auto"`` a client shares its keys with at least this many clients
(itself included), so federations up to this size share with everybody."""
MODULUS = 2**32
"""Flower's ``modulus_range``: masks and sums live modulo :math:`2^{32}`."""
MAX_QUANTIZATION = 2**30
"""Upper end of :math:`R` (quantized entries must fit Flower's int32 rounding)."""
WEIGHT = "num_examples"
"""The reply scalar that weighs a client in a mean."""


@dataclass(frozen=True)
class SecAggSettings:
    """SecAgg+ parameters of a run (``[privacy]`` ``secagg_*``)."""

    clip: float = 8.0
    shares: int | float | str = "auto"
    threshold: int | float = 0.5

    @classmethod
    def from_config(cls, cfg: PrivacyConfig | None) -> SecAggSettings | None:
        """The settings when ``privacy.secagg`` is on, else ``None``."""
        if cfg is None or not cfg.secagg:
            return None
        return cls(cfg.secagg_clip, cfg.secagg_shares, cfg.secagg_threshold)

    def flower_shares(self, n: int) -> int | float:
        """``num_shares`` for Flower's workflow with ``n`` sampled clients.

        ``"auto"``: :math:`k = \\max(15, 2\\lceil\\log_2 n\\rceil + 1)` shares, at most
        :math:`n`: everybody (SecAgg) up to 15 clients, then SecAgg+'s logarithmic degree
        (15 up to 128 clients, 21 at 1,000). The
        cost is Flower's Shamir sharing: about :math:`n k t` operations per phase for degree
        :math:`k` and threshold :math:`t` (docs/performance.md, "SecAgg+": 100 clients at
        degree 15 take 8.4 times a plain round in simulation).
        """
        if self.shares != "auto":
            return self.shares  # type: ignore[return-value]
        k = max(MIN_DEGREE, 2 * math.ceil(math.log2(n)) + 1)
        return 1.0 if k >= n else k

    def protocol_sizes(self, n: int) -> tuple[int, int]:
        """(shares per client, reconstruction threshold) for ``n`` sampled clients.

        The rule of Flower's ``SecAggPlusWorkflow.setup_stage``, so both engines agree.
        """
        param = self.flower_shares(n)
        if isinstance(param, float):
            shares = round(param * n)
            if shares < n and shares % 2 == 0:
                shares += 1
            if shares <= 2:
                shares = n
        else:
            shares = param
        if isinstance(self.threshold, float):
            threshold = max(round(self.threshold * shares), 2)
        else:
            threshold = self.threshold
        return shares, threshold


def require_flwr_for_secagg() -> None:
    """SecAgg+ is Flower's: a one-line error when ``flwr`` is not installed."""
    import importlib.util

    if importlib.util.find_spec("flwr") is None:
        raise ConfigError(
            "privacy.secagg = true needs Flower (flwr), which is not installed",
            "install fedad's optional flower extra, see docs/deployment.md",
        )


def quantization_range(n: int) -> int:
    """:math:`R`: the largest power of two :math:`\\le 2^{30}` with :math:`nR < 2^{32}`."""
    if n < 1:
        raise ValueError("need at least one client")
    return min(MAX_QUANTIZATION, 1 << (((MODULUS - 1) // n).bit_length() - 1))


def rounding_seed(seed: int, round_no: int, client_id: int, phase: str) -> int:
    """The seed of a client's stochastic rounding in one phase (a pure function)."""
    stream = seeded_rng(seed, round_no, client_id, zlib.crc32(phase.encode()), 0x5EC)
    return int(stream.integers(0, 2**32 - 1))


@dataclass
class SecureOutcome:
    """What a grid's ``secure_mean`` returns to the server context."""

    mean: list[np.ndarray] | None = None
    """The weighted mean as flattened float64 vectors (``None`` when the protocol halted)."""
    replies: dict[int, Message] = field(default_factory=dict)
    """Per contributing client: its reply's scalars (sent in the clear), no arrays."""
    rejected: dict[int, str] = field(default_factory=dict)
    """Clients whose reply failed :func:`check_secure_reply`, and why."""
    halted: str | None = None
    """Why no mean came out, if none did."""
    overhead_bytes: int = 0
    """Bytes of the key agreement and share traffic (measured on Flower; 0 in-process)."""


# -------------------------------------------------------------------------- the replies


def check_secure_reply(
    reply: Message,
    arrays: Mapping[str, ArraySpec],
    scalars: Sequence[str],
    kind: str,
    max_weight: float,
) -> str | None:
    """Why a client must not contribute ``reply`` to a secure mean, or ``None``.

    Beyond :func:`~fedad.core.validate.check_reply`: exactly the expected arrays, all of them
    floating point, and an integer weight in ``[0, max_weight]``.
    """
    why = check_reply(reply, arrays, [WEIGHT, *scalars], kind=kind)
    if why is not None:
        return why
    extra = sorted(set(reply.arrays) - set(arrays))
    if extra:
        return f"unexpected array(s) {extra} in a secure mean"
    for name, spec in arrays.items():
        if not np.issubdtype(np.dtype(spec.dtype), np.floating):
            return f"array '{name}' is {spec.dtype}; a secure mean takes floating point only"
    w = float(reply.scalars[WEIGHT])  # a number: check_reply made sure
    if w != int(w):
        return f"weight {WEIGHT} = {w} is not a whole number"
    if w > max_weight:
        return f"weight {WEIGHT} = {w} exceeds the announced bound {max_weight:g}"
    return None


def flatten(arrays: Mapping[str, np.ndarray], names: Sequence[str]) -> list[np.ndarray]:
    """The arrays ``names`` in order, each flattened to 1-D float64.

    float64 because the quantizer computes in the input's precision: with float32 its own
    rounding (:math:`2^{-24}` relative) would be coarser than the grid it rounds to.
    """
    return [np.ravel(np.asarray(arrays[n], dtype=np.float64)) for n in names]


def unflatten(
    vectors: Sequence[np.ndarray], spec: Mapping[str, ArraySpec]
) -> dict[str, np.ndarray]:
    """The named arrays back from :func:`flatten` ed vectors (shape and dtype of ``spec``)."""
    out: dict[str, np.ndarray] = {}
    for (name, s), v in zip(spec.items(), vectors, strict=True):
        out[name] = np.asarray(v).reshape(s.shape).astype(s.dtype, copy=False)
    return out


def reply_nbytes(spec: Mapping[str, ArraySpec], reply_scalars: Mapping[str, Scalar]) -> int:
    """Payload of one secure reply: its masked vector (an int64 per entry, plus the weight
    factor) and its scalars, which travel in the clear (:func:`payload_nbytes`)."""
    entries = sum(int(np.prod(s.shape, dtype=np.int64)) for s in spec.values())
    return SCALAR_BYTES * (entries + 1) + payload_nbytes(reply_scalars.values())
