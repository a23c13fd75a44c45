"""Step 7 of the protocol: split the pooled test set into the clients' local test sets.

:func:`assign_local_tests` is the split of the class-skew schemes (and ``by-source``, and
defect sets); ``natural`` and ``one-vs-rest`` have their own (in their scheme modules) and
``partition.local_test = "shared"`` gives every client the whole pooled set
(:func:`shared_tests`). Every function returns the per-client test normals, test
anomalies and how many test normals went uniformly because no client holds their class.
"""

from __future__ import annotations

import numpy as np

LocalTests = tuple[list[np.ndarray], list[np.ndarray], int]
"""Per-client test normals, per-client test anomalies, test normals dealt uniformly."""


def shared_tests(test_normals: np.ndarray, test_anomalies: np.ndarray, k: int) -> LocalTests:
    """Every one of ``k`` clients gets the whole pooled test set."""
    return [test_normals.copy() for _ in range(k)], [test_anomalies.copy() for _ in range(k)], 0


def assign_local_tests(
    test_normals: np.ndarray,
    test_anomalies: np.ndarray,
    classes: np.ndarray,
    counts: dict[int, np.ndarray],
    num_clients: int,
    rng: np.random.Generator,
    anomaly_group: np.ndarray | None = None,
    client_group: np.ndarray | None = None,
    anomaly_parent: np.ndarray | None = None,
) -> LocalTests:
    """Split the pooled test set over clients (see the package docstring, step 7).

    ``counts[c]`` is the per-client training count of class ``c``. With ``anomaly_group``
    (the source of each test anomaly) and ``client_group`` (each client's source), the
    anomalies of a source are dealt among that source's clients only (``by-source``); a
    source with no client deals to all. With ``anomaly_parent`` (defect sets: each test
    anomaly's product type, -1 for one of ``data.anomaly_source``), an anomaly of type ``c``
    goes to a client drawn like the test normals of ``c``: in proportion to the clients'
    training counts of ``c`` (uniformly when no client holds ``c``); a client left without
    one takes a defect of a type it holds from a client with several, when there is one;
    anomalies of ``data.anomaly_source`` are dealt like cards.
    """
    normals, uniform = _deal_normals(test_normals, classes, counts, num_clients, rng)
    if anomaly_parent is not None:
        owner = _deal_defects(anomaly_parent, counts, num_clients, rng)
        return normals, [test_anomalies[owner == k] for k in range(num_clients)], uniform
    if anomaly_group is None or client_group is None:
        return normals, deal_cards(test_anomalies, num_clients, rng), uniform
    return normals, _deal_by_group(test_anomalies, anomaly_group, client_group, rng), uniform


def _deal_normals(
    test_normals: np.ndarray,
    classes: np.ndarray,
    counts: dict[int, np.ndarray],
    num_clients: int,
    rng: np.random.Generator,
) -> tuple[list[np.ndarray], int]:
    """Test normals of class ``c`` to clients in proportion to their training counts of
    ``c``; a client without a test normal then takes one from a client with several."""
    owner = np.empty(len(test_normals), dtype=np.int64)
    test_classes = classes[test_normals]
    uniform = 0
    for c in np.unique(test_classes):
        where = np.flatnonzero(test_classes == c)
        w = counts.get(int(c), np.zeros(num_clients)).astype(np.float64)
        if w.sum() == 0:
            w = np.ones(num_clients)
            uniform += len(where)
        owner[where] = rng.choice(num_clients, size=len(where), p=w / w.sum())
    # A client without a test normal takes one from a client with several.
    for k in range(num_clients):
        per_client = np.bincount(owner, minlength=num_clients)
        if per_client[k] > 0:
            continue
        donors = np.flatnonzero(per_client[owner] >= 2)
        if len(donors) == 0:
            break
        held = [
            int(c)
            for c in np.unique(test_classes[donors])
            if int(c) in counts and counts[int(c)][k] > 0
        ]
        preferred = donors[np.isin(test_classes[donors], held)] if held else donors
        owner[rng.choice(preferred if len(preferred) else donors)] = k
    return [test_normals[owner == k] for k in range(num_clients)], uniform


def _deal_defects(
    anomaly_parent: np.ndarray,
    counts: dict[int, np.ndarray],
    num_clients: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Each test anomaly's client (defect sets): a defect of type ``c`` like a test normal
    of ``c``; the rest (``data.anomaly_source``, parent -1) dealt like cards."""
    bad_owner = np.full(len(anomaly_parent), -1, dtype=np.int64)
    typed = anomaly_parent >= 0
    for c in np.unique(anomaly_parent[typed]):
        where = np.flatnonzero(anomaly_parent == c)
        w = counts.get(int(c), np.zeros(num_clients)).astype(np.float64)
        w = w if w.sum() > 0 else np.ones(num_clients)
        bad_owner[where] = rng.choice(num_clients, size=len(where), p=w / w.sum())
    # A client without a defect takes one of its own types' from a client with several.
    for k in range(num_clients):
        per_client = np.bincount(bad_owner[typed], minlength=num_clients)
        if per_client[k] > 0:
            continue
        held = [c for c, n in counts.items() if n[k] > 0]
        donors = np.flatnonzero(typed & np.isin(anomaly_parent, held))
        donors = donors[per_client[bad_owner[donors]] >= 2]
        if len(donors):
            bad_owner[rng.choice(donors)] = k
    # Anomalies without a type (data.anomaly_source): dealt like cards, as for class sets.
    rest = np.flatnonzero(~typed)
    if len(rest):
        dealt = rest[rng.permutation(len(rest))]
        for slot, k in enumerate(rng.permutation(num_clients)):
            bad_owner[dealt[slot::num_clients]] = k
    return bad_owner


def deal_cards(
    test_anomalies: np.ndarray, num_clients: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Anomalies dealt like cards in random order, to clients in random order (sorted)."""
    dealt = test_anomalies[rng.permutation(len(test_anomalies))]
    anomalies: list[np.ndarray] = [np.empty(0, np.int64)] * num_clients
    for slot, k in enumerate(rng.permutation(num_clients)):
        anomalies[int(k)] = np.sort(dealt[slot::num_clients])
    return anomalies


def _deal_by_group(
    test_anomalies: np.ndarray,
    anomaly_group: np.ndarray,
    client_group: np.ndarray,
    rng: np.random.Generator,
) -> list[np.ndarray]:
    """``by-source``: a source's anomalies dealt among its clients (all, if it has none)."""
    num_clients = len(client_group)
    hands: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for g in np.unique(anomaly_group):
        players = np.flatnonzero(client_group == g)
        if len(players) == 0:
            players = np.arange(num_clients)
        mine = test_anomalies[anomaly_group == g]
        dealt = mine[rng.permutation(len(mine))]
        for slot, k in enumerate(rng.permutation(players)):
            hands[int(k)].append(dealt[slot :: len(players)])
    return [np.sort(np.concatenate([np.empty(0, np.int64), *h])) for h in hands]
