"""Flower engine (issue 4): placeholder until the adapter lands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fedad.config import ExperimentConfig
from fedad.data.types import Federation
from fedad.errors import ConfigError
from fedad.fl.algorithm import Algorithm
from fedad.fl.engine import RunOutcome


def run_flower(
    cfg: ExperimentConfig,
    algorithm: Algorithm,
    fed: Federation,
    on_round: Callable[[dict[str, Any]], None] | None = None,
) -> RunOutcome:
    """Run ``algorithm`` on Flower as ``cfg.engine.name`` says."""
    raise ConfigError(
        f"engine.name = '{cfg.engine.name}' is not available in this version",
        "use engine.name = 'inprocess'",
    )
