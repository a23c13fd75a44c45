"""Build a :class:`~fedad.data.types.Federation` from an experiment config.

The protocol (also in ``docs/data.md``); every random step draws from its own stream of
``numpy.random.SeedSequence(cfg.seed)``, so the result is a function of the config alone:

1. **Load.** ``data.name`` (with ``data.path``, ``data.size``), every extra entry of
   ``data.sources`` (``"name"`` or ``"name@path"``) and ``data.anomaly_source`` (with
   ``data.anomaly_source_path``). All must have the same kind and feature shape.
   Classes of data sets other than ``data.name`` get ids after it (``name:class``).
   Each loaded data set is checked once for NaN/Inf feature values, which
   ``data.missing`` turns into an error (default), dropped rows, or values imputed with
   the training mean at step 8 (:mod:`fedad.data.missing`).
2. **Normal and anomaly.** A class data set needs ``data.normal``; ``data.anomaly`` lists
   its anomaly classes and may be empty only when ``data.anomaly_source`` is set. Classes in
   neither list are not used. Data sets with a fixed definition (ODDS) must omit both:
   0 is normal, 1 anomaly. The ``normal``/``anomaly`` ids apply to every entry of
   ``data.sources``. **Every** sample of ``data.anomaly_source`` is an anomaly (its own
   classes are kept, offset, in ``c_train``); it adds to the anomaly classes of the main set.
   A *defect set* (``Dataset.defect``/``defect_test``: ``textures``, ``mvtec``) has product
   types as classes: ``data.normal`` selects types (default all), ``data.anomaly`` must be
   omitted, and the defective samples of type ``c`` become class ``"<type> (defect)"``, an
   anomaly class (:func:`as_class_set`). It cannot be mixed with other sets in
   ``data.sources``; ``one-vs-rest`` does not apply.
3. **Test hold-out, before anything else.** The official test split where a data set has
   one, otherwise a seeded class-stratified ``data.test_fraction`` share. Pooled test =
   held-out normals + held-out anomalies, capped at ``data.max_test`` by a seeded
   subsample that keeps the normal/anomaly ratio (``data.test_anomaly_fraction``, when
   given, first sets that ratio by subsampling one side). The rest is the training part.
4. **Server data.** ``data.server_normal`` normal samples of the training part go to
   ``Federation.server_normal`` (never test data).
5. **Partition** the remaining normal training samples over ``partition.clients`` with
   ``partition.scheme`` (see :mod:`fedad.data.partition`); ``by-source`` groups by data set
   and needs at least two (``data.sources``); ``natural`` gives client ``k`` the samples
   of the ``k``-th sorted natural client id (``Dataset.group``: a table's
   ``data.client_column``, an image folder's clients), whose test hold-out (step 3) was
   stratified by client and class. Then cap each client at ``data.max_train_per_client``
   (seeded subsample).
6. **Contamination.** ``round_half_up(contamination * n_k)`` of client ``k``'s samples are
   replaced by anomalies drawn without replacement from the training part's anomalies
   (disjoint from the test anomalies), so every client gets its share; ``y_train`` marks
   them 1.
7. **Local test sets** (``partition.local_test = "shared"``: every client gets the whole
   pooled test set, and pooled metrics are the mean over clients; otherwise, ``"own"``)
   split the pooled test set exactly (disjoint, union = pooled): a test
   normal of class ``c`` goes to client ``k`` with probability proportional to ``k``'s
   training count of ``c`` (uniformly if no client holds ``c``); test anomalies are dealt
   evenly in random order. A client left without a test normal takes one from a client with
   several (preferring its own classes) when possible. Defect sets: the defects of type
   ``c`` are drawn like its test normals (in proportion to the training counts of ``c``),
   so a client is tested on its own types' defects; a client left without a defect takes
   one of its own types' from a client with several; ``data.anomaly_source`` samples are
   dealt evenly.
8. **Encoding** (tables with text columns): each categorical column becomes one 0/1 column
   per category seen in the clients' training rows (:mod:`fedad.data.encoding`).
   **Imputation** (``data.missing = "impute-mean"``): missing values become their feature's
   mean over the clients' training data, in training, test and server data alike.
   **Standardization** (``kind == "vector"`` and ``data.standardize``): z-score with the
   mean and standard deviation of the union of the clients' training data (what a server
   gets from the clients' counts, sums and sums of squares), applied to training, test and
   server data; a zero deviation becomes 1; one-hot columns are left as they are. Images
   stay in [0, 1].

Impossible requests raise a one-line :class:`~fedad.errors.FedadError` that names the key.
``Federation.notes`` records sizes and counts (plain ints, floats, strings, lists, dicts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from fedad.attacks import attacked_clients, gaussian_data, n_affected
from fedad.config import MAX_CLIENTS, ExperimentConfig
from fedad.data.encoding import Encoding, seen_categories
from fedad.data.missing import check_missing, fill_missing, training_means
from fedad.data.partition import partition, round_half_up
from fedad.data.registry import load_dataset, normalize_name
from fedad.data.types import (
    ClientData,
    DataKind,
    Dataset,
    Features,
    Federation,
    GraphSet,
)
from fedad.errors import ConfigError, DataError
from fedad.seeding import rng as seeded_rng

__all__ = [
    "FederationPlan",
    "build_federation",
    "materialize",
    "parse_source",
    "plan_federation",
    "pooled_mean_std",
]

_STREAMS = (
    "split",
    "test_cap",
    "server",
    "partition",
    "cap",
    "contamination",
    "local_test",
    "attack",
)  # append only: a stream's seed depends on its position


# --------------------------------------------------------------------------- sample catalog


class _Catalog:
    """Blocks of samples addressed by one global integer id (no copies until gathered).

    A block is dense (an array of vectors or images) or a :class:`GraphSet`, with optional
    pixel masks; :meth:`gather` and :meth:`gather_masks` copy the samples of some ids.
    """

    def __init__(self) -> None:
        self.blocks: list[Features] = []
        self.masks: list[np.ndarray | None] = []
        self.starts: list[int] = []
        self._classes: list[np.ndarray] = []
        self._members: list[np.ndarray] = []
        self.total = 0

    def add(
        self, x: Features, classes: np.ndarray, member: int, mask: np.ndarray | None = None
    ) -> np.ndarray:
        """Append a block; return its global ids."""
        ids = np.arange(self.total, self.total + len(x), dtype=np.int64)
        self.blocks.append(x)
        self.masks.append(mask)
        self.starts.append(self.total)
        self._classes.append(np.asarray(classes, dtype=np.int64))
        self._members.append(np.full(len(x), member, dtype=np.int64))
        self.total += len(x)
        return ids

    @property
    def classes(self) -> np.ndarray:
        return np.concatenate(self._classes) if self._classes else np.empty(0, np.int64)

    @property
    def members(self) -> np.ndarray:
        return np.concatenate(self._members) if self._members else np.empty(0, np.int64)

    @property
    def has_masks(self) -> bool:
        return bool(self.masks) and all(m is not None for m in self.masks)

    def _locate(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(np.asarray(self.starts), ids, side="right") - 1

    def _gather_dense(self, blocks: list[np.ndarray], ids: np.ndarray, dtype: type) -> np.ndarray:
        out = np.empty((len(ids), *blocks[0].shape[1:]), dtype=dtype)
        if len(ids) == 0:
            return out
        block_of = self._locate(ids)
        for b in np.unique(block_of):
            mask = block_of == b
            out[mask] = blocks[b][ids[mask] - self.starts[b]]
        return out

    def gather(self, ids: np.ndarray) -> Features:
        """The samples with global ``ids``, in that order: a new float32 array or graph set."""
        if isinstance(self.blocks[0], GraphSet):
            block_of = self._locate(ids)
            graphs = [
                self.blocks[b].graph(int(i - self.starts[b]))
                for b, i in zip(block_of, ids, strict=True)
            ]
            return GraphSet.from_graphs(graphs)
        return self._gather_dense(self.blocks, ids, np.float32)  # type: ignore[arg-type]

    def gather_masks(self, ids: np.ndarray) -> np.ndarray | None:
        """The pixel masks of ``ids`` (uint8), or ``None`` unless every block has masks."""
        if not self.has_masks:
            return None
        return self._gather_dense(self.masks, ids, np.uint8)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- members


@dataclass(frozen=True)
class _Member:
    name: str
    dataset: Dataset
    offset: int
    role: Literal["source", "anomaly_source"]
    normal: tuple[int, ...]
    anomaly: tuple[int, ...]
    parent: dict[int, int] = field(default_factory=dict)
    """Defect sets: each defect class's product type (member-local class ids)."""


