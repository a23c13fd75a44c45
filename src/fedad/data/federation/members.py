"""Steps 1 and 2 of the protocol: load the data sets and decide each one's class roles.

The main data set (``data.name``), every extra entry of ``data.sources`` and
``data.anomaly_source`` become :class:`Member` s, whose classes get ids after the previous
ones. Which classes are normal and which anomalous is decided by the scheme
(:meth:`Scheme.roles <fedad.data.federation.schemes.base.Scheme.roles>`; by default
:func:`class_roles`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np

from fedad.core.errors import ConfigError, DataError
from fedad.core.types import Dataset
from fedad.data.missing import check_missing
from fedad.data.registry import load_dataset, normalize_name

if TYPE_CHECKING:
    from fedad.data.federation.sections import DataSection

Roles = tuple[tuple[int, ...], tuple[int, ...]]
"""A data set's (normal, anomaly) class ids, local to it."""


class RoleRule(Protocol):
    """How a scheme decides class roles (a :class:`~.schemes.base.Scheme` is one)."""

    def roles(self, d: DataSection, ds: Dataset, name: str) -> Roles:
        """The normal and anomaly classes of a (non-defect) data set."""
        ...

    def check_defect_set(self, name: str) -> None:
        """Refuse a defect set if the scheme cannot use one."""
        ...


@dataclass(frozen=True)
class Member:
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


def class_list(ds: Dataset, name: str) -> str:
    shown = ", ".join(f"{i}={c}" for i, c in enumerate(ds.classes))
    return f"'{name}' has classes 0..{len(ds.classes) - 1} ({shown})"


def class_ids(ids: list[int | str] | None, key: str, ds: Dataset, name: str) -> tuple[int, ...]:
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
                f"{key} has class {c!r}, but {class_list(ds, name)}",
                f"fix {key}: give class indices or names",
            )
        out.append(c)
    return tuple(dict.fromkeys(out))


def class_roles(d: DataSection, ds: Dataset, name: str) -> Roles:
    """The roles ``data.normal`` / ``data.anomaly`` give a class data set (or a fixed
    definition: 0 normal, 1 anomaly)."""
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
            f"data.normal is missing or empty: {class_list(ds, name)}",
            "set data.normal to the classes treated as normal, e.g. normal = [0]",
        )
    normal = class_ids(d.normal, "data.normal", ds, name)
    anomaly = class_ids(d.anomaly, "data.anomaly", ds, name)
    if not anomaly and not d.anomaly_source:
        raise ConfigError(
            "data.anomaly is missing or empty and no data.anomaly_source is set",
            f"list anomaly classes ({class_list(ds, name)}) or set data.anomaly_source",
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


def _defect_roles(d: DataSection, ds: Dataset, name: str, scheme: RoleRule) -> Roles:
    """A defect set's roles: ``data.normal`` selects product types (default: all); the
    anomalies are the defective samples of those types; ``data.anomaly`` must be omitted."""
    if d.anomaly is not None:
        raise ConfigError(
            f"data.anomaly must be omitted for '{name}': its anomalies are the defective "
            "images of the product types in data.normal",
            "remove data.anomaly (data.normal selects product types; default all)",
        )
    scheme.check_defect_set(name)
    normal = class_ids(d.normal, "data.normal", ds, name) or tuple(range(len(ds.classes)))
    return normal, tuple(len(ds.classes) + c for c in normal)


def _load(
    d: DataSection,
    name: str,
    path: str | None,
    seed: int,
    where: str = "",
    hint: str = "",
    options: dict[str, object] | None = None,
) -> Dataset:
    """Load a data set (its ``data.part``); errors about a secondary one say which key it
    came from."""
    try:
        return load_dataset(name, path, d.size, options, d.part, seed)
    except DataError as err:
        if not where:
            raise
        raise DataError(f"{where} '{name}': {err}; {hint}") from None


def _load_checked(
    d: DataSection, name: str, path: str | None, seed: int, where: str = "", hint: str = ""
) -> Dataset:
    """:func:`_load`, then the missing-value check of ``data.missing`` (once per data set).
    The main data set (``data.name``) gets the loader options (``data.label_column`` ...)."""
    options = d.loader_options() if not where else None
    ds = _load(d, name, path, seed, where, hint, options)
    return check_missing(ds, name, d.missing)


def load_members(d: DataSection, scheme: RoleRule, seed: int = 0) -> list[Member]:
    """Load ``data.name``, ``data.sources`` and ``data.anomaly_source`` and check that they
    go together (one kind, one feature shape, no mix of defect and class sets)."""
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
    members: list[Member] = []
    offset = 0
    for i, (name, path) in enumerate(wanted):
        where = "" if i == 0 else "data.sources entry"
        ds = _load_checked(d, name, path, seed, where, f"give its path as '{name}@PATH'")
        if members and ds.is_defect_set != bool(members[0].parent):
            raise ConfigError(
                "data.sources mixes defect sets (product types with defective items) and other "
                f"data sets ({members[0].name}, {name})",
                "use sources of one kind",
            )
        if ds.is_defect_set:
            normal, anomaly = _defect_roles(d, ds, name, scheme)
            ds, parent = as_class_set(ds)
        else:
            (normal, anomaly), parent = scheme.roles(d, ds, name), {}
        members.append(Member(name, ds, offset, "source", normal, anomaly, parent))
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
        ds = _load_checked(d, key, d.anomaly_source_path, seed, "data.anomaly_source", hint)
        every = tuple(range(len(ds.classes)))
        members.append(Member(key, ds, offset, "anomaly_source", (), every))
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
