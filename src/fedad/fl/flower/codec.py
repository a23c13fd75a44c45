"""fedad messages <-> Flower ``RecordDict`` s, losslessly, and the protocol's record keys.

Arrays go in an ``ArrayRecord`` (``fedad.arrays``, serialised with ``numpy.save``: dtype,
shape and bytes exact), scalars in a ``ConfigRecord`` (``fedad.scalars``: bool, int, float
and str keep their type), the phase name and transport facts in a second ``ConfigRecord``
(``fedad.meta``, not counted as payload). ``flwr`` is imported only inside the functions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from fedad.core.algorithm import EVALUATE
from fedad.core.messages import Message, Scalar

if TYPE_CHECKING:  # flwr is imported only where a record is built
    from flwr.app import RecordDict


ARRAYS_KEY = "fedad.arrays"
"""``RecordDict`` key of the ``ArrayRecord`` holding a message's arrays."""


SCALARS_KEY = "fedad.scalars"
"""``RecordDict`` key of the ``ConfigRecord`` holding a message's scalars."""


META_KEY = "fedad.meta"
"""``RecordDict`` key of the ``ConfigRecord`` with the phase name and transport facts."""


STATE_KEY = "fedad.state"
"""``context.state`` key of the ``ArrayRecord`` holding a client's state."""


HELLO = "fedad_hello"
"""Query action of the handshake that maps Flower node ids to partition ids."""


SIZE = "fedad_size"
"""Query action asking a node its training-set size (SecAgg+'s weight bound)."""


NODE_MODEL = "node_model"
"""Scalar of a deployment's ``evaluate`` reply: where the node saved its personalised
detector (the reply carries no model arrays; :func:`fedad.fl.flower.app.keep_detector_home`)."""


INT64 = (-(2**63), 2**63 - 1)


def route(phase: str) -> str:
    """The Flower ``message_type`` of a phase.

    ``train`` and ``evaluate`` use Flower's own categories; any other phase ``p`` is the
    query ``query.p`` (a phase name that is not a Python identifier is hex-encoded, since
    Flower routes only identifiers).
    """
    if phase in ("train", EVALUATE):
        return phase
    action = phase if phase.isidentifier() else "fedad_x" + phase.encode().hex()
    return f"query.{action}"


def _check_scalar(name: str, value: Scalar) -> Scalar:
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and not (INT64[0] <= value <= INT64[1])
    ):
        raise TypeError(f"scalar '{name}' = {value} does not fit in a signed 64-bit integer")
    return value


def to_recorddict(msg: Message, meta: Mapping[str, Scalar] | None = None) -> RecordDict:
    """``msg`` as a Flower ``RecordDict``: arrays, scalars and the phase name, losslessly.

    ``meta`` adds transport facts (partition id, handler seconds) to ``fedad.meta``; they
    are not part of the message and not counted in its bytes.
    """
    from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

    arrays = {}
    for name, a in msg.arrays.items():
        if a.dtype.hasobject:
            raise TypeError(f"array '{name}' of message '{msg.kind}' has dtype object")
        arrays[name] = Array(np.asarray(a))
    scalars: dict[str, Any] = {k: _check_scalar(k, v) for k, v in msg.scalars.items()}
    info: dict[str, Any] = {"kind": msg.kind}
    info.update(meta or {})
    return RecordDict(
        {
            ARRAYS_KEY: ArrayRecord(arrays) if arrays else ArrayRecord(),
            SCALARS_KEY: ConfigRecord(scalars),
            META_KEY: ConfigRecord(info),
        }
    )


def from_recorddict(content: RecordDict) -> Message:
    """The :class:`Message` that :func:`to_recorddict` wrote into ``content``."""
    configs = content.config_records
    if META_KEY not in configs or "kind" not in configs[META_KEY]:
        raise ValueError("not a fedad message: the record 'fedad.meta' with 'kind' is missing")
    kind = configs[META_KEY]["kind"]
    if not isinstance(kind, str):
        raise ValueError("not a fedad message: 'fedad.meta.kind' is not a string")
    arrays: dict[str, np.ndarray] = {}
    if ARRAYS_KEY in content.array_records:
        arrays = {k: v.numpy() for k, v in content.array_records[ARRAYS_KEY].items()}
    scalars: dict[str, Scalar] = {}
    if SCALARS_KEY in configs:
        for k, v in configs[SCALARS_KEY].items():
            if not isinstance(v, bool | int | float | str):
                raise ValueError(f"scalar '{k}' is a {type(v).__name__}, not bool/int/float/str")
            scalars[k] = v
    return Message(kind, arrays, scalars)


def recorddict_meta(content: RecordDict) -> dict[str, Scalar]:
    """The transport facts of a converted message (``fedad.meta`` without ``kind``)."""
    configs = content.config_records
    if META_KEY not in configs:
        return {}
    return {k: v for k, v in configs[META_KEY].items() if k != "kind" and isinstance(v, Scalar)}


def state_to_record(state: Mapping[str, np.ndarray]) -> Any:
    """A client's state as an ``ArrayRecord`` for ``context.state``."""
    from flwr.app import Array, ArrayRecord

    arrays = {k: Array(np.asarray(v)) for k, v in state.items()}
    return ArrayRecord(arrays) if arrays else ArrayRecord()


def state_from_record(record: Any) -> dict[str, np.ndarray]:
    """A client's state back from its ``ArrayRecord``."""
    return {k: v.numpy() for k, v in record.items()}
