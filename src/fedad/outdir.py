"""The output directory of a run: claimed, locked, written atomically, resumable.

Rules (docs/runs.md):

* ``--out DIR`` may be new, empty, or hold a fedad run. A directory that holds anything
  else is refused, so a run never mixes with or overwrites a user's own files.
* A directory holding a fedad run with results is refused unless ``--force`` (its fedad
  files are cleared first; other files are left alone) or ``--resume`` (finished methods are
  kept, the rest run).
* While a run writes, it holds an exclusive lock (``.fedad/lock``): a second run into the
  same directory stops at once with a one-line error.
* Every file is replaced atomically (written beside, then renamed), so an interruption
  never leaves a half-written ``metrics.json``. Each finished method's results are kept in
  ``.fedad/done/LABEL.{json,npz}`` and the standard files rewritten, so results survive
  Ctrl-C, SIGTERM or a later error, and ``--resume`` continues from them.

* ``DIR`` is resolved once when claimed (it may be a link the user made); below it no
  symbolic link is ever followed: a link among fedad's entries is a one-line error before
  anything is written or deleted (:func:`refuse_links`), and every write, lock and deletion
  opens each component relative to its parent's descriptor with ``O_NOFOLLOW``; temporary
  files get fresh random names and are created with ``O_EXCL``.

Any OSError on the output is a one-line :class:`~fedad.errors.FedadError`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import json
import os
import re
import secrets
import shutil
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np

from fedad.errors import FedadError

STATE_DIR = ".fedad"
RUN_FILE = "run.json"
LOCK_FILE = "lock"
DONE_DIR = "done"
FORMAT = 1
OUTPUTS = (
    "config.toml",
    "metrics.json",
    "history.csv",
    "scores.npz",
    "maps.npz",
    "embeddings.npz",
    "report.html",
    "inputs.json",
)
"""Files a run writes at the top of its directory."""
OUTPUT_DIRS = ("checkpoints", ".flower", STATE_DIR)
"""Folders a run writes (``.flower``: the Flower engines' homes and logs)."""
SEED_DIRS = re.compile(r"seed--?[0-9]{1,20}")
"""Folders of the seeds of a several-seed run (``seed-N``, :mod:`fedad.seeds`)."""
_LABEL = re.compile(r"[A-Za-z0-9_.+-]{1,64}")
_TMP = re.compile(
    r"\.(?:config\.toml|metrics\.json|history\.csv|scores\.npz|maps\.npz|embeddings\.npz|report\.html|inputs\.json)"
    r"\.tmp-[0-9]+(?:-[0-9a-f]{16})?"
)
"""Temporary files of interrupted writes at the top of a run (``.NAME.tmp-PID-RANDOM``;
``.NAME.tmp-PID`` from fedad before the random part)."""

State = Literal["running", "interrupted", "failed", "finished"]


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


# -- the mechanism: paths below a run's root, opened without following links ---------------
#
# A run directory is untrusted: it may be a copy someone shared, crafted so that a name fedad
# writes (``.fedad``, ``.fedad/lock``, ``checkpoints``, a temporary file) is a symbolic link
# out of it. The root itself is the user's choice (``--out`` may be a link they made, or lie
# below one): it is resolved once, when it is claimed, and every component *below* it is
# opened relative to its parent's descriptor with ``O_NOFOLLOW`` (openat-style), so no write,
# lock or deletion ever goes through a link. A link found there is a one-line error naming it.


@dataclass(frozen=True)
class _Anchor:
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


_ANCHORS: list[_Anchor] = []
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


def _enclosing(path: str | Path, strict: bool = False) -> tuple[_Anchor, tuple[str, ...]] | None:
    """The innermost claimed root holding ``path`` (``strict``: strictly above it), and the
    components from that root down to ``path``."""
    p = os.path.abspath(path)
    best: tuple[_Anchor, tuple[str, ...]] | None = None
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


def _push(root: Path) -> tuple[_Anchor, ...]:
    """Claim ``root``: paths below it are opened without following links until popped."""
    found = _enclosing(root)
    rel: tuple[str, ...] = ()
    if found is None:
        base = os.path.realpath(root)
    else:
        base, rel = found[0].base, found[0].rel + found[1]
    alias, real = os.path.abspath(root), os.path.join(base, *rel)
    # also the resolved name, e.g. what workdir.resolve() gives
    pushed = tuple(_Anchor(a, str(root), base, rel) for a in dict.fromkeys((alias, real)))
    with _ANCHORS_LOCK:
        _ANCHORS.extend(pushed)
    return pushed


def _pop(pushed: tuple[_Anchor, ...]) -> None:
    """Undo one :func:`_push` (not another claim of the same folder)."""
    with _ANCHORS_LOCK:
        _ANCHORS[:] = [a for a in _ANCHORS if not any(a is b for b in pushed)]


@contextlib.contextmanager
def anchored(root: Path) -> Iterator[Path]:
    """Within the block, writes below ``root`` never follow a link (``root`` itself may be
    one): for a folder fedad writes into without claiming it (``fedad report``'s run, a
    SuperNode's ``--models-dir``)."""
    pushed = _push(root)
    try:
        yield root
    finally:
        _pop(pushed)


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


# -- the run directory ------------------------------------------------------------------------


@dataclass
class Done:
    """One finished method as kept for resuming: its metrics entry, history, score arrays."""

    metrics: dict[str, Any]
    history: list[dict[str, Any]]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


def _user_entries(root: Path) -> list[str]:
    """Entries of ``root`` that no fedad run writes (our interrupted temporary files aside)."""
    ours = set(OUTPUTS) | set(OUTPUT_DIRS)
    return sorted(
        p.name
        for p in root.iterdir()
        if not (p.name in ours or _TMP.fullmatch(p.name) or _seed_run(p))
    )


def _seed_run(p: Path) -> bool:
    """A seed's folder of a several-seed run (a fedad run itself)."""
    return bool(SEED_DIRS.fullmatch(p.name)) and p.is_dir() and not p.is_symlink()


def _has_results(root: Path) -> bool:
    done = root / STATE_DIR / DONE_DIR
    return (
        (root / "metrics.json").exists()
        or (done.is_dir() and any(done.iterdir()))
        or any(_seed_run(p) and _has_results(p) for p in root.iterdir())
    )


def _ours(name: str, seeds: bool) -> bool:
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
        if not _ours(name, seeds):
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


class RunDir:
    """A claimed output directory: use as a context manager around the whole run.

    Claiming resolves ``root`` once; below it no link is followed (:func:`refuse_links`
    before anything is written, then every write, lock and deletion relative to its
    folder's descriptor), until the context ends.
    """

    def __init__(self, root: Path, created: bool) -> None:
        self.root = root
        self.created = created
        self._lock: IO[str] | None = None
        self._anchors: tuple[_Anchor, ...] = ()

    # -- claiming ---------------------------------------------------------------------
    @classmethod
    def claim(cls, root: Path, force: bool = False, resume: bool = False) -> RunDir:
        """Check ``root`` may take this run, lock it, and (``force``) clear the old run."""
        if force and resume:
            raise FedadError("--force and --resume exclude each other", "give one of them")
        if root.exists() and not root.is_dir():
            raise FedadError(
                f"--out '{root}' exists and is not a directory", "give a new or empty directory"
            )
        created = not (root.exists() or root.is_symlink())
        if _enclosing(root, strict=True) is None:
            try:  # the root as the user named it: links above it are theirs
                root.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise output_error(root, err) from None
        else:  # a seed's run inside a claimed run: not through a link either
            mkdir(root)
        run = cls(root, created)
        run._anchors = _push(root)
        try:
            run._check(force, resume)
        except BaseException:
            run.close()
            raise
        return run

    def _check(self, force: bool, resume: bool) -> None:
        """:meth:`claim`'s rules, in order: no links, not another's folder, the lock, then
        (``force``) clearing."""
        root = self.root
        refuse_links(root)
        is_run = (root / STATE_DIR / RUN_FILE).is_file() or (
            (root / "metrics.json").is_file() and (root / "config.toml").is_file()
        )  # the second: runs written before .fedad/ existed
        others = _user_entries(root)
        if not is_run:  # not a run: anything but our own lock folder is the user's
            others = sorted(p.name for p in root.iterdir() if p.name != STATE_DIR)
        if others and not is_run:
            shown = ", ".join(others[:3]) + (" ..." if len(others) > 3 else "")
            raise FedadError(
                f"--out '{root}' is not empty and holds no fedad run ({shown})",
                "choose a new or empty directory; fedad does not write among other files",
            )
        self._acquire()
        if resume:
            if not is_run:
                raise FedadError(
                    f"--resume: '{root}' holds no fedad run to resume",
                    "drop --resume to start a new run",
                )
        elif _has_results(root):
            if not force:
                raise FedadError(
                    f"--out '{root}' holds a fedad run already",
                    "add --force to replace it, --resume to complete it, or choose another --out",
                )
            self.clear()
        elif is_run:
            self.clear()  # a run that ended before any result: nothing to keep

    def _acquire(self) -> None:
        """Take the lock; creating it is also the check that the directory is writable.

        The lock file is opened without following a link, and must be a plain file with no
        other name (a hard link would let its truncation reach another file)."""
        path = mkdir(self.root / STATE_DIR) / LOCK_FILE
        w = _where(path)
        try:
            with _parent_fd(w) as dfd:
                fd = _open_at(
                    dfd, LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK, str(path), 0o644
                )
        except OSError as err:
            raise output_error(path, err) from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            os.close(fd)
            raise FedadError(
                f"'{path}' is not a plain file of its own (a hard link or a special file)",
                "remove it or choose another --out",
            )
        fh = os.fdopen(fd, "r+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            holder = fh.read(20).strip()
            fh.close()
            raise FedadError(
                f"another fedad run{f' (pid {holder})' if holder else ''} is writing to "
                f"'{self.root}'",
                "wait for it to finish or choose another --out",
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self._lock = fh

    def release(self) -> None:
        """Drop the lock (the lock file stays: it is harmless and reused)."""
        if self._lock is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock, fcntl.LOCK_UN)
                self._lock.close()
            self._lock = None

    def close(self) -> None:
        """Drop the lock and the claim (paths below the root are no longer guarded)."""
        self.release()
        _pop(self._anchors)
        self._anchors = ()

    def clear(self) -> None:
        """Remove what a fedad run wrote here (never other files), keeping the lock.

        Nothing is followed: a link among fedad's entries is an error, and folders are
        removed relative to their parent's descriptor (:func:`shutil.rmtree` with ``dir_fd``,
        which never descends into a link)."""
        for name in sorted(os.listdir(self.root)):
            p = self.root / name
            seed = bool(SEED_DIRS.fullmatch(name))
            if name != STATE_DIR and _ours(name, seeds=True) and (_seed_run(p) or not seed):
                _remove(p)
        state = self.root / STATE_DIR
        for name in sorted(os.listdir(state)) if state.is_dir() and not state.is_symlink() else []:
            if name != LOCK_FILE:
                _remove(state / name)

    def discard_if_empty(self) -> None:
        """After a run that wrote no result: leave no trace (the folder too, if ours).

        Flower logs (``.flower/``) are the exception: they say why a run failed, so they
        stay, and the folder stays a (resultless) fedad run that the next run may reuse.
        """
        if _has_results(self.root):
            return
        flower = self.root / ".flower"
        if flower.is_dir() and any(flower.iterdir()):
            with contextlib.suppress(FedadError):
                self.set_state("failed")
            return
        with contextlib.suppress(FedadError):
            self.clear()
        self.release()
        with contextlib.suppress(FedadError):
            _remove(self.root / STATE_DIR)
        with contextlib.suppress(OSError):
            if self.created and not any(self.root.iterdir()):
                self.root.rmdir()

    # -- state ------------------------------------------------------------------------
    def set_state(self, state: State, config_text: str | None = None) -> None:
        """Record the run's state in ``.fedad/run.json`` (atomically)."""
        info: dict[str, Any] = {"format": FORMAT, "state": state, "pid": os.getpid()}
        write_text(self.root / STATE_DIR / RUN_FILE, json.dumps(info))
        if config_text is not None:
            write_text(self.root / "config.toml", config_text)

    def check_config(self, config_text: str) -> None:
        """``--resume``: refuse when the run here started from another config (one line).

        A run without a ``config.toml`` yet (stopped before it wrote one) passes. The file
        is untrusted: damaged, too large or too deeply nested is a one-line error.
        """
        import tomllib

        path = self.root / "config.toml"
        try:
            old = tomllib.loads(read_text(path))
            diff = config_difference(old, tomllib.loads(config_text))
        except FileNotFoundError:
            return
        except (OSError, ValueError, RecursionError) as err:
            why = "nested too deeply" if isinstance(err, RecursionError) else str(err)[:120]
            raise FedadError(
                f"--resume: '{path}' is damaged ({why})", "run again with --force"
            ) from None
        if diff is not None:
            raise FedadError(
                f"--resume: the config differs from the run in '{self.root}': {diff}",
                "resume with the same config and --set values, or start anew with --force",
            )

    def save_done(self, label: str, done: Done) -> None:
        """Keep one finished method's results for resuming."""
        d = mkdir(self.root / STATE_DIR / DONE_DIR)
        write_npz(d / f"{label}.npz", done.arrays)
        write_text(
            d / f"{label}.json", json.dumps({"metrics": done.metrics, "history": done.history})
        )

    def load_done(self, labels: list[str]) -> dict[str, Done]:
        """The finished methods among ``labels`` (untrusted files: checked, one-line errors)."""
        from fedad.runs import read_npz

        d = self.root / STATE_DIR / DONE_DIR
        out: dict[str, Done] = {}
        for label in labels:
            meta, arrays = d / f"{label}.json", d / f"{label}.npz"
            if not (_LABEL.fullmatch(label) and meta.is_file() and arrays.is_file()):
                continue
            try:
                data = json.loads(read_text(meta))
            except (OSError, ValueError, RecursionError) as err:
                raise FedadError(
                    f"--resume: '{meta}' is damaged ({str(err)[:120]})",
                    "run again with --force",
                ) from None
            if not (
                isinstance(data, dict)
                and isinstance(data.get("metrics"), dict)
                and isinstance(data.get("history"), list)
                and all(isinstance(r, dict) for r in data["history"])
            ):
                raise FedadError(f"--resume: '{meta}' is damaged", "run again with --force")
            if not (self.root / "checkpoints" / label / "detector.json").is_file():
                continue  # results without their checkpoint: run the method again
            out[label] = Done(data["metrics"], data["history"], read_npz(arrays))
        return out

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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


def _remove(path: Path) -> None:
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
                _remove(tmp)


def config_difference(old: Any, new: Any, where: str = "") -> str | None:
    """The first key at which two resolved configs differ, described in words, or None."""
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new), key=str):
            key = f"{where}.{k}" if where else str(k)
            if k not in old:
                return f"'{key}' is new"
            if k not in new:
                return f"'{key}' is gone"
            diff = config_difference(old[k], new[k], key)
            if diff:
                return diff
        return None
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            diff = config_difference(a, b, f"{where}.{i}")
            if diff:
                return diff
        return None
    if old != new or type(old) is not type(new):
        return f"'{where}' was {old!r}, now {new!r}"
    return None
