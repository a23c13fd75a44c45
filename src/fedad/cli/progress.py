"""A run with a progress bar, then the results table: what ``fedad run`` and ``fedad flower
run`` share (:func:`run_with_progress`)."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from fedad.cli.options import console, show
from fedad.cli.summary import results_table
from fedad.core.errors import MethodsFailed


class PlainProgress:
    """Progress as plain lines, for standard output that is no terminal (a CI log, ``| tee``):
    one when a method starts, then at most one every :data:`EVERY` seconds and one at the
    end of its rounds, each with its count and the time since the run began. A drop-in for
    the few calls :func:`run_with_progress` makes of Rich's :class:`~rich.progress.Progress`."""

    EVERY = 10.0

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.last = -math.inf
        self.description = ""
        self.total = 0.0
        self.done = 0.0

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, description: str, /, *, total: float) -> int:
        self.description, self.total, self.done = description, total, 0.0
        self._say()
        return 0

    def _say(self) -> None:
        self.last = time.monotonic()
        text = Text.from_markup(self.description).plain
        done, total = int(self.done), int(self.total)
        show(f"{text}: {done}/{total} rounds ({self.last - self.t0:.0f} s)")

    def update(self, task: Any, /, *, description: str) -> None:
        changed = description != self.description
        self.description = description
        if changed:
            self._say()

    def advance(self, task: Any, /) -> None:
        self.done += 1
        if time.monotonic() - self.last >= self.EVERY or self.done >= self.total:
            self._say()

    def stop(self) -> None:
        return None


class _Bar(Protocol):
    """What :func:`run_with_progress` uses of a progress display."""

    def __enter__(self) -> Any: ...
    def __exit__(self, *exc: Any) -> Any: ...
    def add_task(self, description: str, /, *, total: float) -> Any: ...
    def update(self, task: Any, /, *, description: str) -> None: ...
    def advance(self, task: Any, /) -> None: ...
    def stop(self) -> None: ...


def _progress(progress: bool) -> _Bar:
    """Rich's progress bar on a terminal, :class:`PlainProgress` elsewhere; none when off."""
    if progress and not console.is_terminal:
        return PlainProgress()
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not progress,
        transient=True,
    )


def run_with_progress(
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
    with _progress(progress) as bar:
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

        try:
            if cfg.seeds is None:
                metrics = run_experiment(
                    cfg,
                    out_dir,
                    on_round=on_round,
                    on_method=on_method,
                    force=force,
                    resume=resume,
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
        except MethodsFailed as err:  # the other methods finished: show them first
            if err.data is not None:
                bar.stop()
                show(results_table(err.data))
                show(f"wrote {out_dir}/ (report.html, metrics.json, history.csv)")
            raise
    if finished is not None:
        finished.append(out_dir)
    secs = metrics["experiment"]["total_seconds"]
    show(results_table(metrics))
    show(f"wrote {out_dir}/ (report.html, metrics.json, history.csv) in {secs:.1f} s")


class BenchCallbacks:
    """What ``fedad bench`` shows as it goes: a bar (or plain lines) per federation run."""

    def __init__(self, bar: _Bar, jobs: int) -> None:
        self.bar = bar
        self.jobs = jobs
        self.task: Any = None
        self.fed = ""
        self.seed = ""

    def on_run(self, federation: str, cfg: Any) -> None:
        """A new bar for the run of federation ``cfg`` (rounds x methods x seeds)."""
        self.fed = federation
        per_seed = 1 if self.jobs > 1 else cfg.rounds * len(cfg.methods)
        self.task = self.bar.add_task(federation, total=per_seed * len(cfg.seed_list()))

    def _describe(self, label: str = "") -> None:
        if self.task is not None:
            self.bar.update(self.task, description=f"[cyan]{self.fed}: {self.seed}{label}")

    def on_method(self, label: str) -> None:
        self._describe(label)

    def on_round(self, label: str, row: dict[str, Any]) -> None:
        if row["round"] >= 1 and self.task is not None:
            self.bar.advance(self.task)

    def on_seed(self, seed: int, what: str) -> None:
        self.seed = f"seed {seed}: "
        if self.jobs > 1 and what != "start" and self.task is not None:
            self.bar.advance(self.task)

    def for_runs(self) -> dict[str, Any]:
        if self.jobs > 1:
            return {"on_seed": self.on_seed}
        return {"on_seed": self.on_seed, "on_round": self.on_round, "on_method": self.on_method}


@contextmanager
def bench_progress(progress: bool, jobs: int) -> Iterator[BenchCallbacks]:
    """The progress display of ``fedad bench`` (:class:`BenchCallbacks`)."""
    with _progress(progress) as bar:
        yield BenchCallbacks(bar, jobs)
