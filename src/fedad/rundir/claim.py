"""Claiming a run's output directory: the lock, ``--force`` and ``--resume``, the finished
methods kept for resuming.

Rules (docs/runs.md):

* ``--out DIR`` may be new, empty, or hold a fedad run. A directory that holds anything
  else is refused, so a run never mixes with or overwrites a user's own files.
* A directory holding a fedad run with results is refused unless ``--force`` (its fedad
  files are cleared first; other files are left alone) or ``--resume`` (finished methods are
  kept, the rest run).
* While a run writes, it holds an exclusive lock (``.fedad/lock``): a second run into the
  same directory stops at once with a one-line error.
* Each finished method's results are kept in ``.fedad/done/LABEL.{json,npz}`` and the
  standard files rewritten, so results survive Ctrl-C, SIGTERM or a later error, and
  ``--resume`` continues from them.

Every file is written, locked and removed through :mod:`fedad.rundir.files`, which never follows a
symbolic link below the claimed root; :func:`~fedad.rundir.files.refuse_links` checks the run's
structure before anything is written. Any OSError is a one-line
:class:`~fedad.core.errors.FedadError`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import signal
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np

from fedad.core.errors import FedadError, Interrupted
from fedad.interrupts import signals_held
from fedad.rundir.files import (
    Anchor,
    claimed_above,
    is_run_entry,
    mkdir,
    move,
    open_nofollow,
    output_error,
    pop_anchor,
    push_anchor,
    read_text,
    refuse_links,
    remove,
    run_holding,
    write_npz,
    write_text,
)
from fedad.rundir.layout import (
    ASIDE_DIR,
    CHECKPOINTS_DIR,
    CONFIG_FILE,
    DONE_DIR,
    FORMAT,
    LOCK_FILE,
    METRICS_FILE,
    RUN_FILE,
    SEED_DIRS,
    STATE_DIR,
)
from fedad.rundir.load import read_npz

log = logging.getLogger("fedad")
_LABEL = re.compile(r"[A-Za-z0-9_.+-]{1,64}")

State = Literal["running", "interrupted", "failed", "finished"]


@dataclass
class Done:
    """One finished method as kept for resuming: its metrics entry, history, score arrays."""

    metrics: dict[str, Any]
    history: list[dict[str, Any]]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


def _user_entries(root: Path) -> list[str]:
    """Entries of ``root`` that no fedad run writes (our interrupted temporary files aside)."""
    return sorted(
        p.name for p in root.iterdir() if not (is_run_entry(p.name, seeds=False) or _seed_run(p))
    )


def _seed_run(p: Path) -> bool:
    """A seed's folder of a several-seed run (a fedad run itself)."""
    return bool(SEED_DIRS.fullmatch(p.name)) and p.is_dir() and not p.is_symlink()


def has_results(root: Path) -> bool:
    """Whether the run in ``root`` holds a result: ``metrics.json``, a finished method kept
    for resuming, or a seed's run that does (``False`` for a folder that is not there)."""
    return root.is_dir() and not root.is_symlink() and _has_results(root)


def _has_results(root: Path) -> bool:
    done = root / STATE_DIR / DONE_DIR
    return (
        (root / METRICS_FILE).exists()
        or (done.is_dir() and any(done.iterdir()))
        or any(_seed_run(p) and _has_results(p) for p in root.iterdir())
    )


_MOVED = ".moved"
"""In the folder of a run set aside: every entry of it was moved there (the new run's
entries at the top are the new run's)."""
_CLEARING = ".clearing"
"""Putting the run back, first step: the new run's entries at the top are being removed."""
_RESTORING = ".restoring"
"""Putting the run back, second step: the top holds nothing new; entries move back."""


