"""Several seeds in one run: each seed a complete run in ``OUT/seed-N/``, aggregated in ``OUT/``.

A config with ``seeds = [0, 1, 2]`` runs :func:`fedad.runner.run_experiment` once per seed
(the config with ``seed = N``), each into its own directory with every file a single run
writes, and keeps an aggregate at the top of ``OUT``:

* ``metrics.json`` (:mod:`fedad.evaluation.seeds`): today's shape; each method's numeric
  metrics are the **mean over seeds**, ``std`` holds their standard deviations (numpy's
  ``np.std``, ``ddof = 0``) and ``per_seed`` lists ``{"seed": N, metric: value, ...}``. A
  metric is averaged only when every finished seed has a finite value for it; otherwise its
  mean and std are ``null`` (never a mean over the seeds that happened to work).
  ``per_client`` and ``events`` stay in each seed's own ``metrics.json``. ``experiment``
  keeps the facts all seeds share and adds ``seeds``; ``columns`` lists the metric columns
  of every seed (their union, in order), so a new metric family's numbers are aggregated and
  shown like any other.
* ``history.csv``: every seed's rows, with a ``seed`` column first.
* ``report.html``: mean +- std, the per-seed spread, links to each seed's report.
* ``config.toml``: the config as given (with ``seeds``); each seed's resolved config is in
  its directory.

``jobs > 1`` runs seeds in that many worker processes (``spawn``); each seed's results are
identical to a ``jobs = 1`` run. A seed that fails is reported and the others are kept: the
aggregate covers the finished seeds, ``experiment.failed_seeds`` names the failures, and the
run ends with a one-line :class:`~fedad.core.errors.FedadError`. Ctrl-C / SIGTERM keep the
finished seeds (and the finished methods of the seed that was running); ``resume`` completes
the run.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from fedad.config import ExperimentConfig, dump_toml, parse_config
from fedad.core.errors import FedadError, Interrupted, MethodsFailed
from fedad.evaluation.seeds import aggregate, history_with_seeds
from fedad.interrupts import keep_swallowed_signals, raise_interrupted
from fedad.rundir import fingerprint
from fedad.rundir.claim import RunDir, has_results
from fedad.rundir.files import anchored, write_text
from fedad.rundir.fingerprint import Fingerprint, files_digest
from fedad.rundir.layout import HISTORY_FILE, METRICS_FILE, RUN_FILE, SEED_DIR, STATE_DIR
from fedad.rundir.seeds import finished_seed, seed_dir
from fedad.tracking import track_seeds

log = logging.getLogger("fedad")


OnSeed = Callable[[int, str], None]
"""Called with (seed, "start" | "done" | "failed") as seeds progress."""


def as_given(cfg: ExperimentConfig) -> dict[str, Any]:
    """The keys the config was given (with ``seeds``, no ``seed``), as plain data.

    Defaults stay out: some checks read whether a key was given (``partition.clients``
    under the natural scheme must equal the data's clients only when it is named), so a
    config rebuilt from a dump with every default filled in would fail them.
    """
    raw = cfg.model_dump(mode="json", exclude_none=True, exclude_unset=True)
    raw.pop("seed", None)
    return raw


def top_config_text(cfg: ExperimentConfig) -> str:
    """``OUT/config.toml``: the config as given, with ``seeds`` (no ``seed``)."""
    return dump_toml(as_given(cfg))


class _Aggregate:
    """The top of ``OUT``: rewritten after every seed."""

    def __init__(self, cfg: ExperimentConfig, out: Path) -> None:
        self.out = out
        self.seeds = cfg.seed_list()
        self.labels = cfg.labels()
        self.per_seed: dict[int, dict[str, Any]] = {}
        self.failed: dict[int, str] = {}
        self.partial: dict[int, str] = {}  # seeds where some methods failed, others finished
        self.t0 = time.perf_counter()

    def write(self, report: bool = True) -> dict[str, Any]:
        data = aggregate(self.per_seed, self.seeds, self.labels)
        exp = data["experiment"]
        pending = [s for s in self.seeds if s not in self.per_seed and s not in self.failed]
        whole = not pending and not self.failed and not self.partial
        exp["status"] = "complete" if whole else "partial"
        if pending:
            exp["pending"] = [SEED_DIR.format(s) for s in pending]
        if self.failed:
            exp["failed_seeds"] = [{"seed": s, "error": e} for s, e in sorted(self.failed.items())]
        exp.pop("failed_methods", None)
        if self.partial:
            exp["failed_methods"] = [
                {"seed": s, **f}
                for s in sorted(self.partial)
                for f in self.per_seed[s].get("experiment", {}).get("failed_methods", [])
                if isinstance(f, dict)
            ]
        exp["total_seconds"] = time.perf_counter() - self.t0
        from fedad.rundir.outputs import _clean

        texts = []
        for s in self.seeds:
            p = seed_dir(self.out, s) / HISTORY_FILE
            if s in self.per_seed and p.is_file():
                try:
                    texts.append((s, p.read_text(encoding="utf-8")))
                except (OSError, UnicodeDecodeError) as err:
                    raise FedadError(f"cannot read '{p}': {err}") from None
        write_text(self.out / HISTORY_FILE, history_with_seeds(texts))
        write_text(self.out / METRICS_FILE, json.dumps(_clean(data), indent=2))
        if report:
            from fedad.report.html import write_report

            write_report(self.out)
        return data


def run_seeds(
    cfg: ExperimentConfig,
    out: Path,
    *,
    jobs: int = 1,
    on_round: Callable[[str, dict[str, Any]], None] | None = None,
    on_method: Callable[[str], None] | None = None,
    on_seed: OnSeed | None = None,
    force: bool = False,
    resume: bool = False,
    keep_going: bool = False,
) -> dict[str, Any]:
    """Run every seed of ``cfg`` into ``out/seed-N`` and write the aggregate; return its data.

    ``on_round`` / ``on_method`` are passed to each seed's run when ``jobs == 1`` (workers
    report only through ``on_seed``); ``keep_going``: a method that fails in a seed fails
    alone (:func:`fedad.runner.run_experiment`), the seed then counts as failed with the
    other methods' results in its folder.
    """
    if jobs < 1:
        raise FedadError(f"--jobs {jobs}: give 1 or more worker processes")
    rd = RunDir.claim(out, force=force, resume=resume)
    with rd:
        text = top_config_text(cfg)
        try:
            fp = Fingerprint(files=files_digest(cfg.data))  # the same for every seed
            if resume:
                rd.check_config(text)
                fingerprint.check(out, fp)
            fingerprint.write(out, fp)
            rd.set_state("running", text)
        except BaseException:
            if not resume:
                rd.discard_if_empty()
            raise
        agg = _Aggregate(cfg, out)
        todo: list[int] = []
        for s in agg.seeds:
            if seed_dir(out, s).is_symlink():  # never read or write through a link out
                raise FedadError(
                    f"'{seed_dir(out, s)}' is a symbolic link, not a seed's run",
                    "remove it, or start anew with --force",
                )
            prior = finished_seed(seed_dir(out, s)) if resume else None
            if prior is not None:
                agg.per_seed[s] = prior
            else:
                todo.append(s)
        try:
            if jobs == 1 or len(todo) <= 1:
                _serial(cfg, out, todo, agg, resume, on_round, on_method, on_seed, keep_going)
            else:
                _parallel(cfg, out, todo, agg, resume, jobs, on_seed, keep_going)
        except BaseException as err:
            kept = tuple(
                SEED_DIR.format(s) + ("" if s in agg.per_seed else " (partly)")
                for s in agg.seeds
                if s in agg.per_seed or has_results(seed_dir(out, s))
            )
            restored = _keep(rd, agg)
            if isinstance(err, KeyboardInterrupt | Interrupted):
                signum = err.signum if isinstance(err, Interrupted) else signal.SIGINT
                raise Interrupted(int(signum), kept, str(out), restored=restored) from None
            raise
        restored = _settle(rd, agg)
        if not restored:
            data = agg.write()
            track_seeds(cfg, out, data)  # [tracking]: the aggregate as one more MLflow run
            rd.set_state("finished" if not agg.failed and not agg.partial else "failed")
    _raise_failures(agg, out, restored, None if restored else data)
    return data


def _raise_failures(
    agg: _Aggregate, out: Path, restored: bool, data: dict[str, Any] | None
) -> None:
    """The run's one-line error when seeds failed, or methods failed in some seeds."""
    if agg.failed:
        s, why = next(iter(sorted(agg.failed.items())))
        n = len(agg.failed)
        raise FedadError(
            f"{n} of {len(agg.seeds)} seeds failed (seed {s}: {why})",
            f"the other seeds' results are in {out}/; see experiment.failed_seeds"
            if agg.per_seed
            else "no seed finished; fix the first error and run again"
            + (f"; the earlier run in {out}/ is kept as it was" if restored else ""),
        )
    if agg.partial:
        s, why = next(iter(sorted(agg.partial.items())))
        raise MethodsFailed(
            f"methods failed in {len(agg.partial)} of {len(agg.seeds)} seeds (seed {s}: {why})",
            f"the other methods' results are in {out}/; see experiment.failed_methods",
            data,
        )


