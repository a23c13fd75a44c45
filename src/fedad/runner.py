"""Run an experiment: one federation, every configured method, the outputs of docs/outputs.md
(what metrics.json says of each method is assembled in :mod:`fedad.method_metrics`).

``run_experiment`` claims the output directory (:mod:`fedad.rundir.files`: refused when it holds
other files or another run, locked while the run writes), builds the federation once,
validates every method before training any, runs each on the configured engine, evaluates
each client's final (last-round) detector on its local test set with a threshold from
training data, and writes ``config.toml``, ``metrics.json``, ``history.csv``,
``scores.npz``, ``maps.npz`` (methods with anomaly maps only), ``embeddings.npz``
(methods whose detector has ``represent`` only), ``checkpoints/`` and
``report.html``. Which metrics: every metric family that applies to a method
(:mod:`fedad.evaluation.families`). The standard files are rewritten
(atomically) as each method finishes, so an interruption or a later error keeps what was
done; ``resume=True`` runs only the methods not yet done.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedad.blas import one_blas_thread
from fedad.config import ExperimentConfig, dump_toml
from fedad.core.algorithm import Algorithm
from fedad.core.errors import FedadError, Interrupted, MethodsFailed, is_allocation_failure
from fedad.core.types import Federation
from fedad.devices import resolve_device
from fedad.evaluation.families import BUILTIN, MetricFamily
from fedad.fl.drive import RunOutcome
from fedad.fl.engines import RunSettings, engine_for
from fedad.fl.workers import WorkerPool, run_pool
from fedad.interrupts import stop_if_swallowed
from fedad.memory import allocation_error
from fedad.method_metrics import (
    experiment_facts,
    method_seconds,
    run_families,
    summarize,
)
from fedad.peak_memory import peak_mb, reset_peak
from fedad.privacy.budget import privacy_guarantee
from fedad.resolve import resolve
from fedad.rundir import fingerprint
from fedad.rundir.checkpoints import save_checkpoint
from fedad.rundir.claim import Done, RunDir
from fedad.rundir.files import write_text
from fedad.rundir.fingerprint import Fingerprint, federation_digest, files_digest
from fedad.rundir.inputs import Inputs
from fedad.rundir.layout import INPUTS_FILE
from fedad.rundir.outputs import _clean, write_outputs
from fedad.tracking import Tracker
from fedad.tracking import start as start_tracking

TIMING_KEYS = ("seconds", "train_seconds", "client_seconds", "peak_mb")
"""metrics.json keys that measure wall time or memory, and so differ between identical runs."""

RoundCallback = Callable[[str, dict[str, Any]], None]


def run_method(
    cfg: ExperimentConfig,
    algorithm: Algorithm,
    fed: Federation,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    workdir: Path | None = None,
    pool: WorkerPool | None = None,
) -> RunOutcome:
    """Run one algorithm on the engine ``cfg.engine.name`` names (:func:`engine_for`;
    ``workdir``: the run's output directory, where the Flower engines keep their logs and
    hand-over files; ``pool``: the run's worker processes, ``engine.workers``)."""
    settings = RunSettings(cfg, workdir=workdir, pool=pool)
    return engine_for(cfg.engine.name).run(algorithm, fed, settings, on_round)


def _resumable(rd: RunDir, config_text: str, fp: Fingerprint, labels: list[str]) -> dict[str, Done]:
    """The methods an interrupted run finished, after checking it ran this very config on
    these very data (:mod:`fedad.rundir.fingerprint`); nothing is written before."""
    rd.check_config(config_text)
    if not fingerprint.check(rd.root, fp):
        logging.getLogger("fedad").warning(
            "--resume: '%s' keeps no fingerprint of its data (written by an earlier fedad): "
            "only its config was checked",
            rd.root,
        )
    return rd.load_done(labels)


def _report(out: Path) -> None:
    from fedad.report.html import write_report

    write_report(out)


@dataclass
class Prepared:
    """A run checked and ready to train (:func:`prepare`)."""

    cfg: ExperimentConfig
    fed: Federation
    algorithms: dict[str, Algorithm]
    done: dict[str, Done]
    tracker: Tracker | None


def prepare(rd: RunDir, cfg: ExperimentConfig, resume: bool) -> Prepared:
    """Everything that can fail before a method trains, then the run's first files.

    The device, the config (:func:`fedad.resolve.resolve`: the data, every method), the
    tracking store are checked and, with
    ``resume``, the config and the data against the run's (:func:`_resumable`) before a
    byte is written; only then ``inputs.json`` (kept as it is on a resume), the
    fingerprint, the state and ``config.toml``."""
    out = rd.root
    resolve_device(cfg.engine.device)  # a device that is not there: stop now
    settled = resolve(cfg)
    cfg, fed, algorithms, resolved = settled.cfg, settled.fed, settled.algorithms, settled.config
    config_text = dump_toml(resolved)
    inputs_text = Inputs.from_federation(cfg, fed).to_json()
    fp = Fingerprint(files_digest(cfg.data), federation_digest(fed, inputs_text))
    done = _resumable(rd, config_text, fp, list(algorithms)) if resume else {}
    stop_if_swallowed()  # a Ctrl-C Python swallowed while the data loaded: stop before writing
    tracker = start_tracking(cfg.tracking, out, resolved, resume=resume)
    try:
        if not (resume and (out / INPUTS_FILE).is_file()):  # on a resume: checked equal
            write_text(out / INPUTS_FILE, inputs_text)
        fingerprint.write(out, fp)
        rd.set_state("running", config_text)
    except BaseException:
        if tracker is not None:
            tracker.abort(False)
        raise
    return Prepared(cfg, fed, algorithms, done, tracker)


def _signum(err: BaseException) -> int:
    return int(err.signum) if isinstance(err, Interrupted) else int(signal.SIGINT)


def run_experiment(
    cfg: ExperimentConfig,
    out: Path,
    on_round: RoundCallback | None = None,
    on_method: Callable[[str], None] | None = None,
    force: bool = False,
    resume: bool = False,
    keep_going: bool = False,
) -> dict[str, Any]:
    """Run every method of ``cfg``, write all outputs to ``out``; return metrics.json's data.

    ``out`` is claimed first (:meth:`RunDir.claim <fedad.rundir.claim.RunDir.claim>`): ``force``
    replaces a run already there (set aside until this one has a result, and brought back
    when it ends without one), ``resume`` keeps its finished methods and runs the rest.
    On KeyboardInterrupt or :class:`~fedad.core.errors.Interrupted` the outputs of the finished
    methods are written and :class:`~fedad.core.errors.Interrupted` is raised, naming them. A
    method that runs out of memory (or, with ``keep_going``, fails in any one-line way)
    fails alone: the others run, are written, and :class:`~fedad.core.errors.MethodsFailed`
    ends the run (``experiment.failed_methods``).
    """
    t0 = time.perf_counter()
    # the claim last: a signal after it lands inside the guarded block (nothing left behind)
    with one_blas_thread(), RunDir.claim(out, force=force, resume=resume) as rd:
        try:
            run = prepare(rd, cfg, resume)
        except BaseException as err:
            restored = rd.discard_if_empty() if not resume else False
            if isinstance(err, KeyboardInterrupt | Interrupted):
                raise Interrupted(_signum(err), (), str(out), restored=restored) from None
            raise
        cfg, fed, algorithms, done, tracker = (
            run.cfg,
            run.fed,
            run.algorithms,
            run.done,
            run.tracker,
        )
        labels = list(algorithms)
        if tracker is not None:  # a resumed run's finished methods
            for label in (lab for lab in labels if lab in done):
                tracker.method(label, done[label].history, done[label].metrics)
        facts = experiment_facts(cfg, fed)
        families = run_families(algorithms.values())
        pool = run_pool(cfg, fed, [lab for lab in labels if lab not in done])
        try:
            failed = _train_all(rd, run, facts, families, t0, pool, on_round, on_method, keep_going)
            if failed and not done:  # nothing to keep: a failure like any other
                raise next(iter(failed.values()))
            if failed:
                facts["failed_methods"] = [
                    {"method": k, "error": str(e)} for k, e in failed.items()
                ]
            data = write_outputs(out, labels, done, facts, time.perf_counter() - t0, families)
            _report(out)
        except BaseException as err:
            if tracker is not None:  # first: _keep may fail as the report did
                tracker.abort(isinstance(err, KeyboardInterrupt | Interrupted))
            restored = _keep(rd, labels, done, facts, time.perf_counter() - t0, families)
            if isinstance(err, KeyboardInterrupt | Interrupted):
                kept = tuple(lab for lab in labels if lab in done)
                raise Interrupted(_signum(err), kept, str(out), restored=restored) from None
            raise
        finally:
            if pool is not None:
                pool.close()
        if failed:  # the others finished and are written; the run ends with exit status 2
            if tracker is not None:
                tracker.abort(False)
            rd.set_state("failed")
            raise _methods_failed(failed, data)
        if tracker is not None:
            tracker.finish(out)
        rd.set_state("finished")
    return data


def _methods_failed(failed: dict[str, FedadError], data: dict[str, Any]) -> MethodsFailed:
    """The run's one-line error when ``failed`` methods failed and the others finished."""
    first = next(iter(failed.values()))
    if len(failed) == 1:
        return MethodsFailed(str(first), data=data)
    return MethodsFailed(
        f"{len(failed)} methods failed ({', '.join(failed)}); the first: {first}",
        "see experiment.failed_methods in metrics.json",
        data,
    )


def _train_all(
    rd: RunDir,
    run: Prepared,
    facts: dict[str, Any],
    families: Sequence[MetricFamily],
    t0: float,
    pool: WorkerPool | None,
    on_round: RoundCallback | None,
    on_method: Callable[[str], None] | None,
    keep_going: bool = False,
) -> dict[str, FedadError]:
    """Run every method not yet done, in config order, keeping each one's results as it
    finishes; the methods that failed, with their one-line errors: those that ran out of
    memory (:mod:`fedad.memory`) and, with ``keep_going`` (a benchmark), any whose run
    raised a :class:`FedadError`; the others still run."""
    labels, done = list(run.algorithms), run.done
    failed: dict[str, FedadError] = {}
    for i, (label, alg) in enumerate(run.algorithms.items()):
        if label in done:
            continue
        if on_method is not None:
            on_method(label)
        try:
            done[label] = _run_one(run.cfg, label, alg, run.fed, rd.root, pool, on_round)
        except Exception as err:
            if is_allocation_failure(err):
                failed[label] = allocation_error(label, i, alg.params, err)
            elif keep_going and isinstance(err, FedadError):
                failed[label] = FedadError(f"method '{label}' failed: {err}")
            else:
                raise
            logging.getLogger("fedad").warning("%s", failed[label])
            continue
        rd.save_done(label, done[label])
        rd.settle(produced=True)  # a run --force replaced is gone now
        stop_if_swallowed()
        write_outputs(rd.root, labels, done, facts, time.perf_counter() - t0, families)
        if run.tracker is not None:
            run.tracker.method(label, done[label].history, done[label].metrics)
    return failed


def _run_one(
    cfg: ExperimentConfig,
    label: str,
    alg: Algorithm,
    fed: Federation,
    out: Path,
    pool: WorkerPool | None,
    on_round: RoundCallback | None,
) -> Done:
    """Run one method to its end, save its checkpoint; its metrics, history rows and kept
    arrays. Its ``seconds`` count everything from the first round to the summary."""

    def cb(row: dict[str, Any]) -> None:
        stop_if_swallowed()  # a signal whose exception Python ignored stops the run here
        if on_round is not None:
            on_round(label, row)

    started = time.perf_counter()
    reset_peak()
    outcome = run_method(cfg, alg, fed, on_round=cb, workdir=out, pool=pool)
    metrics, arr = summarize(label, alg, outcome, fed)
    metrics.update(method_seconds(outcome, time.perf_counter() - started))
    metrics["peak_mb"] = peak_mb()
    if cfg.privacy.mechanism == "gaussian":
        metrics["privacy"] = privacy_guarantee(
            cfg, alg, outcome.releases, outcome.array_replies, len(fed.clients)
        )
    rows = [{"method": label, **row} for row in outcome.history]
    save_checkpoint(out, label, alg, outcome)
    return Done(_clean(metrics), _clean(rows), arr)


def _keep(
    rd: RunDir,
    labels: list[str],
    done: dict[str, Done],
    facts: dict[str, Any],
    seconds: float,
    families: Sequence[MetricFamily] = BUILTIN,
) -> bool:
    """After an interruption or error: the finished methods' outputs, and the state;
    whether a run that ``--force`` would have replaced was brought back (nothing finished)."""
    if not done:
        return rd.discard_if_empty()
    try:
        write_outputs(rd.root, labels, done, facts, seconds, families)
        rd.set_state("interrupted")
        _report(rd.root)
    except (FedadError, OSError, ValueError) as err:  # keep the original error in front
        logging.getLogger("fedad").warning("could not write the partial report: %s", err)
    return False
