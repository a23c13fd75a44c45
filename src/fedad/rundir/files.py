"""Files below a run's output directory, written and read without following links.

* ``DIR`` is resolved once when claimed (it may be a link the user made;
  :class:`fedad.rundir.claim.RunDir` claims it, :func:`anchored` and :func:`reading` guard a folder
  fedad writes into or reads without claiming it); below it no symbolic link is ever
  followed: a link among fedad's entries is a one-line error before anything is written or
  deleted (:func:`refuse_links`), and every write, lock, read and deletion opens each
  component relative to its parent's descriptor with ``O_NOFOLLOW``; temporary files get
  fresh random names and are created with ``O_EXCL``.
* Every file is replaced atomically (written beside, then renamed), so an interruption
  never leaves a half-written ``metrics.json``.
* The names a run writes at the top of its folder (:data:`OUTPUTS`, :data:`OUTPUT_DIRS`,
  ``seed-N/``) are the only ones fedad writes, reads or deletes there (docs/runs.md).

Any OSError on the output is a one-line :class:`~fedad.core.errors.FedadError`.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import secrets
import shutil
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from fedad.core.errors import FedadError
from fedad.rundir.layout import (
    CONFIG_FILE,
    METRICS_FILE,
    OUTPUT_DIRS,
    OUTPUTS,
    RUN_FILE,
    SEED_DIRS,
    STATE_DIR,
)

_TMP = re.compile(
    r"\.(?:" + "|".join(re.escape(name) for name in OUTPUTS) + r")\.tmp-[0-9]+(?:-[0-9a-f]{16})?"
)
"""Temporary files of interrupted writes at the top of a run (``.NAME.tmp-PID-RANDOM``;
``.NAME.tmp-PID`` from fedad before the random part)."""


def _why(err: OSError) -> str:
    return err.strerror or str(err) or type(err).__name__


def output_error(path: Path, err: OSError) -> FedadError:
    """The one-line error for an OSError while writing ``path``."""
    fix = (
        "free some space or choose another --out"
        if err.errno in (errno.ENOSPC, errno.EDQUOT)
        else "choose a writable --out"
    )
    return FedadError(f"cannot write '{path}': {_why(err)}", fix)


# -- a path the user names for a new output ------------------------------------------------


def target_path(path: str | Path, flag: str = "--out") -> Path:
    """The one absolute path that both the checks and the writes of an output use.

    ``path`` names a new file or folder: its parent is resolved through the file system
    (non-strictly: ``missing/..`` is the folder it textually names, as the writes would
    take it), and its last component is kept as given, so a link there is still seen as a
    link. A check that asks the file system and a write that cleans the path as text can
    then never disagree (``missing/../victim`` is ``victim`` for both). Refused in one line:
    an empty path, a path ending in ``..`` or naming the current folder (no entry of its own), and a
    path below a file."""
    raw = os.fspath(path)
    if not raw.strip():
        raise FedadError(f"{flag} is empty", f"give a path, e.g. {flag} exports/NAME")
    p = Path(raw).expanduser()
    if p.name in ("", ".", ".."):
        what = "ends in '..'" if p.name == ".." else "is a folder's own name ('.' or '/')"
        raise FedadError(
            f"{flag} '{raw}' {what}, not a new entry", f"give a new name, e.g. {flag} NAME"
        )
    parent = Path(os.path.realpath(p.parent))
    for above in (*reversed(parent.parents), parent):
        try:
            mode = os.stat(above).st_mode
        except FileNotFoundError:
            break
        except OSError as err:
            raise FedadError(f"{flag} '{raw}': cannot read '{above}': {_why(err)}") from None
        if not stat.S_ISDIR(mode):
            raise FedadError(
                f"{flag} '{raw}' lies below '{above}', which is a file, not a folder",
                f"choose another {flag}",
            )
    return parent / p.name


def run_holding(path: Path) -> Path | None:
    """The fedad run directory that ``path`` (absolute) lies in or is, if any: a folder
    with ``.fedad/run.json``, or ``metrics.json`` beside ``config.toml`` (runs written
    before ``.fedad/`` existed)."""
    for d in (path, *path.parents):
        if (d / STATE_DIR / RUN_FILE).is_file() or (
            (d / METRICS_FILE).is_file() and (d / CONFIG_FILE).is_file()
        ):
            return d
    return None


def refuse_inside_run(out: Path, flag: str = "--out") -> None:
    """A one-line error when ``out`` (from :func:`target_path`) lies inside a fedad run:
    a file of fedad's own there could damage the run (an export in its ``checkpoints/``
    makes it unreadable) or block a later ``--force``."""
    run = run_holding(out)
    if run is not None:
        raise FedadError(
            f"{flag} '{out}' lies inside the fedad run '{run}'; fedad writes nothing of its "
            "own among a run's files",
            f"choose a {flag} outside '{run}'",
        )


# -- the mechanism: paths below a run's root, opened without following links ---------------
#
# A run directory is untrusted: it may be a copy someone shared, crafted so that a name fedad
# writes (``.fedad``, ``.fedad/lock``, ``checkpoints``, a temporary file) is a symbolic link
# out of it. The root itself is the user's choice (``--out`` may be a link they made, or lie
# below one): it is resolved once, when it is claimed, and every component *below* it is
# opened relative to its parent's descriptor with ``O_NOFOLLOW`` (openat-style), so no write,
# lock or deletion ever goes through a link. A link found there is a one-line error naming it.


@dataclass(frozen=True)
class Anchor:
    """A claimed root: ``alias`` (an absolute path as the user named it) lies at ``rel``
    below ``base``, a resolved directory that is opened following links."""

    alias: str
    shown: str
    base: str
    rel: tuple[str, ...]


@dataclass(frozen=True)
class _Where:
    """A path located below an anchor: open ``base``, then each of ``parts`` in turn."""

    base: str
    parts: tuple[str, ...]
    shown: tuple[str, ...]
    """How each component of ``parts`` is named in messages."""
    anchored: bool


_ANCHORS: list[Anchor] = []
_ANCHORS_LOCK = threading.Lock()
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


WRITE_FIX = "remove it or choose another --out"
READ_FIX = "remove it, or put the file itself in its place"
"""The remedy a link error names when a run directory is read (:func:`reading`)."""


class LinkError(FedadError):
    """A symbolic link found below a run's root (:func:`link_error`); ``path`` names it."""

    def __init__(self, path: str | Path, fix: str = WRITE_FIX) -> None:
        self.path = str(path)
        super().__init__(
            f"'{path}' is a symbolic link; fedad does not follow links inside a run directory",
            fix,
        )


