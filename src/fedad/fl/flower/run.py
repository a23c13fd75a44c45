"""Entry point of the Flower engines: :func:`run_flower` runs an algorithm as
``engine.name`` says (``flower-simulation`` or ``flower-deployment``); :class:`FlowerEngine`
is the same behind the engine protocol (:class:`fedad.fl.engines.Engine`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedad.config import ExperimentConfig
from fedad.core.algorithm import Algorithm
from fedad.core.errors import ConfigError
from fedad.core.types import Federation
from fedad.fl.flower.spec import require_flwr

if TYPE_CHECKING:  # the engine pulls in scipy; the ClientApp's handshake stays light
    from fedad.fl.drive import RunOutcome
    from fedad.fl.engines import RunSettings


def run_flower(
    cfg: ExperimentConfig,
    algorithm: Algorithm,
    fed: Federation,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    workdir: Path | None = None,
) -> RunOutcome:
    """Run ``algorithm`` on Flower as ``cfg.engine.name`` says.

    ``workdir`` (the run's output directory) holds Flower's home, logs and the results
    hand-over under ``.flower/``; without it a temporary directory is used and removed.
    """
    name = cfg.engine.name
    require_flwr(name)
    if len(fed.clients) != algorithm.setup.num_clients:
        raise ConfigError(
            f"the algorithm was built for {algorithm.setup.num_clients} clients, "
            f"the federation has {len(fed.clients)}"
        )
    if name == "flower-simulation":
        from fedad.fl.flower.sim import run_simulation

        return run_simulation(cfg, algorithm, fed, on_round=on_round, workdir=workdir)
    if name == "flower-deployment":
        from fedad.fl.flower.deploy.run import run_deployment

        return run_deployment(cfg, algorithm, fed, on_round=on_round, workdir=workdir)
    raise ConfigError(f"engine.name = '{name}' is not a Flower engine")


class FlowerEngine:
    """The Flower engines behind the one engine protocol (:class:`fedad.fl.engines.Engine`):
    ``flower-simulation`` or ``flower-deployment``, as the config's ``engine.name`` says."""

    def run(
        self,
        algorithm: Algorithm,
        federation: Federation,
        settings: RunSettings,
        on_round: Callable[[dict[str, Any]], None] | None = None,
    ) -> RunOutcome:
        return run_flower(
            settings.config, algorithm, federation, on_round=on_round, workdir=settings.workdir
        )
