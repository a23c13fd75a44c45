"""``one-vs-rest``: the training split of ``one-class``; each client's own class against
every other class of ``data.normal``.

Every listed class is normal for the clients that train on it and an anomaly for all
others, so local tests overlap and pooled metrics are the mean over clients.
"""

from __future__ import annotations

import numpy as np

from fedad.core.errors import ConfigError, DataError
from fedad.core.types import Dataset
from fedad.data.federation.contaminate import mix
from fedad.data.federation.local_tests import LocalTests
from fedad.data.federation.members import Roles, class_ids, class_list
from fedad.data.federation.schemes.base import Draft, Scheme, Training
from fedad.data.federation.sections import DataSection, PartitionSpec
from fedad.data.partition import round_half_up


class OneVsRest(Scheme):
    """See the module docstring."""

    def roles(self, d: DataSection, ds: Dataset, name: str) -> Roles:
        """``data.normal`` lists the classes; each is an anomaly for the other classes'
        clients."""
        if ds.fixed_split:
            raise ConfigError(
                f"partition.scheme = 'one-vs-rest' needs a data set with classes; '{name}' "
                "has a fixed normal/anomaly definition",
                "use another scheme",
            )
        for key, value in (
            ("anomaly", d.anomaly),
            ("anomaly_source", d.anomaly_source),
            ("test_anomaly_fraction", d.test_anomaly_fraction),
        ):
            if value:
                raise ConfigError(
                    f"data.{key} must be omitted with partition.scheme = 'one-vs-rest': every "
                    "class of data.normal is an anomaly for the clients of the other classes",
                    f"remove data.{key}",
                )
        normal = class_ids(d.normal, "data.normal", ds, name)
        if len(normal) < 2:
            raise ConfigError(
                f"partition.scheme = 'one-vs-rest' needs at least two classes in data.normal: "
                f"{class_list(ds, name)}",
                "list the classes, e.g. normal = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]",
            )
        return normal, ()

    def check_defect_set(self, name: str) -> None:
        """A defect set's anomalies are defective items, not other classes."""
        raise ConfigError(
            f"partition.scheme = 'one-vs-rest' does not apply to '{name}', whose anomalies "
            "are defective items of each product type",
            "use dirichlet, iid, dominant or one-class",
        )

    def check_request(self, p: PartitionSpec) -> None:
        """Local tests are each client's class against the rest: never shared."""
        if p.local_test == "shared":
            raise ConfigError(
                "partition.local_test = 'shared' does not apply to partition.scheme = "
                "'one-vs-rest', whose local test sets are each client's class against the "
                "rest",
                "drop partition.local_test",
            )

    def check_test_set(self, draft: Draft) -> None:
        """The held-out set must hold at least two of the listed classes."""
        if len(np.unique(draft.classes[draft.test_normals])) < 2:
            raise DataError(
                "the held-out test set holds fewer than two of data.normal's classes",
                "raise data.test_fraction",
            )

    def anomaly_pool(self, normal_pool: np.ndarray, anomaly_pool: np.ndarray) -> np.ndarray:
        """Every listed class is another class's anomaly."""
        return np.sort(normal_pool)

    def contaminate(
        self,
        draft: Draft,
        train_normals: list[np.ndarray],
        pool: np.ndarray,
        contamination: float,
        rng: np.random.Generator,
    ) -> tuple[list[np.ndarray], list[np.ndarray], list[int]]:
        """Client ``k``'s anomalies are training samples of classes it does not hold (drawn
        without replacement over all clients; such a sample may also be another client's
        normal training data, never test data)."""
        classes = draft.classes
        n_bad = [round_half_up(contamination * len(t)) for t in train_normals]
        taken = np.zeros(0, np.int64)
        ids, flags = [], []
        for t, n_a in zip(train_normals, n_bad, strict=True):
            own = np.unique(classes[t])
            candidates = np.setdiff1d(pool[~np.isin(classes[pool], own)], taken)
            if n_a > len(candidates):
                raise DataError(
                    f"partition.contamination={contamination:g} needs {n_a} training samples "
                    f"of other classes for a client but only {len(candidates)} are left",
                    "lower partition.contamination",
                )
            drawn = rng.choice(candidates, size=n_a, replace=False) if n_a else taken[:0]
            taken = np.concatenate([taken, drawn])
            kept = rng.permutation(t)[: len(t) - n_a]
            mine, flag = mix(kept, drawn, rng)
            ids.append(mine)
            flags.append(flag)
        return ids, flags, n_bad

    def local_tests(self, draft: Draft, train: Training, rng: np.random.Generator) -> LocalTests:
        """The held-out samples of a class are split evenly, at random, among the clients
        that train on it (its normals there); every held-out sample is an anomaly for each
        client that does not train on its class."""
        test_pool, classes, num_clients = draft.test_normals, draft.classes, draft.k_clients
        normals: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        test_classes = classes[test_pool]
        held_by = {c: np.flatnonzero(w > 0) for c, w in train.counts.items()}
        for c in np.unique(test_classes):
            holders = held_by.get(int(c), np.empty(0, np.int64))
            if len(holders) == 0:
                continue  # a listed class no client holds is an anomaly for everyone
            mine = rng.permutation(test_pool[test_classes == c])
            for k, piece in zip(
                rng.permutation(holders), np.array_split(mine, len(holders)), strict=True
            ):
                normals[int(k)].append(piece)
        out_n = [np.sort(np.concatenate([np.empty(0, np.int64), *n])) for n in normals]
        out_a = []
        for k in range(num_clients):
            own = [c for c, holders in held_by.items() if k in holders]
            out_a.append(np.sort(test_pool[~np.isin(test_classes, own)]))
        return out_n, out_a, 0

    def anomaly_classes(self, draft: Draft) -> list[int]:
        """Every listed class is an anomaly for some client."""
        return list(draft.normal_classes)

    def add_notes(
        self, notes: dict[str, object], d: DataSection, draft: Draft, local_anomalies: int
    ) -> None:
        """Pooled metrics are the clients' mean; anomalies counted over the local tests."""
        notes["pooled"] = "client-mean"
        notes["n_test_anomaly"] = local_anomalies
