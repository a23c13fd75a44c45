"""What a Flower run is (:class:`RunSpec`, carried as Flower run config) and whether
Flower is installed; imports without ``flwr``."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedad.config import ExperimentConfig
from fedad.core.algorithm import Algorithm, Setup, build_algorithm
from fedad.core.errors import ConfigError, FedadError

DEFAULT_TIMEOUT = 600.0
"""Reply timeout (seconds) on Flower when ``engine.timeout`` is not set."""


INSTALL_HINT = (
    "install fedad's optional flower extra, which adds flwr and Ray; see docs/deployment.md"
)
"""No square brackets: the CLI prints errors as rich markup, which would eat ``[flower]``."""


class FlowerRunError(FedadError):
    """A Flower run could not finish (too few nodes answered, a process failed)."""


def flwr_available() -> bool:
    """Whether ``flwr`` can be imported."""
    return importlib.util.find_spec("flwr") is not None


def require_flwr(engine: str) -> None:
    """Raise a one-line :class:`ConfigError` when ``flwr`` is not installed."""
    if not flwr_available():
        raise ConfigError(
            f"engine.name = '{engine}' needs Flower (flwr), which is not installed", INSTALL_HINT
        )


@dataclass(frozen=True)
class RunSpec:
    """Everything a ServerApp and a ClientApp need to know about a run.

    It travels as Flower run config (flat ``str -> scalar``), see :meth:`to_run_config`.
    """

    config_json: str
    method: str
    detector: str | None
    params_json: str
    setup_json: str
    timeout: float = DEFAULT_TIMEOUT
    results_dir: str = ""
    label: str = ""
    """The method's key in metrics.json (names the folder of a node's saved detector)."""

    @classmethod
    def build(
        cls,
        cfg: ExperimentConfig,
        algorithm: Algorithm,
        results_dir: str | Path = "",
    ) -> RunSpec:
        """The spec of running ``algorithm`` with ``cfg`` (checks it survives the trip)."""
        setup = dataclasses.asdict(algorithm.setup)
        setup["feature_shape"] = list(setup["feature_shape"])
        spec = cls(
            config_json=cfg.model_dump_json(),
            method=algorithm.name,
            detector=algorithm.detector,
            params_json=algorithm.params.model_dump_json(),
            setup_json=json.dumps(setup),
            timeout=float(cfg.engine.timeout or DEFAULT_TIMEOUT),
            results_dir=str(results_dir),
            label=method_label(cfg, algorithm),
        )
        again = spec.build_algorithm()
        if type(again) is not type(algorithm) or again.params != algorithm.params:
            raise ConfigError(
                f"method '{algorithm.name}' cannot be sent to Flower nodes: its parameters "
                "do not survive a JSON round trip"
            )
        return spec

    def to_run_config(self) -> dict[str, str | float]:
        """Flat Flower run config (keys ``fedad-*``)."""
        return {
            "fedad-config": self.config_json,
            "fedad-method": self.method,
            "fedad-detector": self.detector or "",
            "fedad-params": self.params_json,
            "fedad-setup": self.setup_json,
            "fedad-timeout": float(self.timeout),
            "fedad-results": self.results_dir,
            "fedad-label": self.label,
        }

    @classmethod
    def from_run_config(cls, rc: Mapping[str, Any]) -> RunSpec:
        """The spec :meth:`to_run_config` wrote."""
        if "fedad-config" not in rc:
            raise ValueError("this Flower run was not started by fedad (no 'fedad-config')")
        return cls(
            config_json=str(rc["fedad-config"]),
            method=str(rc["fedad-method"]),
            detector=str(rc["fedad-detector"]) or None,
            params_json=str(rc["fedad-params"]),
            setup_json=str(rc["fedad-setup"]),
            timeout=float(rc.get("fedad-timeout", DEFAULT_TIMEOUT)),
            results_dir=str(rc.get("fedad-results", "")),
            label=str(rc.get("fedad-label", "")),
        )

    def config(self) -> ExperimentConfig:
        """The experiment config."""
        return ExperimentConfig.model_validate_json(self.config_json)

    def setup(self) -> Setup:
        """The algorithm's :class:`~fedad.core.algorithm.Setup`."""
        d = json.loads(self.setup_json)
        d["feature_shape"] = tuple(d["feature_shape"])
        return Setup(**d)

    def build_algorithm(self) -> Algorithm:
        """A fresh instance of the algorithm, as the registry builds it."""
        return build_algorithm(
            self.method, json.loads(self.params_json), self.setup(), self.detector
        )

    @property
    def num_partitions(self) -> int:
        """How many clients (SuperNodes) the run has."""
        return int(json.loads(self.setup_json)["num_clients"])


def method_label(cfg: ExperimentConfig, algorithm: Algorithm) -> str:
    """The label (metrics.json key) of the first method of ``cfg`` that ``algorithm`` is
    (same name, detector and parameters); the method's name when none matches."""
    for label, m in zip(cfg.labels(), cfg.methods, strict=True):
        if m.name != algorithm.name or m.detector not in (None, algorithm.detector):
            continue
        try:
            if type(algorithm).ParamsModel.model_validate(m.params) == algorithm.params:
                return label
        except ValueError:  # pydantic's ValidationError
            continue
    return algorithm.name
