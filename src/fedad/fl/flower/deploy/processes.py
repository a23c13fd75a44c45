"""Process management of a Flower deployment: start, watch and stop every process, and
make sure that nothing outlives fedad (see the package's docstring)."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from fedad.fl.flower.deploy.launch import port_open
from fedad.interrupts import raise_interrupted

START_TIMEOUT = 60.0
"""Seconds to wait for a SuperLink to accept connections."""


OWNER_ENV = "FEDAD_FLOWER_OWNER"
"""Environment variable that marks the processes of one :class:`Supervisor` (inherited by
the processes Flower starts in turn), so that stragglers can be found and stopped."""


READY_LINE = "Uvicorn running on"
"""What a Flower 1.41 SuperLink or SuperNode prints once its HTTP API listens."""


log = logging.getLogger("fedad")


def _prctl() -> Callable[..., int] | None:
    """libc's ``prctl`` (Linux), looked up here so the child has nothing to load after fork."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
        return prctl
    except (OSError, AttributeError):
        return None


PR_SET_PDEATHSIG = 1


def child_setup() -> Callable[[], None]:
    """A ``preexec_fn``: the child gets its own session (so Ctrl-C in a terminal reaches
    only fedad, which then stops the children in order) and, on Linux, SIGKILL when the
    thread that started it dies (``PR_SET_PDEATHSIG``; not inherited by its own children,
    which the reaper of :class:`Supervisor` covers). Call it in the thread that will wait
    for the child."""
    prctl = _prctl()
    parent = os.getpid()
    kill = int(signal.SIGKILL)

    def setup() -> None:  # pragma: no cover - runs in the child, between fork and exec
        os.setsid()
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, kill)
            if os.getppid() != parent:  # the parent died before the signal was armed
                os.kill(os.getpid(), kill)

    return setup


def _proc_children() -> dict[int, list[int]] | None:
    """Parent pid -> live child pids, from ``/proc`` (``None`` where there is no /proc)."""
    if not Path("/proc/self/stat").exists():
        return None
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) < 2 or fields[0] == "Z":
            continue
        children.setdefault(int(fields[1]), []).append(int(d))
    return children


def process_tree(roots: Iterable[int]) -> set[int]:
    """``roots`` and all their live descendants."""
    out = set(roots)
    children = _proc_children()
    if children is None:
        return out
    todo = list(out)
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def marked_processes(token: str) -> set[int]:
    """Live processes whose environment has ``FEDAD_FLOWER_OWNER=token`` (Linux)."""
    needle = f"{OWNER_ENV}={token}".encode()
    try:
        names = os.listdir("/proc")
    except OSError:
        return set()
    found = set()
    for d in names:
        if not d.isdigit():
            continue
        try:
            env = Path(f"/proc/{d}/environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0") and _alive(int(d)):
            found.add(int(d))
    return found


def proc_state(pid: int) -> str:
    """The state letter of ``pid`` in ``/proc`` (``R``, ``S``, ``T`` stopped, ...), or ``""``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[0] if fields else ""


def _alive(pid: int) -> bool:
    state = proc_state(pid)
    if state:
        return state not in ("Z", "X")
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return not Path("/proc").is_dir()


def _pgid(pid: int) -> int | None:
    """The process group of ``pid`` (``None`` when it is gone)."""
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _signal_all(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


_BOX = str.maketrans(dict.fromkeys("╭╮╰╯─│┃━┏┓┗┛", " "))


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def clean_output(text: str) -> list[str]:
    """A Flower process's output as plain, non-empty lines (no colours, no box drawing)."""
    lines = _ANSI.sub("", text).translate(_BOX).splitlines()
    return [" ".join(x.split()) for x in lines if x.strip()]


