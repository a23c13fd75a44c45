"""Checks that a client reply is well-formed before the server aggregates it.

A reply is rejected (and the rejection logged by the caller) when it is of the wrong kind, an
expected array is missing, has the wrong shape or dtype, or any numeric array holds NaN/Inf,
or an expected scalar is missing, not a number (a bool is not one) or not finite. A scalar may
be negative (a flow's negative log-likelihood is a legitimate loss), except the scalars in
``non_negative``: by default :data:`NON_NEGATIVE`, the example count ``num_examples`` that
weighs a client's update in every weighted mean, plain or secure. The round goes on with the
replies that pass.

Replies to a model-update phase are also checked together (:func:`outlying_updates`).
Node k's update ``u_k`` is the difference between each floating array it returned and the
array of the same name and shape it was sent (the returned array itself when none was
sent); ``|.|`` is the L2 norm over all of them, computed without overflow; ``w_k`` are the
arrays it was sent. The reply is rejected when ``|u_k|`` is not finite, exceeds
:data:`MAX_UPDATE_GROWTH` ``* max(1, |w_k|)``, or exceeds both ``max(1, |w_k|)`` and
:data:`OUTLIER_RATIO` times the median of the other replies' update norms. Finite but
absurd updates (a ``scaled-update`` attack with ``scale = 1e30``) would otherwise pass and
break every mean; the bounds are far above the spread of honest updates (within a few
times of each other), so boosted updates of ordinary size still get through, as the attack
simulations need. Under SecAgg+ (``privacy.secagg``) the server sees only the sum, and
this check does not apply.

Array shapes are declared per phase by the server program (the ``arrays`` a phase's
``ServerContext.send`` or ``mean`` passes here), one :class:`ArraySpec` per array. A spec's
dimension is either a size or ``None``, a *free* dimension: any size, and it may differ from
reply to reply (a client's share of samples, a variable number of prototypes). The number of
dimensions and the dtype are always fixed. A spec with a free dimension cannot describe the
operand of a mean (arrays of different sizes do not average): declare free dimensions only
for phases whose replies the program reads one by one.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedad.core.messages import Message

MAX_UPDATE_GROWTH = 1e6
"""An update reply is rejected when the L2 norm of its update exceeds this many times
``max(1, norm of the arrays it was sent)`` (:func:`outlying_updates`)."""
OUTLIER_RATIO = 1e4
"""... or when it exceeds this many times the median update norm of the other replies of
the phase, and the norm of the arrays it was sent (or 1)."""

NON_NEGATIVE: frozenset[str] = frozenset({"num_examples"})
"""Scalars that must be finite and non-negative in every reply that declares them:
``num_examples``, the weight of a client's update (:data:`fedad.core.secagg.WEIGHT`); a
negative one would turn a weighted mean into an extrapolation."""


@dataclass(frozen=True, init=False)
class ArraySpec:
    """Expected shape and dtype of one array.

    Built from one entry per dimension: a size (an ``int >= 0``), or ``None`` for a free
    dimension, which matches any size. ``ArraySpec((None, 8), "float32")`` accepts a float32
    array of 8 columns and any number of rows; ``ArraySpec((2, 2), "float32")`` only 2 x 2.

    Stored as ``shape`` (the sizes, 0 where a dimension is free) and ``free`` (the free
    axes), so that code needing a fixed shape (a mean's operand) can keep reading ``shape``
    once it has checked :attr:`fixed`; :attr:`dims` gives the declared form back.
    """

    shape: tuple[int, ...]
    """The sizes; 0 on a free axis (see :attr:`free`)."""
    dtype: str
    free: frozenset[int]
    """The free axes (0-based): any size."""

    def __init__(self, shape: Sequence[int | np.integer[Any] | None], dtype: str) -> None:
        sizes: list[int] = []
        free: set[int] = set()
        for axis, d in enumerate(shape):
            if d is None:
                sizes.append(0)
                free.add(axis)
            elif isinstance(d, int | np.integer) and not isinstance(d, bool) and d >= 0:
                sizes.append(int(d))
            else:
                raise ValueError(f"array spec dimension {d!r}: need a size >= 0 or None (free)")
        object.__setattr__(self, "shape", tuple(sizes))
        object.__setattr__(self, "dtype", str(dtype))
        object.__setattr__(self, "free", frozenset(free))

    def __repr__(self) -> str:
        return f"ArraySpec({self.dims!r}, {self.dtype!r})"

    @classmethod
    def of(cls, a: np.ndarray, free: Sequence[int] = ()) -> ArraySpec:
        """The spec of ``a``: its shape and dtype, with the axes ``free`` (negative ones count
        from the end) left free."""
        return cls(tuple(int(s) for s in a.shape), str(a.dtype)).with_free(*free)

    def with_free(self, *axes: int) -> ArraySpec:
        """The same spec with the dimensions ``axes`` free (``IndexError`` when out of range)."""
        dims = list(self.dims)
        for axis in axes:
            if not -len(dims) <= axis < len(dims):
                raise IndexError(f"axis {axis} out of range for a {len(dims)}-d array spec")
            dims[axis] = None
        return ArraySpec(dims, self.dtype)

    @property
    def dims(self) -> tuple[int | None, ...]:
        """The shape as declared: ``None`` on each free axis."""
        return tuple(None if i in self.free else d for i, d in enumerate(self.shape))

    @property
    def fixed(self) -> bool:
        """Whether every dimension has a size (no free axis), as the operand of a mean needs."""
        return not self.free

    def matches_shape(self, shape: Sequence[int]) -> bool:
        """Whether an array of ``shape`` fits: as many dimensions, each of the declared size
        or free."""
        return len(shape) == len(self.shape) and all(
            i in self.free or int(got) == want
            for i, (got, want) in enumerate(zip(shape, self.shape, strict=True))
        )

    def shape_text(self) -> str:
        """The shape as in a message: ``(any, 8)`` for ``(None, 8)``."""
        dims = ["any" if d is None else str(d) for d in self.dims]
        return f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(dims)})"  # () when 0-d


def spec_of(
    arrays: Mapping[str, np.ndarray], free: Mapping[str, Sequence[int]] | None = None
) -> dict[str, ArraySpec]:
    """The spec every reply carrying these arrays must match.

    ``free`` names, per array, the axes whose size may vary from reply to reply, e.g.
    ``spec_of({"x": x0}, free={"x": [0]})`` for a phase in which each client sends its own
    number of rows.
    """
    free = free or {}
    unknown = sorted(set(free) - set(arrays))
    if unknown:
        raise KeyError(f"free axes given for unknown array(s) {unknown}")
    return {k: ArraySpec.of(np.asarray(v), free.get(k, ())) for k, v in arrays.items()}


def check_reply(
    reply: Message,
    arrays: Mapping[str, ArraySpec] | None = None,
    scalars: Sequence[str] = (),
    kind: str | None = None,
    non_negative: Collection[str] = NON_NEGATIVE,
) -> str | None:
    """Return why ``reply`` is malformed, or ``None`` when it is fine.

    ``arrays``: the arrays the reply must carry, each matching its spec (free dimensions any
    size); ``scalars``: the scalars it must carry, each a finite number, and non-negative if
    it is in ``non_negative``; ``kind``: the reply's kind, if given. Every numeric array in
    the reply, declared or not, must be finite.
    """
    if kind is not None and reply.kind != kind:
        return f"reply kind '{reply.kind}' where '{kind}' was expected"
    for name, spec in (arrays or {}).items():
        if name not in reply.arrays:
            return f"array '{name}' missing"
        a = reply.arrays[name]
        if not spec.matches_shape(a.shape):
            return f"array '{name}' has shape {tuple(a.shape)}, expected {spec.shape_text()}"
        if str(a.dtype) != spec.dtype:
            return f"array '{name}' has dtype {a.dtype}, expected {spec.dtype}"
    for name, a in reply.arrays.items():
        if np.issubdtype(a.dtype, np.number) and not np.all(np.isfinite(a)):
            return f"array '{name}' holds NaN or Inf"
    for name in scalars:
        v = reply.scalars.get(name)
        if not isinstance(v, int | float) or isinstance(v, bool):
            return f"scalar '{name}' missing or not a number"
        if isinstance(v, float) and not math.isfinite(v):  # an int is exact, of any size
            return f"scalar '{name}' = {v} is not finite"
        if v < 0 and name in non_negative:
            return f"scalar '{name}' = {v} is negative"
    return None


def _norm(a: np.ndarray) -> float:
    """The L2 norm of ``a`` in float64, scaled by its largest magnitude so that no square
    overflows; ``inf`` when ``a`` holds a non-finite value."""
    m = float(np.max(np.abs(a))) if a.size else 0.0
    if not math.isfinite(m):
        return math.inf
    if m == 0.0:
        return 0.0
    return m * math.sqrt(float(np.sum(np.square(a / m))))


def update_norms(
    sent: Mapping[str, np.ndarray], returned: Mapping[str, np.ndarray]
) -> tuple[float, float]:
    """``(norm of the update, norm of the arrays sent)`` over the floating arrays of
    ``returned``: each minus the array of ``sent`` of the same name and shape, or as it is
    when ``sent`` has none (see the module docstring)."""
    parts: list[float] = []
    base: list[float] = []
    for name, a in returned.items():
        if not np.issubdtype(a.dtype, np.floating):
            continue
        w = sent.get(name)
        wide = a.astype(np.float64)
        if w is not None and w.shape == a.shape:
            with np.errstate(over="ignore", invalid="ignore"):  # inf is checked by the caller
                wide = wide - w.astype(np.float64)
            base.append(_norm(w.astype(np.float64)))
        parts.append(_norm(wide))
    norm = float(np.hypot.reduce(parts)) if parts else 0.0
    return norm, float(np.hypot.reduce(base)) if base else 0.0


def outlying_updates(sent: Mapping[int, Message], replies: Mapping[int, Message]) -> dict[int, str]:
    """Why each reply of ``replies`` (to the messages ``sent``, by node) with a non-finite or
    absurdly large update is rejected (the rules of the module docstring); the others are
    not in the result."""
    norms = {
        nid: update_norms(sent[nid].arrays if nid in sent else {}, r.arrays)
        for nid, r in replies.items()
    }
    out: dict[int, str] = {}
    for nid, (n, w) in norms.items():
        scale = max(1.0, w)
        others = [m for j, (m, _) in norms.items() if j != nid and math.isfinite(m)]
        median = float(np.median(others)) if others else math.inf
        if not math.isfinite(n):
            out[nid] = "its update's norm is not finite"
        elif n > MAX_UPDATE_GROWTH * scale:
            out[nid] = (
                f"its update's norm {n:.3g} exceeds {MAX_UPDATE_GROWTH:g} x max(1, {w:.3g}), "
                "the norm of the arrays it was sent"
            )
        elif n > scale and n > OUTLIER_RATIO * median:
            out[nid] = (
                f"its update's norm {n:.3g} exceeds {OUTLIER_RATIO:g} x {median:.3g}, the "
                "median of the other replies'"
            )
    return out