def _settle(rd: RunDir, agg: _Aggregate) -> bool:
    """End a ``--force`` replacement (:meth:`RunDir.settle`): the run set aside is dropped
    once a seed has a result, else brought back; whether it came back."""
    produced = bool(agg.per_seed) or any(has_results(seed_dir(agg.out, s)) for s in agg.seeds)
    return rd.settle(produced)


def _keep(rd: RunDir, agg: _Aggregate) -> bool:
    """After an interruption: the aggregate of the finished seeds, and the state; whether
    the run that ``--force`` would have replaced came back instead (no seed had a result)."""
    try:
        if _settle(rd, agg):
            return True
        if agg.per_seed:
            agg.write()
        rd.set_state("interrupted")
    except (FedadError, OSError, ValueError) as err:
        log.warning("could not write the partial aggregate: %s", err)
    return False


def _one_seed_dir_resumable(d: Path, resume: bool) -> bool:
    return resume and (d / STATE_DIR / RUN_FILE).is_file()


def _serial(
    cfg: ExperimentConfig,
    out: Path,
    todo: Sequence[int],
    agg: _Aggregate,
    resume: bool,
    on_round: Callable[[str, dict[str, Any]], None] | None,
    on_method: Callable[[str], None] | None,
    on_seed: OnSeed | None,
    keep_going: bool = False,
) -> None:
    from fedad.runner import run_experiment

    for s in todo:
        d = seed_dir(out, s)
        if on_seed is not None:
            on_seed(s, "start")
        try:
            data = run_experiment(
                cfg.for_seed(s),
                d,
                on_round=on_round,
                on_method=on_method,
                force=d.exists() and not _one_seed_dir_resumable(d, resume),
                resume=_one_seed_dir_resumable(d, resume),
                keep_going=keep_going,
            )
        except MethodsFailed as err:  # the seed's other methods finished
            _partial(agg, s, str(err), err.data, on_seed)
            continue
        except FedadError as err:
            _failed(agg, s, str(err), on_seed)
            continue
        agg.per_seed[s] = data
        agg.write(report=False)
        if on_seed is not None:
            on_seed(s, "done")