def failure_line(text: str) -> str:
    """The line of a Flower process's output that says why it stopped (best effort)."""
    lines = clean_output(text)
    if not lines:
        return "no output"
    for i, line in enumerate(lines):  # Flower's own exit messages: "Exit Code: 600" + reason
        if line.startswith("ERROR") and "Exit Code" in line and i + 1 < len(lines):
            reason = []  # its lines, up to Flower's link or the next log line
            for more in lines[i + 1 : i + 5]:
                if more.startswith(("For more information", "INFO", "ERROR", "WARN")):
                    break
                reason.append(more)
            return " ".join(reason or lines[i + 1 : i + 2])[:300]
    errors = [x for x in lines if re.match(r"[\w.]*(Error|Exception)\b.*:", x) or "ERROR" in x]
    return (errors or lines)[-1][:300]


_REAPER = r"""
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
needle = ("%s=%s" % (sys.argv[1], sys.argv[2])).encode()
groups, buf = set(), b""
while True:
    try:
        chunk = os.read(0, 4096)
    except InterruptedError:
        continue
    except OSError:
        break
    if not chunk:
        break
    buf += chunk
    *lines, buf = buf.split(b"\n")
    for line in lines:
        if line == b"exit":
            sys.exit(0)
        if line[:1] == b"+":
            groups.add(int(line[1:]))
        elif line[:1] == b"-":
            groups.discard(int(line[1:]))

def marked():
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for d in names:
        if d.isdigit() and int(d) != os.getpid():
            try:
                with open("/proc/%s/environ" % d, "rb") as fh:
                    if needle in fh.read().split(b"\0"):
                        found.append(int(d))
            except OSError:
                pass
    return found

for _ in range(50):
    for g in groups:
        try:
            os.killpg(g, signal.SIGKILL)
        except OSError:
            pass
    pids = marked()
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    if not pids:
        break
    time.sleep(0.1)
"""


