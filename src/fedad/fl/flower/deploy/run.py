"""``engine.name = "flower-deployment"``: submit the run with ``flwr run``, wait for it and
read its results (:func:`run_deployment`)."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedad.config import ExperimentConfig
from fedad.core.algorithm import Algorithm
from fedad.core.errors import ConfigError, Interrupted
from fedad.core.types import Federation
from fedad.fl.drive import RunOutcome
from fedad.fl.flower.deploy.launch import (
    CONNECTION,
    flower_bin,
    flower_env,
    superexec_argv,
    tls_args_client,
    write_app,
)
from fedad.fl.flower.deploy.local import MAX_LOCAL_NODES, NODE_MODELS, LocalDeployment
from fedad.fl.flower.deploy.processes import Supervisor, sigterm_as_interrupt
from fedad.fl.flower.results import ResultsDir
from fedad.fl.flower.spec import FlowerRunError, RunSpec
from fedad.fl.timeline import timeline_event
from fedad.rundir.files import mkdir
from fedad.rundir.layout import CONFIG_FILE

log = logging.getLogger("fedad")


@dataclass(frozen=True)
class RemoteSuperLink:
    """A SuperLink started elsewhere (``fedad flower superlink``), as ``fedad flower run``
    reaches it: ``address`` is ``HOST:PORT``; ``root_certificates`` the CA certificate
    (PEM) to verify it, or ``None`` with ``insecure=True``."""

    address: str
    root_certificates: str | None = None
    insecure: bool = False


_REMOTE: contextvars.ContextVar[RemoteSuperLink | None] = contextvars.ContextVar(
    "fedad_remote_superlink", default=None
)


@contextlib.contextmanager
def remote_superlink(link: RemoteSuperLink) -> Iterator[None]:
    """Within the block, ``flower-deployment`` runs use ``link`` instead of local processes."""
    token = _REMOTE.set(link)
    try:
        yield
    finally:
        _REMOTE.reset(token)


def write_connection(home: Path, link: RemoteSuperLink) -> None:
    """The ``flwr`` CLI's config: one SuperLink connection named ``fedad``."""
    import tomli_w

    conn: dict[str, Any] = {"address": link.address}
    if link.insecure:
        conn["insecure"] = True
    else:
        conn["root-certificates"] = str(Path(str(link.root_certificates)).resolve())
    home.mkdir(parents=True, exist_ok=True)
    doc = {"superlink": {"default": CONNECTION, CONNECTION: conn}}
    (home / CONFIG_FILE).write_text(tomli_w.dumps(doc))


def submit_and_wait(
    spec: RunSpec,
    link: RemoteSuperLink,
    workdir: Path,
    supervisor: Supervisor,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    watch: Iterable[str] = (),
    stop_on_interrupt: bool = False,
    tick: Callable[[], None] | None = None,
) -> RunOutcome:
    """Run a SuperExec here, submit the run to ``link`` with ``flwr run``, wait, read results.

    ``watch`` names supervised processes whose death ends the wait with an error; ``tick``
    is called while waiting (:meth:`LocalDeployment.check_nodes`); with
    ``stop_on_interrupt``, Ctrl-C also asks the SuperLink to stop the run (``flwr stop``).
    """
    results = ResultsDir(spec.results_dir)
    app = write_app(workdir / "app", spec)
    cli_home = workdir / "homes" / "cli"
    write_connection(cli_home, link)
    tls = tls_args_client(link.root_certificates, link.insecure)
    supervisor.start(
        "superexec", superexec_argv(link.address, tls), flower_env(workdir / "homes" / "superexec")
    )
    timeline_event("run-submit", time=time.time())
    submit = supervisor.start(
        "flwr-run",
        [flower_bin("flwr"), "run", str(app), CONNECTION, "--stream"],
        flower_env(cli_home),
    )
    watched = ["superexec", *watch]
    try:
        return _wait(results, supervisor, submit, watched, workdir, on_round, tick)
    except (KeyboardInterrupt, Interrupted):
        if stop_on_interrupt:  # do not leave the run going on a remote SuperLink
            run_id = _run_id(workdir / "logs" / "flwr-run.log")
            if run_id is not None:
                with contextlib.suppress(OSError, subprocess.SubprocessError):
                    subprocess.run(
                        [flower_bin("flwr"), "stop", run_id, CONNECTION],
                        env=flower_env(cli_home),
                        capture_output=True,
                        timeout=20,
                    )
        raise


