"""Which methods a benchmark runs: every (method, detector) pair the catalog declares for a
federation's data kind, or the ones ``--methods`` names.

A pair is written ``name`` or ``name:detector``; a name alone selects every detector of
that method that suits the data kind (``fedavg`` on a table: the autoencoder, Deep SVDD
...), ``name:detector`` that one. A method that brings its own model has no detector part.
Each pair runs with default params under a label of its own (``fedavg-autoencoder``,
``onlad``), so that one run holds them all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedad.core.algorithm import method_class
from fedad.core.catalog import method_entries
from fedad.core.errors import ConfigError

__all__ = ["Pair", "expand_methods", "pairs_for", "parse_methods"]


@dataclass(frozen=True)
class Pair:
    """A method with one of its detectors (``None``: the method's own model)."""

    method: str
    detector: str | None

    @property
    def label(self) -> str:
        return self.method if self.detector is None else f"{self.method}-{self.detector}"

    def entry(self) -> dict[str, Any]:
        """Its ``[[methods]]`` table."""
        out: dict[str, Any] = {"name": self.method, "label": self.label}
        if self.detector is not None:
            out["detector"] = self.detector
        return out


def pairs_for(kind: str) -> list[Pair]:
    """Every (method, detector) pair declared for data of ``kind``, in catalog order."""
    out: list[Pair] = []
    for name, entry in method_entries().items():
        cls = method_class(name)
        for det in entry.detectors or (None,):
            kinds = cls.kinds_for(det) if cls is not None else entry.kinds
            if kind in kinds:
                out.append(Pair(name, det))
    return out


def parse_methods(spec: str | None) -> list[tuple[str, str | None]]:
    """``--methods a,b:c`` as ``[("a", None), ("b", "c")]`` (``None``: every selection)."""
    if spec is None:
        return []
    out: list[tuple[str, str | None]] = []
    for item in (p.strip() for p in spec.split(",")):
        if not item:
            continue
        name, _, det = item.partition(":")
        out.append((name.strip(), det.strip() or None))
    if not out:
        raise ConfigError("--methods is empty", "give names such as feddymem,fedavg:patchcore")
    return out


def expand_methods(kind: str, chosen: list[tuple[str, str | None]]) -> list[Pair]:
    """The pairs for ``kind``: all of them, or those ``chosen`` names (each must exist and
    suit ``kind``; a one-line :class:`ConfigError` names the first that does not)."""
    every = pairs_for(kind)
    if not chosen:
        return every
    out: list[Pair] = []
    for name, det in chosen:
        hits = [p for p in every if p.method == name and (det is None or p.detector == det)]
        if not hits:
            known = sorted({p.method for p in every})
            what = name if det is None else f"{name}:{det}"
            raise ConfigError(
                f"--methods: '{what}' is no method (and detector) for {kind} data",
                f"methods for {kind} data: {', '.join(known)} (`fedad list methods`)",
            )
        out += [p for p in hits if p not in out]
    return out
