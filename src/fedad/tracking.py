"""Experiment tracking with MLflow: ``[tracking] mlflow = "DIR or URI"`` (docs/tracking.md).

Off unless the config has a ``[tracking]`` section. Then :func:`start` opens one MLflow run
before anything trains (in experiment ``tracking.experiment``, named ``tracking.run_name``
or after the output folder) and logs the resolved config, flattened, as params
(``data.name``, ``methods.0.params.lr``, ...); :meth:`Tracker.method` logs each finished
method's per-round history as metrics with ``step`` = round (``LABEL/round/KEY``) and its
final metrics (``LABEL/KEY``, per client ``LABEL/client-i/KEY``); :meth:`Tracker.finish`
logs ``report.html``, ``metrics.json``, ``config.toml``, ``history.csv`` and ``inputs.json``
as artifacts and ends the run. A run over several seeds logs one MLflow run per seed (named
``OUT/seed-N``) and, once the seeds are aggregated, one for ``OUT`` (:func:`track_seeds`:
each method's means over seeds as ``LABEL/KEY`` and their spreads as ``LABEL/std/KEY``,
``OUT``'s report.html, metrics.json, config.toml and history.csv as artifacts).

``mlflow`` is a folder (MLflow's local file store there; MLflow 3 keeps that store in
maintenance mode behind ``MLFLOW_ALLOW_FILE_STORE``, which fedad sets for its own process
when it writes to a folder or a ``file:`` URI) or any tracking URI (``http://...``,
``databricks``; ``sqlite:///...`` needs the full ``mlflow`` package). Needs the optional
extra ``tracking`` (``mlflow-skinny``): without it, a one-line error before anything trains.
A tracking server that cannot be reached at the start is a one-line error too; one that
fails later costs a warning, never the run's own files.

**Resuming.** The MLflow run's id is kept in the run directory (``.fedad/mlflow.json``,
with the tracking URI and the methods already logged). ``fedad run --resume`` reopens that
MLflow run (status ``RUNNING`` again) and logs only the methods it lacks, so one fedad run
is one MLflow run however often it was resumed. When the store no longer has it (deleted,
another store, an unreadable record), a new MLflow run is started and a warning says so.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from fedad import __version__
from fedad.core.errors import FedadError
from fedad.rundir.files import read_text, write_text
from fedad.rundir.layout import (
    CONFIG_FILE,
    HISTORY_FILE,
    INPUTS_FILE,
    METRICS_FILE,
    REPORT_FILE,
    STATE_DIR,
)

if TYPE_CHECKING:
    from fedad.config import ExperimentConfig, TrackingConfig

__all__ = [
    "ARTIFACTS",
    "EXTRA",
    "STATE_FILE",
    "Tracker",
    "flatten",
    "start",
    "track_seeds",
    "tracking_uri",
]

EXTRA = "tracking"
STATE_FILE = "mlflow.json"
"""In the run's ``.fedad/``: the MLflow run to continue on ``--resume``."""
_RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
ARTIFACTS = (REPORT_FILE, METRICS_FILE, CONFIG_FILE, HISTORY_FILE, INPUTS_FILE)
MAX_PARAM = 6000
"""MLflow's longest param value (longer ones are cut, with '...')."""
_BATCH = 100
_KEY = re.compile(r"[^A-Za-z0-9_\-. :/]")
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
}
"""MLflow's HTTP retries for fedad's process, unless set: MLflow's own (7 retries, backoff
factor 2, 120 s timeout) take about 4 minutes to say that a server does not answer."""
log = logging.getLogger("fedad")


def _client() -> Any:
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise FedadError(
            "[tracking] mlflow needs the package mlflow-skinny, which is not installed",
            f"pip install 'fedad[{EXTRA}]', or remove the [tracking] section",
        ) from None
    return MlflowClient


