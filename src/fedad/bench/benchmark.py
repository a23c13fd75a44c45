"""``fedad bench``: every federation of a suite, every method, every seed; then the results
and the leaderboard.

The output folder holds ``bench.json`` (what was asked: the suite, seeds, methods),
``results.csv`` and ``results.json`` (:mod:`fedad.bench.results`), ``leaderboard.html``
(:mod:`fedad.bench.leaderboard`) and ``runs/FEDERATION/``, each a usual several-seed fedad
run (``seed-N/`` inside) with all its methods in one run per seed. The results are written
again after each federation, so Ctrl-C keeps every finished row; ``resume`` completes a
benchmark (finished seeds and methods are not run again), ``force`` replaces one. A method
that fails fails alone (its row says why); a pair whose requirements the data cannot meet
(server data, masks, a public set) is left out before anything runs, and named.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from fedad.bench.expand import Pair, expand_methods
from fedad.bench.leaderboard import render_leaderboard
from fedad.bench.results import rows_of_run, write_results
from fedad.bench.suites import Federation, Suite, data_kind
from fedad.config import ExperimentConfig, parse_config
from fedad.core.algorithm import build_algorithm
from fedad.core.errors import FedadError, Interrupted
from fedad.federation import build_federation
from fedad.fl.server_inputs import check_requirements, supplied_fields
from fedad.resolve import make_setup, with_server_data
from fedad.rundir.files import (
    anchored,
    link_error,
    mkdir,
    open_nofollow,
    read_text,
    remove,
    target_path,
    write_text,
)
from fedad.rundir.layout import METRICS_FILE
from fedad.rundir.read import read_metrics
from fedad.rundir.seeds import seed_dir
from fedad.seeds import run_seeds

__all__ = ["BenchRequest", "run_bench"]

log = logging.getLogger("fedad")
BENCH_FILE = "bench.json"
RUNS = "runs"
LOCK = ".lock"
OURS = (BENCH_FILE, "results.csv", "results.json", "leaderboard.html", RUNS, LOCK)
"""Entries a benchmark writes in its folder (and the only ones ``--force`` removes)."""

OnRun = Callable[[str, ExperimentConfig], None]


@dataclass
class BenchRequest:
    """What ``fedad bench`` was asked for."""

    suite: Suite
    out: Path
    seeds: tuple[int, ...] | None = None
    methods: list[tuple[str, str | None]] = field(default_factory=list)
    jobs: int = 1
    resume: bool = False
    force: bool = False

    @property
    def seed_list(self) -> list[int]:
        return list(self.seeds or self.suite.seeds)

    def meta(self) -> dict[str, Any]:
        s = self.suite
        return {
            "suite": s.name,
            "split": s.split,
            "source": s.source,
            "seeds": self.seed_list,
            "methods": [f"{m}:{d}" if d else m for m, d in self.methods],
            "federations": [f.name for f in s.federations],
        }


def _refuse_links(out: Path) -> None:
    """No entry of the benchmark's, nor a federation's run folder, may be a link: fedad
    would write through it (the folder is untrusted, as a run's)."""
    for name in OURS:
        if (out / name).is_symlink():
            raise link_error(out / name)
    runs = out / RUNS
    if runs.is_dir():
        for child in sorted(runs.iterdir()):
            if child.is_symlink():
                raise link_error(child)


def _check_out(req: BenchRequest, configs: dict[str, str]) -> list[str]:
    """``out`` must be new, empty, or a benchmark (replaced with ``force``, completed with
    ``resume`` when it was asked the same: target, seeds, methods and every federation's
    resolved config); its entries to replace (``force``). Nothing is written here."""
    out = req.out
    if out.exists() and not out.is_dir():
        raise FedadError(f"--out '{out}' is not a folder", "give a new or empty folder")
    entries = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    others = [e for e in entries if e not in OURS]
    if others:
        raise FedadError(
            f"--out '{out}' holds files of its own ({', '.join(others[:3])})",
            "give a new or empty folder; fedad bench writes only among its own files",
        )
    if req.force and req.resume:
        raise FedadError("--force and --resume exclude each other", "give one of them")
    _refuse_links(out)
    started = [e for e in entries if e != LOCK]
    if req.resume and not started:
        raise FedadError(f"--resume: '{out}' holds no benchmark", "drop --resume to start one")
    if not started or req.force:
        return started
    if not req.resume:
        raise FedadError(
            f"--out '{out}' holds a benchmark already",
            "add --resume to complete it, --force to replace it, or choose another --out",
        )
    try:
        old = json.loads(read_text(out / BENCH_FILE))
    except (OSError, ValueError, RecursionError) as err:
        raise FedadError(f"--resume: '{out / BENCH_FILE}' is unreadable ({err})") from None
    new = {**req.meta(), "configs": configs}
    for key in ("suite", "seeds", "methods", "federations", "configs"):
        if not isinstance(old, dict) or old.get(key) != new[key]:
            what = {
                "suite": "another suite",
                "seeds": "other seeds",
                "methods": "other methods",
                "federations": "other federations",
                "configs": "another config (--set, or an edited file)",
            }[key]
            raise FedadError(
                f"--resume: the benchmark in '{out}' was asked {what}",
                "resume with the same target, --set, --seeds and --methods, or use --force",
            )
    return []


def _lock(out: Path) -> IO[str]:
    """The benchmark's exclusive lock (``.lock``): one ``fedad bench`` per folder."""
    import fcntl

    mkdir(out)
    try:
        fd = open_nofollow(out / LOCK, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK, 0o644)
    except OSError as err:
        raise FedadError(f"cannot lock '{out / LOCK}': {err.strerror or err}") from None
    fh = os.fdopen(fd, "r+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        raise FedadError(
            f"another fedad bench is writing to '{out}'", "wait for it or choose another --out"
        ) from None
    return fh


def pick_rows(
    entries: list[dict[str, Any]], chosen: list[tuple[str, str | None]]
) -> tuple[list[dict[str, Any]], list[tuple[str, str | None]]]:
    """A federation's own ``[[methods]]`` rows that ``--methods`` names (``name``: every row
    of that method, or the row of that label; ``name:detector``: that method's rows with that
    detector), as written, with their params and labels; and the names that match no row
    (the catalog's pairs at default params run for those)."""
    kept: list[dict[str, Any]] = []
    rest: list[tuple[str, str | None]] = []
    for name, det in chosen:
        hits = [
            e
            for e in entries
            if (e.get("name") == name and (det is None or e.get("detector") == det))
            or (det is None and e.get("label") == name)
        ]
        kept += [e for e in hits if e not in kept]
        if not hits:
            rest.append((name, det))
    return kept, rest


def federation_config(fed: Federation, req: BenchRequest) -> tuple[ExperimentConfig, list[Pair]]:
    """The config of one federation: the suite's (or ``--seeds``) seeds, and its own
    ``[[methods]]`` or every pair for its data kind; ``--methods`` picks among its own rows
    (:func:`pick_rows`) and adds the catalog's pair for a name that matches none."""
    raw = {k: v for k, v in fed.raw.items() if k != "methods"}
    pairs: list[Pair] = []
    entries = fed.raw.get("methods")
    if entries and not req.methods:
        methods = entries
    elif entries:
        methods, rest = pick_rows(entries, req.methods)
        pairs = expand_methods(data_kind(fed), rest) if rest else []
        methods += [p.entry() for p in pairs]
    else:
        pairs = expand_methods(data_kind(fed), req.methods)
        methods = [p.entry() for p in pairs]
    engine = {**raw.get("engine", {}), "progress": False}
    cfg = parse_config({**raw, "engine": engine, "seeds": req.seed_list, "methods": methods})
    return cfg, pairs


def usable(cfg: ExperimentConfig) -> tuple[ExperimentConfig, list[dict[str, str]]]:
    """``cfg`` without the methods whose requirements its data cannot meet (each built on
    the first seed's federation, as a run checks them), and those left out with why."""
    first = with_server_data(cfg.for_seed(cfg.seed_list()[0]))
    fed = build_federation(first)
    setup, fields = make_setup(first, fed), supplied_fields(fed)
    kept, left = [], []
    for label, m in zip(cfg.labels(), cfg.methods, strict=True):
        try:
            alg = build_algorithm(m.name, m.params, setup, m.detector, where=label)
            check_requirements(alg, label, fields)
        except FedadError as err:
            left.append({"label": label, "why": str(err)})
            continue
        kept.append(m)
    if not kept:
        raise FedadError(f"no method can run on this federation ({left[0]['why']})")
    return cfg.model_copy(update={"methods": kept}), left


Done = dict[str, tuple[ExperimentConfig, str]]
"""The federations started so far: their configs (as run) and data kinds."""


def collect(req: BenchRequest, done: Done) -> list[dict[str, Any]]:
    """Every row finished so far: per federation run, each seed's ``metrics.json``."""
    rows: list[dict[str, Any]] = []
    for name, (cfg, kind) in done.items():
        run = req.out / RUNS / name
        failed_seeds = _failed_seeds(run / METRICS_FILE)
        for s in cfg.seed_list():
            path = seed_dir(run, s) / METRICS_FILE
            metrics = read_metrics(path) if path.is_file() else {}
            got = rows_of_run(name, kind, cfg.labels(), metrics, s) if metrics else []
            have = {r["label"] for r in got}
            if s in failed_seeds:  # a seed that failed before any method finished
                got += [
                    _failed_row(name, kind, s, lab, m.name, m.detector, failed_seeds[s])
                    for lab, m in zip(cfg.labels(), cfg.methods, strict=True)
                    if lab not in have
                ]
            rows += got
    return rows


def _failed_row(
    fed: str, kind: str, seed: int, label: str, method: str, detector: str | None, why: str
) -> dict[str, Any]:
    return {
        "federation": fed,
        "method": method,
        "detector": detector,
        "label": label,
        "seed": seed,
        "kind": kind,
        "error": why,
    }


def _failed_seeds(path: Path) -> dict[int, str]:
    if not path.is_file():
        return {}
    failed = read_metrics(path)["experiment"].get("failed_seeds", [])
    return {
        int(f["seed"]): str(f.get("error", ""))
        for f in (failed if isinstance(failed, list) else [])
        if isinstance(f, dict) and isinstance(f.get("seed"), int)
    }


def _write(req: BenchRequest, rows: list[dict[str, Any]], extra: dict[str, Any]) -> None:
    meta = {**req.meta(), **extra}
    write_results(req.out, rows, meta)
    write_text(req.out / "leaderboard.html", render_leaderboard(rows, meta))


@dataclass
class _Plan:
    """Every federation's config, checked before anything runs or is replaced."""

    configs: dict[str, ExperimentConfig] = field(default_factory=dict)
    excluded: dict[str, list[dict[str, str]]] = field(default_factory=dict)

    def digests(self) -> dict[str, str]:
        """A digest of each federation's resolved config (what ``--resume`` compares)."""
        return {
            name: hashlib.sha256(
                json.dumps(cfg.model_dump(mode="json"), sort_keys=True).encode()
            ).hexdigest()
            for name, cfg in self.configs.items()
        }


def _plan(req: BenchRequest) -> _Plan:
    plan = _Plan()
    for fed in req.suite.federations:
        cfg, _ = federation_config(fed, req)
        plan.configs[fed.name], plan.excluded[fed.name] = usable(cfg)
    return plan


def run_bench(
    req: BenchRequest,
    on_run: OnRun | None = None,
    run_callbacks: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Run ``req`` (module docstring); the rows. ``on_run(federation, config)`` is called as
    each federation starts; ``run_callbacks`` are passed to each several-seed run
    (``on_round``, ``on_method``, ``on_seed``). Every federation's config and data are
    checked before a benchmark in ``out`` is touched; a federation whose runs all failed
    ends it with a one-line error after the others ran and were written."""
    req.out = target_path(req.out)
    plan = _plan(req)
    configs = plan.digests()
    replaced = _check_out(req, configs)
    lock = _lock(req.out)
    try:
        with anchored(req.out):
            for name in replaced:
                remove(req.out / name)
            write_text(req.out / BENCH_FILE, json.dumps({**req.meta(), "configs": configs}))
            return _run_all(req, plan, on_run, run_callbacks)
    finally:
        lock.close()


def _run_all(
    req: BenchRequest,
    plan: _Plan,
    on_run: OnRun | None,
    run_callbacks: dict[str, Any] | None,
) -> list[dict[str, Any]]:
    done: Done = {}
    failures: dict[str, str] = {}
    extra: dict[str, Any] = {"excluded": plan.excluded, "failures": failures}
    try:
        for fed in req.suite.federations:
            cfg = plan.configs[fed.name]
            done[fed.name] = (cfg, fed.kind)
            if on_run is not None:
                on_run(fed.name, cfg)
            run = req.out / RUNS / fed.name
            try:
                run_seeds(
                    cfg,
                    run,
                    jobs=req.jobs,
                    resume=req.resume and run.exists(),
                    keep_going=True,
                    **(run_callbacks or {}),
                )
            except FedadError as err:  # some seeds failed: their rows say why
                failures[fed.name] = str(err)
                log.warning("%s: %s", fed.name, err)
            _write(req, collect(req, done), extra)
    except (KeyboardInterrupt, Interrupted) as err:
        rows = collect(req, done)
        _write(req, rows, {**extra, "interrupted": True})
        signum = err.signum if isinstance(err, Interrupted) else int(signal.SIGINT)
        kept = (f"{len(rows)} rows",) if rows else ()
        raise Interrupted(signum, kept, str(req.out)) from None
    rows = collect(req, done)
    _write(req, rows, extra)
    finished = {r["federation"] for r in rows if r.get("auroc") is not None}
    empty = [name for name in failures if name not in finished]
    if empty:
        raise FedadError(
            f"no method finished on federation '{empty[0]}' ({failures[empty[0]]})",
            f"the other rows are in {req.out}/results.csv",
        )
    return rows
