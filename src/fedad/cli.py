"""The ``fedad`` command line: ``run``, ``list``, ``report``, ``score``, ``export``.

User mistakes (bad config, missing data, impossible partitions) print one line on stderr and
exit with status 2; no traceback. So does output that cannot be written (standard output
closed or full). Ctrl-C prints one line too, whenever it comes, and exits with 130
(:class:`_CtrlC`).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Annotated, Any

try:  # a Ctrl-C while the command line starts: one line, not a traceback (see _CtrlC)
    import typer
    from rich.console import Console
    from rich.logging import RichHandler
    from rich.markup import escape
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.table import Table

    from fedad.errors import FedadError, Interrupted
    from fedad.fl.flower_cli import app as flower_app
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
console = Console(
    stderr=False, width=None if sys.stdout is not None and sys.stdout.isatty() else 120
)
errors = Console(stderr=True)


def _fail(err: Exception) -> None:
    errors.print(f"[bold red]error:[/] {escape(str(err))}", highlight=False, soft_wrap=True)
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


def _write_stdout(text: str) -> None:
    """``text`` on standard output, flushed; a :class:`FedadError` when that fails."""
    if sys.stdout is None:
        raise _stdout_error(None)
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except OSError as err:
        raise _stdout_error(err) from None


def _show(*objects: Any) -> None:
    """``console.print(*objects)`` on standard output, flushed; a :class:`FedadError` when
    that fails (closed or full)."""
    if sys.stdout is None:
        raise _stdout_error(None)
    try:
        console.print(*objects)
        sys.stdout.flush()
    except OSError as err:
        raise _stdout_error(err) from None


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _mb(v: Any) -> str:
    return "–" if v is None else f"{v / 1e6:.2f}"


def _cell(m: dict[str, Any], key: str, kind: str, spread: bool) -> str:
    """One value of the results table, formatted by its column's kind; ``mean ± std`` of a
    several-seed aggregate for the columns with ``spread``."""
    v = m.get(key)
    if kind == "bytes":
        return _mb(v) if isinstance(v, int | float) or v is None else _fmt(v)
    digits = 1 if kind == "seconds" else 3
    text = _fmt(v, digits)
    std = m.get("std")
    if spread and isinstance(std, dict) and isinstance(std.get(key), float) and v is not None:
        text += f" ± {std[key]:.{digits}f}"
    return text


def results_table(metrics: dict[str, Any]) -> Table:
    """The terminal summary: one row per method, pooled metrics (mean +- std over seeds).

    The columns are metrics.json's ``columns["summary"]`` (:func:`fedad.evaluation.
    columns_of`), each shown as its :func:`~fedad.evaluation.column_spec` says: those with a
    terminal header, and with seeds only those kept beside the ``± std`` of the spread ones.
    """
    from fedad.evaluation import column_spec, columns_of

    seeds = metrics.get("experiment", {}).get("seeds")
    several = isinstance(seeds, list)
    how = "pooled over clients' local test sets"
    if metrics.get("experiment", {}).get("pooled") == "client-mean":
        how = "mean over clients of their one-vs-rest metrics"
    title = f"results ({how})"
    if several:
        title = f"results: mean ± std over {len(seeds)} seeds ({how})"
    t = Table(title=title)
    t.add_column("method", no_wrap=True)
    specs = [column_spec(k) for k in columns_of(metrics)["summary"]]
    specs = [c for c in specs if c.terminal is not None and (c.with_seeds or not several)]
    for c in specs:
        wraps = c.kind in ("bytes", "seconds")
        t.add_column(c.terminal or c.key, justify="right", no_wrap=not wraps)
    methods = metrics.get("methods")
    for label, m in (methods if isinstance(methods, dict) else {}).items():
        entry = m if isinstance(m, dict) else {}
        t.add_row(label, *(_cell(entry, c.key, c.kind, c.spread) for c in specs))
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
        with _terminate_as_interrupt():
            _run(cfg, out_dir, cfg.engine.progress and not quiet, force, resume, jobs, finished)
    except FedadError as err:
        _fail(err)
    except Interrupted as stop:
        _interrupted(stop, config)
    except KeyboardInterrupt:  # before the run began, or after it ended
        _interrupted(Interrupted(signal.SIGINT, out=str(finished[0]) if finished else ""), config)


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
    """Say what an interrupted run kept, in one line, and exit with ``128 + signum``."""
    _CTRL_C.reported = True
    try:
        name = signal.Signals(stop.signum).name
    except ValueError:
        name = f"signal {stop.signum}"
    if stop.out and not stop.kept:
        errors.print(
            f"interrupted by {name} after the run had finished: its results are in "
            f"{escape(stop.out)}/",
            highlight=False,
            soft_wrap=True,
        )
    elif stop.kept:
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
    cfg: Any,
    out_dir: Path,
    progress: bool,
    force: bool = False,
    resume: bool = False,
    jobs: int = 1,
    finished: list[Path] | None = None,
) -> None:
    """Run ``cfg`` into ``out_dir`` with a progress bar, then show the results table;
    ``out_dir`` is appended to ``finished`` once every output is written."""
    from fedad.runner import run_experiment
    from fedad.seeds import run_seeds

    seeds = cfg.seed_list()
    parallel = cfg.seeds is not None and jobs > 1
    total = len(seeds) if parallel else cfg.rounds * len(cfg.methods) * len(seeds)
    current = {"seed": ""}
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
            bar.update(task, description=f"[cyan]{current['seed']}{label}")

        def on_round(label: str, row: dict[str, Any]) -> None:
            if row["round"] >= 1:
                bar.advance(task)

        def on_seed(seed: int, what: str) -> None:
            current["seed"] = f"seed {seed}: "
            if parallel and what != "start":
                bar.advance(task)
            if parallel:
                bar.update(task, description=f"[cyan]{jobs} workers")

        if cfg.seeds is None:
            metrics = run_experiment(
                cfg, out_dir, on_round=on_round, on_method=on_method, force=force, resume=resume
            )
        else:
            metrics = run_seeds(
                cfg,
                out_dir,
                jobs=jobs,
                on_round=on_round,
                on_method=on_method,
                on_seed=on_seed,
                force=force,
                resume=resume,
            )
    if finished is not None:
        finished.append(out_dir)
    secs = metrics["experiment"]["total_seconds"]
    _show(results_table(metrics))
    _show(f"wrote {out_dir}/ (report.html, metrics.json, history.csv) in {secs:.1f} s")


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
    try:
        _show(t)
    except FedadError as err:
        _fail(err)


PARTITIONS = {
    "iid": "normal training data shuffled and split evenly",
    "dirichlet": "per class, shares over clients ~ Dir(alpha); small alpha = very non-IID",
    "dominant": "each client mostly one normal class (dominant_fraction), the rest mixed",
    "one-class": "each client exactly one normal class",
    "by-source": "each client one data source (data.sources)",
    "one-vs-rest": "each client one normal class; the other classes are its anomalies",
    "natural": "one client per value of data.client_column (or the image folder's clients)",
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
        _show(f"wrote {path}")
    except FedadError as err:
        _fail(err)


@app.command()
def score(
    run_dir: Annotated[Path, typer.Argument(help="a directory written by fedad run")],
    data: Annotated[Path, typer.Argument(help="a .csv/.tsv/.parquet file or an image folder")],
    method: Annotated[str, typer.Option("--method", "-m", help="the method's label")],
    client: Annotated[
        str | None,
        typer.Option(help="the client whose detector scores (number or natural id value)"),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="write the CSV here (default: stdout)")
    ] = None,
    id_column: Annotated[
        str | None, typer.Option("--id-column", help="table column giving each row's id")
    ] = None,
    skip_bad_files: Annotated[
        bool, typer.Option("--skip-bad-files", help="skip unreadable images, and count them")
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="replace the file at --out")] = False,
) -> None:
    """Score new data with a trained detector, preprocessed as in training."""
    from fedad.scoring import score_data, scores_csv

    try:
        if out is not None and out.exists() and not force:
            raise FedadError(f"'{out}' exists", "choose another --out, or add --force")
        scored = score_data(run_dir, data, method, client, id_column, skip_bad_files)
        text = scores_csv(scored)
        if out is not None:
            _write_file(out, text)
        else:
            _write_stdout(text)
    except (FedadError, OSError) as err:
        _fail(err)
    n, k = len(scored.ids), int(scored.flags.sum())
    where = f" to {out}" if out is not None else ""
    errors.print(f"scored {n} inputs with '{method}'{where}: {k} flagged as anomalies")


@app.command()
def export(
    run_dir: Annotated[Path, typer.Argument(help="a directory written by fedad run")],
    method: Annotated[str, typer.Option("--method", "-m", help="the method's label")],
    client: Annotated[
        str | None,
        typer.Option(help="only this client's detector (number or natural id value)"),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="a new or empty folder (default: exports/LABEL)"),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="replace a previous export in --out")
    ] = False,
) -> None:
    """Export a method's detectors as ONNX models (client-<i>.onnx or global.onnx, and
    model.json) that score raw inputs with onnxruntime alone, as fedad scores them."""
    from fedad.export import export_run

    target = Path("exports") / method if out is None else out
    try:
        done = export_run(run_dir, method, target, client, force)
    except FedadError as err:
        _fail(err)
    models = [f for f in done.files if f.endswith(".onnx")]
    _show(f"wrote {done.out}/ ({', '.join(models)}, model.json): scores checked against fedad's")


def _write_file(out: Path, text: str) -> None:
    """``text`` into the file ``out`` (atomically); a one-line error naming it otherwise."""
    from fedad.outdir import write_text

    try:
        write_text(out, text)
    except OSError as err:
        raise FedadError(f"cannot write '{out}': {err.strerror or err}") from None


app.add_typer(flower_app, name="flower")


class _CtrlC:
    """The command line's SIGINT handler: the first Ctrl-C raises ``KeyboardInterrupt``
    (a run then keeps its finished methods and stops, :func:`run`); the ones that follow
    while that happens only say it is under way, so that three quick Ctrl-C neither cut the
    keeping short nor end in the default handler's silent death by signal. Ctrl-\\
    (SIGQUIT) still stops at once. ``reported``: a command already said it was interrupted.
    """

    def __init__(self) -> None:
        self.count = 0
        self.reported = False

    def __call__(self, signum: int, frame: object) -> None:
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


_CTRL_C = _CtrlC()


def main() -> None:
    """Console-script entry point."""
    installed = _CTRL_C.install()
    try:
        logging.basicConfig(
            level=logging.WARNING,
            format="%(message)s",
            handlers=[RichHandler(console=errors, show_path=False, show_time=False)],
        )
        app()
    except FedadError as err:  # pragma: no cover - commands handle their own
        errors.print(f"error: {err}")
        sys.exit(2)
    except SystemExit as done:
        if done.code == 128 + signal.SIGINT and _CTRL_C.count and not _CTRL_C.reported:
            errors.print("interrupted by SIGINT")  # a command that did not say it
        raise
    except KeyboardInterrupt:  # outside any command (typer's own work)
        errors.print("interrupted by SIGINT")
        raise SystemExit(128 + signal.SIGINT) from None
    finally:
        if installed:  # a Ctrl-C while Python exits must not kill it by signal
            signal.signal(signal.SIGINT, signal.SIG_IGN)


if __name__ == "__main__":
    main()
