"""``fedad run CONFIG``: an experiment into a run directory."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated

import typer

from fedad.cli.options import (
    ConfigFile,
    ForceRun,
    OutDir,
    Quiet,
    Resume,
    SetValues,
    fail,
    interrupted,
    terminate_as_interrupt,
)
from fedad.cli.progress import run_with_progress
from fedad.core.errors import FedadError, Interrupted
from fedad.interrupts import swallowed


def run(
    config: ConfigFile,
    out: OutDir = None,
    set_: SetValues = None,
    quiet: Quiet = False,
    force: ForceRun = False,
    resume: Resume = False,
    jobs: Annotated[
        int,
        typer.Option("--jobs", "-j", min=1, help="with seeds = [...]: seeds run in N processes"),
    ] = 1,
) -> None:
    """Run an experiment and write metrics, history, scores, checkpoints and report.html.

    With ``seeds = [...]`` each seed is a complete run in OUT/seed-N/ and OUT/ holds the
    mean +- std over seeds. Exit status: 0 done, 2 bad input or a failed run (one line on
    stderr), 130 / 143 after Ctrl-C / SIGTERM (the finished methods' results are kept;
    --resume completes the run).
    """
    finished: list[Path] = []
    try:
        from fedad.config import load_config

        cfg = load_config(config, set_ or [])
        out_dir = Path("runs") / config.stem if out is None else out
        if jobs > 1 and cfg.seeds is None:
            raise FedadError(
                "--jobs runs seeds in parallel, and this config has one seed",
                "give seeds = [0, 1, 2] in the config or --set 'seeds=[0,1,2]'",
            )
        with terminate_as_interrupt():
            run_with_progress(
                cfg, out_dir, cfg.engine.progress and not quiet, force, resume, jobs, finished
            )
            late = swallowed()  # a signal Python ignored after the last check: act on it now
            if late is not None:
                raise Interrupted(late)
    except FedadError as err:
        fail(err)
    except Interrupted as stop:
        if finished and not stop.kept:  # SIGTERM while the results were shown
            stop = Interrupted(stop.signum, out=str(finished[0]), finished=True)
        again = [f"--set={v}" for v in set_ or []] + ([f"--jobs={jobs}"] if jobs > 1 else [])
        interrupted(stop, config, options=again)
    except KeyboardInterrupt:  # before the run began, or after it ended
        interrupted(
            Interrupted(signal.SIGINT, out=str(finished[0]), finished=True)
            if finished
            else Interrupted(signal.SIGINT),
            config,
        )