def parse_source(entry: str) -> tuple[str, str | None]:
    """``"name"`` or ``"name@path"`` from ``data.sources`` as ``(name, path or None)``."""
    name, sep, path = entry.partition("@")
    if not name.strip() or (sep and not path.strip()):
        raise ConfigError(
            f"data.sources entry '{entry}' is not 'name' or 'name@path'",
            'write e.g. sources = ["mnist", "kmnist@/data/kmnist"]',
        )
    return name.strip(), (path.strip() if sep else None)


def _class_list(ds: Dataset, name: str) -> str:
    shown = ", ".join(f"{i}={c}" for i, c in enumerate(ds.classes))
    return f"'{name}' has classes 0..{len(ds.classes) - 1} ({shown})"


def _class_ids(ids: list[int | str] | None, key: str, ds: Dataset, name: str) -> tuple[int, ...]:
    """Class indices of ``ids``: indices into ``ds.classes`` or class names (``"leather"``
    for ``textures``), or, for a data set whose classes are values found in a file
    (``ds.by_value``: tables, image folders), the classes whose value (name) is each id."""
    out: list[int] = []
    for c in dict.fromkeys(ids or []):
        if ds.by_value:
            if str(c) not in ds.classes:
                shown = ", ".join(repr(v) for v in ds.classes[:12])
                more = f" and {len(ds.classes) - 12} more" if len(ds.classes) > 12 else ""
                raise DataError(
                    f"{key} has {c!r}, which is not a class of '{name}' (its values: "
                    f"{shown}{more})",
                    f"fix {key}: it selects classes by value",
                )
            out.append(ds.classes.index(str(c)))
            continue
        if isinstance(c, str) and c in ds.classes:
            out.append(ds.classes.index(c))
            continue
        if isinstance(c, str) or not 0 <= c < len(ds.classes):
            raise DataError(
                f"{key} has class {c!r}, but {_class_list(ds, name)}",
                f"fix {key}: give class indices or names",
            )
        out.append(c)
    return tuple(dict.fromkeys(out))


def _roles(cfg: ExperimentConfig, ds: Dataset, name: str) -> tuple[tuple[int, ...], ...]:
    d = cfg.data
    if cfg.partition.scheme == "one-vs-rest":
        return _one_vs_rest_roles(cfg, ds, name)
    if ds.fixed_split:
        given = [k for k, v in (("normal", d.normal), ("anomaly", d.anomaly)) if v is not None]
        if given:
            raise ConfigError(
                f"data.{given[0]} must be omitted for '{name}': its normal/anomaly split is "
                "fixed by its definition (0 normal, 1 anomaly)",
                f"remove data.{given[0]}",
            )
        return (0,), (1,)
    if ds.by_value and set(ds.classes) == {"0", "1"} and d.normal is None and d.anomaly is None:
        # a 0/1 label column: 1 marks an anomaly (a fixed definition, like ODDS)
        return (ds.classes.index("0"),), (ds.classes.index("1"),)
    if not d.normal:
        raise ConfigError(
            f"data.normal is missing or empty: {_class_list(ds, name)}",
            "set data.normal to the classes treated as normal, e.g. normal = [0]",
        )
    normal = _class_ids(d.normal, "data.normal", ds, name)
    anomaly = _class_ids(d.anomaly, "data.anomaly", ds, name)
    if not anomaly and not d.anomaly_source:
        raise ConfigError(
            "data.anomaly is missing or empty and no data.anomaly_source is set",
            f"list anomaly classes ({_class_list(ds, name)}) or set data.anomaly_source",
        )
    return normal, anomaly


def as_class_set(ds: Dataset) -> tuple[Dataset, dict[int, int]]:
    """A defect set as a class set: the defective samples of type ``c`` (of ``T`` types)
    become class ``T + c``, named ``"<type> (defect)"``; returns the set and each defect
    class's type. Any other data set is returned as it is, with an empty map."""
    if not ds.is_defect_set:
        return ds, {}
    t = len(ds.classes)

    def relabel(y: np.ndarray | None, defect: np.ndarray | None) -> np.ndarray | None:
        if y is None or defect is None:
            return y
        d = np.asarray(defect, dtype=bool)
        if d.shape != y.shape:
            raise DataError(f"data set '{ds.name}' has a defect flag per sample of another count")
        return np.where(d, y + t, y).astype(np.int64)

    y = relabel(ds.y, ds.defect)
    assert y is not None
    out = replace(
        ds,
        y=y,
        y_test=relabel(ds.y_test, ds.defect_test),
        classes=(*ds.classes, *(f"{c} (defect)" for c in ds.classes)),
        defect=None,
        defect_test=None,
    )
    return out, {t + c: c for c in range(t)}


