"""The partition schemes behind one protocol (:class:`~.base.Scheme`), by name."""

from __future__ import annotations

from fedad.core.errors import ConfigError
from fedad.data.federation.schemes.base import Draft, Scheme, Training
from fedad.data.federation.schemes.by_source import BySource
from fedad.data.federation.schemes.natural import Natural
from fedad.data.federation.schemes.one_vs_rest import OneVsRest
from fedad.data.partition import SCHEMES

__all__ = ["Draft", "Scheme", "Training", "scheme_for"]

_OWN: dict[str, type[Scheme]] = {
    "by-source": BySource,
    "natural": Natural,
    "one-vs-rest": OneVsRest,
}


def scheme_for(name: str) -> Scheme:
    """The scheme called ``name`` (one of :data:`fedad.data.partition.SCHEMES`); the
    class-skew schemes (iid, dirichlet, dominant, one-class) are the default
    :class:`Scheme` and differ only in their partition function."""
    if name not in SCHEMES:
        raise ConfigError(f"partition.scheme '{name}' is not one of {', '.join(SCHEMES)}")
    return _OWN.get(name, Scheme)(name)
