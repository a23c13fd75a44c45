"""An experiment's federation: its config's sections, the data planner, then the attacks.

The composition the runner and the Flower SuperNodes share: the planner
(:mod:`fedad.data.federation`) reads only the ``[data]`` and ``[partition]`` sections and
the seed; the data attacks of ``[attack]`` (:mod:`fedad.attacks`) are applied after it, on
the plan (``contamination``) and on the built federation (``gaussian-data``).
"""

from __future__ import annotations

from fedad.attacks import check_attack, poison_data, poison_plan
from fedad.config import MAX_CLIENTS, ExperimentConfig, PartitionConfig
from fedad.core.types import Federation
from fedad.data.federation import FederationPlan, PartitionSpec, materialize
from fedad.data.federation import plan_federation as plan_sections

__all__ = ["build_federation", "partition_spec", "plan_federation"]


def partition_spec(p: PartitionConfig) -> PartitionSpec:
    """The ``[partition]`` section as the planner reads it."""
    return PartitionSpec(
        scheme=p.scheme,
        clients=p.clients,
        alpha=p.alpha,
        dominant_fraction=p.dominant_fraction,
        contamination=p.contamination,
        min_per_client=p.min_per_client,
        local_test=p.local_test,
        max_clients=MAX_CLIENTS,
        clients_given="clients" in p.model_fields_set,
    )


def plan_federation(cfg: ExperimentConfig) -> FederationPlan:
    """The plan of ``cfg``'s federation, data attacks on the plan included."""
    check_attack(cfg.attack, cfg.partition.scheme)
    plan = plan_sections(cfg.data, partition_spec(cfg.partition), cfg.seed)
    poison_plan(plan, cfg.attack, cfg.seed)
    return plan


def build_federation(cfg: ExperimentConfig) -> Federation:
    """The federation ``cfg`` describes: :func:`plan_federation`, materialized, then the
    ``gaussian-data`` attack."""
    return poison_data(materialize(plan_federation(cfg)), cfg.attack, cfg.seed)
