"""Steps 1-7 of the protocol: which sample (a global id) goes where, by scheme.

:func:`plan_federation` runs the steps in order; what a scheme changes in a step is in its
:class:`~fedad.data.federation.schemes.base.Scheme`. Every random step draws from its own
stream of ``numpy.random.SeedSequence(seed)`` (:func:`streams`), so a plan is a function of
the ``[data]`` and ``[partition]`` sections and the seed alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fedad.core.errors import ConfigError, DataError
from fedad.core.types import DataKind
from fedad.data.federation.blocks import Catalog
from fedad.data.federation.contaminate import mix
from fedad.data.federation.holdout import cap_pair, ratio_pair, split_block
from fedad.data.federation.local_tests import LocalTests, shared_tests
from fedad.data.federation.members import Member, load_members
from fedad.data.federation.schemes import Draft, Scheme, Training, scheme_for
from fedad.data.federation.sections import DataSection, PartitionSpec
from fedad.data.partition import partition

STREAMS = (
    "split",
    "test_cap",
    "server",
    "partition",
    "cap",
    "contamination",
    "local_test",
    "attack",
)  # append only: a stream's seed depends on its position
"""The named random streams; ``attack`` is drawn by the attack step after planning."""


def streams(seed: int) -> dict[str, np.random.Generator]:
    """One generator per name of :data:`STREAMS`, from ``SeedSequence(seed)`` (negative
    seeds map to distinct non-negative ones)."""
    root = np.random.SeedSequence(seed % (1 << 128))
    return {
        name: np.random.default_rng(s)
        for name, s in zip(STREAMS, root.spawn(len(STREAMS)), strict=True)
    }


@dataclass
class FederationPlan:
    """Which sample (a global id into the loaded data) goes where; no feature arrays copied.

    ``train_ids[k]``, ``train_anomaly[k]`` (1 = contamination), ``test_ids[k]`` and
    ``test_anomaly[k]`` per client; ``server_ids`` for the server; ``classes`` maps a
    global id to its class in the federation's class space.
    """

    name: str
    kind: DataKind
    feature_shape: tuple[int, ...]
    class_names: tuple[str, ...]
    normal_classes: list[int]
    anomaly_classes: list[int]
    train_ids: list[np.ndarray]
    train_anomaly: list[np.ndarray]
    test_ids: list[np.ndarray]
    test_anomaly: list[np.ndarray]
    server_ids: np.ndarray
    classes: np.ndarray
    standardize: bool
    catalog: Catalog = field(repr=False)
    anomaly_pool: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64), repr=False)
    """The training part's anomalies (contamination and the contamination attack draw
    from them)."""
    member_names: list[str] = field(default_factory=list)
    """The name of each loaded data set, by member number."""
    impute: bool = False
    notes: dict[str, object] = field(default_factory=dict)
    client_names: list[str] = field(default_factory=list)
    """Natural partitions: each client's id value (``data.client_column`` ...)."""
    columns: tuple[str, ...] = ()
    categorical: tuple[tuple[int, tuple[str, ...]], ...] = ()
    """A table's categorical columns (:attr:`Dataset.categorical`), one-hot encoded by
    :func:`~fedad.data.federation.materialize.materialize` with the categories of the
    clients' training rows."""

    @property
    def client_sources(self) -> list[str]:
        """Each client's data set: the one its normal training samples come from, or
        ``"mixed"``."""
        source_of = self.catalog.members
        out = []
        for ids, flag in zip(self.train_ids, self.train_anomaly, strict=True):
            used = np.unique(source_of[ids[flag == 0]])
            out.append(self.member_names[int(used[0])] if len(used) == 1 else "mixed")
        return out


