"""What every ``fedad`` sub-command shares: the typer options and arguments written once,
the consoles, the one-line errors and exit statuses, standard output that cannot be written,
and Ctrl-C / SIGTERM.

User mistakes (bad config, missing data, impossible partitions) print one line on stderr and
exit with status 2; no traceback (:func:`fail`). So does output that cannot be written
(standard output closed or full: :func:`show`, :func:`write_stdout`). Ctrl-C prints one line
too, whenever it comes, and exits with 130 (:class:`CtrlC`, :func:`interrupted`).

The overrides of ``--set`` (``key=value``, dotted keys) are parsed by
:func:`fedad.config.load_config`, which every command that reads a config calls.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from types import FrameType
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from fedad.core.errors import FedadError, Interrupted
from fedad.interrupts import deferred_while_importing, raise_interrupted
from fedad.printable import printable

ConfigFile = Annotated[Path, typer.Argument(help="experiment TOML file")]
RunDir = Annotated[Path, typer.Argument(help="a directory written by fedad run")]
OutDir = Annotated[Path | None, typer.Option("--out", "-o", help="output directory")]
SetValues = Annotated[
    list[str] | None,
    typer.Option("--set", help="override a config value: key=value (dotted keys)"),
]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar")]
ForceRun = Annotated[bool, typer.Option("--force", help="replace the fedad run already in --out")]
Resume = Annotated[
    bool,
    typer.Option("--resume", help="complete an interrupted run in --out (same config)"),
]
MethodLabel = Annotated[str, typer.Option("--method", "-m", help="the method's label")]

NOT_A_TERMINAL_WIDTH = 1000
"""Standard output that is no terminal (a CI log, ``| tee``) has no width to fit: tables
are written whole there, never cut to ``3.…``."""
console = Console(
    stderr=False,
    width=None if sys.stdout is not None and sys.stdout.isatty() else NOT_A_TERMINAL_WIDTH,
)
errors = Console(stderr=True)


def shown(text: object) -> str:
    """``text`` (from a file, a run directory, a user) for a Rich print: its control
    characters escaped (:func:`fedad.printable.printable`: ``\\x1b`` for an escape, so that
    none reaches the terminal) and its Rich markup too (``[red]`` shown as written)."""
    return escape(printable(text))


def fail(err: Exception) -> NoReturn:
    """``error: ERR`` on stderr in one line (its control characters and markup escaped:
    :func:`shown`), and exit status 2."""
    errors.print(f"[bold red]error:[/] {shown(err)}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _stdout_error(err: OSError | None) -> FedadError:
    """The one-line error for output that cannot go to standard output (``None``: it is
    closed). The unwritten rest is sent to /dev/null, so that Python does not fail again
    flushing it at exit."""
    out = sys.stdout
    try:
        if out is not None and out.fileno() == 1:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.close(null)
    except (OSError, ValueError):
        pass
    why = "it is closed" if err is None else (err.strerror or str(err))
    return FedadError(f"cannot write to standard output: {why}")


def write_stdout(text: str) -> None:
    """``text`` on standard output, flushed; a :class:`FedadError` when that fails."""
    if sys.stdout is None:
        raise _stdout_error(None)
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except OSError as err:
        raise _stdout_error(err) from None


def show(*objects: Any) -> None:
    """``console.print(*objects)`` on standard output, flushed; a :class:`FedadError` when
    that fails (closed or full)."""
    if sys.stdout is None:
        raise _stdout_error(None)
    try:
        console.print(*objects)
        sys.stdout.flush()
    except OSError as err:
        raise _stdout_error(err) from None


def write_file(out: Path, text: str) -> None:
    """``text`` into the file ``out`` (atomically); a one-line error naming it otherwise."""
    from fedad.rundir.files import write_text

    try:
        write_text(out, text)
    except OSError as err:
        raise FedadError(f"cannot write '{out}': {err.strerror or err}") from None


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises :class:`Interrupted` (like Ctrl-C) for the duration of a run."""

    try:
        previous = signal.signal(signal.SIGTERM, raise_interrupted)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def shell_quote(path: str | Path) -> str:
    """``path`` as a shell word (quoted only where it needs it), for a command to copy."""
    return shlex.quote(str(path))


def interrupted(
    stop: Interrupted, config: Path, command: str = "run", options: Sequence[str] = ()
) -> NoReturn:
    """Say what an interrupted run kept, in one line, and exit with ``128 + signum``;
    ``options``: the command's own (``--set k=v`` ...), repeated in the ``--resume``
    command it suggests."""
    CTRL_C.reported = True
    try:
        name = signal.Signals(stop.signum).name
    except ValueError:
        name = f"signal {stop.signum}"
    out = escape(stop.out)
    if stop.finished:
        text = f"interrupted by {name} after the run had finished: its results are in {out}/"
    elif stop.kept:
        text = (
            f"interrupted by {name}: kept {', '.join(stop.kept)} in {out}/; complete the run "
            f"with `fedad {command} {escape(shell_quote(config))}"
            f"{''.join(' ' + escape(shell_quote(o)) for o in options)} --resume --out "
            f"{escape(shell_quote(stop.out))}`"
        )
    elif stop.restored:
        text = (
            f"interrupted by {name}: no method had finished; the earlier run in {out}/ is "
            "kept as it was"
        )
    else:
        text = f"interrupted by {name}: no method had finished, no results kept"
    errors.print(text, highlight=False, soft_wrap=True)
    raise typer.Exit(128 + stop.signum)


class CtrlC:
    """The command line's SIGINT handler: the first Ctrl-C raises ``KeyboardInterrupt``
    (a run then keeps its finished methods and stops, :func:`fedad.cli.run.run`); the ones
    that follow while that happens only say it is under way, so that three quick Ctrl-C
    neither cut the keeping short nor end in the default handler's silent death by signal.
    Ctrl-\\ (SIGQUIT) still stops at once. A Ctrl-C while a module loads is put off until it
    has loaded, at most 5 s; a second one while it waits acts at once
    (:func:`fedad.interrupts.deferred_while_importing`). ``reported``: a command already said
    it was interrupted.
    """

    def __init__(self) -> None:
        self.count = 0
        self.reported = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.count == 0 and deferred_while_importing(signum, frame):
            return  # the first Ctrl-C comes back once the module has loaded
        self.count += 1
        if self.count == 1:
            raise KeyboardInterrupt
        if self.count == 2:
            note = b"stopping after Ctrl-C: keeping what finished (Ctrl-\\ quits at once)\n"
            with suppress(OSError):
                os.write(2, note)

    def install(self) -> bool:
        """Take SIGINT if it has Python's default handler (an ignored SIGINT, as a shell's
        background job has, stays ignored); whether it did."""
        try:
            if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
                return False
            signal.signal(signal.SIGINT, self)
        except ValueError:  # not the main thread
            return False
        return True


CTRL_C = CtrlC()
"""The handler :func:`fedad.cli.app.main` installs; :func:`interrupted` marks it reported."""