class _Reaper:
    """A process that SIGKILLs a :class:`Supervisor`'s processes once fedad is gone.

    It reads process-group ids from a pipe (``+PGID``, ``-PGID``); end of file without a
    final ``exit`` line means that fedad died (the kernel closes the pipe whatever killed
    it), and then it kills those groups and every process marked with ``token``. It runs
    in a session of its own, so a Ctrl-C or a signal to fedad's process group misses it.
    """

    def __init__(self, token: str) -> None:
        env = {k: v for k, v in os.environ.items() if k != OWNER_ENV}
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _REAPER, OWNER_ENV, token],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )

    def send(self, line: str) -> None:
        stdin = self.proc.stdin
        if stdin is None or stdin.closed:
            return
        with contextlib.suppress(OSError, ValueError):
            stdin.write(f"{line}\n".encode())
            stdin.flush()

    def close(self) -> None:
        """Dismiss the reaper: everything was stopped the ordinary way."""
        self.send("exit")
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - it exits at once
            self.proc.kill()
            self.proc.wait(timeout=5)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """In the main thread, hold SIGINT and SIGTERM for the block (clean-up must finish: a
    second Ctrl-C must not leave children behind), then deliver the first one that came."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        got.append(signum)

    old: dict[signal.Signals, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        before = signal.getsignal(sig)
        if before is not None and before != signal.SIG_IGN:
            old[sig] = signal.signal(sig, hold)
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if got:
            signal.raise_signal(got[0])


class Supervisor:
    """Starts Flower processes (own session, parent-death signal, logs to files) and stops
    them all, with a reaper that stops them if fedad itself is killed (see the module)."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.token = f"{os.getpid()}-{secrets.token_hex(8)}"
        self._logs: list[IO[bytes]] = []
        self._lock = threading.Lock()
        self._reaper: _Reaper | None = None

    def start(
        self, name: str, argv: list[str], env: dict[str, str], stdout: int | None = None
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` as ``name``; its output goes to ``LOGDIR/NAME.log``, or to
        ``stdout`` (e.g. ``subprocess.PIPE``) when given."""
        out: int | IO[bytes]
        if stdout is None:
            self.logdir.mkdir(parents=True, exist_ok=True)
            fh = (self.logdir / f"{name}.log").open("wb")
            self._logs.append(fh)
            out = fh
        else:
            out = stdout
        with self._lock:
            if self._reaper is None:
                self._reaper = _Reaper(self.token)
            reaper = self._reaper
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**env, OWNER_ENV: self.token},
            preexec_fn=child_setup(),  # own session + parent-death signal
        )
        reaper.send(f"+{proc.pid}")  # its process group is the child's pid (setsid)
        with self._lock:
            self.procs[name] = proc
        return proc

    def log_path(self, name: str) -> Path:
        return self.logdir / f"{name}.log"

    def rotate_log(self, name: str) -> None:
        """Keep process ``name``'s log as ``NAME.log.1`` before it is started again (a new
        start truncates ``NAME.log``)."""
        path = self.log_path(name)
        with contextlib.suppress(OSError):
            path.replace(path.with_suffix(".log.1"))

    def log_text(self, name: str) -> str:
        path = self.log_path(name)
        return path.read_text(errors="replace") if path.is_file() else ""

    def log_tail(self, name: str, lines: int = 5) -> str:
        """The last lines of a process's log, as one line."""
        return " | ".join(clean_output(self.log_text(name))[-lines:])

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to process ``name`` and everything it started."""
        proc = self.procs[name]
        tree = process_tree([proc.pid])
        _signal_all(tree, sig)
        if sig == signal.SIGKILL:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)

    def stop_all(self, grace: float = 5.0) -> None:
        """SIGTERM every process started, its descendants and whatever else carries this
        supervisor's marker; SIGKILL what is left after ``grace`` seconds."""
        with signals_deferred():
            with self._lock:
                procs = list(self.procs.values())
            tree = process_tree(p.pid for p in procs if p.poll() is None)
            tree |= marked_processes(self.token)  # e.g. children of a SuperNode that died
            groups = set()
            for p in procs:
                if p.poll() is None:
                    with contextlib.suppress(OSError):
                        os.killpg(p.pid, signal.SIGTERM)
                        groups.add(p.pid)
            # one SIGTERM each: Flower's handler takes the first, shuts down gracefully (a
            # SuperNode signs off at the SuperLink) and leaves a second to the default action
            _signal_all((pid for pid in tree if _pgid(pid) not in groups), signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and any(_alive(pid) for pid in tree):
                time.sleep(0.1)
            left = process_tree(pid for pid in tree if _alive(pid))  # with late-born children
            left |= marked_processes(self.token)
            _signal_all(left, signal.SIGKILL)
            for p in procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=5)
            for fh in self._logs:
                fh.close()
            self._logs.clear()
            with self._lock:
                reaper, self._reaper = self._reaper, None
            if reaper is not None:
                reaper.close()


def wait_started(
    proc: subprocess.Popen[bytes],
    output: Callable[[], str],
    port: int,
    host: str = "127.0.0.1",
    timeout: float = START_TIMEOUT,
) -> str:
    """Wait until a Flower server process listens: ``"ready"``, ``"exited"`` or ``"timeout"``.

    Ready: it printed :data:`READY_LINE` (its own socket is bound), or, should a later
    Flower print something else, ``host:port`` has accepted connections for 2 s while it
    runs (a port that another process holds would have made it exit by then).
    """
    deadline = time.monotonic() + timeout
    open_since: float | None = None
    while True:
        if proc.poll() is not None:
            return "exited"
        if READY_LINE in output():
            return "ready"
        if port_open(host, port):
            open_since = open_since or time.monotonic()
            if time.monotonic() - open_since >= 2.0:
                return "ready"
        else:
            open_since = None
        if time.monotonic() >= deadline:
            return "timeout"
        time.sleep(0.05)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """In the main thread, make SIGTERM raise :class:`~fedad.core.errors.Interrupted` (signum 15)
    so that clean-up code runs, unless the caller already handles (or ignores) SIGTERM."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL
    ):
        yield
        return

    old = signal.signal(signal.SIGTERM, raise_interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