def _exists(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def _is_run(root: Path) -> bool:
    """Whether ``root`` holds a fedad run (``.fedad/run.json``, or ``metrics.json`` beside
    ``config.toml``: runs written before ``.fedad/`` existed), or a run that ``--force``
    set aside (``.fedad/replaced/``, whatever the replacement left)."""
    state = root / STATE_DIR
    return (
        (state / RUN_FILE).is_file()
        or ((state / ASIDE_DIR).is_dir() and not (state / ASIDE_DIR).is_symlink())
        or ((root / METRICS_FILE).is_file() and (root / CONFIG_FILE).is_file())
    )


def _refuse_inside_another(root: Path) -> None:
    """A new run's folder may not lie inside another fedad run (among its checkpoints, it
    would make that run unreadable)."""
    holder = run_holding(Path(os.path.abspath(root)).parent)
    if holder is not None:
        raise FedadError(
            f"--out '{root}' lies inside the fedad run '{holder}'",
            f"choose an --out outside '{holder}'",
        )


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
        self._anchors: tuple[Anchor, ...] = ()
        self.aside = False
        """An earlier run is set aside (``--force``) until this one has a result."""
        self.made_state = False
        """This claim made ``.fedad/`` (removed again when the claim is refused)."""

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
        if not claimed_above(root):
            _refuse_inside_another(root)
            try:  # the root as the user named it: links above it are theirs
                root.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise output_error(root, err) from None
        else:  # a seed's run inside a claimed run: not through a link either
            mkdir(root)
        run = cls(root, created)
        run.made_state = not _exists(root / STATE_DIR)
        try:
            run._anchors = push_anchor(root)
            run._check(force, resume)
        except BaseException as err:  # a refusal, or Ctrl-C / SIGTERM while claiming
            restored = run.aside
            run._undo_claim()
            if restored and isinstance(err, KeyboardInterrupt | Interrupted):
                signum = err.signum if isinstance(err, Interrupted) else int(signal.SIGINT)
                raise Interrupted(signum, (), str(root), restored=True) from None
            raise
        return run

    def _undo_claim(self) -> None:
        """A claim that did not complete leaves the folder as it found it: a run half set
        aside moved back, and a folder this claim created removed with its lock."""
        try:
            if self.aside:
                with signals_held():
                    self._move_back()
            if (self.created or self.made_state) and self._lock is not None:
                self.release()
                remove(self.root / STATE_DIR)
            if self.created:
                with contextlib.suppress(OSError):
                    self.root.rmdir()
        finally:
            self.close()

    def _check(self, force: bool, resume: bool) -> None:
        """:meth:`claim`'s rules, in order: no links, not another's folder, the lock, a run
        set aside by a replacement that never finished brought back, then (``force``) the
        old run set aside (:meth:`set_aside`)."""
        root = self.root
        refuse_links(root)
        is_run = _is_run(root)
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
        if self._recover_aside():
            is_run = _is_run(root)
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
            self.set_aside()
        elif is_run:
            self.clear()  # a run that ended before any result: nothing to keep

    def _acquire(self) -> None:
        """Take the lock; creating it is also the check that the directory is writable.

        The lock file is opened without following a link, and must be a plain file with no
        other name (a hard link would let its truncation reach another file)."""
        path = mkdir(self.root / STATE_DIR) / LOCK_FILE
        try:
            fd = open_nofollow(path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK, 0o644)
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
                self._lock.seek(0)
                self._lock.truncate()  # the pid only while held: a refused claim leaves
                self._lock.flush()  # the lock file as it found it (empty)
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock, fcntl.LOCK_UN)
                self._lock.close()
            self._lock = None

    def close(self) -> None:
        """Drop the lock and the claim (paths below the root are no longer guarded)."""
        self.release()
        pop_anchor(self._anchors)
        self._anchors = ()

    # -- replacing a run (--force): the old one set aside until the new one has a result ---
    def _aside_dir(self) -> Path:
        return self.root / STATE_DIR / ASIDE_DIR

    def _ours(self) -> list[str]:
        """The entries at the top of the run that a run wrote (``.fedad`` aside)."""
        out = []
        for name in sorted(os.listdir(self.root)):
            seed = bool(SEED_DIRS.fullmatch(name))
            ours = name != STATE_DIR and is_run_entry(name, seeds=True)
            if ours and (_seed_run(self.root / name) or not seed):
                out.append(name)
        return out

    def _state_entries(self) -> list[str]:
        state = self.root / STATE_DIR
        if not state.is_dir() or state.is_symlink():
            return []
        return [n for n in sorted(os.listdir(state)) if n not in (LOCK_FILE, ASIDE_DIR)]

    def set_aside(self) -> None:
        """``--force``: move the run here into ``.fedad/replaced/`` (renames, nothing
        copied, signals held back meanwhile). :meth:`settle` drops it once the new run has
        a result, or brings it back when the new run ends without one (a failed check, an
        error, Ctrl-C), so that a replacement that never produced anything loses nothing.
        A marker in the folder says how far a replacement got, for a claim after a kill
        (:meth:`_recover_aside`)."""
        aside = self._aside_dir()
        with signals_held():
            remove(aside)
            mkdir(aside / STATE_DIR)
            self.aside = True
            for name in self._ours():
                move(self.root / name, aside / name)
            for name in self._state_entries():
                move(self.root / STATE_DIR / name, aside / STATE_DIR / name)
            write_text(aside / _MOVED, "")

    def _restore_aside(self) -> None:
        """Remove what the new run wrote, and put the run set aside back in its place; each
        step marked first, so that a kill in between is finished by the next claim."""
        aside = self._aside_dir()
        with signals_held():
            if (aside / _MOVED).is_file():
                move(aside / _MOVED, aside / _CLEARING)
            if (aside / _CLEARING).is_file():
                self.clear()
                move(aside / _CLEARING, aside / _RESTORING)
            self._move_back()

    def _move_back(self) -> None:
        """Every entry set aside back in its place (a run's own names only, never over an
        entry already there), then the folder of the set-aside run removed."""
        aside = self._aside_dir()
        for name in sorted(os.listdir(aside)):
            ours = is_run_entry(name, seeds=True) and name != STATE_DIR
            if ours and not _exists(self.root / name):
                move(aside / name, self.root / name)
        kept_state = aside / STATE_DIR
        for name in sorted(os.listdir(kept_state)) if kept_state.is_dir() else []:
            if name not in (LOCK_FILE, ASIDE_DIR) and not _exists(self.root / STATE_DIR / name):
                move(kept_state / name, self.root / STATE_DIR / name)
        remove(aside)
        self.aside = False

    def settle(self, produced: bool) -> bool:
        """End a replacement: drop the run set aside when the new run ``produced`` a
        result, else bring it back; whether an earlier run was brought back."""
        if not self.aside:
            return False
        if produced:
            remove(self._aside_dir())
            self.aside = False
            return False
        self._restore_aside()
        return True

    def _recover_aside(self) -> bool:
        """A run set aside by a replacement that was killed (SIGKILL, a power cut) before
        it settled: back in place when the replacement left no result, else dropped;
        whether it came back. Its marker says where the replacement stopped: setting the
        run aside (no marker: nothing new at the top, move back), putting it back
        (finish that), or running (``.moved``: settle on the new run's results)."""
        aside = self._aside_dir()
        if not aside.is_dir() or aside.is_symlink():
            return False
        self.aside = True
        markers = {m for m in (_MOVED, _CLEARING, _RESTORING) if (aside / m).is_file()}
        if markers == {_MOVED}:
            return self.settle(produced=_has_results(self.root))
        if not markers:
            with signals_held():
                self._move_back()
            return True
        self._restore_aside()
        return True

    def clear(self) -> None:
        """Remove what a fedad run wrote here (never other files), keeping the lock.

        Nothing is followed: a link among fedad's entries is an error, and folders are
        removed relative to their parent's descriptor (:func:`shutil.rmtree` with ``dir_fd``,
        which never descends into a link). A run set aside by ``--force`` stays."""
        for name in self._ours():
            remove(self.root / name)
        for name in self._state_entries():
            remove(self.root / STATE_DIR / name)

    def discard_if_empty(self) -> bool:
        """After a run that wrote no result: leave no trace (the folder too, if ours), or
        put back the run that ``--force`` set aside; whether that run came back.

        Flower logs (``.flower/``) are the exception: they say why a run failed, so they
        stay, and the folder stays a (resultless) fedad run that the next run may reuse.
        """
        if _has_results(self.root):
            return False
        if self.aside:
            try:
                return self.settle(produced=False)
            except FedadError as err:  # the next claim of the folder brings it back
                log.warning("could not put back the earlier run yet: %s", err)
                return False
        flower = self.root / ".flower"
        if flower.is_dir() and any(flower.iterdir()):
            with contextlib.suppress(FedadError):
                self.set_state("failed")
            return False
        with contextlib.suppress(FedadError):
            self.clear()
        self.release()
        with contextlib.suppress(FedadError):
            remove(self.root / STATE_DIR)
        with contextlib.suppress(OSError):
            if self.created and not any(self.root.iterdir()):
                self.root.rmdir()
        return False

    # -- state ------------------------------------------------------------------------
    def set_state(self, state: State, config_text: str | None = None) -> None:
        """Record the run's state in ``.fedad/run.json`` (atomically)."""
        info: dict[str, Any] = {"format": FORMAT, "state": state, "pid": os.getpid()}
        write_text(self.root / STATE_DIR / RUN_FILE, json.dumps(info))
        if config_text is not None:
            write_text(self.root / CONFIG_FILE, config_text)

    def check_config(self, config_text: str) -> None:
        """``--resume``: refuse when the run here started from another config (one line).

        A run without a ``config.toml`` yet (stopped before it wrote one) passes when it has
        no results; with results it is refused, since they cannot be checked. The file
        is untrusted: damaged, too large or too deeply nested is a one-line error.
        """
        import tomllib

        path = self.root / CONFIG_FILE
        try:
            old = tomllib.loads(read_text(path))
            diff = config_difference(old, tomllib.loads(config_text))
        except FileNotFoundError:
            if _has_results(self.root):
                raise FedadError(
                    f"--resume: '{self.root}' holds results but no config.toml, so the config "
                    "they came from cannot be checked",
                    "start anew with --force",
                ) from None
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
            if not (self.root / CHECKPOINTS_DIR / label / "detector.json").is_file():
                continue  # results without their checkpoint: run the method again
            out[label] = Done(data["metrics"], data["history"], read_npz(arrays))
        return out

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