def link_error(path: str | Path, fix: str = WRITE_FIX) -> LinkError:
    """The one-line error for a symbolic link found below a run's root."""
    return LinkError(path, fix)


def _enclosing(path: str | Path, strict: bool = False) -> tuple[Anchor, tuple[str, ...]] | None:
    """The innermost claimed root holding ``path`` (``strict``: strictly above it), and the
    components from that root down to ``path``."""
    p = os.path.abspath(path)
    best: tuple[Anchor, tuple[str, ...]] | None = None
    for a in tuple(_ANCHORS):  # later anchors win ties: the innermost, most recent claim
        rest = os.path.relpath(p, a.alias)
        if rest == os.pardir or rest.startswith(os.pardir + os.sep):
            continue
        tail = () if rest == os.curdir else tuple(rest.split(os.sep))
        if strict and not tail:
            continue
        if best is None or len(a.alias) >= len(best[0].alias):
            best = (a, tail)
    return best


def claimed_above(path: str | Path) -> bool:
    """Whether ``path`` lies strictly below a claimed root (a seed's run inside a run)."""
    return _enclosing(path, strict=True) is not None


def _where(path: str | Path) -> _Where:
    """Where ``path`` lies: below a claimed root (anchored), else in its parent as given."""
    found = _enclosing(path)
    if found is None:
        p = os.path.abspath(path)
        return _Where(os.path.dirname(p), (os.path.basename(p),), (str(path),), False)
    a, tail = found
    shown = [os.path.join(a.base, *a.rel[: i + 1]) for i in range(len(a.rel))]
    shown += [os.path.join(a.shown, *tail[: i + 1]) for i in range(len(tail))]
    return _Where(a.base, a.rel + tail, tuple(shown), True)