def _defect_roles(
    cfg: ExperimentConfig, ds: Dataset, name: str
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A defect set's roles: ``data.normal`` selects product types (default: all); the
    anomalies are the defective samples of those types; ``data.anomaly`` must be omitted."""
    d = cfg.data
    if d.anomaly is not None:
        raise ConfigError(
            f"data.anomaly must be omitted for '{name}': its anomalies are the defective "
            "images of the product types in data.normal",
            "remove data.anomaly (data.normal selects product types; default all)",
        )
    if cfg.partition.scheme == "one-vs-rest":
        raise ConfigError(
            f"partition.scheme = 'one-vs-rest' does not apply to '{name}', whose anomalies "
            "are defective items of each product type",
            "use dirichlet, iid, dominant or one-class",
        )
    normal = _class_ids(d.normal, "data.normal", ds, name) or tuple(range(len(ds.classes)))
    return normal, tuple(len(ds.classes) + c for c in normal)


def _one_vs_rest_roles(
    cfg: ExperimentConfig, ds: Dataset, name: str
) -> tuple[tuple[int, ...], ...]:
    """``data.normal`` lists the classes; each is an anomaly for the other classes' clients."""
    d = cfg.data
    if ds.fixed_split:
        raise ConfigError(
            f"partition.scheme = 'one-vs-rest' needs a data set with classes; '{name}' has a "
            "fixed normal/anomaly definition",
            "use another scheme",
        )
    for key, value in (("anomaly", d.anomaly), ("anomaly_source", d.anomaly_source),
                       ("test_anomaly_fraction", d.test_anomaly_fraction)):  # fmt: skip
        if value:
            raise ConfigError(
                f"data.{key} must be omitted with partition.scheme = 'one-vs-rest': every "
                "class of data.normal is an anomaly for the clients of the other classes",
                f"remove data.{key}",
            )
    normal = _class_ids(d.normal, "data.normal", ds, name)
    if len(normal) < 2:
        raise ConfigError(
            f"partition.scheme = 'one-vs-rest' needs at least two classes in data.normal: "
            f"{_class_list(ds, name)}",
            "list the classes, e.g. normal = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]",
        )
    return normal, ()


def _load(
    name: str,
    path: str | None,
    size: int | None,
    where: str = "",
    hint: str = "",
    options: dict[str, object] | None = None,
) -> Dataset:
    """Load a data set; errors about a secondary one say which key it came from."""
    try:
        return load_dataset(name, path, size, options)
    except DataError as err:
        if not where:
            raise
        raise DataError(f"{where} '{name}': {err}; {hint}") from None


def _load_checked(
    cfg: ExperimentConfig, name: str, path: str | None, where: str = "", hint: str = ""
) -> Dataset:
    """:func:`_load`, then the missing-value check of ``data.missing`` (once per data set).
    The main data set (``data.name``) gets the loader options (``data.label_column`` ...)."""
    options = cfg.data.loader_options() if not where else None
    ds = _load(name, path, cfg.data.size, where, hint, options)
    return check_missing(ds, name, cfg.data.missing)


def _load_members(cfg: ExperimentConfig) -> list[_Member]:
    d = cfg.data
    main = normalize_name(d.name)
    wanted: list[tuple[str, str | None]] = [(main, d.path)]
    for entry in d.sources:
        name, path = parse_source(entry)
        key = normalize_name(name)
        if key == main:
            if path is not None:
                wanted[0] = (main, path)
        elif key not in [w[0] for w in wanted]:
            wanted.append((key, path))
    members: list[_Member] = []
    offset = 0
    for i, (name, path) in enumerate(wanted):
        where = "" if i == 0 else "data.sources entry"
        ds = _load_checked(cfg, name, path, where, f"give its path as '{name}@PATH'")
        if members and ds.is_defect_set != bool(members[0].parent):
            raise ConfigError(
                "data.sources mixes defect sets (product types with defective items) and other "
                f"data sets ({members[0].name}, {name})",
                "use sources of one kind",
            )
        if ds.is_defect_set:
            normal, anomaly = _defect_roles(cfg, ds, name)
            ds, parent = as_class_set(ds)
        else:
            (normal, anomaly), parent = _roles(cfg, ds, name), {}
        members.append(_Member(name, ds, offset, "source", normal, anomaly, parent))
        offset += len(ds.classes)
    fixed = {m.dataset.fixed_split for m in members}
    if len(fixed) > 1:
        raise ConfigError(
            "data.sources mixes data sets with a fixed normal/anomaly definition and class "
            f"data sets ({', '.join(m.name for m in members)})",
            "use sources of one kind",
        )
    if d.anomaly_source:
        key = normalize_name(d.anomaly_source)
        if key in [m.name for m in members]:
            raise ConfigError(
                f"data.anomaly_source '{d.anomaly_source}' is also a normal source",
                "use data.anomaly for anomaly classes of the same data set",
            )
        hint = "its path is data.anomaly_source_path"
        ds = _load_checked(cfg, key, d.anomaly_source_path, "data.anomaly_source", hint)
        every = tuple(range(len(ds.classes)))
        members.append(_Member(key, ds, offset, "anomaly_source", (), every))
    first = members[0]
    if first.dataset.categorical and len(members) > 1:
        raise ConfigError(
            f"'{first.name}' has text (categorical) columns and cannot be combined with "
            "data.sources or data.anomaly_source",
            "use the table alone",
        )
    for m in members[1:]:
        what = "data.anomaly_source" if m.role == "anomaly_source" else "data.sources entry"
        if m.dataset.kind != first.dataset.kind:
            raise DataError(
                f"{what} '{m.name}' holds {m.dataset.kind} data but '{first.name}' holds "
                f"{first.dataset.kind} data",
                "use data sets of one kind",
            )
        if first.dataset.kind != "graph" and m.dataset.feature_shape != first.dataset.feature_shape:
            raise DataError(
                f"{what} '{m.name}' has feature shape {m.dataset.feature_shape} but "
                f"'{first.name}' has {first.dataset.feature_shape}",
                "use data sets of the same shape (data.size resizes images)",
            )
    return members


# --------------------------------------------------------------------------- plan


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
    client_sources: list[str]
    train_ids: list[np.ndarray]
    train_anomaly: list[np.ndarray]
    test_ids: list[np.ndarray]
    test_anomaly: list[np.ndarray]
    server_ids: np.ndarray
    classes: np.ndarray
    standardize: bool
    catalog: _Catalog = field(repr=False)
    impute: bool = False
    gaussian_clients: dict[int, float] = field(default_factory=dict)
    attack_seed: int = 0
    notes: dict[str, object] = field(default_factory=dict)
    client_names: list[str] = field(default_factory=list)
    """Natural partitions: each client's id value (``data.client_column`` ...)."""
    columns: tuple[str, ...] = ()
    categorical: tuple[tuple[int, tuple[str, ...]], ...] = ()
    """A table's categorical columns (:attr:`Dataset.categorical`), one-hot encoded by
    :func:`materialize` with the categories of the clients' training rows."""


def _split_block(
    ids: np.ndarray, classes: np.ndarray, fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Class-stratified ``(train ids, test ids)``; every class with >= 2 samples in both."""
    train, test = [], []
    for c in np.unique(classes):
        members = rng.permutation(ids[classes == c])
        n = len(members)
        k = round_half_up(fraction * n)
        k = min(max(k, 1), n - 1) if n >= 2 else 0
        test.append(members[:k])
        train.append(members[k:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def _ratio_pair(
    normals: np.ndarray, anomalies: np.ndarray, fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Subsample one side so that anomalies are ``fraction`` of the pair (keeping the most)."""
    n_n, n_a = len(normals), len(anomalies)
    want_a = round_half_up(fraction * n_n / (1.0 - fraction))
    if want_a <= n_a:
        k_n, k_a = n_n, max(1, want_a)
    else:
        k_n, k_a = max(1, round_half_up(n_a * (1.0 - fraction) / fraction)), n_a
    pick_n = np.sort(rng.choice(normals, size=min(k_n, n_n), replace=False))
    pick_a = np.sort(rng.choice(anomalies, size=min(k_a, n_a), replace=False))
    return pick_n, pick_a


def _cap_pair(
    normals: np.ndarray, anomalies: np.ndarray, cap: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    n_n, n_a = len(normals), len(anomalies)
    if n_n + n_a <= cap:
        return normals, anomalies
    k_a = round_half_up(cap * n_a / (n_n + n_a))
    k_a = min(max(k_a, 1 if n_a else 0), cap - (1 if n_n else 0))
    k_n = cap - k_a
    pick_n = np.sort(rng.choice(normals, size=k_n, replace=False))
    pick_a = np.sort(rng.choice(anomalies, size=k_a, replace=False))
    return pick_n, pick_a


def _assign_local_tests(
    test_normals: np.ndarray,
    test_anomalies: np.ndarray,
    classes: np.ndarray,
    counts: dict[int, np.ndarray],
    num_clients: int,
    rng: np.random.Generator,
    anomaly_group: np.ndarray | None = None,
    client_group: np.ndarray | None = None,
    anomaly_parent: np.ndarray | None = None,
) -> tuple[list[np.ndarray], list[np.ndarray], int]:
    """Split the pooled test set over clients (see the module docstring, step 7).

    ``counts[c]`` is the per-client training count of class ``c``. With ``anomaly_group``
    (the source of each test anomaly) and ``client_group`` (each client's source), the
    anomalies of a source are dealt among that source's clients only (``by-source``); a
    source with no client deals to all. With ``anomaly_parent`` (defect sets: each test
    anomaly's product type, -1 for one of ``data.anomaly_source``), an anomaly of type ``c``
    goes to a client drawn like the test normals of ``c``: in proportion to the clients'
    training counts of ``c`` (uniformly when no client holds ``c``); a client left without
    one takes a defect of a type it holds from a client with several, when there is one;
    anomalies of ``data.anomaly_source`` are dealt like cards. Returns the per-client test
    normals, test anomalies, and how many test normals went uniformly (class unheld).
    """
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
            int(c) for c in np.unique(test_classes[donors])
            if int(c) in counts and counts[int(c)][k] > 0
        ]  # fmt: skip
        preferred = donors[np.isin(test_classes[donors], held)] if held else donors
        owner[rng.choice(preferred if len(preferred) else donors)] = k
    normals = [test_normals[owner == k] for k in range(num_clients)]
    if anomaly_parent is not None:
        bad_owner = np.full(len(test_anomalies), -1, dtype=np.int64)
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
        return normals, [test_anomalies[bad_owner == k] for k in range(num_clients)], uniform
    # Anomalies: dealt like cards in random order, to clients in random order.
    if anomaly_group is None or client_group is None:
        dealt = test_anomalies[rng.permutation(len(test_anomalies))]
        anomalies: list[np.ndarray] = [np.empty(0, np.int64)] * num_clients
        for slot, k in enumerate(rng.permutation(num_clients)):
            anomalies[int(k)] = np.sort(dealt[slot::num_clients])
        return normals, anomalies, uniform
    hands: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for g in np.unique(anomaly_group):
        players = np.flatnonzero(client_group == g)
        if len(players) == 0:
            players = np.arange(num_clients)
        mine = test_anomalies[anomaly_group == g]
        dealt = mine[rng.permutation(len(mine))]
        for slot, k in enumerate(rng.permutation(players)):
            hands[int(k)].append(dealt[slot :: len(players)])
    anomalies = [np.sort(np.concatenate([np.empty(0, np.int64), *h])) for h in hands]
    return normals, anomalies, uniform


def _one_vs_rest_tests(
    test_pool: np.ndarray,
    classes: np.ndarray,
    counts: dict[int, np.ndarray],
    num_clients: int,
    rng: np.random.Generator,
) -> tuple[list[np.ndarray], list[np.ndarray], int]:
    """Local tests of ``one-vs-rest``: client ``k``'s own class against every other class.

    The held-out samples of a class are split evenly, at random, among the clients that
    train on it (its normals there); every held-out sample is an anomaly for each client
    that does not train on its class. Local tests therefore overlap (a sample is an anomaly
    for many clients), which is why pooled metrics are the mean of the clients' metrics.
    Returns per-client normals, anomalies, and 0 (no class goes uniformly).
    """
    normals: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    test_classes = classes[test_pool]
    held_by = {c: np.flatnonzero(w > 0) for c, w in counts.items()}
    for c in np.unique(test_classes):
        holders = held_by.get(int(c), np.empty(0, np.int64))
        if len(holders) == 0:
            continue  # a listed class no client holds is an anomaly for everyone
        mine = rng.permutation(test_pool[test_classes == c])
        for k, piece in zip(rng.permutation(holders), np.array_split(mine, len(holders)),
                            strict=True):  # fmt: skip
            normals[int(k)].append(piece)
    out_n = [np.sort(np.concatenate([np.empty(0, np.int64), *n])) for n in normals]
    out_a = []
    for k in range(num_clients):
        own = [c for c, holders in held_by.items() if k in holders]
        out_a.append(np.sort(test_pool[~np.isin(test_classes, own)]))
    return out_n, out_a, 0


def _contaminate_other_classes(
    train_normals: list[np.ndarray],
    pool: np.ndarray,
    classes: np.ndarray,
    contamination: float,
    rng: np.random.Generator,
) -> tuple[list[np.ndarray], list[np.ndarray], list[int]]:
    """:func:`_contaminate` for ``one-vs-rest``: client ``k``'s anomalies are training
    samples of classes it does not hold (drawn without replacement over all clients; such a
    sample may also be another client's normal training data, never test data)."""
    n_bad = [round_half_up(contamination * len(t)) for t in train_normals]
    taken = np.zeros(0, np.int64)
    ids, flags = [], []
    for t, n_a in zip(train_normals, n_bad, strict=True):
        own = np.unique(classes[t])
        candidates = np.setdiff1d(pool[~np.isin(classes[pool], own)], taken)
        if n_a > len(candidates):
            raise DataError(
                f"partition.contamination={contamination:g} needs {n_a} training samples of "
                f"other classes for a client but only {len(candidates)} are left",
                "lower partition.contamination",
            )
        drawn = rng.choice(candidates, size=n_a, replace=False) if n_a else taken[:0]
        taken = np.concatenate([taken, drawn])
        kept = rng.permutation(t)[: len(t) - n_a]
        mine, flag = _mix(kept, drawn, rng)
        ids.append(mine)
        flags.append(flag)
    return ids, flags, n_bad


def _mix(
    normals: np.ndarray, anomalies: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Normals and anomalies in one random order, with 0/1 anomaly flags."""
    ids = np.concatenate([normals, anomalies])
    flag = np.r_[np.zeros(len(normals), np.int64), np.ones(len(anomalies), np.int64)]
    order = rng.permutation(len(ids))
    return ids[order], flag[order]


def _contaminate(
    train_normals: list[np.ndarray],
    anomaly_pool: np.ndarray,
    contamination: float,
    rng: np.random.Generator,
) -> tuple[list[np.ndarray], list[np.ndarray], list[int]]:
    """Replace ``round_half_up(contamination * n_k)`` of each client's samples by anomalies.

    Anomalies are drawn without replacement from ``anomaly_pool``; every client gets its own
    share. Returns per-client ids, 0/1 contamination flags, and the counts replaced.
    """
    n_bad = [round_half_up(contamination * len(t)) for t in train_normals]
    if sum(n_bad) > len(anomaly_pool):
        raise DataError(
            f"partition.contamination={contamination:g} needs {sum(n_bad)} training "
            f"anomalies but only {len(anomaly_pool)} are available outside the test set",
            "lower partition.contamination or data.max_train_per_client, or add anomaly classes",
        )
    drawn = rng.permutation(anomaly_pool)
    ids, flags = [], []
    start = 0
    for t, n_a in zip(train_normals, n_bad, strict=True):
        kept = rng.permutation(t)[: len(t) - n_a]
        mine, flag = _mix(kept, drawn[start : start + n_a], rng)
        start += n_a
        ids.append(mine)
        flags.append(flag)
    return ids, flags, n_bad


def _natural_clients(cfg: ExperimentConfig, members: list[_Member]) -> list[str]:
    """The clients of ``partition.scheme = "natural"``: the main data set's distinct client
    ids (training and test rows), sorted; checks ``partition.clients`` against their count."""
    main = members[0].dataset
    if main.group is None:
        raise ConfigError(
            f"partition.scheme = 'natural' needs a client id per sample, which '{main.name}' "
            "does not have",
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
        f"data.client_column '{cfg.data.client_column}'"
        if cfg.data.client_column
        else ("the image folder's client ids")
    )
    if len(names) > MAX_CLIENTS:
        raise DataError(
            f"{where} has {len(names):,} distinct values, more than the {MAX_CLIENTS:,} clients "
            "fedad runs",
            "group the rows into fewer clients",
        )
    if "clients" in cfg.partition.model_fields_set and cfg.partition.clients != len(names):
        shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
        raise ConfigError(
            f"partition.clients = {cfg.partition.clients}, but {where} names {len(names)} "
            f"clients ({shown})",
            f"omit partition.clients or set it to {len(names)}",
        )
    return names


def _group_codes(group: np.ndarray | None, n: int, names: list[str]) -> np.ndarray:
    """Each sample's client number (its id's index in ``names``), -1 without natural ids."""
    if group is None or not names:
        return np.full(n, -1, dtype=np.int64)
    lookup = {v: k for k, v in enumerate(names)}
    return np.array([lookup[str(v)] for v in group.tolist()], dtype=np.int64)


def _check_natural_sizes(
    cfg: ExperimentConfig, names: list[str], counts: Sequence[int], server: bool = False
) -> None:
    """Every natural client holds at least ``partition.min_per_client`` normal training
    samples (``counts``, one per client of ``names``; ``server``: after the server's share
    was taken); else a one-line error naming the first small client and how many there are
    (the client count is the data's, so the fix is never ``partition.clients``)."""
    least = cfg.partition.min_per_client
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


def _natural_tests(
    test_normals: np.ndarray,
    test_anomalies: np.ndarray,
    group_of: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
) -> tuple[list[np.ndarray], list[np.ndarray], int]:
    """Local tests of ``natural``: each client's own held-out rows; anomalies without a
    client (``data.anomaly_source``) are dealt evenly."""
    normals = [np.sort(test_normals[group_of[test_normals] == k]) for k in range(num_clients)]
    own = [test_anomalies[group_of[test_anomalies] == k] for k in range(num_clients)]
    rest = test_anomalies[group_of[test_anomalies] < 0]
    dealt = rest[rng.permutation(len(rest))]
    hands = [own[k] for k in range(num_clients)]
    for slot, k in enumerate(rng.permutation(num_clients)):
        hands[int(k)] = np.concatenate([hands[int(k)], dealt[slot::num_clients]])
    out = [np.sort(h) for h in hands]
    return normals, out, 0


def _seed_sequence(seed: int) -> np.random.SeedSequence:
    """The root of all random streams; negative seeds map to distinct non-negative ones."""
    return np.random.SeedSequence(seed % (1 << 128))


def plan_federation(cfg: ExperimentConfig) -> FederationPlan:
    """Decide, by global sample id, the data of every client, the server and the tests."""
    d, p = cfg.data, cfg.partition
    rngs = {
        name: np.random.default_rng(s)
        for name, s in zip(_STREAMS, _seed_sequence(cfg.seed).spawn(len(_STREAMS)), strict=True)
    }
    members = _load_members(cfg)
    main = members[0]
    class_names: list[str] = []
    for m in members:
        prefix = "" if m is main else f"{m.name}:"
        class_names.extend(prefix + c for c in m.dataset.classes)

    catalog = _Catalog()
    normal_classes: list[int] = []
    anomaly_classes: list[int] = []
    train_parts: list[np.ndarray] = []
    test_parts: list[np.ndarray] = []
    split_notes: dict[str, str] = {}
    natural = p.scheme == "natural"
    client_names = _natural_clients(cfg, members) if natural else []
    k_clients = len(client_names) if natural else p.clients
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
            tr, te = _split_block(ids, strata, d.test_fraction, rngs["split"])
            train_parts.append(tr)
            test_parts.append(te)
            group_blocks.append(codes)
            split_notes[m.name] = f"stratified {d.test_fraction:g}" + (
                " per client" if natural else ""
            )
    group_of = np.concatenate(group_blocks)
    classes = catalog.classes
    source_of = catalog.members
    train_all = np.concatenate(train_parts)
    test_all = np.concatenate(test_parts)
    normal_set = np.asarray(normal_classes, dtype=np.int64)
    anomaly_set = np.asarray(anomaly_classes, dtype=np.int64)

    # 3. pooled test set
    ovr = p.scheme == "one-vs-rest"
    if ovr and p.local_test == "shared":
        raise ConfigError(
            "partition.local_test = 'shared' does not apply to partition.scheme = "
            "'one-vs-rest', whose local test sets are each client's class against the rest",
            "drop partition.local_test",
        )
    if ovr and cfg.attack.kind == "contamination":
        raise ConfigError(
            "attack.kind = 'contamination' is not supported with partition.scheme = 'one-vs-rest'",
            "use partition.contamination, or a model attack",
        )
    test_normals = test_all[np.isin(classes[test_all], normal_set)]
    test_anomalies = test_all[np.isin(classes[test_all], anomaly_set)]
    if ovr and len(np.unique(classes[test_normals])) < 2:
        raise DataError(
            "the held-out test set holds fewer than two of data.normal's classes",
            "raise data.test_fraction",
        )
    if not ovr and (len(test_normals) == 0 or len(test_anomalies) == 0):
        which = "normal" if len(test_normals) == 0 else "anomalous"
        per_client = natural and split_notes[main.name].startswith("stratified")
        raise DataError(
            f"the held-out test set has no {which} samples",
            "natural splits each client's rows class by class, and a client's only row of a "
            "class stays in training: give the clients more rows, or choose the test rows "
            "with data.split_column or train/ and test/ folders"
            if per_client
            else "raise data.test_fraction or check data.normal / data.anomaly",
        )
    n_test_before = len(test_normals) + len(test_anomalies)
    if d.test_anomaly_fraction is not None:
        test_normals, test_anomalies = _ratio_pair(
            test_normals, test_anomalies, d.test_anomaly_fraction, rngs["test_cap"]
        )
    if d.max_test is not None:
        test_normals, test_anomalies = _cap_pair(
            test_normals, test_anomalies, d.max_test, rngs["test_cap"]
        )
    normal_pool = train_all[np.isin(classes[train_all], normal_set)]
    anomaly_pool = train_all[np.isin(classes[train_all], anomaly_set)]
    if ovr:  # every listed class is another class's anomaly (contamination: step 6)
        anomaly_pool = np.sort(normal_pool)

    # 4. server data
    if natural:  # before the server's share: the clients' own sizes, each named
        sizes = np.bincount(group_of[normal_pool], minlength=k_clients)[:k_clients]
        _check_natural_sizes(cfg, client_names, sizes.tolist())
    server_ids = np.empty(0, dtype=np.int64)
    if d.server_normal > 0:
        left = len(normal_pool) - d.server_normal
        if left < k_clients * p.min_per_client:
            raise DataError(
                f"data.server_normal={d.server_normal} leaves {max(left, 0)} of "
                f"{len(normal_pool)} normal training samples for {k_clients} clients "
                f"(partition.min_per_client={p.min_per_client} each)",
                "lower data.server_normal" + ("" if natural else " or partition.clients"),
            )
        pick = rngs["server"].permutation(len(normal_pool))
        server_ids = np.sort(normal_pool[pick[: d.server_normal]])
        normal_pool = np.sort(normal_pool[pick[d.server_normal :]])

    # 5. partition + cap
    if len(normal_pool) < k_clients * p.min_per_client:
        raise DataError(
            f"partition.clients={k_clients} needs at least {k_clients * p.min_per_client} "
            f"normal training samples (partition.min_per_client={p.min_per_client} each) but "
            f"only {len(normal_pool)} are available",
            "lower partition.clients or partition.min_per_client, or use more normal classes",
        )
    if p.scheme == "by-source" and sum(m.role == "source" for m in members) < 2:
        raise ConfigError(
            "partition.scheme='by-source' needs data.sources to list at least two data sets",
            'set e.g. data.sources = ["mnist", "kmnist@/data/kmnist"], or use another scheme',
        )
    if d.max_train_per_client is not None and d.max_train_per_client < p.min_per_client:
        raise ConfigError(
            f"data.max_train_per_client={d.max_train_per_client} is below "
            f"partition.min_per_client={p.min_per_client}",
            "raise data.max_train_per_client",
        )
    parts = partition(
        p.scheme,
        classes[normal_pool],
        k_clients,
        rngs["partition"],
        groups=group_of[normal_pool] if natural else source_of[normal_pool],
        classes=normal_classes,
        alpha=p.alpha,
        dominant_fraction=p.dominant_fraction,
        min_per_client=p.min_per_client,
    )
    train_normals = [normal_pool[part] for part in parts]
    if natural:
        _check_natural_sizes(cfg, client_names, [len(t) for t in train_normals], server=True)
    if d.max_train_per_client is not None:
        cap = d.max_train_per_client
        train_normals = [
            rngs["cap"].choice(t, size=cap, replace=False) if len(t) > cap else t
            for t in train_normals
        ]

    # 6. contamination
    if ovr:
        train_ids, train_anomaly, n_bad = _contaminate_other_classes(
            train_normals, anomaly_pool, classes, p.contamination, rngs["contamination"]
        )
    else:
        train_ids, train_anomaly, n_bad = _contaminate(
            train_normals, anomaly_pool, p.contamination, rngs["contamination"]
        )

    # 7. local test sets
    counts = {
        c: np.array([int(np.sum(classes[ids[flag == 0]] == c))
                     for ids, flag in zip(train_ids, train_anomaly, strict=True)])
        for c in normal_classes
    }  # fmt: skip
    groups: dict[str, np.ndarray] = {}
    if p.scheme == "by-source":
        # each client holds one source's normals; it is tested on that source's anomalies
        client_group = np.array(
            [int(source_of[ids[flag == 0]][0]) if np.any(flag == 0) else -1
             for ids, flag in zip(train_ids, train_anomaly, strict=True)]
        )  # fmt: skip
        groups = {"anomaly_group": source_of[test_anomalies], "client_group": client_group}
    parent_of = {m.offset + a: m.offset + c for m in members for a, c in m.parent.items()}
    parents: dict[str, np.ndarray] = {}
    if parent_of and not groups:
        # defect sets: a client is tested on the defective items of its own product types
        parents = {
            "anomaly_parent": np.array([parent_of.get(int(c), -1) for c in classes[test_anomalies]])
        }
    if ovr:
        local_n, local_a, uniform = _one_vs_rest_tests(
            test_normals, classes, counts, k_clients, rngs["local_test"]
        )
    elif p.local_test == "shared":
        local_n = [test_normals.copy() for _ in range(k_clients)]
        local_a = [test_anomalies.copy() for _ in range(k_clients)]
        uniform = 0
    elif natural:
        local_n, local_a, uniform = _natural_tests(
            test_normals, test_anomalies, group_of, k_clients, rngs["local_test"]
        )
    else:
        local_n, local_a, uniform = _assign_local_tests(
            test_normals, test_anomalies, classes, counts, k_clients, rngs["local_test"],
            **groups, **parents,
        )  # fmt: skip
    mixed = [_mix(nn, aa, rngs["local_test"]) for nn, aa in zip(local_n, local_a, strict=True)]
    test_ids = [ids for ids, _ in mixed]
    test_anomaly = [flag for _, flag in mixed]

    # 8. attacks on training data (after the test sets are fixed, so they never change)
    attacked = attacked_clients(cfg.attack, k_clients, cfg.seed)
    gaussian: dict[int, float] = {}
    if cfg.attack.kind == "contamination" and attacked:
        used = np.concatenate(
            [ids[flag == 1] for ids, flag in zip(train_ids, train_anomaly, strict=True)]
        )
        spare = rngs["attack"].permutation(np.setdiff1d(anomaly_pool, used))
        start = 0
        for k in attacked:
            normal_ids = train_ids[k][train_anomaly[k] == 0]
            n_a = min(n_affected(len(train_ids[k]), cfg.attack.fraction), len(normal_ids))
            if start + n_a > len(spare):
                raise DataError(
                    f"attack.kind='contamination' needs {start + n_a} training anomalies but "
                    f"only {len(spare)} are left after partition.contamination",
                    "lower attack.fraction or attack.clients",
                )
            kept = rngs["attack"].permutation(normal_ids)[: len(normal_ids) - n_a]
            old_bad = train_ids[k][train_anomaly[k] == 1]
            train_ids[k], train_anomaly[k] = _mix(
                kept, np.concatenate([old_bad, spare[start : start + n_a]]), rngs["attack"]
            )
            start += n_a
    elif cfg.attack.kind == "gaussian-data" and attacked:
        if main.dataset.kind == "graph":
            raise ConfigError(
                "attack.kind='gaussian-data' replaces feature rows by noise and does not "
                "apply to graph data",
                "use attack.kind = 'contamination' or a model attack",
            )
        gaussian = {k: cfg.attack.fraction for k in attacked}

    client_sources = []
    for ids, flag in zip(train_ids, train_anomaly, strict=True):
        used = np.unique(source_of[ids[flag == 0]])
        client_sources.append(members[int(used[0])].name if len(used) == 1 else "mixed")

    names = tuple(class_names)
    used_classes = set(normal_classes) | set(anomaly_classes)
    notes: dict[str, object] = {
        "dataset": main.name,
        "sources": [m.name for m in members if m.role == "source"],
        "anomaly_source": next((m.name for m in members if m.role == "anomaly_source"), ""),
        "scheme": p.scheme,
        "clients": k_clients,
        "test_split": split_notes,
        "n_test": int(len(test_normals) + len(test_anomalies)),
        "n_test_normal": len(test_normals),
        "n_test_anomaly": len(test_anomalies),
        "n_test_before_cap": int(n_test_before),
        "n_train": int(sum(len(t) for t in train_ids)),
        "n_train_per_client": [len(t) for t in train_ids],
        "contamination_per_client": list(n_bad),
        "anomaly_pool": len(anomaly_pool),
        "normal_pool": len(normal_pool),
        "normal_pool_unused": int(len(normal_pool) - sum(len(t) for t in train_normals)),
        "server_normal": len(server_ids),
        "train_class_counts": [
            {names[c]: int(counts[c][k]) for c in normal_classes if counts[c][k]}
            for k in range(k_clients)
        ],
        "local_test_sizes": [[len(nn), len(aa)] for nn, aa in zip(local_n, local_a, strict=True)],
        "test_normals_unheld_class": int(uniform),
        "unused_classes": [n for i, n in enumerate(names) if i not in used_classes],
        "attack": cfg.attack.kind,
        "attacked_clients": attacked,
    }
    if ovr:
        notes["pooled"] = "client-mean"
        notes["n_test_anomaly"] = int(sum(len(a) for a in local_a))
    elif p.local_test == "shared":
        notes["pooled"] = "client-mean"
        notes["local_test"] = "shared"
    if natural:
        notes["client_names"] = list(client_names)
        notes["client_column"] = cfg.data.client_column or ""
    if catalog.has_masks:
        notes["masks"] = True
    without = [m.name for m in members if not m.dataset.has_masks]
    if not catalog.has_masks and len(without) < len(members):
        notes["masks_dropped"] = f"pixel masks dropped: {', '.join(without)} has none"
    return FederationPlan(
        name=main.name,
        kind=main.dataset.kind,
        feature_shape=main.dataset.feature_shape,
        class_names=names,
        normal_classes=normal_classes,
        anomaly_classes=list(normal_classes) if ovr else anomaly_classes,
        client_sources=client_sources,
        train_ids=train_ids,
        train_anomaly=train_anomaly,
        test_ids=test_ids,
        test_anomaly=test_anomaly,
        server_ids=server_ids,
        classes=classes,
        standardize=d.standardize and main.dataset.kind == "vector",
        catalog=catalog,
        impute=d.missing == "impute-mean",
        notes=notes,
        gaussian_clients=gaussian,
        attack_seed=cfg.seed,
        client_names=list(client_names),
        columns=main.dataset.columns,
        categorical=main.dataset.categorical,
    )


# --------------------------------------------------------------------------- materialize


def pooled_mean_std(
    blocks: list[np.ndarray], floor: float = 1e-12
) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature mean and (population) std of the union of ``blocks``, merged per block.

    The merge (Chan et al.) uses only each block's count, mean and sum of squared
    deviations, i.e. what clients could send; it equals the statistics of the concatenation.
    A std at or below ``floor`` (relative to ``max(1, |mean|)``) becomes 1.
    """
    n = 0
    mean: np.ndarray | None = None
    m2: np.ndarray | None = None
    for b in blocks:
        if len(b) == 0:
            continue
        x = b.reshape(len(b), -1).astype(np.float64)
        nb, mb = len(x), x.mean(axis=0)
        m2b = ((x - mb) ** 2).sum(axis=0)
        if mean is None or m2 is None:
            n, mean, m2 = nb, mb, m2b
            continue
        delta = mb - mean
        tot = n + nb
        mean = mean + delta * (nb / tot)
        m2 = m2 + m2b + delta**2 * (n * nb / tot)
        n = tot
    if mean is None or m2 is None:
        raise DataError("cannot standardize: the clients hold no training data")
    std = np.sqrt(m2 / n)
    std = np.where(std <= floor * np.maximum(1.0, np.abs(mean)), 1.0, std)
    return mean, std


def _dense(x: Features) -> np.ndarray:
    """``x`` as a dense array; the plan refuses imputation, standardization and data
    attacks for graphs, so a graph set here is a bug."""
    if isinstance(x, GraphSet):
        raise TypeError("dense operation on graph samples")
    return x


def materialize(plan: FederationPlan) -> Federation:
    """Copy the planned samples into a :class:`Federation` (and standardize vectors)."""
    cat = plan.catalog
    clients = []
    for k in range(len(plan.train_ids)):
        clients.append(
            ClientData(
                client_id=k,
                x_train=cat.gather(plan.train_ids[k]),
                y_train=plan.train_anomaly[k].copy(),
                c_train=plan.classes[plan.train_ids[k]],
                x_test=cat.gather(plan.test_ids[k]),
                y_test=plan.test_anomaly[k].copy(),
                source=plan.client_sources[k],
                mask_train=cat.gather_masks(plan.train_ids[k]),
                mask_test=cat.gather_masks(plan.test_ids[k]),
                name=plan.client_names[k] if plan.client_names else "",
            )
        )
    server = cat.gather(plan.server_ids) if len(plan.server_ids) else None
    notes = dict(plan.notes)
    notes["columns"] = list(plan.columns)
    feature_shape = plan.feature_shape
    one_hot = None
    if plan.categorical:
        raw = dict(plan.categorical)
        enc = Encoding(plan.columns, seen_categories([_dense(c.x_train) for c in clients],
                                                     plan.categorical))  # fmt: skip
        for c in clients:
            c.x_train = enc.apply(_dense(c.x_train), raw)
            c.x_test = enc.apply(_dense(c.x_test), raw)
        if server is not None:
            server = enc.apply(_dense(server), raw)
        feature_shape = (len(enc.encoded_columns),)
        one_hot = enc.one_hot_mask
        notes["encoding"] = {
            "columns": list(plan.columns),
            "categories": {plan.columns[j]: list(v) for j, v in enc.categories.items()},
            "encoded_columns": list(enc.encoded_columns),
        }
    if plan.impute:
        means = training_means([_dense(c.x_train) for c in clients], plan.name)
        for c in clients:
            c.x_train = fill_missing(_dense(c.x_train), means)
            c.x_test = fill_missing(_dense(c.x_test), means)
        if server is not None:
            server = fill_missing(_dense(server), means)
        notes["imputed_means"] = [float(v) for v in means]
    if plan.standardize:
        mean, std = pooled_mean_std([_dense(c.x_train) for c in clients])
        if one_hot is not None:  # one-hot columns stay 0/1
            mean, std = np.where(one_hot, 0.0, mean), np.where(one_hot, 1.0, std)
        mu, sd = mean.astype(np.float32), std.astype(np.float32)
        for c in clients:
            c.x_train = (_dense(c.x_train) - mu) / sd
            c.x_test = (_dense(c.x_test) - mu) / sd
        if server is not None:
            server = (_dense(server) - mu) / sd
        notes["standardize_mean"] = [float(v) for v in mean]
        notes["standardize_std"] = [float(v) for v in std]
    notes["standardized"] = plan.standardize
    rng = seeded_rng(plan.attack_seed, 0x6A5)
    for k, fraction in sorted(plan.gaussian_clients.items()):
        c = clients[k]
        c.x_train, hit = gaussian_data(_dense(c.x_train), fraction, rng)
        c.y_train = np.where(hit, 1, c.y_train).astype(np.int64)
    return Federation(
        name=plan.name,
        kind=plan.kind,
        feature_shape=feature_shape,
        clients=clients,
        normal_classes=list(plan.normal_classes),
        anomaly_classes=list(plan.anomaly_classes),
        class_names=plan.class_names,
        server_normal=server,
        notes=notes,
    )


def build_federation(cfg: ExperimentConfig) -> Federation:
    """The federation ``cfg`` describes: :func:`plan_federation` then :func:`materialize`."""
    return materialize(plan_federation(cfg))
