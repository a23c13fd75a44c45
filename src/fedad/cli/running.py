"""A run with a progress bar, then the results table: what ``fedad run`` and ``fedad flower
run`` share (:func:`run_with_progress`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fedad.cli.options import console, show
from fedad.cli.summary import results_table
from fedad.errors import AllocationFailed


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
            try:
                metrics = run_experiment(
                    cfg,
                    out_dir,
                    on_round=on_round,
                    on_method=on_method,
                    force=force,
                    resume=resume,
                )
            except AllocationFailed as err:  # the other methods finished: show them first
                if err.data is not None:
                    bar.stop()
                    show(results_table(err.data))
                    show(f"wrote {out_dir}/ (report.html, metrics.json, history.csv)")
                raise
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
    show(results_table(metrics))
    show(f"wrote {out_dir}/ (report.html, metrics.json, history.csv) in {secs:.1f} s")