def push_anchor(root: Path) -> tuple[Anchor, ...]:
    """Claim ``root``: paths below it are opened without following links until popped."""
    found = _enclosing(root)
    rel: tuple[str, ...] = ()
    if found is None:
        base = os.path.realpath(root)
    else:
        base, rel = found[0].base, found[0].rel + found[1]
    alias, real = os.path.abspath(root), os.path.join(base, *rel)
    # also the resolved name, e.g. what workdir.resolve() gives
    pushed = tuple(Anchor(a, str(root), base, rel) for a in dict.fromkeys((alias, real)))
    with _ANCHORS_LOCK:
        _ANCHORS.extend(pushed)
    return pushed


def pop_anchor(pushed: tuple[Anchor, ...]) -> None:
    """Undo one :func:`push_anchor` (not another claim of the same folder)."""
    with _ANCHORS_LOCK:
        _ANCHORS[:] = [a for a in _ANCHORS if not any(a is b for b in pushed)]


@contextlib.contextmanager
def anchored(root: Path) -> Iterator[Path]:
    """Within the block, writes below ``root`` never follow a link (``root`` itself may be
    one): for a folder fedad writes into without claiming it (``fedad report``'s run, a
    SuperNode's ``--models-dir``)."""
    pushed = push_anchor(root)
    try:
        yield root
    finally:
        pop_anchor(pushed)


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _open_at(dir_fd: int, name: str, flags: int, shown: str, mode: int = 0o777) -> int:
    """``openat(dir_fd, name, flags | O_NOFOLLOW)``; a link there is :func:`link_error`."""
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK) and _is_link(dir_fd, name):
            raise link_error(shown) from None
        raise


@contextlib.contextmanager
def _parent_fd(w: _Where, create: bool = False) -> Iterator[int]:
    """A descriptor of the folder holding ``w``'s last part, reached without following a
    link below the root (``create``: missing folders are made on the way)."""
    fd = os.open(w.base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name, shown in zip(w.parts[:-1], w.shown[:-1], strict=True):
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, dir_fd=fd)
            nxt = _open_at(fd, name, _DIR_FLAGS, shown)
            os.close(fd)
            fd = nxt
        yield fd
    finally:
        os.close(fd)


def open_nofollow(path: Path, flags: int, mode: int = 0o777) -> int:
    """A descriptor of ``path`` opened with ``flags`` without following a link anywhere
    below a claimed root (a link is :func:`link_error` naming ``path``); any other failure
    is an OSError for the caller to word."""
    w = _where(path)
    with _parent_fd(w) as dfd:
        return _open_at(dfd, w.parts[-1], flags, str(path), mode)


def _refuse_link(dir_fd: int, name: str, w: _Where) -> None:
    """Below a claimed root, an existing link at ``name`` is an error (never replaced)."""
    if w.anchored and _is_link(dir_fd, name):
        raise link_error(w.shown[-1])


def _tmp_name(name: str) -> str:
    """A fresh temporary name beside ``name``: unpredictable, so nothing can be planted."""
    return f".{name}.tmp-{os.getpid()}-{secrets.token_hex(8)}"


# -- atomic writes --------------------------------------------------------------------------


def _atomic(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """Write a new file beside ``path`` (``O_EXCL``, never through a link) and rename it."""
    w = _where(path)
    name = w.parts[-1]
    try:
        with _parent_fd(w) as dfd:
            _refuse_link(dfd, name, w)
            tmp = _tmp_name(name)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
            fd = _open_at(dfd, tmp, flags, str(path.with_name(tmp)), 0o666)
            try:
                with os.fdopen(fd, "wb") as fh:
                    write(fh)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)
                raise
    except OSError as err:
        raise output_error(path, err) from None