def _partial(agg: _Aggregate, seed: int, why: str, data: Any, on_seed: OnSeed | None) -> None:
    """Seed ``seed`` finished some methods and others failed (``data``: its metrics.json
    data): it counts in the aggregate, its failed methods without a mean."""
    if not isinstance(data, dict):
        _failed(agg, seed, why, on_seed)
        return
    log.warning("seed %s: %s", seed, why)
    agg.per_seed[seed] = data
    agg.partial[seed] = why
    agg.write(report=False)
    if on_seed is not None:
        on_seed(seed, "done")


def _failed(agg: _Aggregate, seed: int, why: str, on_seed: OnSeed | None) -> None:
    log.warning("seed %s failed: %s", seed, why)
    agg.failed[seed] = why
    if agg.per_seed:  # no aggregate before a seed has a result: it would count as one
        agg.write(report=False)
    if on_seed is not None:
        on_seed(seed, "failed")


def _worker_init(threads: int) -> None:
    """Worker processes: SIGTERM stops a seed like in the CLI; CPU threads shared out."""
    import torch

    signal.signal(signal.SIGTERM, raise_interrupted)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; it sends SIGTERM
    keep_swallowed_signals()
    torch.set_num_threads(threads)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")


def _worker(
    raw: dict[str, Any], seed: int, d: str, resume: bool, keep_going: bool = False
) -> tuple[str, Any]:
    """Run one seed in a worker; the outcome as plain data (exceptions do not cross)."""
    from fedad.runner import run_experiment

    path = Path(d)
    cfg = parse_config(raw).for_seed(seed)
    try:
        # the parent claimed OUT; here too nothing below it is followed if it is a link
        with anchored(path.parent):
            data = run_experiment(
                cfg,
                path,
                force=path.exists() and not _one_seed_dir_resumable(path, resume),
                resume=_one_seed_dir_resumable(path, resume),
                keep_going=keep_going,
            )
    except MethodsFailed as err:
        return "partial", (str(err), err.data)
    except FedadError as err:
        return "failed", str(err)
    except Interrupted as stop:
        return "interrupted", stop.signum
    return "done", data


