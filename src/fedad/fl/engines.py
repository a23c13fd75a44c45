"""Engines: what runs a method's server program against its clients, as one protocol.

:class:`Engine` is the one interface the runner sees: ``run(algorithm, federation,
settings, on_round)`` returns a :class:`~fedad.fl.engine.RunOutcome`, whatever carries the
messages. The in-process engine (:class:`InProcessEngine`, :mod:`fedad.fl.engine`) and the
Flower engines (:class:`fedad.fl.flower.run.FlowerEngine`, simulation and deployment)
implement it; :func:`engine_for` picks one by ``engine.name`` and imports the Flower engine
(an optional extra) only when a config names it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from fedad.config import ExperimentConfig
from fedad.core.algorithm import Algorithm
from fedad.core.errors import ConfigError
from fedad.core.types import Federation
from fedad.fl.drive import RunOutcome
from fedad.fl.engine import run_inprocess
from fedad.fl.workers import WorkerPool, resolve_workers

__all__ = ["ENGINES", "Engine", "InProcessEngine", "OnRound", "RunSettings", "engine_for"]

OnRound = Callable[[dict[str, Any]], None]
"""Called with each finished round's history row (a progress bar, a live log)."""


@dataclass(frozen=True)
class RunSettings:
    """What an engine needs of a run beside the algorithm and its federation: the resolved
    ``config`` of this seed (rounds, seed, ``[engine]``, ``[attack]``, ``[privacy]``), the
    run's output directory ``workdir`` (where the Flower engines keep their logs and
    hand-over files; ``None``: a temporary one) and the run's worker processes ``pool``
    (``engine.workers`` of the in-process engine, one pool for every method of a run)."""

    config: ExperimentConfig
    workdir: Path | None = None
    pool: WorkerPool | None = None


@runtime_checkable
class Engine(Protocol):
    """Runs one algorithm on one federation, then evaluates every client."""

    def run(
        self,
        algorithm: Algorithm,
        federation: Federation,
        settings: RunSettings,
        on_round: OnRound | None = None,
    ) -> RunOutcome:
        """The outcome of ``algorithm``'s server program and the clients' evaluation."""
        ...


class InProcessEngine:
    """The embedded engine: clients as function calls in this process, or in
    ``engine.workers`` worker processes (:func:`fedad.fl.engine.run_inprocess`)."""

    def run(
        self,
        algorithm: Algorithm,
        federation: Federation,
        settings: RunSettings,
        on_round: OnRound | None = None,
    ) -> RunOutcome:
        cfg = settings.config
        e = cfg.engine
        return run_inprocess(
            algorithm,
            federation,
            rounds=cfg.rounds,
            seed=cfg.seed,
            fraction=e.fraction,
            dropout=e.dropout,
            min_clients=e.min_clients,
            on_round=on_round,
            attack=cfg.attack,
            eval_every=e.eval_every,
            privacy=cfg.privacy,
            workers=resolve_workers(e.workers),
            pool=settings.pool,
        )


ENGINES: dict[str, str] = {
    "inprocess": "fedad.fl.engines:InProcessEngine",
    "flower-simulation": "fedad.fl.flower.run:FlowerEngine",
    "flower-deployment": "fedad.fl.flower.run:FlowerEngine",
}
"""``engine.name`` -> the class implementing it (``module:class``, imported when named)."""


def engine_for(name: str) -> Engine:
    """The engine ``engine.name`` names; a one-line :class:`ConfigError` for another name."""
    where = ENGINES.get(name)
    if where is None:
        raise ConfigError(
            f"engine.name = '{name}' is no engine", f"one of: {', '.join(sorted(ENGINES))}"
        )
    module, _, cls = where.partition(":")
    engine: Engine = getattr(importlib.import_module(module), cls)()
    return engine
