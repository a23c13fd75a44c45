from __future__ import annotations

import numpy as np
import pytest

from fedad.core.messages import Message, payload_nbytes, prefixed, unprefixed


def test_nbytes_is_sum_of_array_sizes() -> None:
    m = Message("train", {"a": np.zeros((3, 4), np.float32), "b": np.zeros(5, np.float64)})
    assert m.nbytes == 3 * 4 * 4 + 5 * 8


def test_nbytes_counts_scalars() -> None:
    m = Message("train", {}, {"round": 3, "loss": 0.5, "flag": True, "name": "héllo"})
    assert m.nbytes == 8 + 8 + 8 + len("héllo".encode())


def test_message_is_frozen_and_copy_is_deep() -> None:
    a = np.arange(3.0)
    m = Message("x", {"a": a})
    with pytest.raises(TypeError):
        m.arrays["b"] = a  # type: ignore[index]
    c = m.copy()
    c.arrays["a"][0] = 99
    assert m.arrays["a"][0] == 0


def test_numpy_scalars_become_python_and_bad_scalars_raise() -> None:
    m = Message("x", {}, {"n": np.int64(4)})
    assert type(m.scalars["n"]) is int
    with pytest.raises(TypeError):
        Message("x", {}, {"bad": [1, 2]})  # type: ignore[dict-item]


def test_prefix_roundtrip() -> None:
    d = {"w": np.ones(2)}
    assert unprefixed(prefixed(d, "model"), "model").keys() == d.keys()


def test_payload_nbytes_counts_each_kind_of_value() -> None:
    values = [np.zeros((2, 3), np.float32), "héllo", b"\x00\x01\x02", 7, 0.5, True, [1, "ab"]]
    assert payload_nbytes(values) == 24 + 6 + 3 + 8 + 8 + 8 + (8 + 2)
    assert payload_nbytes([]) == 0


MESSAGES = [
    Message(
        "train",
        {"w": np.ones((3, 4), np.float32), "b": np.arange(5.0), "i": np.arange(3, dtype=np.int8)},
        {"round": 3, "loss": 0.5, "flag": True, "name": "héllo", "num_examples": 40},
    ),
    Message("stats", {}, {"num_examples": 12}),
    Message("upload", {"x": np.zeros((0, 2), np.float32)}, {}),
]


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: m.kind)
def test_in_process_secagg_and_flower_counts_agree(msg: Message) -> None:
    """The same message costs the same bytes on every engine: the in-process engine counts
    ``Message.nbytes``; Flower's grid the decoded message and the wire records (counted as
    its SecAgg+ glue counts a record); a secure reply, in process and on Flower, its masked
    int64 vector (with the weight factor) and its clear scalars."""
    pytest.importorskip("flwr")
    from fedad.core.secagg import reply_nbytes
    from fedad.core.validate import spec_of
    from fedad.fl.flower.codec import ARRAYS_KEY, SCALARS_KEY, from_recorddict, to_recorddict
    from fedad.fl.flower.secagg import config_nbytes, decode_clear, encode_fitres

    record = to_recorddict(msg, {"partition-id": 1})  # transport facts are not payload
    wire = payload_nbytes(a.numpy() for a in record.array_records[ARRAYS_KEY].values())
    wire += config_nbytes(record.config_records[SCALARS_KEY])
    assert from_recorddict(record).nbytes == wire == msg.nbytes

    spec = spec_of(dict(msg.arrays))
    entries = sum(a.size for a in msg.arrays.values())
    masked = Message(msg.kind, {"masked": np.zeros(entries + 1, np.int64)}, msg.scalars)
    assert reply_nbytes(spec, msg.scalars) == masked.nbytes
    fitres = encode_fitres(Message(msg.kind, msg.arrays, {"num_examples": 4, **msg.scalars}),
                           spec, 0.0)  # fmt: skip
    clear = decode_clear(fitres.config_records["fitres.metrics"])
    assert reply_nbytes(spec, clear.scalars) == reply_nbytes(
        spec, {"num_examples": 4, **msg.scalars}
    )