def _parallel(
    cfg: ExperimentConfig,
    out: Path,
    todo: Sequence[int],
    agg: _Aggregate,
    resume: bool,
    jobs: int,
    on_seed: OnSeed | None,
    keep_going: bool = False,
) -> None:
    jobs = min(jobs, len(todo))
    threads = max(1, (os.cpu_count() or 1) // jobs)
    raw = as_given(cfg)  # the config has seeds; each worker runs cfg.for_seed(s)
    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(jobs, mp_context=ctx, initializer=_worker_init, initargs=(threads,))
    running: dict[Future[tuple[str, Any]], int] = {}
    try:
        for s in todo:
            job = pool.submit(_worker, raw, s, str(seed_dir(out, s)), resume, keep_going)
            running[job] = s
            if on_seed is not None:
                on_seed(s, "start")
        interrupted: int | None = None
        while running:
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in finished:
                s = running.pop(fut)
                try:
                    status, value = fut.result()
                except Exception as err:  # a worker that died (killed, out of memory)
                    status, value = "failed", f"worker process failed: {err}"
                if status == "done":
                    agg.per_seed[s] = value
                    agg.write(report=False)
                    if on_seed is not None:
                        on_seed(s, "done")
                elif status == "interrupted":
                    interrupted = int(value)
                elif status == "partial":
                    _partial(agg, s, str(value[0]), value[1], on_seed)
                else:
                    _failed(agg, s, str(value), on_seed)
        if interrupted is not None:
            raise Interrupted(interrupted)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)  # nothing new starts
        _stop_workers(pool)
        # collect what the stopped workers kept as finished seeds
        for fut, s in running.items():
            try:
                status, value = fut.result(timeout=60)
            except Exception:
                continue
            if status == "done":
                agg.per_seed[s] = value
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """SIGTERM to every worker: each keeps its finished methods and stops."""
    procs = getattr(pool, "_processes", None) or {}
    for p in list(procs.values()):
        try:
            if p.pid is not None and p.is_alive():
                os.kill(p.pid, signal.SIGTERM)
        except (OSError, ValueError):
            pass
