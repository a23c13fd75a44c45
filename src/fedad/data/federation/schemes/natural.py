"""``natural``: one client per natural client id of the data (``Dataset.group``).

The ids are a table's ``data.client_column`` or an image folder's clients; client ``k``
holds the rows of the ``k``-th sorted id, the test hold-out is stratified by client and
class, and each client is tested on its own held-out rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedad.core.errors import ConfigError, DataError
from fedad.data.federation.local_tests import LocalTests
from fedad.data.federation.members import Member
from fedad.data.federation.schemes.base import Draft, Scheme, Training
from fedad.data.federation.sections import DataSection, PartitionSpec


class Natural(Scheme):
    """The data name the clients; see the module docstring."""

    fixed_clients = True

    def clients(self, d: DataSection, p: PartitionSpec, members: list[Member]) -> list[str]:
        """The main data set's distinct client ids (training and test rows), sorted; checks
        ``partition.clients`` against their count."""
        main = members[0].dataset
        if main.group is None:
            raise ConfigError(
                f"partition.scheme = 'natural' needs a client id per sample, which "
                f"'{main.name}' does not have",
                "set data.client_column (tables) or give the image folder client folders or "
                "clients.csv; or use another scheme",
            )
        if sum(m.role == "source" for m in members) > 1:
            raise ConfigError(
                "partition.scheme = 'natural' takes its clients from one data set, but "
                "data.sources lists several",
                "remove data.sources, or use partition.scheme = 'by-source'",
            )
        values = [main.group] + ([main.group_test] if main.group_test is not None else [])
        names = sorted({str(v) for g in values for v in g.tolist()})
        where = (
            f"data.client_column '{d.client_column}'"
            if d.client_column
            else ("the image folder's client ids")
        )
        if len(names) > p.max_clients:
            raise DataError(
                f"{where} has {len(names):,} distinct values, more than the "
                f"{p.max_clients:,} clients fedad runs",
                "group the rows into fewer clients",
            )
        if p.clients_given and p.clients != len(names):
            shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
            raise ConfigError(
                f"partition.clients = {p.clients}, but {where} names {len(names)} "
                f"clients ({shown})",
                f"omit partition.clients or set it to {len(names)}",
            )
        return names

    def num_clients(self, p: PartitionSpec, names: list[str]) -> int:
        """One client per natural id."""
        return len(names)

    def empty_test_hint(self, draft: Draft) -> str:
        """Natural splits each client's rows class by class."""
        if draft.split_notes[draft.members[0].name].startswith("stratified"):
            return (
                "natural splits each client's rows class by class, and a client's only row of "
                "a class stays in training: give the clients more rows, or choose the test "
                "rows with data.split_column or train/ and test/ folders"
            )
        return super().empty_test_hint(draft)

    def check_sizes(
        self, p: PartitionSpec, draft: Draft, counts: Sequence[int], server: bool
    ) -> None:
        """Every natural client holds at least ``partition.min_per_client`` normal training
        samples (``counts``, one per client; ``server``: after the server's share was
        taken); else a one-line error naming the first small client and how many there are
        (the client count is the data's, so the fix is never ``partition.clients``)."""
        least, names = p.min_per_client, draft.client_names
        small = [(name, int(n)) for name, n in zip(names, counts, strict=True) if n < least]
        if not small:
            return
        name, n = small[0]
        more = f" (and {len(small) - 1} more of the {len(names)} clients)" if len(small) > 1 else ""
        raise DataError(
            f"client '{name}' has {n} normal training samples, fewer than "
            f"partition.min_per_client = {least}{more}",
            "natural makes one client per id: give those clients more normal rows or remove "
            "their rows, or lower partition.min_per_client"
            + (" or data.server_normal" if server else ""),
        )

    def partition_groups(self, draft: Draft, pool: np.ndarray) -> np.ndarray:
        """The natural client numbers."""
        return np.asarray(draft.group_of[pool], dtype=np.int64)

    def local_tests(self, draft: Draft, train: Training, rng: np.random.Generator) -> LocalTests:
        """Each client's own held-out rows; anomalies without a client
        (``data.anomaly_source``) are dealt evenly."""
        test_normals, test_anomalies = draft.test_normals, draft.test_anomalies
        group_of, num_clients = draft.group_of, draft.k_clients
        normals = [np.sort(test_normals[group_of[test_normals] == k]) for k in range(num_clients)]
        own = [test_anomalies[group_of[test_anomalies] == k] for k in range(num_clients)]
        rest = test_anomalies[group_of[test_anomalies] < 0]
        dealt = rest[rng.permutation(len(rest))]
        hands = [own[k] for k in range(num_clients)]
        for slot, k in enumerate(rng.permutation(num_clients)):
            hands[int(k)] = np.concatenate([hands[int(k)], dealt[slot::num_clients]])
        return normals, [np.sort(h) for h in hands], 0

    def add_notes(
        self, notes: dict[str, object], d: DataSection, draft: Draft, local_anomalies: int
    ) -> None:
        """The clients' names and the column that gave them."""
        notes["client_names"] = list(draft.client_names)
        notes["client_column"] = d.client_column or ""