def tracking_uri(target: str) -> str:
    """The MLflow tracking URI of ``tracking.mlflow``: a URI as it is, a folder as its
    ``file://`` URI (created; MLflow's file store)."""
    if _URI.match(target) and not re.match(r"^[A-Za-z]:[\\/]", target):
        if target.lower().startswith("file:"):  # the file store, given as a URI
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        return target
    try:
        folder = Path(target).expanduser().resolve()
        folder.mkdir(parents=True, exist_ok=True)
    except (OSError, ValueError, RuntimeError) as err:  # a NUL byte, no home for '~', ...
        reason = getattr(err, "strerror", None) or str(err) or type(err).__name__
        raise FedadError(
            f"[tracking] mlflow: cannot create the folder {target!r}: {reason}",
            "give a folder you can write to, or a tracking URI",
        ) from None
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return folder.as_uri()


def _store_folder(target: str) -> Path | None:
    """The local folder (or file) ``tracking.mlflow`` writes to, if any: a folder, a
    ``file:`` URI or an ``sqlite:`` database; ``None`` for a server."""
    if _URI.match(target) and not re.match(r"^[A-Za-z]:[\\/]", target):
        parsed = urlparse(target)
        if parsed.scheme.lower() == "file":
            return Path(unquote(parsed.path))
        if parsed.scheme.lower() == "sqlite" and target.startswith("sqlite:///"):
            return Path(target.removeprefix("sqlite:///"))
        return None
    return Path(target).expanduser()


def _outside(target: str, out: Path) -> None:
    """A store inside the run's own folder is refused: MLflow's files there (its store,
    ``.trash/``) would mix with the run's and block a later ``--force``."""
    try:
        store = _store_folder(target)
        if store is None:
            return
        run = Path(os.path.realpath(out))
        where = Path(os.path.realpath(store))
    except (ValueError, OSError):  # a NUL byte, no home for '~': tracking_uri words it
        return
    if where == run or run in where.parents:
        raise FedadError(
            f"[tracking] mlflow {target!r} lies inside the run's folder '{out}'",
            'give a store outside --out, e.g. mlflow = "mlruns"',
        )


