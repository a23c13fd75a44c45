"""The protocol every partition scheme follows, and the class-skew schemes' behaviour.

:class:`Scheme` is the one place where a scheme differs from the others in the steps of
the protocol (see :mod:`fedad.data.federation`): the class roles, the clients, the checks
of the test set and of the client sizes, what the partition groups by, contamination,
local test sets and notes. Its default methods are those of ``iid``, ``dirichlet``,
``dominant`` and ``one-class``, which differ only in the partition function
(:mod:`fedad.data.partition`); ``by-source``, ``natural`` and ``one-vs-rest`` override
what they change, each in its own module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedad.core.errors import DataError
from fedad.core.types import Dataset
from fedad.data.federation.blocks import Catalog
from fedad.data.federation.contaminate import contaminate
from fedad.data.federation.local_tests import LocalTests, assign_local_tests
from fedad.data.federation.members import Member, Roles, class_roles
from fedad.data.federation.sections import DataSection, PartitionSpec


@dataclass
class Draft:
    """What the first steps decided, by global sample id, for the later ones to read."""

    members: list[Member]
    catalog: Catalog
    client_names: list[str]
    k_clients: int
    normal_classes: list[int]
    anomaly_classes: list[int]
    split_notes: dict[str, str]
    group_of: np.ndarray
    """Each sample's natural client number (-1 without one)."""
    test_normals: np.ndarray
    test_anomalies: np.ndarray
    """The pooled test set's normals and anomalies (rebalanced and capped in step 3)."""
    train_all: np.ndarray
    """Every sample of the training part (normal, anomalous or unused)."""

    @property
    def classes(self) -> np.ndarray:
        """Each sample's class in the federation's class space."""
        return self.catalog.classes

    @property
    def source_of(self) -> np.ndarray:
        """Each sample's member (data set) number."""
        return self.catalog.members


@dataclass(frozen=True)
class Training:
    """The clients' training data after contamination (step 6)."""

    ids: list[np.ndarray]
    anomaly: list[np.ndarray]
    n_bad: list[int]
    counts: dict[int, np.ndarray]
    """Per normal class, each client's training count of it (contamination excluded)."""


class Scheme:
    """A partition scheme: how it departs from the default steps (see the module docstring)."""

    name: str = ""
    fixed_clients = False
    """Whether the data, not ``partition.clients``, give the number of clients."""

    def __init__(self, name: str) -> None:
        self.name = name

    # -- steps 1-2: members and roles -------------------------------------------------------
    def roles(self, d: DataSection, ds: Dataset, name: str) -> Roles:
        """The normal and anomaly classes of a (non-defect) data set."""
        return class_roles(d, ds, name)

    def check_defect_set(self, name: str) -> None:
        """Refuse a defect set if the scheme cannot use one."""

    def clients(self, d: DataSection, p: PartitionSpec, members: list[Member]) -> list[str]:
        """The clients' names when the data name them (``natural``); else empty."""
        return []

    def num_clients(self, p: PartitionSpec, names: list[str]) -> int:
        """How many clients the federation has."""
        return p.clients

    # -- step 3: pooled test set ------------------------------------------------------------
    def check_request(self, p: PartitionSpec) -> None:
        """Refuse ``[partition]`` keys that do not apply to the scheme."""

    def check_test_set(self, draft: Draft) -> None:
        """The held-out test set must have normal and anomalous samples."""
        if len(draft.test_normals) == 0 or len(draft.test_anomalies) == 0:
            which = "normal" if len(draft.test_normals) == 0 else "anomalous"
            raise DataError(
                f"the held-out test set has no {which} samples", self.empty_test_hint(draft)
            )

    def empty_test_hint(self, draft: Draft) -> str:
        """The hint of the error of :meth:`check_test_set`."""
        return "raise data.test_fraction or check data.normal / data.anomaly"

    def anomaly_pool(self, normal_pool: np.ndarray, anomaly_pool: np.ndarray) -> np.ndarray:
        """The training samples contamination draws from."""
        return anomaly_pool

    # -- steps 4-5: server data and partition -----------------------------------------------
    def check_sizes(
        self, p: PartitionSpec, draft: Draft, counts: Sequence[int], server: bool
    ) -> None:
        """Check each client's normal training count (``natural``: before the server's
        share is taken, and after the partition with ``server``)."""

    def check_partition(self, members: list[Member]) -> None:
        """Refuse data the scheme cannot partition."""

    def partition_groups(self, draft: Draft, pool: np.ndarray) -> np.ndarray:
        """The group ids the partition function splits ``pool`` by (``by-source``)."""
        return np.asarray(draft.source_of[pool], dtype=np.int64)

    # -- steps 6-7: contamination and local tests -------------------------------------------
    def contaminate(
        self,
        draft: Draft,
        train_normals: list[np.ndarray],
        pool: np.ndarray,
        contamination: float,
        rng: np.random.Generator,
    ) -> tuple[list[np.ndarray], list[np.ndarray], list[int]]:
        """Replace a ``contamination`` share of each client's normals by anomalies."""
        return contaminate(train_normals, pool, contamination, rng)

    def local_tests(self, draft: Draft, train: Training, rng: np.random.Generator) -> LocalTests:
        """Split the pooled test set over the clients (``local_test = "own"``); defect sets:
        a client is tested on the defective items of its own product types."""
        members, classes = draft.members, draft.classes
        parent_of = {m.offset + a: m.offset + c for m in members for a, c in m.parent.items()}
        parents: dict[str, np.ndarray] = {}
        if parent_of:
            parent = [parent_of.get(int(c), -1) for c in classes[draft.test_anomalies]]
            parents = {"anomaly_parent": np.array(parent)}
        return assign_local_tests(
            draft.test_normals,
            draft.test_anomalies,
            classes,
            train.counts,
            draft.k_clients,
            rng,
            **parents,
        )

    # -- the plan ---------------------------------------------------------------------------
    def anomaly_classes(self, draft: Draft) -> list[int]:
        """The federation's anomaly classes."""
        return draft.anomaly_classes

    def add_notes(
        self, notes: dict[str, object], d: DataSection, draft: Draft, local_anomalies: int
    ) -> None:
        """Add the scheme's own entries to ``Federation.notes``."""
