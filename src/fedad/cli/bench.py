"""``fedad bench TARGET --out DIR``: a suite (or a config) on every method, ranked."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated, Any

import typer

from fedad.cli.options import (
    ForceRun,
    Quiet,
    Resume,
    SetValues,
    fail,
    interrupted,
    show,
    terminate_as_interrupt,
)
from fedad.core.errors import FedadError, Interrupted


def _seeds(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        seeds = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise FedadError(
            f"--seeds '{text}' is not a list of integers", "write e.g. --seeds 0,1,2"
        ) from None
    if not seeds:
        raise FedadError("--seeds is empty", "write e.g. --seeds 0,1,2")
    return seeds


def bench(
    target: Annotated[
        str, typer.Argument(help="a suite (`fedad list suites`) or a config / suite TOML file")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="output folder")],
    seeds: Annotated[
        str | None, typer.Option("--seeds", help="seeds instead of the target's: 0,1,2")
    ] = None,
    methods: Annotated[
        str | None,
        typer.Option("--methods", help="only these: name or name:detector, comma-separated"),
    ] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="seeds in N processes")] = 1,
    set_: SetValues = None,
    quiet: Quiet = False,
    force: ForceRun = False,
    resume: Resume = False,
) -> None:
    """Run every method (or --methods) on every federation and seed of TARGET; write
    results.csv, results.json and leaderboard.html, and each run's folder under runs/."""
    from fedad.bench.benchmark import BenchRequest, run_bench
    from fedad.bench.expand import parse_methods
    from fedad.bench.suites import load_target
    from fedad.cli.progress import bench_progress

    try:
        suite = load_target(target, set_ or [])
        req = BenchRequest(suite, out, _seeds(seeds), parse_methods(methods), jobs, resume, force)
        with terminate_as_interrupt(), bench_progress(not quiet, jobs) as callbacks:
            rows = run_bench(req, callbacks.on_run, callbacks.for_runs())
    except FedadError as err:
        fail(err)
    except Interrupted as stop:
        again = [f"--set={v}" for v in set_ or []]
        again += [f"--{k}={v}" for k, v in (("seeds", seeds), ("methods", methods)) if v]
        again += [f"--jobs={jobs}"] if jobs > 1 else []
        interrupted(stop, Path(target), command="bench", options=again)
    except KeyboardInterrupt:
        interrupted(Interrupted(signal.SIGINT, out=str(out)), Path(target), command="bench")
    _summary(rows, req.out)


def _summary(rows: list[dict[str, Any]], out: Path) -> None:
    from fedad.bench.ranks import rank_kinds

    for kr in rank_kinds(rows):
        show(kr.note)
    failed = sum(1 for r in rows if r.get("error"))
    more = f", {failed} failed (see leaderboard.html)" if failed else ""
    show(f"wrote {out}/ (leaderboard.html, results.csv, results.json): {len(rows)} rows{more}")