def _run_id(log: Path) -> str | None:
    """The run id ``flwr run`` printed ("Successfully started run N")."""
    if not log.is_file():
        return None
    m = re.search(r"started run (\d+)", log.read_text(errors="replace"))
    return m.group(1) if m else None


def _wait(
    results: ResultsDir,
    supervisor: Supervisor,
    submit: subprocess.Popen[bytes],
    watched: list[str],
    workdir: Path,
    on_round: Callable[[dict[str, Any]], None] | None,
    tick: Callable[[], None] | None = None,
) -> RunOutcome:
    """Follow the run: rows and the ServerApp's warnings as they come, then the outcome or
    a one-line error."""
    seen = 0
    warned = 0
    ended_at: float | None = None
    while True:
        warnings = results.read_warnings(warned)
        warned += len(warnings)
        for text in warnings:
            log.warning("%s", text)
        if tick is not None:
            tick()
        rows = results.read_rounds(seen)
        seen += len(rows)
        for row in rows:
            if on_round is not None:
                on_round(row)
        if results.outcome_file.is_file():
            return results.read()
        err = results.read_error()
        if err is not None:
            raise FlowerRunError(f"the Flower run failed: {err}", f"logs in {workdir}")
        for name in watched:
            if supervisor.procs[name].poll() is not None:
                raise FlowerRunError(
                    f"the {name} process stopped during the run",
                    f"its log: {supervisor.log_tail(name)}; logs in {workdir}",
                )
        if submit.poll() is not None:
            ended_at = ended_at or time.monotonic()
            if time.monotonic() - ended_at > 5.0:  # the run is over; give the files a moment
                raise FlowerRunError(
                    "the Flower run ended without results",
                    f"flwr run: {supervisor.log_tail('flwr-run')}; logs in {workdir}",
                )
        time.sleep(0.1)


def _workdir(base: Path | None, name: str) -> tuple[Path, bool]:
    """A fresh work directory under ``base/.flower`` (or a temp dir); whether it is temporary."""
    if base is None:
        return Path(tempfile.mkdtemp(prefix=f"fedad-flower-{name}-")), True
    root = mkdir(base / ".flower")  # in a claimed run: not through a link
    return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root)), False


def run_deployment(
    cfg: ExperimentConfig,
    algorithm: Algorithm,
    fed: Federation,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    workdir: Path | None = None,
) -> RunOutcome:
    """Run ``algorithm`` on a Flower deployment: local processes, or the remote SuperLink
    set with :func:`remote_superlink`."""
    remote = _REMOTE.get()
    if remote is None and len(fed.clients) > MAX_LOCAL_NODES:
        raise ConfigError(
            f"engine.name = 'flower-deployment' starts one SuperNode process per client on "
            f"this machine; {len(fed.clients)} clients is more than {MAX_LOCAL_NODES}",
            "use engine.name = 'flower-simulation', or SuperNodes on several machines "
            "(docs/deployment.md)",
        )
    w, temporary = _workdir(workdir.resolve() if workdir else None, algorithm.name)
    ok = False
    interrupted = False
    try:
        # the ServerApp derives data.server_normal from the run config (server_normal_of)
        spec = RunSpec.build(cfg, algorithm, results_dir=w / "results")
        with sigterm_as_interrupt():
            if remote is not None:
                sup = Supervisor(w / "logs")
                try:
                    outcome = submit_and_wait(
                        spec, remote, w, sup, on_round, stop_on_interrupt=True
                    )
                finally:
                    sup.stop_all()
            else:
                # the nodes' personalised detectors outlive the work directory: .flower/
                models = w / "node-models" if temporary else w.parent / NODE_MODELS
                nodes = len(fed.clients)
                with LocalDeployment(w, nodes, models, cfg.engine.clientapp) as dep:
                    link = RemoteSuperLink(dep.address, insecure=True)
                    outcome = submit_and_wait(
                        spec,
                        link,
                        w,
                        dep.supervisor,
                        on_round,
                        ["superlink"],
                        tick=dep.check_nodes,
                    )
        ok = True
        return outcome
    except (KeyboardInterrupt, Interrupted):  # every process is stopped by now
        interrupted = True
        raise
    finally:
        keep = not (ok or temporary or not (w / "logs").exists())  # the logs of a failed run
        if not keep:
            shutil.rmtree(w, ignore_errors=True)
            if not temporary:
                with contextlib.suppress(OSError):
                    w.parent.rmdir()  # .flower/, when empty
        if interrupted:
            if keep:
                log.warning("interrupted; Flower processes stopped, Flower logs kept in %s", w)
            else:
                log.warning("interrupted; Flower processes stopped")
