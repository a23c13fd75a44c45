"""The data set registry: names to loaders.

A loader is a callable ``loader(path=None, size=None) -> Dataset``. Built-in loaders live in
:mod:`fedad.data.sources` and register themselves on import; :func:`load_dataset` and
:func:`list_datasets` import them on first use, so ``import fedad.data.registry`` stays cheap.

Register your own::

    from fedad.data.registry import register_dataset

    @register_dataset("my_set", description="my sensors, 12 features", kind="vector")
    def load_my_set(path=None, size=None):
        ...
        return Dataset(...)
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, overload

from fedad.core.errors import DataError
from fedad.core.types import DataKind, Dataset
from fedad.data.parts import Part, PartRule, take_part

__all__ = [
    "DatasetInfo",
    "Loader",
    "dataset_info",
    "list_datasets",
    "load_dataset",
    "normalize_name",
    "register_dataset",
    "unregister_dataset",
]

# Modules whose import registers the built-in data sets.
_BUILTIN_MODULES: tuple[str, ...] = ("fedad.data.sources",)


class Loader(Protocol):
    """What a registered loader looks like."""

    def __call__(self, path: str | None = None, size: int | None = None) -> Dataset: ...


@dataclass(frozen=True)
class DatasetInfo:
    """A registry entry: the loader plus what ``fedad list datasets`` shows."""

    name: str
    loader: Loader
    description: str
    kind: DataKind
    options: tuple[str, ...] = ()
    """Extra ``data.*`` keys the loader takes as keyword arguments (``label_column`` ...)."""
    defects: bool = False
    """A defect set: product types whose anomalies are defective items with pixel masks
    (``textures``, ``mvtec``); benchmarks rank them apart from other images."""
    parts: PartRule = "content"
    """How ``data.part`` splits it: ``"content"``, by each sample's bytes
    (:func:`fedad.data.parts.take_part`); ``"loader"``, by the loader itself, which takes
    ``part`` and ``seed`` (generated sets: other types or another stream for evaluation)."""


_REGISTRY: dict[str, DatasetInfo] = {}
_builtins_loaded = False


def normalize_name(name: str) -> str:
    """Registry key of a name: case-insensitive, ``-`` and ``_`` are the same."""
    return name.strip().lower().replace("-", "_")


@overload
def register_dataset(
    name: str,
    loader: None = None,
    description: str = "",
    kind: DataKind = "vector",
    *,
    overwrite: bool = False,
    options: tuple[str, ...] = (),
    parts: PartRule = "content",
    defects: bool = False,
) -> Callable[[Loader], Loader]: ...


@overload
def register_dataset(
    name: str,
    loader: Loader,
    description: str = "",
    kind: DataKind = "vector",
    *,
    overwrite: bool = False,
    options: tuple[str, ...] = (),
    parts: PartRule = "content",
    defects: bool = False,
) -> Loader: ...


def register_dataset(
    name: str,
    loader: Loader | None = None,
    description: str = "",
    kind: DataKind = "vector",
    *,
    overwrite: bool = False,
    options: tuple[str, ...] = (),
    parts: PartRule = "content",
    defects: bool = False,
) -> Loader | Callable[[Loader], Loader]:
    """Register ``loader`` under ``name``; without ``loader`` return a decorator.

    ``description`` is one line (shown by :func:`list_datasets`); ``kind`` is the
    :data:`~fedad.core.types.DataKind` of what the loader returns; ``options`` names the
    extra ``data.*`` keys the loader accepts as keyword arguments (see :func:`load_dataset`);
    ``parts`` how ``data.part`` splits it and ``defects`` whether it is a defect set
    (:class:`DatasetInfo`).
    Registering a taken name is a programming error (``ValueError``) unless ``overwrite``
    is true.
    """
    key = normalize_name(name)
    if "\n" in description:
        raise ValueError(f"description of data set '{name}' must be one line")

    def add(fn: Loader) -> Loader:
        if key in _REGISTRY and not overwrite:
            raise ValueError(f"data set '{key}' is already registered (pass overwrite=True)")
        _REGISTRY[key] = DatasetInfo(key, fn, description, kind, tuple(options), defects, parts)
        return fn

    if loader is None:
        return add
    return add(loader)


def unregister_dataset(name: str) -> None:
    """Remove a registered data set (no error if it is not there)."""
    _REGISTRY.pop(normalize_name(name), None)


def _load_builtins() -> None:
    global _builtins_loaded
    if _builtins_loaded:
        return
    _builtins_loaded = True
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)


def dataset_info(name: str) -> DatasetInfo:
    """The registry entry of ``name``; unknown names raise a one-line :class:`DataError`."""
    _load_builtins()
    key = normalize_name(name)
    if key not in _REGISTRY and f"odds_{key}" in _REGISTRY:
        key = f"odds_{key}"  # the ODDS sets by their ODDS names: shuttle, satellite, ...
    if key not in _REGISTRY:
        names = sorted(_REGISTRY)
        close = difflib.get_close_matches(key, names, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise DataError(
            f"unknown data set '{name}'",
            f"{hint}available: {', '.join(names)}; see `fedad list datasets`",
        )
    return _REGISTRY[key]


def list_datasets() -> list[tuple[str, str]]:
    """``(name, one-line description)`` of every registered data set, sorted by name."""
    _load_builtins()
    return [(k, _REGISTRY[k].description) for k in sorted(_REGISTRY)]


def load_dataset(
    name: str,
    path: str | None = None,
    size: int | None = None,
    options: Mapping[str, Any] | None = None,
    part: Part = "all",
    seed: int = 0,
) -> Dataset:
    """Load a registered data set.

    ``path`` is where its files are (loaders that need one say so when it is missing);
    ``size`` resizes images to ``size x size`` and is an error for non-image data sets.
    ``options`` are extra ``data.*`` keys (``None`` values mean "not set"); each set one
    must be among the loader's declared ``options``, else a one-line :class:`DataError`.
    ``part`` (``data.part``): ``"dev"`` or ``"eval"``, the fixed half of the data set that
    development or evaluation uses (docs/data.md), ``"all"`` the whole set; ``seed`` is the
    run's, for loaders that draw their samples (``parts = "loader"``).
    """
    info = dataset_info(name)
    if size is not None and info.kind != "image":
        raise DataError(
            f"data.size={size} applies to image data sets only, but '{info.name}' holds "
            f"{info.kind} data",
            "remove data.size",
        )
    given = {k: v for k, v in (options or {}).items() if v is not None}
    stray = [k for k in given if k not in info.options]
    if stray:
        takers = sorted(i.name for i in _REGISTRY.values() if stray[0] in i.options)
        where = f" (it applies to {', '.join(takers)})" if takers else ""
        raise DataError(
            f"data.{stray[0]} does not apply to data set '{info.name}'{where}",
            f"remove data.{stray[0]}",
        )
    if info.parts == "loader":
        given = {**given, "part": part, "seed": seed}
    ds = info.loader(path=path, size=size, **given) if given else info.loader(path=path, size=size)
    return take_part(ds, part) if info.parts == "content" else ds
