"""What a config means for one run, settled once before anything trains.

:func:`resolve` turns the config as written into the config the run follows, in this
order (each step needs the one before):

1. ``data.server_normal`` raised to what the methods' server programs ask for
   (:func:`with_server_data`);
2. the federation built from it (:func:`fedad.federation.build_federation`), and, under the
   natural scheme, its client count named in the config;
3. every method built and validated against that federation (:func:`build_algorithms`);
4. ``privacy.noise_multiplier`` calibrated to ``privacy.target_epsilon`` for those methods
   and clients (:func:`fedad.privacy.budget.with_calibrated_noise`);
5. the resolved config: every default filled in, each method's params
   (:func:`resolved_config`, written as the run's ``config.toml``).

Nothing rewrites the config after :func:`resolve`: the runner, the engines and the outputs
read :attr:`Resolved.cfg`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from fedad.config import ExperimentConfig
from fedad.core.algorithm import Algorithm, Setup, build_algorithm, method_class
from fedad.core.detector import DEFAULT_CONTAMINATION
from fedad.core.types import Federation
from fedad.federation import build_federation, plan_federation
from fedad.fl.server_inputs import check_requirements, supplied_fields
from fedad.privacy.budget import with_calibrated_noise

__all__ = [
    "SERVER_SHARE",
    "Resolved",
    "build_algorithms",
    "make_setup",
    "resolve",
    "resolved_config",
    "with_server_data",
]


@dataclass(frozen=True)
class Resolved:
    """A config settled for one run (:func:`resolve`)."""

    cfg: ExperimentConfig
    """The config the run follows."""
    fed: Federation
    """Its federation."""
    algorithms: dict[str, Algorithm]
    """Every method by label, in config order, built and validated."""
    config: dict[str, Any]
    """The resolved config as data (``config.toml``)."""


def resolve(cfg: ExperimentConfig) -> Resolved:
    """``cfg`` settled for one run: the server data, the federation, the methods, the
    calibrated noise and the resolved config, in the order of the module's list."""
    cfg = with_server_data(cfg)
    fed = build_federation(cfg)
    if cfg.partition.scheme == "natural":  # the resolved config names the count
        cfg = cfg.natural_counts_checked(len(fed.clients))
    algorithms = build_algorithms(cfg, fed)
    cfg = with_calibrated_noise(cfg, algorithms.values(), len(fed.clients))
    return Resolved(cfg, fed, algorithms, resolved_config(cfg, algorithms))


SERVER_SHARE = 5
"""Server-side data a method asks for is capped at 1/SERVER_SHARE of the normal training pool."""


def with_server_data(cfg: ExperimentConfig) -> ExperimentConfig:
    """``cfg`` with ``data.server_normal`` large enough for every method's server program.

    A method asks via :meth:`Algorithm.requirements`; the request is capped at a fifth of
    the normal training pool so that small data sets still leave clients most of their data.
    All methods of a run share the federation, so they all train without those samples.
    """

    def asks(name: str, params: dict[str, Any]) -> int:
        cls = method_class(name)
        try:
            return cls.server_samples(params) if cls is not None else 0
        except ValidationError:  # reported, in one line, when the method is built
            return 0

    asked = max((asks(m.name, m.params) for m in cfg.methods), default=0)
    if asked <= cfg.data.server_normal:
        return cfg
    pool = int(plan_federation(cfg).notes["normal_pool"])  # type: ignore[call-overload]
    take = max(cfg.data.server_normal, min(asked, pool // SERVER_SHARE))
    data = cfg.data.model_copy(update={"server_normal": take})
    return cfg.model_copy(update={"data": data})


def make_setup(cfg: ExperimentConfig, fed: Federation) -> Setup:
    contamination = cfg.partition.contamination or DEFAULT_CONTAMINATION
    return Setup(
        kind=fed.kind,
        feature_shape=tuple(fed.feature_shape),
        rounds=cfg.rounds,
        seed=cfg.seed,
        contamination=contamination,
        num_clients=len(fed.clients),
        device=cfg.engine.device,
    )


def build_algorithms(cfg: ExperimentConfig, fed: Federation) -> dict[str, Algorithm]:
    """Every configured method, validated before anything trains."""
    setup = make_setup(cfg, fed)
    out = {
        label: build_algorithm(m.name, m.params, setup, m.detector, where=f"methods.{i}")
        for i, (label, m) in enumerate(zip(cfg.labels(), cfg.methods, strict=True))
    }
    fields = supplied_fields(fed)
    for label, alg in out.items():
        check_requirements(alg, label, fields)
    return out


def resolved_config(cfg: ExperimentConfig, algorithms: dict[str, Algorithm]) -> dict[str, Any]:
    """The config with every default filled in, methods' params included."""
    raw = cfg.model_dump(mode="json", exclude_none=True)
    for m, alg in zip(raw["methods"], algorithms.values(), strict=True):
        m["params"] = alg.params.model_dump(mode="json", exclude_none=True)
        if alg.detector is not None:
            m["detector"] = alg.detector
    return raw