def flatten(data: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    """``(dotted key, value)`` of a nested config: lists of tables by index
    (``methods.0.name``), other lists as JSON, values as text."""
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from flatten(value, name + ".")
        elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            for i, item in enumerate(value):
                yield from flatten(item, f"{name}.{i}.")
        elif value is not None:
            text = json.dumps(value) if isinstance(value, list | bool) else str(value)
            yield name, text if len(text) <= MAX_PARAM else text[: MAX_PARAM - 3] + "..."


def _reason(err: BaseException) -> str:
    """An exception's message on one line, its start and end where it is long (MLflow's
    HTTP errors name the cause last: '... [Errno 111] Connection refused')."""
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= 300 else f"{text[:140]} ... {text[-150:]}"


def _key(text: str) -> str:
    """A metric key MLflow accepts (letters, digits, ``_ - . : /`` and spaces)."""
    return _KEY.sub("_", text)


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def run_name(cfg: TrackingConfig, out: Path) -> str:
    """``tracking.run_name``, else the output folder's name (``OUT/seed-N`` for a seed)."""
    if cfg.run_name:
        return cfg.run_name
    out = Path(out).resolve()
    return f"{out.parent.name}/{out.name}" if out.name.startswith("seed-") else out.name


class Tracker:
    """One MLflow run (see the module docstring); every call after :func:`start` only
    warns when MLflow fails. With ``out``, the run's id, ``uri`` and the methods logged
    are kept in ``out/.fedad/mlflow.json`` for ``--resume``."""

    def __init__(
        self,
        client: Any,
        run_id: str,
        where: str,
        out: Path | None = None,
        uri: str = "",
        logged: Iterable[str] = (),
    ) -> None:
        self.client = client
        self.run_id = run_id
        self.where = where
        self.out = out
        self.uri = uri
        self.logged: list[str] = list(logged)

    def _safely(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> bool:
        try:
            fn(*args, **kwargs)
        except Exception as err:  # MLflow raises many kinds (HTTP, file store, ...)
            log.warning("tracking: could not log %s to %s: %s", what, self.where, _reason(err))
            return False
        return True

    def save(self) -> None:
        """Record the MLflow run in the run directory's ``.fedad/`` (a failure only warns;
        nothing without one, outside a claimed run)."""
        if self.out is None or not (Path(self.out) / STATE_DIR).is_dir():
            return
        state = {"uri": self.uri, "run_id": self.run_id, "logged": self.logged}
        try:
            write_text(Path(self.out) / STATE_DIR / STATE_FILE, json.dumps(state))
        except (FedadError, OSError) as err:
            log.warning("tracking: could not record the MLflow run for --resume: %s", err)

    def _metrics(self, metrics: list[Any]) -> None:
        for i in range(0, len(metrics), 1000):
            self.client.log_batch(self.run_id, metrics=metrics[i : i + 1000])

    def method(self, label: str, history: list[dict[str, Any]], metrics: dict[str, Any]) -> None:
        """A finished method: its per-round history and its final metrics (once: a method
        this MLflow run has, logged before a ``--resume``, is skipped)."""
        if label in self.logged:
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        rows: list[Any] = []
        for row in history:
            step = int(row.get("round", 0) or 0)
            for k, v in row.items():
                f = _number(v)
                if f is not None and k not in ("round", "method"):
                    rows.append(Metric(_key(f"{label}/round/{k}"), f, now, step))
        for k, v in metrics.items():
            f = _number(v)
            if f is not None:
                rows.append(Metric(_key(f"{label}/{k}"), f, now, 0))
        spread = metrics.get("std")  # a several-seed aggregate: the seeds' spread
        for k, v in spread.items() if isinstance(spread, dict) else ():
            f = _number(v)
            if f is not None:
                rows.append(Metric(_key(f"{label}/std/{k}"), f, now, 0))
        for client in metrics.get("per_client") or []:
            if not isinstance(client, dict):
                continue
            cid = client.get("client")
            for k, v in client.items():
                f = _number(v)
                if f is not None and k not in ("client",):
                    rows.append(Metric(_key(f"{label}/client-{cid}/{k}"), f, now, 0))
        if self._safely(f"method '{label}'", self._metrics, rows):
            self.logged.append(label)
            self.save()

    def finish(self, out: Path) -> None:
        """The run's files as artifacts; the MLflow run ends as finished."""
        for name in ARTIFACTS:
            path = Path(out) / name
            if path.is_file() and not path.is_symlink():
                self._safely(name, self.client.log_artifact, self.run_id, str(path))
        self._safely("the end of the run", self.client.set_terminated, self.run_id, "FINISHED")

    def abort(self, interrupted: bool) -> None:
        """The run stopped early: the MLflow run ends as killed or failed."""
        status = "KILLED" if interrupted else "FAILED"
        self._safely("the end of the run", self.client.set_terminated, self.run_id, status)


def experiment_id(client: Any, name: str) -> str:
    """The id of MLflow experiment ``name``, created when missing. Seeds run in parallel
    (``--jobs``) may both find it missing: the one whose creation fails reads it again."""
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return str(exp.experiment_id)
    try:
        return str(client.create_experiment(name))
    except Exception:
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return str(exp.experiment_id)


def _recorded(out: Path) -> tuple[str, str, list[str]] | None:
    """(tracking URI, run id, methods logged) of the MLflow run an earlier attempt at the
    run in ``out`` recorded; ``None`` when there is none or the record is unusable (the
    file is untrusted: checked, a warning)."""
    path = Path(out) / STATE_DIR / STATE_FILE
    try:
        data = json.loads(read_text(path, limit=1 << 20))
    except FileNotFoundError:
        return None
    except (FedadError, OSError, ValueError, RecursionError) as err:
        log.warning(
            "tracking: the MLflow record '%s' is unreadable (%s): a new MLflow run is started",
            path,
            _reason(err),
        )
        return None
    if not isinstance(data, dict):
        data = {}
    uri, run_id, logged = data.get("uri"), data.get("run_id"), data.get("logged")
    if (
        isinstance(uri, str)
        and isinstance(run_id, str)
        and _RUN_ID.fullmatch(run_id)
        and isinstance(logged, list)
        and all(isinstance(x, str) for x in logged)
    ):
        return uri, run_id, logged
    log.warning("tracking: the MLflow record '%s' is damaged: a new MLflow run is started", path)
    return None


def _reopen(client: Any, cfg: TrackingConfig, out: Path, uri: str) -> Tracker | None:
    """The MLflow run recorded in ``out``, running again; ``None`` (and why, logged) when
    there is none to continue."""
    recorded = _recorded(out)
    if recorded is None:
        log.info("tracking: no MLflow run recorded in '%s': a new one is started", out)
        return None
    old_uri, run_id, logged = recorded
    if old_uri != uri:
        log.warning(
            "tracking: the interrupted run was logged to %s, [tracking] now names %s: "
            "a new MLflow run is started",
            old_uri,
            uri,
        )
        return None
    try:
        run = client.get_run(run_id)
        if run.info.lifecycle_stage != "active":
            raise LookupError(f"its lifecycle stage is '{run.info.lifecycle_stage}'")
        client.update_run(run_id, status="RUNNING")
    except Exception as err:  # MLflow raises many kinds (not found, HTTP, file store, ...)
        log.warning(
            "tracking: the MLflow run %s of the interrupted run is no longer in %s (%s): "
            "a new MLflow run is started",
            run_id,
            cfg.mlflow,
            _reason(err),
        )
        return None
    log.info("tracking: continuing MLflow run %s in %s", run_id, cfg.mlflow)
    return Tracker(client, run_id, cfg.mlflow, out, uri, logged)


def start(
    cfg: TrackingConfig | None, out: Path, resolved: Mapping[str, Any], resume: bool = False
) -> Tracker | None:
    """Open the MLflow run of ``cfg`` (``None``: tracking is off) and log the resolved
    config as params; a one-line :class:`FedadError` when it cannot. With ``resume``, the
    MLflow run recorded in ``out`` continues when the store still has it."""
    if cfg is None:
        return None
    client_cls = _client()
    _outside(cfg.mlflow, out)
    uri = tracking_uri(cfg.mlflow)
    for name, value in HTTP_DEFAULTS.items():
        os.environ.setdefault(name, value)
    from mlflow.entities import Param, RunTag

    try:
        client = client_cls(tracking_uri=uri)
    except Exception as err:  # any failure of the backend, before anything trains
        raise FedadError(
            f"[tracking] mlflow {cfg.mlflow!r} cannot start a run: {_reason(err)}",
            "check the tracking URI or folder, or remove the [tracking] section",
        ) from None
    reopened = _reopen(client, cfg, out, uri) if resume else None
    if reopened is not None:
        return reopened
    try:
        run = client.create_run(experiment_id(client, cfg.experiment), run_name=run_name(cfg, out))
        run_id = run.info.run_id
        params = [Param(k, v) for k, v in flatten(resolved)]
        tags = [RunTag("fedad.version", __version__), RunTag("fedad.out", str(Path(out)))]
        for i in range(0, len(params), _BATCH):
            client.log_batch(run_id, params=params[i : i + _BATCH], tags=tags if i == 0 else [])
    except Exception as err:  # any failure of the backend, before anything trains
        raise FedadError(
            f"[tracking] mlflow {cfg.mlflow!r} cannot start a run: {_reason(err)}",
            "check the tracking URI or folder, or remove the [tracking] section",
        ) from None
    tracker = Tracker(client, run_id, cfg.mlflow, out, uri)
    tracker.save()
    return tracker


def track_seeds(cfg: ExperimentConfig, out: Path, data: Mapping[str, Any]) -> None:
    """A several-seed run's aggregate (``data``: ``OUT/metrics.json``'s) as one more MLflow
    run named after ``OUT``; the seeds have finished, so a failure here only warns."""
    if cfg.tracking is None:
        return
    try:
        tracker = start(cfg.tracking, out, cfg.model_dump(mode="json", exclude_none=True))
    except FedadError as err:
        log.warning("tracking: the aggregate over seeds was not logged: %s", err)
        return
    if tracker is None:
        return
    methods = data.get("methods")
    for label, entry in methods.items() if isinstance(methods, dict) else ():
        if isinstance(entry, dict):
            tracker.method(str(label), [], entry)
    tracker.finish(out)
