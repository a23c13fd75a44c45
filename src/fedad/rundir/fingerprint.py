"""What a run was trained on, kept as digests so that ``--resume`` can refuse other data.

A run keeps ``.fedad/fingerprint.json`` (written before its first method trains):

* ``files``: SHA-256 over the bytes of the data files the config names (``data.path``,
  ``data.anomaly_source_path``; a folder's regular files in sorted order, each with its
  path relative to the folder), or ``null`` for built-in data sets that are read from no
  user path. It does not depend on the seed, so a several-seed run checks it once;
* ``federation``: BLAKE2b over every array of the built federation (each client's training
  and test samples, labels and masks, the server's normal data) and the preprocessing
  (``inputs.json``'s text): what the methods train, test and score on.

``--resume`` computes the same digests from the config and data it is given and refuses, in
one line and before writing anything, when one differs (:func:`check`); the config itself
is compared with the run's ``config.toml`` (:meth:`fedad.rundir.claim.RunDir.check_config`). A
run written before fingerprints existed has none: it resumes on the config check alone,
and says so.
The file is untrusted: a damaged one is a one-line error.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedad.core.errors import FedadError
from fedad.rundir.files import read_text, write_text
from fedad.rundir.layout import FINGERPRINT_FILE, STATE_DIR

if TYPE_CHECKING:
    from fedad.config import DataConfig
    from fedad.core.types import Federation

__all__ = ["FINGERPRINT_FILE", "Fingerprint", "check", "files_digest", "read", "write"]

FORMAT = 1
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Fingerprint:
    """The digests of one run's inputs (module docstring); ``None``: not computed."""

    files: str | None = None
    federation: str | None = None


def _hash_file(h: Any, path: Path) -> None:
    """Feed a regular file's bytes to ``h`` (opened without following a link or waiting on
    a pipe; anything else is left to the loader to word)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        h.update(b"<unreadable>")
        return
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            h.update(b"<special>")
            return
        while chunk := fh.read(_CHUNK):
            h.update(chunk)


def _walk(top: Path) -> Iterator[Path]:
    """The regular files below ``top``, in sorted order, links not followed."""
    for root, dirs, files in os.walk(top, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            p = Path(root) / name
            if p.is_file() and not p.is_symlink():
                yield p


_DIGESTS: dict[tuple[object, ...], str] = {}
"""Digests of this process, by the files' names, sizes and times: the seeds of a run (and a
benchmark's runs) hash one data file once."""


def _stamp(paths: list[str]) -> tuple[object, ...]:
    out: list[object] = []
    for given in paths:
        top = Path(given).expanduser()
        files = list(_walk(top)) if top.is_dir() else [top]
        for f in files:
            try:
                st = f.stat()
            except OSError:
                out.append((str(f), None))
                continue
            out.append((str(f), st.st_size, st.st_mtime_ns, st.st_ino))
    return tuple(out)


def files_digest(data: DataConfig) -> str | None:
    """SHA-256 over the data files named by ``data`` (``None`` when it names none)."""
    paths = [p for p in (data.path, data.anomaly_source_path) if p]
    if not paths:
        return None
    stamp = _stamp(paths)
    if stamp in _DIGESTS:
        return _DIGESTS[stamp]
    _DIGESTS[stamp] = digest = _hash_files(paths)
    return digest


def _hash_files(paths: list[str]) -> str:
    h = hashlib.sha256()
    for i, given in enumerate(paths):  # the paths themselves are the config's to compare
        top = Path(given).expanduser()
        h.update(f"\0path {i}\0".encode())
        if top.is_dir():
            for f in _walk(top):
                h.update(f"\0file\0{f.relative_to(top).as_posix()}\0".encode())
                _hash_file(h, f)
        else:
            _hash_file(h, top)
    return h.hexdigest()


def _arrays(fed: Federation) -> Iterable[tuple[str, Any]]:
    for c in fed.clients:
        prefix = f"client{c.client_id}"
        for name in ("x_train", "y_train", "x_test", "y_test", "mask_train", "mask_test"):
            yield f"{prefix}/{name}", getattr(c, name)
    yield "server_normal", fed.server_normal


def _feed(h: Any, key: str, value: Any) -> None:
    if value is None:
        h.update(f"\0{key}\0none".encode())
        return
    arrays = value.arrays() if hasattr(value, "arrays") else {"": value}
    for sub, arr in sorted(arrays.items()):
        a = np.ascontiguousarray(arr)
        h.update(f"\0{key}{sub}\0{a.dtype.str}\0{a.shape}\0".encode())
        if a.dtype.hasobject:
            h.update(repr(a.tolist()).encode())
            continue
        try:
            h.update(a)  # the buffer itself: no copy of a large image array
        except (TypeError, ValueError, BufferError):
            h.update(a.tobytes())


def federation_digest(fed: Federation, inputs_text: str) -> str:
    """BLAKE2b over the federation's arrays and its preprocessing (module docstring)."""
    h = hashlib.blake2b(digest_size=32)
    h.update(inputs_text.encode())
    for key, value in _arrays(fed):
        _feed(h, key, value)
    return h.hexdigest()


def _path(root: Path) -> Path:
    return root / STATE_DIR / FINGERPRINT_FILE


def read(root: Path) -> Fingerprint | None:
    """The run's fingerprint, or ``None`` when it has none (written before they existed)."""
    path = _path(root)
    try:
        raw = json.loads(read_text(path, limit=1 << 16))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as err:
        raise FedadError(
            f"--resume: '{path}' is damaged ({str(err)[:120]})", "run again with --force"
        ) from None
    keys = ("files", "federation")
    if not (
        isinstance(raw, dict)
        and raw.get("format") == FORMAT
        and all(raw.get(k) is None or isinstance(raw.get(k), str) for k in keys)
    ):
        raise FedadError(f"--resume: '{path}' is damaged", "run again with --force")
    return Fingerprint(**{k: raw.get(k) for k in keys})


def write(root: Path, fp: Fingerprint) -> None:
    """Keep ``fp`` in the run (atomically)."""
    write_text(_path(root), json.dumps({"format": FORMAT, **asdict(fp)}))


def check(root: Path, fp: Fingerprint) -> bool:
    """``--resume``: refuse in one line when a digest kept in the run at ``root`` differs
    from ``fp`` (a digest either side lacks is not compared); whether the run had a
    fingerprint at all."""
    kept = read(root)
    if kept is None:
        return False
    what = {
        "files": "the data files",
        "federation": "the data the methods train and test on",
    }
    for key, words in what.items():
        old, new = getattr(kept, key), getattr(fp, key)
        if old is not None and new is not None and old != new:
            raise FedadError(
                f"--resume: {words} differ from those the run in '{root}' was trained on",
                "resume with the same config and data, or start anew with --force",
            )
    return True
