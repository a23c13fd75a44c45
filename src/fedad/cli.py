"""The ``fedad`` command line: ``run``, ``list``, ``report``.

User mistakes (bad config, missing data, impossible partitions) print one line on stderr and
exit with status 2; no traceback.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from fedad.errors import FedadError, Interrupted
from fedad.fl.flower_cli import app as flower_app

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="fedad: federated anomaly detection experiments from one TOML file.",
    pretty_exceptions_enable=False,
)
console = Console(stderr=False, width=None if sys.stdout.isatty() else 120)
errors = Console(stderr=True)


def _fail(err: Exception) -> None:
    errors.print(f"[bold red]error:[/] {escape(str(err))}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _mb(v: Any) -> str:
    return "–" if v is None else f"{v / 1e6:.2f}"


def results_table(metrics: dict[str, Any]) -> Table:
    """The terminal summary: one row per method, pooled metrics."""
    t = Table(title="results (pooled over clients' local test sets)")
    t.add_column("method", no_wrap=True)
    for col in ("AUROC", "AUPR", "F1", "precision", "recall", "FE", "ME"):
        t.add_column(col, justify="right", no_wrap=True)
    t.add_column("MB up", justify="right")
    t.add_column("MB down", justify="right")
    t.add_column("s", justify="right")
    for label, m in metrics["methods"].items():
        t.add_row(
            label,
            *(_fmt(m.get(k)) for k in ("auroc", "aupr", "f1", "precision", "recall", "fe", "me")),
            _mb(m.get("bytes_up")),
            _mb(m.get("bytes_down")),
            _fmt(m.get("seconds"), 1),
        )
    return t


@app.command()
def run(
    config: Annotated[Path, typer.Argument(help="experiment TOML file")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="output directory")] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="override a config value: key=value (dotted keys)"),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="replace the fedad run already in --out")
    ] = False,
    resume: Annotated[
        bool,
        typer.Option("--resume", help="complete an interrupted run in --out (same config)"),
    ] = False,
) -> None:
    """Run an experiment and write metrics, history, scores, checkpoints and report.html.

    Exit status: 0 done, 2 bad input or a failed run (one line on stderr), 130 / 143 after
    Ctrl-C / SIGTERM (the finished methods' results are kept; --resume completes the run).
    """
    from fedad.config import load_config

    try:
        cfg = load_config(config, set_ or [])
        out_dir = Path("runs") / config.stem if out is None else out
        with _terminate_as_interrupt():
            _run(cfg, out_dir, cfg.engine.progress and not quiet, force, resume)
    except FedadError as err:
        _fail(err)
    except Interrupted as stop:
        _interrupted(stop, config)


@contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises :class:`Interrupted` (like Ctrl-C) for the duration of a run."""

    def on_term(signum: int, frame: object) -> None:
        raise Interrupted(signum)

    try:
        previous = signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupted(stop: Interrupted, config: Path) -> None:
    try:
        name = signal.Signals(stop.signum).name
    except ValueError:
        name = f"signal {stop.signum}"
    if stop.kept:
        errors.print(
            f"interrupted by {name}: kept {', '.join(stop.kept)} in {escape(stop.out)}/; "
            f"complete the run with `fedad run {escape(str(config))} --resume --out "
            f"{escape(stop.out)}`",
            highlight=False,
            soft_wrap=True,
        )
    else:
        errors.print(f"interrupted by {name}: no method had finished, no results kept")
    raise typer.Exit(128 + stop.signum)


def _run(
    cfg: Any, out_dir: Path, progress: bool, force: bool = False, resume: bool = False
) -> None:
    from fedad.runner import run_experiment

    total = cfg.rounds * len(cfg.methods)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not progress,
        transient=True,
    ) as bar:
        task = bar.add_task("preparing data", total=total)

        def on_method(label: str) -> None:
            bar.update(task, description=f"[cyan]{label}")

        def on_round(label: str, row: dict[str, Any]) -> None:
            if row["round"] >= 1:
                bar.advance(task)

        metrics = run_experiment(
            cfg, out_dir, on_round=on_round, on_method=on_method, force=force, resume=resume
        )
    console.print(results_table(metrics))
    secs = metrics["experiment"]["total_seconds"]
    console.print(f"wrote {out_dir}/ (report.html, metrics.json, history.csv) in {secs:.1f} s")


@app.command("list")
def list_(
    what: Annotated[str, typer.Argument(help="methods | datasets | partitions")],
) -> None:
    """List registered methods, datasets or partition schemes."""
    from fedad.data.registry import list_datasets
    from fedad.fl.algorithm import registry

    if what == "methods":
        t = Table("method", "detectors", "data", "what it is")
        for name, cls in registry().items():
            t.add_row(name, ", ".join(cls.detectors) or "own", ", ".join(cls.kinds), cls.summary)
    elif what == "datasets":
        t = Table("dataset", "description")
        for name, desc in list_datasets():
            t.add_row(name, desc)
    elif what == "partitions":
        t = Table("scheme", "what it does")
        for name, desc in PARTITIONS.items():
            t.add_row(name, desc)
    else:
        _fail(FedadError(f"cannot list '{what}'", "choose methods, datasets or partitions"))
    console.print(t)


PARTITIONS = {
    "iid": "normal training data shuffled and split evenly",
    "dirichlet": "per class, shares over clients ~ Dir(alpha); small alpha = very non-IID",
    "dominant": "each client mostly one normal class (dominant_fraction), the rest mixed",
    "one-class": "each client exactly one normal class",
    "by-source": "each client one data source (data.sources)",
}


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="a directory written by fedad run")],
) -> None:
    """Rebuild report.html of a run directory."""
    from fedad.report.html import write_report

    try:
        if not (run_dir / "metrics.json").is_file():
            raise FedadError(
                f"'{run_dir}' has no metrics.json", "give a directory written by fedad run"
            )
        path = write_report(run_dir)
    except FedadError as err:
        _fail(err)
    console.print(f"wrote {path}")


app.add_typer(flower_app, name="flower")


def main() -> None:
    """Console-script entry point."""
    logging.basicConfig(
        level=logging.WARNING,
        format="%(message)s",
        handlers=[RichHandler(console=errors, show_path=False, show_time=False)],
    )
    try:
        app()
    except FedadError as err:  # pragma: no cover - commands handle their own
        errors.print(f"error: {err}")
        sys.exit(2)


if __name__ == "__main__":
    main()