def write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically."""
    _atomic(path, lambda fh: fh.write(text.encode("utf-8")))


def write_npz(path: Path, arrays: dict[str, np.ndarray], compressed: bool = False) -> None:
    """Replace ``path`` with an ``.npz`` of ``arrays`` atomically (no pickles)."""

    def write(fh: IO[bytes]) -> None:
        buf = io.BytesIO()
        save = np.savez_compressed if compressed else np.savez
        save(buf, **arrays)  # type: ignore[arg-type]
        fh.write(buf.getbuffer())

    _atomic(path, write)


def mkdir(path: Path) -> Path:
    """``mkdir -p`` with a one-line error; below a claimed root, never through a link."""
    w = _where(path)
    try:
        if not w.anchored:
            path.mkdir(parents=True, exist_ok=True)
        elif w.parts:
            with _parent_fd(w, create=True) as dfd:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(w.parts[-1], dir_fd=dfd)
                os.close(_open_at(dfd, w.parts[-1], _DIR_FLAGS, w.shown[-1]))
    except OSError as err:
        raise output_error(path, err) from None
    return path


MAX_READ = 64 * 2**20
"""The most :func:`read_text` reads of one bookkeeping file (resolved configs, done files)."""


def open_read(path: Path) -> io.BufferedReader:
    """A regular file opened for reading without following a link below a claimed root
    (:func:`anchored`, :func:`reading`; elsewhere its last component is never a link),
    nor waiting on a pipe: a link is :func:`link_error`, anything but a regular file an
    OSError (``EINVAL``), as is any other failure, for the caller to word."""
    w = _where(path)
    with _parent_fd(w) as dfd:
        fd = _open_at(dfd, w.parts[-1], os.O_RDONLY | os.O_NONBLOCK, w.shown[-1])
    fh = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        fh.close()
        raise OSError(errno.EINVAL, "not a regular file")
    return fh


def read_bytes(path: Path, limit: int = MAX_READ) -> bytes:
    """At most ``limit`` bytes of a file, read as :func:`open_read` opens it (a larger
    file is an OSError, ``EFBIG``)."""
    with open_read(path) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes")
    return data


def read_text(path: Path, limit: int = MAX_READ) -> str:
    """A small text file below a claimed root, read without following a link (a one-line
    error) or waiting on a pipe; OSError / UnicodeDecodeError for the caller to word."""
    return read_bytes(path, limit).decode("utf-8")


@contextlib.contextmanager
def reading(root: Path, walk: bool = True) -> Iterator[Path]:
    """Within the block, reads of ``root``'s files never follow a link below it (``root``
    itself may be one): on entry :func:`refuse_links` checks the whole run structure
    (``walk``; skipped when ``root`` lies in a claimed run, whose claim checked it, or is no
    folder, which its reader words), so a link anywhere in it is an error before anything
    is read, and every read through :func:`open_read` opens each component with
    ``O_NOFOLLOW``, so a link planted later is refused too. For ``fedad.load``, ``fedad
    report`` and ``fedad score``."""
    try:
        if walk and root.is_dir() and _enclosing(root) is None:
            refuse_links(root)
        with anchored(root):
            yield root
    except LinkError as err:
        raise link_error(err.path, READ_FIX) from None


# -- the run structure: the entries fedad owns, checked for links before use ---------------


def is_run_entry(name: str, seeds: bool) -> bool:
    """Whether a run writes, reads or deletes the entry ``name`` at the top of its folder."""
    return (
        name in OUTPUTS
        or name in OUTPUT_DIRS
        or bool(_TMP.fullmatch(name))
        or (seeds and bool(SEED_DIRS.fullmatch(name)))
    )


def refuse_links(root: Path, seeds: bool = True) -> None:
    """Raise :func:`link_error` for the first symbolic link in the run structure below
    ``root`` (``root`` itself may be one): fedad's entries at the top, everything below
    ``.fedad/`` and ``checkpoints/``, ``.flower`` and its ``node-models/`` (the rest of
    ``.flower`` is Flower's own, never written again, only deleted without following
    links), and ``seed-N/`` folders as runs of their own. Files of the user's are not
    looked at. Checked when a run directory is claimed, before anything is written."""
    try:
        names = sorted(os.listdir(root))
    except OSError as err:
        raise FedadError(f"cannot read '{root}': {_why(err)}", "choose another --out") from None
    for name in names:
        p = root / name
        if not is_run_entry(name, seeds):
            continue
        if p.is_symlink():
            raise link_error(p)
        if not p.is_dir():
            continue
        if SEED_DIRS.fullmatch(name):
            refuse_links(p, seeds=False)
        elif name == ".flower":
            models = p / "node-models"
            if models.is_symlink():
                raise link_error(models)
            if models.is_dir():
                _refuse_links_below(models)
        else:
            _refuse_links_below(p)


def _refuse_links_below(top: Path) -> None:
    """:func:`link_error` for the first link anywhere below the folder ``top`` (iterative,
    so that no nesting depth can exhaust the stack)."""
    stack = [top]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                entries = sorted(it, key=lambda e: e.name)
            for e in entries:
                if e.is_symlink():
                    raise link_error(d / e.name)
                if e.is_dir(follow_symlinks=False):
                    stack.append(d / e.name)
        except OSError as err:
            raise FedadError(f"cannot read '{d}': {_why(err)}", "choose another --out") from None


def _remove_at(dir_fd: int, name: str, shown: str, anchored: bool) -> None:
    """Remove the entry ``name`` of the folder ``dir_fd`` without following a link: a
    folder with :func:`shutil.rmtree` relative to ``dir_fd`` (which never descends into a
    link), anything else unlinked; below a claimed root a link is an error instead."""
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode) and anchored:
        raise link_error(shown)
    if stat.S_ISDIR(mode):
        shutil.rmtree(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)


def remove(path: Path) -> None:
    """Remove ``path`` (a file or a whole folder; nothing when it is not there)."""
    w = _where(path)
    try:
        with _parent_fd(w) as dfd:
            _remove_at(dfd, w.parts[-1], w.shown[-1], w.anchored)
    except FileNotFoundError:
        return
    except (OSError, RecursionError) as err:
        why = _why(err) if isinstance(err, OSError) else "nested too deeply"
        raise FedadError(
            f"cannot clear '{path}': {why}", "remove it yourself or choose another --out"
        ) from None


def move(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst`` (a new name, on the same file system) without following a
    link on the way to either; the entry itself is moved as it is."""
    a, b = _where(src), _where(dst)
    try:
        with _parent_fd(a) as sfd, _parent_fd(b) as dfd:
            os.rename(a.parts[-1], b.parts[-1], src_dir_fd=sfd, dst_dir_fd=dfd)
    except OSError as err:
        raise FedadError(
            f"cannot move '{src}' to '{dst}': {_why(err)}",
            "move it yourself or choose another --out",
        ) from None


@contextlib.contextmanager
def staged_dir(final: Path) -> Iterator[Path]:
    """A temporary folder beside ``final`` that replaces it when the block succeeds.

    The folder's name is fresh and unpredictable and it is created exclusively; the
    replacement renames it relative to the parent's descriptor."""
    w = _where(final)
    name, tmp_name = w.parts[-1], _tmp_name(w.parts[-1])
    tmp = final.with_name(tmp_name)
    mkdir(final.parent)
    placed = False
    try:
        with _parent_fd(w) as dfd:
            os.mkdir(tmp_name, 0o777, dir_fd=dfd)
        yield tmp
        with _parent_fd(w) as dfd:
            _remove_at(dfd, name, w.shown[-1], w.anchored)
            os.replace(tmp_name, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            placed = True
    except OSError as err:
        raise output_error(final, err) from None
    finally:
        if not placed:
            with contextlib.suppress(FedadError):
                remove(tmp)
