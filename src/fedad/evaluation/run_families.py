"""The metric families a run's report shows: those its ``metrics.json`` describes
(:func:`fedad.evaluation.columns.families_of`), so that rendering imports no method; for a
run written before they were described, the families the code knows (the built-in ones and
every method's: this imports every method)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedad.core.algorithm import registry
from fedad.evaluation.columns import FamilySpec, families_of


def known_families() -> tuple[FamilySpec, ...]:
    """The built-in families, ONLAD's normal-positive one (which every method reported
    before families were declared per method) and every family a method declares."""
    from fedad.evaluation.families import BUILTIN, NORMAL_POSITIVE

    out: dict[str, FamilySpec] = {f.name: f for f in (*BUILTIN, NORMAL_POSITIVE)}
    for cls in registry().values():
        for f in cls.metric_families:
            out.setdefault(f.name, f)
    return tuple(out.values())


def run_families(metrics: Mapping[str, Any]) -> tuple[FamilySpec, ...]:
    """The families of the run whose ``metrics.json`` data are ``metrics``."""
    described = families_of(metrics)
    return described if described is not None else known_families()
