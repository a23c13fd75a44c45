"""The parts of an experiment config the planner reads, without the config module.

:class:`DataSection` is the ``[data]`` section as the planner sees it (read-only; the
pydantic ``DataConfig`` satisfies it as it is). :class:`PartitionSpec` is the
``[partition]`` section plus whether ``partition.clients`` was given, which ``natural``
checks against the data's client count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from fedad.data.missing import MissingPolicy


class DataSection(Protocol):
    """The ``[data]`` keys the planner reads (see ``docs/config.md``)."""

    @property
    def name(self) -> str: ...
    @property
    def path(self) -> str | None: ...
    @property
    def normal(self) -> list[int | str] | None: ...
    @property
    def anomaly(self) -> list[int | str] | None: ...
    @property
    def anomaly_source(self) -> str: ...
    @property
    def anomaly_source_path(self) -> str | None: ...
    @property
    def sources(self) -> list[str]: ...
    @property
    def size(self) -> int | None: ...
    @property
    def part(self) -> Literal["all", "dev", "eval"]: ...
    @property
    def max_train_per_client(self) -> int | None: ...
    @property
    def max_test(self) -> int | None: ...
    @property
    def test_anomaly_fraction(self) -> float | None: ...
    @property
    def test_fraction(self) -> float: ...
    @property
    def server_normal(self) -> int: ...
    @property
    def standardize(self) -> bool: ...
    @property
    def missing(self) -> MissingPolicy: ...
    @property
    def client_column(self) -> str | None: ...

    def loader_options(self) -> dict[str, Any]:
        """The extra keys the main data set's loader takes."""
        ...


@dataclass(frozen=True)
class PartitionSpec:
    """The ``[partition]`` keys the planner reads."""

    scheme: str
    clients: int
    alpha: float
    dominant_fraction: float
    contamination: float
    min_per_client: int
    local_test: str
    max_clients: int
    """The most clients fedad runs (``natural`` refuses data naming more)."""
    clients_given: bool = False
    """Whether ``partition.clients`` was set (``natural`` then checks it)."""