def plan_federation(d: DataSection, p: PartitionSpec, seed: int) -> FederationPlan:
    """Decide, by global sample id, the data of every client, the server and the tests."""
    rngs = streams(seed)
    scheme = scheme_for(p.scheme)
    draft = _split(d, p, scheme, load_members(d, scheme, seed), rngs["split"])
    scheme.check_request(p)
    n_test_before, normal_pool, anomaly_pool = _pooled_test(d, scheme, draft, rngs["test_cap"])
    server_ids, normal_pool = _server(d, p, scheme, draft, normal_pool, rngs["server"])
    train_normals = _partition(d, p, scheme, draft, normal_pool, rngs)
    train = _contaminate(p, scheme, draft, train_normals, anomaly_pool, rngs["contamination"])
    if p.local_test == "shared":
        local: LocalTests = shared_tests(draft.test_normals, draft.test_anomalies, draft.k_clients)
    else:
        local = scheme.local_tests(draft, train, rngs["local_test"])
    local_n, local_a, _ = local
    mixed = [mix(nn, aa, rngs["local_test"]) for nn, aa in zip(local_n, local_a, strict=True)]
    main = draft.members[0]
    return FederationPlan(
        name=main.name,
        kind=main.dataset.kind,
        feature_shape=main.dataset.feature_shape,
        class_names=_class_names(draft.members),
        normal_classes=draft.normal_classes,
        anomaly_classes=scheme.anomaly_classes(draft),
        train_ids=list(train.ids),
        train_anomaly=list(train.anomaly),
        test_ids=[ids for ids, _ in mixed],
        test_anomaly=[flag for _, flag in mixed],
        server_ids=server_ids,
        classes=draft.classes,
        standardize=d.standardize and main.dataset.kind == "vector",
        catalog=draft.catalog,
        anomaly_pool=anomaly_pool,
        member_names=[m.name for m in draft.members],
        impute=d.missing == "impute-mean",
        notes=_notes(
            d,
            p,
            scheme,
            draft,
            train,
            local,
            n_test_before,
            normal_pool,
            anomaly_pool,
            train_normals,
            server_ids,
        ),
        client_names=list(draft.client_names),
        columns=main.dataset.columns,
        categorical=main.dataset.categorical,
    )


def _class_names(members: list[Member]) -> tuple[str, ...]:
    """Every member's classes; those of data sets other than the first prefixed ``name:``."""
    names: list[str] = []
    for m in members:
        prefix = "" if m is members[0] else f"{m.name}:"
        names.extend(prefix + c for c in m.dataset.classes)
    return tuple(names)


def _group_codes(group: np.ndarray | None, n: int, names: list[str]) -> np.ndarray:
    """Each sample's client number (its id's index in ``names``), -1 without natural ids."""
    if group is None or not names:
        return np.full(n, -1, dtype=np.int64)
    lookup = {v: k for k, v in enumerate(names)}
    return np.array([lookup[str(v)] for v in group.tolist()], dtype=np.int64)


def _split(
    d: DataSection,
    p: PartitionSpec,
    scheme: Scheme,
    members: list[Member],
    rng: np.random.Generator,
) -> Draft:
    """Steps 1-3a: the clients, the catalog of all samples and the test hold-out."""
    catalog = Catalog()
    normal_classes: list[int] = []
    anomaly_classes: list[int] = []
    train_parts: list[np.ndarray] = []
    test_parts: list[np.ndarray] = []
    split_notes: dict[str, str] = {}
    client_names = scheme.clients(d, p, members)
    k_clients = scheme.num_clients(p, client_names)
    group_blocks: list[np.ndarray] = []
    for j, m in enumerate(members):
        ds, off = m.dataset, m.offset
        normal_classes.extend(off + c for c in m.normal)
        anomaly_classes.extend(off + c for c in m.anomaly)
        codes = _group_codes(ds.group, len(ds.x), client_names)
        if ds.x_test is not None and ds.y_test is not None:
            train_parts.append(catalog.add(ds.x, ds.y + off, j, ds.mask))
            test_parts.append(catalog.add(ds.x_test, ds.y_test + off, j, ds.mask_test))
            group_blocks += [codes, _group_codes(ds.group_test, len(ds.x_test), client_names)]
            split_notes[m.name] = "official"
        else:
            ids = catalog.add(ds.x, ds.y + off, j, ds.mask)
            # natural clients: each client's own rows are split, class by class
            strata = (ds.y.astype(np.int64) + off) * (k_clients + 1) + codes + 1
            tr, te = split_block(ids, strata, d.test_fraction, rng)
            train_parts.append(tr)
            test_parts.append(te)
            group_blocks.append(codes)
            split_notes[m.name] = f"stratified {d.test_fraction:g}" + (
                " per client" if scheme.fixed_clients else ""
            )
    train_all, test_all = np.concatenate(train_parts), np.concatenate(test_parts)
    classes = catalog.classes
    return Draft(
        members,
        catalog,
        client_names,
        k_clients,
        normal_classes,
        anomaly_classes,
        split_notes,
        np.concatenate(group_blocks),
        test_all[np.isin(classes[test_all], np.asarray(normal_classes, dtype=np.int64))],
        test_all[np.isin(classes[test_all], np.asarray(anomaly_classes, dtype=np.int64))],
        train_all,
    )


