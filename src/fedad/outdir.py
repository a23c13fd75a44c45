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
import shutil
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
    r"\.tmp-[0-9]+"
)

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


# -- atomic writes --------------------------------------------------------------------------


def _atomic(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
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
    """``mkdir -p`` with a one-line error."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise output_error(path, err) from None
    return path


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


class RunDir:
    """A claimed output directory: use as a context manager around the whole run."""

    def __init__(self, root: Path, created: bool) -> None:
        self.root = root
        self.created = created
        self._lock: IO[str] | None = None

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
        created = not root.exists()
        mkdir(root)
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
        run = cls(root, created)
        run._acquire()
        try:
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
                        "add --force to replace it, --resume to complete it, or choose "
                        "another --out",
                    )
                run.clear()
            elif is_run:
                run.clear()  # a run that ended before any result: nothing to keep
        except BaseException:
            run.release()
            raise
        return run

    def _acquire(self) -> None:
        """Take the lock; creating it is also the check that the directory is writable."""
        state = mkdir(self.root / STATE_DIR)
        path = state / LOCK_FILE
        try:
            fh = open(path, "a+")  # noqa: SIM115 - held open for the run's lifetime
        except OSError as err:
            raise output_error(path, err) from None
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            holder = fh.read().strip()[:20]
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

    def clear(self) -> None:
        """Remove what a fedad run wrote here (never other files), keeping the lock."""
        for name in OUTPUTS:
            with contextlib.suppress(FileNotFoundError):
                _remove(self.root / name)
        for name in ("checkpoints", ".flower"):
            _remove(self.root / name)
        for p in list(self.root.iterdir()):
            if _TMP.fullmatch(p.name) or _seed_run(p):
                _remove(p)
        state = self.root / STATE_DIR
        for p in state.iterdir() if state.is_dir() else []:
            if p.name != LOCK_FILE:
                _remove(p)

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
        with contextlib.suppress(OSError):
            shutil.rmtree(self.root / STATE_DIR)
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

        A run without a ``config.toml`` yet (stopped before it wrote one) passes.
        """
        import tomllib

        path = self.root / "config.toml"
        try:
            old = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as err:
            raise FedadError(f"--resume: '{path}' is damaged ({str(err)[:120]})") from None
        diff = config_difference(old, tomllib.loads(config_text))
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
                data = json.loads(meta.read_text(encoding="utf-8"))
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
        self.release()


def _remove(path: Path) -> None:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    except OSError as err:
        raise FedadError(
            f"cannot clear '{path}': {_why(err)}", "remove it yourself or choose another --out"
        ) from None


@contextlib.contextmanager
def staged_dir(final: Path) -> Iterator[Path]:
    """A temporary folder beside ``final`` that replaces it when the block succeeds."""
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    _remove(tmp)
    mkdir(tmp)
    try:
        yield tmp
        _remove(final)
        os.replace(tmp, final)
    except OSError as err:
        raise output_error(final, err) from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


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
