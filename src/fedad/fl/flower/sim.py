"""``engine.name = "flower-simulation"``: Flower's simulation runtime (Ray) on this machine.

The ServerApp runs in a thread of this process around the very algorithm object the
runner built, so its result, history and ``on_round`` calls need no hand-over; the
ClientApps run in Ray worker processes (one per CPU, each builds the federation once and
serves many partitions). Flower's home, Ray's temporary directory and caches live in a
temporary directory that is removed afterwards (Ray's socket paths must stay short, so it
is not under the run directory). Telemetry, update checks and Ray usage stats are off.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from fedad.config import ExperimentConfig
from fedad.core.algorithm import Algorithm
from fedad.core.errors import ConfigError
from fedad.core.types import Federation
from fedad.fl.drive import RunOutcome
from fedad.fl.flower.spec import FlowerRunError, RunSpec

QUIET_ENV = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
    "RAY_DEDUP_LOGS": "0",
}
"""Environment for every Flower process fedad starts: nothing phones home."""
MAX_WORKERS = 8
"""Most Ray workers a simulation starts (each builds the whole federation in memory)."""


@contextlib.contextmanager
def environment(values: dict[str, str], unset: tuple[str, ...] = ()) -> Iterator[None]:
    """Set (and ``unset``) environment variables for the block, then restore them."""
    keys = [*values, *unset, "PYTHONPATH"]  # Flower's Ray backend rewrites PYTHONPATH
    old = {k: os.environ.get(k) for k in keys}
    os.environ.update(values)
    for k in unset:
        os.environ.pop(k, None)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class _DropDeprecation(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "DEPRECATED FEATURE" not in record.getMessage()


@contextlib.contextmanager
def quiet_flower(level: int = logging.WARNING) -> Iterator[None]:
    """Flower's logger at ``level`` without the ``run_simulation`` deprecation notice."""
    logger = logging.getLogger("flwr")
    old = logger.level
    filt = _DropDeprecation()
    logger.setLevel(level)
    handlers = [logger, *logger.handlers]
    for h in handlers:
        h.addFilter(filt)
    try:
        yield
    finally:
        logger.setLevel(old)
        for h in handlers:
            h.removeFilter(filt)


def require_ray() -> None:
    """Raise a one-line error when Ray (Flower's simulation backend) is missing."""
    if importlib.util.find_spec("ray") is None:
        raise ConfigError(
            "engine.name = 'flower-simulation' needs Ray, which is not installed",
            "install fedad's flower extra (it includes Ray), "
            "or use engine.name = 'flower-deployment'",
        )


def run_simulation(
    cfg: ExperimentConfig,
    algorithm: Algorithm,
    fed: Federation,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    workdir: Path | None = None,
) -> RunOutcome:
    """Run ``algorithm`` in Flower's simulation runtime with one virtual SuperNode per client."""
    require_ray()
    import ray
    from flwr.simulation import run_simulation as flwr_run_simulation

    from fedad.fl.flower.app import FedadClientApp, make_server_app

    spec = RunSpec.build(cfg, algorithm)
    sink: list[RunOutcome] = []
    server = make_server_app(spec, algorithm, sink, on_round, server_data=fed.server_normal)
    client = FedadClientApp(spec)
    tmp = Path(tempfile.mkdtemp(prefix="fedad-sim-"))
    # one Ray worker per CPU, each holding the whole federation: at most MAX_WORKERS
    cpus = max(1, min(os.cpu_count() or 1, len(fed.clients), MAX_WORKERS))
    backend_config: dict[str, Any] = {
        "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
        "init_args": {
            "num_cpus": cpus,
            "num_gpus": 0,
            "include_dashboard": False,
            "log_to_driver": False,
            "logging_level": "error",
            "_temp_dir": str(tmp / "ray"),
        },
    }
    env = {
        **QUIET_ENV,
        "FLWR_HOME": str(tmp / "flwr"),
        "RAY_TMPDIR": str(tmp / "ray"),
    }
    try:
        with environment(env, unset=("RAY_ADDRESS",)), quiet_flower():  # a local Ray only
            flwr_run_simulation(
                server_app=server,
                client_app=client,
                num_supernodes=len(fed.clients),
                backend_config=backend_config,
            )
    except SystemExit as err:  # flwr_exit() on a startup problem
        raise FlowerRunError(
            f"the Flower simulation stopped at start-up (exit code {err.code})"
        ) from None
    except RuntimeError as err:
        if isinstance(err.__cause__, Exception) and "Ending simulation" in str(err):
            raise err.__cause__ from None
        raise
    finally:
        if ray.is_initialized():
            ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    if not sink:
        raise FlowerRunError("the Flower simulation ended without a result")
    return sink[0]