def _pooled_test(
    d: DataSection, scheme: Scheme, draft: Draft, rng: np.random.Generator
) -> tuple[int, np.ndarray, np.ndarray]:
    """Step 3b: check, rebalance and cap the pooled test set (in ``draft``); return its
    size before that, and the training part's normal and anomaly pools."""
    scheme.check_test_set(draft)
    n_test_before = len(draft.test_normals) + len(draft.test_anomalies)
    if d.test_anomaly_fraction is not None:
        draft.test_normals, draft.test_anomalies = ratio_pair(
            draft.test_normals, draft.test_anomalies, d.test_anomaly_fraction, rng
        )
    if d.max_test is not None:
        draft.test_normals, draft.test_anomalies = cap_pair(
            draft.test_normals, draft.test_anomalies, d.max_test, rng
        )
    classes, train_all = draft.classes, draft.train_all
    normal_pool = train_all[np.isin(classes[train_all], np.asarray(draft.normal_classes, np.int64))]
    anomaly_pool = train_all[
        np.isin(classes[train_all], np.asarray(draft.anomaly_classes, np.int64))
    ]
    return n_test_before, normal_pool, scheme.anomaly_pool(normal_pool, anomaly_pool)


def _server(
    d: DataSection,
    p: PartitionSpec,
    scheme: Scheme,
    draft: Draft,
    normal_pool: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Step 4: ``data.server_normal`` normal training samples for the server; returns them
    and the normal pool left for the clients."""
    k_clients = draft.k_clients
    if scheme.fixed_clients:  # before the server's share: the clients' own sizes, each named
        sizes = np.bincount(draft.group_of[normal_pool], minlength=k_clients)[:k_clients]
        scheme.check_sizes(p, draft, sizes.tolist(), server=False)
    server_ids = np.empty(0, dtype=np.int64)
    if d.server_normal > 0:
        left = len(normal_pool) - d.server_normal
        if left < k_clients * p.min_per_client:
            raise DataError(
                f"data.server_normal={d.server_normal} leaves {max(left, 0)} of "
                f"{len(normal_pool)} normal training samples for {k_clients} clients "
                f"(partition.min_per_client={p.min_per_client} each)",
                "lower data.server_normal"
                + ("" if scheme.fixed_clients else " or partition.clients"),
            )
        pick = rng.permutation(len(normal_pool))
        server_ids = np.sort(normal_pool[pick[: d.server_normal]])
        normal_pool = np.sort(normal_pool[pick[d.server_normal :]])
    return server_ids, normal_pool


def _partition(
    d: DataSection,
    p: PartitionSpec,
    scheme: Scheme,
    draft: Draft,
    normal_pool: np.ndarray,
    rngs: dict[str, np.random.Generator],
) -> list[np.ndarray]:
    """Step 5: the normal pool over the clients, each capped at ``max_train_per_client``."""
    k_clients = draft.k_clients
    if len(normal_pool) < k_clients * p.min_per_client:
        raise DataError(
            f"partition.clients={k_clients} needs at least {k_clients * p.min_per_client} "
            f"normal training samples (partition.min_per_client={p.min_per_client} each) but "
            f"only {len(normal_pool)} are available",
            "lower partition.clients or partition.min_per_client, or use more normal classes",
        )
    scheme.check_partition(draft.members)
    if d.max_train_per_client is not None and d.max_train_per_client < p.min_per_client:
        raise ConfigError(
            f"data.max_train_per_client={d.max_train_per_client} is below "
            f"partition.min_per_client={p.min_per_client}",
            "raise data.max_train_per_client",
        )
    parts = partition(
        p.scheme,
        draft.classes[normal_pool],
        k_clients,
        rngs["partition"],
        groups=scheme.partition_groups(draft, normal_pool),
        classes=draft.normal_classes,
        alpha=p.alpha,
        dominant_fraction=p.dominant_fraction,
        min_per_client=p.min_per_client,
    )
    train_normals = [normal_pool[part] for part in parts]
    if scheme.fixed_clients:
        scheme.check_sizes(p, draft, [len(t) for t in train_normals], server=True)
    if d.max_train_per_client is not None:
        cap = d.max_train_per_client
        train_normals = [
            rngs["cap"].choice(t, size=cap, replace=False) if len(t) > cap else t
            for t in train_normals
        ]
    return train_normals


def _contaminate(
    p: PartitionSpec,
    scheme: Scheme,
    draft: Draft,
    train_normals: list[np.ndarray],
    anomaly_pool: np.ndarray,
    rng: np.random.Generator,
) -> Training:
    """Step 6: contamination, and each client's training count of each normal class."""
    ids, flags, n_bad = scheme.contaminate(draft, train_normals, anomaly_pool, p.contamination, rng)
    classes = draft.classes
    counts = {
        c: np.array([int(np.sum(classes[i[f == 0]] == c)) for i, f in zip(ids, flags, strict=True)])
        for c in draft.normal_classes
    }
    return Training(ids, flags, n_bad, counts)


def _notes(
    d: DataSection,
    p: PartitionSpec,
    scheme: Scheme,
    draft: Draft,
    train: Training,
    local: LocalTests,
    n_test_before: int,
    normal_pool: np.ndarray,
    anomaly_pool: np.ndarray,
    train_normals: list[np.ndarray],
    server_ids: np.ndarray,
) -> dict[str, object]:
    """``Federation.notes``: sizes and counts (plain ints, floats, strings, lists, dicts)."""
    members, k_clients, counts = draft.members, draft.k_clients, train.counts
    names = _class_names(members)
    local_n, local_a, uniform = local
    test_normals, test_anomalies = draft.test_normals, draft.test_anomalies
    used_classes = set(draft.normal_classes) | set(draft.anomaly_classes)
    notes: dict[str, object] = {
        "dataset": members[0].name,
        "sources": [m.name for m in members if m.role == "source"],
        "anomaly_source": next((m.name for m in members if m.role == "anomaly_source"), ""),
        "scheme": p.scheme,
        "clients": k_clients,
        "test_split": draft.split_notes,
        "n_test": int(len(test_normals) + len(test_anomalies)),
        "n_test_normal": len(test_normals),
        "n_test_anomaly": len(test_anomalies),
        "n_test_before_cap": int(n_test_before),
        "n_train": int(sum(len(t) for t in train.ids)),
        "n_train_per_client": [len(t) for t in train.ids],
        "contamination_per_client": list(train.n_bad),
        "anomaly_pool": len(anomaly_pool),
        "normal_pool": len(normal_pool),
        "normal_pool_unused": int(len(normal_pool) - sum(len(t) for t in train_normals)),
        "server_normal": len(server_ids),
        "train_class_counts": [
            {names[c]: int(counts[c][k]) for c in draft.normal_classes if counts[c][k]}
            for k in range(k_clients)
        ],
        "local_test_sizes": [[len(nn), len(aa)] for nn, aa in zip(local_n, local_a, strict=True)],
        "test_normals_unheld_class": int(uniform),
        "unused_classes": [n for i, n in enumerate(names) if i not in used_classes],
    }
    if p.local_test == "shared":
        notes["pooled"] = "client-mean"
        notes["local_test"] = "shared"
    scheme.add_notes(notes, d, draft, int(sum(len(a) for a in local_a)))
    catalog = draft.catalog
    if catalog.has_masks:
        notes["masks"] = True
    without = [m.name for m in members if not m.dataset.has_masks]
    if not catalog.has_masks and len(without) < len(members):
        notes["masks_dropped"] = f"pixel masks dropped: {', '.join(without)} has none"
    return notes
