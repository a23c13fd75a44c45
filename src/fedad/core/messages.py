"""Typed messages between the server program and client handlers.

A :class:`Message` is a frozen record of named numpy arrays and named scalars, tagged with
the phase it belongs to (``kind``: ``"train"``, ``"stats"``, ``"evaluate"`` ...). It is what
crosses the network in a real federation, so it knows its exact payload size in bytes and
converts losslessly to and from Flower ``RecordDict`` s (see :mod:`fedad.fl.flower`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

Scalar = int | float | str | bool

SCALAR_BYTES = 8
"""Bytes charged for one numeric or boolean scalar (an int64/float64 on the wire)."""


def payload_nbytes(values: Iterable[Any]) -> int:
    """Payload size of ``values`` on the wire: the one byte count of every engine.

    An array counts its ``nbytes``, text its UTF-8 length, ``bytes`` their length, a list
    the sum of its items, a number or boolean :data:`SCALAR_BYTES`. :attr:`Message.nbytes`
    (both engines' ``bytes_up`` and ``bytes_down``), a SecAgg+ reply
    (:func:`fedad.core.secagg.reply_nbytes`) and the SecAgg+ protocol's own records on Flower
    (``fedad.fl.flower.secagg.config_nbytes``) are all counted with it.
    """
    total = 0
    for v in values:
        if isinstance(v, np.ndarray):
            total += int(v.nbytes)
        elif isinstance(v, str):
            total += len(v.encode("utf-8"))
        elif isinstance(v, bytes):
            total += len(v)
        elif isinstance(v, list | tuple):
            total += payload_nbytes(v)
        else:
            total += SCALAR_BYTES
    return total


@dataclass(frozen=True)
class Message:
    """One message: a phase name, named arrays and named scalars.

    The mappings are read-only views; build a new message instead of mutating one.
    """

    kind: str
    arrays: Mapping[str, np.ndarray] = field(default_factory=dict)
    scalars: Mapping[str, Scalar] = field(default_factory=dict)

    def __post_init__(self) -> None:
        arrays = {str(k): np.asarray(v) for k, v in dict(self.arrays).items()}
        scalars = dict(self.scalars)
        for k, v in scalars.items():
            if not isinstance(v, int | float | str | bool | np.integer | np.floating | np.bool_):
                raise TypeError(f"scalar '{k}' of message '{self.kind}' is a {type(v).__name__}")
            if isinstance(v, np.generic):
                scalars[k] = v.item()
        object.__setattr__(self, "arrays", MappingProxyType(arrays))
        object.__setattr__(self, "scalars", MappingProxyType(scalars))

    @property
    def nbytes(self) -> int:
        """Exact payload size: the arrays' ``nbytes`` plus each scalar's size
        (:func:`payload_nbytes`)."""
        return payload_nbytes([*self.arrays.values(), *self.scalars.values()])

    def copy(self) -> Message:
        """A deep copy, as a receiver sees it after serialisation."""
        return Message(
            self.kind, {k: np.array(v, copy=True) for k, v in self.arrays.items()}, self.scalars
        )

    def get(self, name: str, default: Any = None) -> Any:
        """A scalar by name."""
        return self.scalars.get(name, default)

    def __reduce__(self) -> tuple[Any, ...]:
        # picklable (worker processes): rebuilt from plain dicts, read-only again
        return (Message, (self.kind, dict(self.arrays), dict(self.scalars)))


def prefixed(arrays: Mapping[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    """Prefix array names (``prefix/name``) so several groups can share one message."""
    return {f"{prefix}/{k}": v for k, v in arrays.items()}


def unprefixed(arrays: Mapping[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    """The arrays whose names start with ``prefix/``, with the prefix removed."""
    p = prefix + "/"
    return {k[len(p) :]: v for k, v in arrays.items() if k.startswith(p)}
