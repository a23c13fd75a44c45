"""``by-source``: one data set (``data.sources``) per client group, tested on its anomalies."""

from __future__ import annotations

import numpy as np

from fedad.core.errors import ConfigError
from fedad.data.federation.local_tests import LocalTests, assign_local_tests
from fedad.data.federation.members import Member
from fedad.data.federation.schemes.base import Draft, Scheme, Training


class BySource(Scheme):
    """Clients assigned to sources round-robin; each tested on its own source's anomalies."""

    def check_partition(self, members: list[Member]) -> None:
        """At least two normal sources."""
        if sum(m.role == "source" for m in members) < 2:
            raise ConfigError(
                "partition.scheme='by-source' needs data.sources to list at least two data sets",
                'set e.g. data.sources = ["mnist", "kmnist@/data/kmnist"], or use another scheme',
            )

    def local_tests(self, draft: Draft, train: Training, rng: np.random.Generator) -> LocalTests:
        """Each client holds one source's normals; it is tested on that source's anomalies
        (dealt among that source's clients)."""
        source_of = draft.source_of
        client_group = np.array(
            [
                int(source_of[ids[flag == 0]][0]) if np.any(flag == 0) else -1
                for ids, flag in zip(train.ids, train.anomaly, strict=True)
            ]
        )
        return assign_local_tests(
            draft.test_normals,
            draft.test_anomalies,
            draft.classes,
            train.counts,
            draft.k_clients,
            rng,
            anomaly_group=source_of[draft.test_anomalies],
            client_group=client_group,
        )
