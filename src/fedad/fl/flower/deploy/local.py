"""A local deployment on 127.0.0.1: one SuperLink, one SuperNode (and its ClientApp
process) per client, as child processes of fedad."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

from fedad.core.errors import ConfigError
from fedad.fl.flower.deploy.launch import (
    CLIENTAPP_MODES,
    PORT_BUSY,
    PORT_TRIES,
    flower_env,
    free_port,
    superlink_argv,
    supernode_argv,
    worker_argv,
)
from fedad.fl.flower.deploy.processes import (
    READY_LINE,
    START_TIMEOUT,
    Supervisor,
    proc_state,
    wait_started,
)
from fedad.fl.flower.spec import FlowerRunError

NODE_MODELS = "node-models"
"""Folder of ``RUN_DIR/.flower`` where a local deployment's SuperNodes keep personalised
detectors (kept after the run; ``--force`` clears it with the rest of ``.flower``)."""


MAX_LOCAL_NODES = 32
"""Most SuperNodes ``fedad run`` starts on one machine (two processes each, ~130 MB apiece)."""


WORKER_RESTARTS = 3
"""How often a SuperNode's ClientApp process that died is started again (per node)."""


log = logging.getLogger("fedad")


class LocalDeployment:
    """A SuperLink and ``num_nodes`` SuperNodes on 127.0.0.1 (use as a context manager)."""

    def __init__(
        self,
        workdir: Path,
        num_nodes: int,
        models_dir: Path | None = None,
        clientapp: str = "per-node",
    ) -> None:
        self.workdir = workdir
        self.num_nodes = num_nodes
        self.models_dir = models_dir or workdir / "node-models"
        """Where the SuperNodes keep personalised detectors (all of them: each in its own
        ``run-R/client-I`` folder); created only when one is saved."""
        if clientapp not in CLIENTAPP_MODES:
            raise ConfigError(f"clientapp '{clientapp}' is not one of {', '.join(CLIENTAPP_MODES)}")
        self.clientapp = clientapp
        """``per-node``: each SuperNode's tasks run in one long-running ClientApp process
        (``worker-I``, :func:`worker_argv`); ``per-message``: Flower's SuperExec per node."""
        self.supervisor = Supervisor(workdir / "logs")
        self.port = 0
        self.address = ""
        self.node_ports: dict[int, int] = {}
        self._restarts: dict[int, int] = {}
        self._worker_restarts: dict[int, int] = {}
        self._workers_gone: set[int] = set()
        self._reported: dict[int, str] = {}

    def start(self) -> None:
        """Start the SuperLink, wait until it listens, then start the SuperNodes.

        A port that another process takes between our choosing it and the SuperLink binding
        it is retried with another one (:data:`PORT_TRIES` in all).
        """
        w = self.workdir
        taken: list[int] = []
        for _ in range(PORT_TRIES):
            self.port = free_port()
            proc = self.supervisor.start(
                "superlink", superlink_argv(port=self.port), flower_env(w / "homes" / "superlink")
            )
            state = wait_started(proc, lambda: self.supervisor.log_text("superlink"), self.port)
            if state == "ready":
                break
            text = self.supervisor.log_text("superlink")
            if state == "exited" and PORT_BUSY.search(text):
                taken.append(self.port)
                continue
            raise FlowerRunError(
                "the SuperLink did not start"
                + (f" within {START_TIMEOUT:g} s" if state == "timeout" else ""),
                f"its log: {self.supervisor.log_tail('superlink')}; logs in {w}",
            )
        else:
            raise FlowerRunError(
                f"the SuperLink could not listen on 127.0.0.1: the ports it was given "
                f"({', '.join(map(str, taken))}) were taken by other processes first",
                "run again; if this repeats, something on this machine grabs free ports",
            )
        self.address = f"127.0.0.1:{self.port}"
        for i in range(self.num_nodes):
            self._start_node(i)

    def _node_env(self, i: int) -> dict[str, str]:
        """Node ``i``'s environment: its Flower home, the data cache, and
        ``OMP_NUM_THREADS`` (:meth:`node_threads`) unless the caller's environment sets it."""
        extra = {"FEDAD_FLOWER_CACHE": str(self.workdir / "cache")}
        if "OMP_NUM_THREADS" not in os.environ:
            extra["OMP_NUM_THREADS"] = str(self.node_threads())
        return flower_env(self.workdir / "homes" / f"supernode-{i}", extra)

    def node_threads(self) -> int:
        """Torch threads of each node's ClientApp: this process's threads shared out over
        the nodes (at least 1), as ``engine.workers`` shares them over workers. The nodes
        of a round train at the same time on one machine; more threads than cores make
        torch's threads wait on each other (float32 sums may then differ from the
        in-process run's in the last bits; metrics agree to 1e-6)."""
        import torch

        return max(1, torch.get_num_threads() // max(1, self.num_nodes))

    def _start_node(self, i: int) -> None:
        self.node_ports[i] = free_port()
        self.supervisor.start(
            f"supernode-{i}",
            supernode_argv(
                self.address,
                i,
                self.num_nodes,
                self.node_ports[i],
                models_dir=str(self.models_dir),
                clientapp=self.clientapp,
            ),
            self._node_env(i),
        )
        if self.clientapp == "per-node":
            self._start_worker(i)

    def _start_worker(self, i: int) -> None:
        """Node ``i``'s ClientApp process; it waits for the SuperNode's Runtime API itself
        (tasks wait in the SuperNode until it polls)."""
        self.supervisor.start(f"worker-{i}", worker_argv(self.node_ports[i]), self._node_env(i))

    def _check_worker(self, i: int) -> None:
        """Start node ``i``'s ClientApp process again if it died (a message it was running
        gets Flower's "ClientApp crashed" reply), :data:`WORKER_RESTARTS` times at most;
        then its replies are missing, and the console says so once."""
        name = f"worker-{i}"
        proc = self.supervisor.procs.get(name)
        if proc is None or proc.poll() is None or i in self._workers_gone:
            return
        code = proc.returncode
        why = f"exit code {code}" if code >= 0 else f"killed by signal {-code}"
        if self._worker_restarts.get(i, 0) < WORKER_RESTARTS:
            self._worker_restarts[i] = self._worker_restarts.get(i, 0) + 1
            self.supervisor.rotate_log(name)
            self._start_worker(i)
            log.warning(
                "node %d: its ClientApp process (pid %d) stopped (%s); started another "
                "(log of the one that stopped: %s)",
                i,
                proc.pid,
                why,
                self.supervisor.log_path(name).with_suffix(".log.1"),
            )
            return
        self._workers_gone.add(i)
        log.warning(
            "node %d: its ClientApp process stopped again (%s), %d restarts used; its replies "
            "will be missing (log: %s)",
            i,
            why,
            WORKER_RESTARTS,
            self.supervisor.log_path(name),
        )

    def check_nodes(self) -> None:
        """Called while a run goes on: restart a SuperNode whose port was taken at start-up,
        and a node's ClientApp process that died (:meth:`_check_worker`); log a warning,
        once, for a SuperNode that exited or is stopped (its client's replies will be
        missing)."""
        for i in range(self.num_nodes):
            name = f"supernode-{i}"
            proc = self.supervisor.procs[name]
            code = proc.poll()
            if code is None and self.clientapp == "per-node":
                self._check_worker(i)
            if code is None:
                state = proc_state(proc.pid)
                if state in ("T", "t") and self._reported.get(i) != "stopped":
                    self._reported[i] = "stopped"
                    log.warning(
                        "node %d: its SuperNode (pid %d) is stopped and cannot answer; its "
                        "replies will be missing",
                        i,
                        proc.pid,
                    )
                elif state not in ("T", "t") and self._reported.get(i) == "stopped":
                    del self._reported[i]  # continued (SIGCONT)
                continue
            if self._reported.get(i) == "exited":
                continue
            text = self.supervisor.log_text(name)
            if (
                PORT_BUSY.search(text)
                and READY_LINE not in text
                and self._restarts.get(i, 0) < PORT_TRIES - 1
            ):
                self._restarts[i] = self._restarts.get(i, 0) + 1
                port = self.node_ports[i]
                self._start_node(i)
                log.info(
                    "node %d: port %d was taken; its SuperNode restarts on port %d",
                    i,
                    port,
                    self.node_ports[i],
                )
                continue
            self._reported[i] = "exited"
            why = f"exit code {code}" if code >= 0 else f"killed by signal {-code}"
            log.warning(
                "node %d: its SuperNode (pid %d) stopped during the run (%s); its replies will "
                "be missing (log: %s)",
                i,
                proc.pid,
                why,
                self.supervisor.log_path(name),
            )

    def kill_supernode(self, partition_id: int, sig: int = signal.SIGKILL) -> None:
        """Kill (or, with SIGSTOP, hang) SuperNode ``partition_id`` and its processes."""
        self.supervisor.kill(f"supernode-{partition_id}", sig)

    def stop(self) -> None:
        """Stop every process this deployment started."""
        self.supervisor.stop_all()

    def __enter__(self) -> LocalDeployment:
        _ACTIVE.append(self)
        try:
            self.start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            if self in _ACTIVE:
                _ACTIVE.remove(self)


_ACTIVE: list[LocalDeployment] = []


def active_deployments() -> list[LocalDeployment]:
    """The local deployments running now (tests use this to kill a SuperNode mid-run)."""
    return list(_ACTIVE)
