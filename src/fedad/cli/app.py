"""The ``fedad`` command line assembled: ``run``, ``list``, ``report``, ``score``, ``export``
and ``flower ...``, one module each; :func:`main` is the console script.

Each sub-command module imports only the shared modules (:mod:`fedad.cli.options`,
:mod:`fedad.cli.progress`, :mod:`fedad.cli.summary`), never another sub-command or this one;
heavy modules (torch, the methods) are imported inside the commands.
"""

from __future__ import annotations

import logging
import signal
import sys

from fedad.cli.tuning import tune_process

tune_process()  # before anything loads torch (docs/runs.md)

try:  # a Ctrl-C while the command line starts: one line, not a traceback (see CtrlC)
    import typer
    from rich.logging import RichHandler

    from fedad.cli import bench, export, flower, listing, options, report, run, score
    from fedad.core.errors import FedadError
    from fedad.interrupts import keep_swallowed_signals
except KeyboardInterrupt:
    if sys.stderr is not None:
        sys.stderr.write("interrupted by SIGINT while starting: nothing was done\n")
    raise SystemExit(128 + signal.SIGINT) from None

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="fedad: federated anomaly detection experiments from one TOML file.",
    pretty_exceptions_enable=False,
)
app.command("run")(run.run)
app.command("list")(listing.list_)
app.command("report")(report.report)
app.command("score")(score.score)
app.command("export")(export.export)
app.command("bench")(bench.bench)
app.add_typer(flower.app, name="flower")


def main() -> None:
    """Console-script entry point."""
    ctrl_c = options.CTRL_C
    installed = ctrl_c.install()
    keep_swallowed_signals()
    try:
        logging.basicConfig(
            level=logging.WARNING,
            format="%(message)s",
            handlers=[RichHandler(console=options.errors, show_path=False, show_time=False)],
        )
        app()
    except FedadError as err:  # pragma: no cover - commands handle their own
        options.errors.print(f"error: {err}")
        sys.exit(2)
    except SystemExit as done:
        if done.code == 128 + signal.SIGINT and ctrl_c.count and not ctrl_c.reported:
            options.errors.print("interrupted by SIGINT")  # a command that did not say it
        raise
    except KeyboardInterrupt:  # outside any command (typer's own work)
        options.errors.print("interrupted by SIGINT")
        raise SystemExit(128 + signal.SIGINT) from None
    finally:
        if installed:  # a Ctrl-C while Python exits must not kill it by signal
            signal.signal(signal.SIGINT, signal.SIG_IGN)
