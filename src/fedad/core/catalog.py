"""The catalog of methods and detectors: what exists, by name, without importing any of it.

Each method folder declares its entries in its torch-free ``__init__.py``
(:func:`declare_method`, :func:`declare_detector`): a name, the module that defines the
class, and the facts ``fedad list methods`` and the config checks need (summary, data
kinds, detectors). The packages that hold declarations are found as installed plugins: the
entry points of group :data:`ENTRY_POINT_GROUP` (fedad's own: ``builtin = "fedad.methods"``
in ``pyproject.toml``; another package adds its methods the same way), each imported once,
at the first look-up (:func:`discover`). That reads the declarations and nothing heavy; the
module behind a name is imported when that name is looked up (:func:`import_method`,
:func:`import_detector`), so a run imports only the methods and detectors its config or
checkpoint names. Nothing of fedad imports :mod:`fedad.methods` to fill the catalog. A
contract test checks every declaration against the class it names
(``tests/core/test_catalog.py``).

Names from untrusted input (a checkpoint, a config) only select among declared entries:
the module paths come from the declarations in code, never from the input.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from dataclasses import dataclass

from fedad.core.errors import FedadError

__all__ = [
    "GRAPHS_NOT_EXPORTABLE",
    "DetectorEntry",
    "MethodEntry",
    "declare_detector",
    "declare_method",
    "detector_entries",
    "discover",
    "import_detector",
    "import_method",
    "method_entries",
]


@dataclass(frozen=True)
class MethodEntry:
    """A declared method: ``name`` (the ``[[methods]]`` name), the ``module`` whose import
    registers its :class:`~fedad.core.algorithm.Algorithm`, a one-line ``summary``, the data
    ``kinds`` it handles and the ``detectors`` it can use (``()``: its own)."""

    name: str
    module: str
    summary: str
    kinds: tuple[str, ...]
    detectors: tuple[str, ...] = ()


@dataclass(frozen=True)
class DetectorEntry:
    """A declared detector class: its registered ``name``, the ``module`` defining it, and
    how ``fedad export`` treats it: the module whose import registers its ONNX ``exporter``
    (imported only when a detector of that name is exported), or the one-line reason it
    cannot be exported (``export_refusal``)."""

    name: str
    module: str
    exporter: str | None = None
    export_refusal: str | None = None


GRAPHS_NOT_EXPORTABLE = (
    "it scores graphs (node features and edges of any size), which the exported models' "
    "fixed per-sample inputs cannot hold"
)
"""Why no graph detector is exportable: ``fedad export`` writes fixed per-sample inputs."""


_METHODS: dict[str, MethodEntry] = {}
_DETECTORS: dict[str, DetectorEntry] = {}

ENTRY_POINT_GROUP = "fedad.methods"
"""The entry-point group whose packages declare methods and detectors when imported."""
BUILTIN = importlib.metadata.EntryPoint("builtin", "fedad.methods", ENTRY_POINT_GROUP)
"""fedad's own entry (as in ``pyproject.toml``), used as well when the metadata that Python
finds lacks it: fedad run from its source folder (``PYTHONPATH=src``) or beside metadata
written by an older install still has its built-in methods."""
_discovered = False


def discover() -> None:
    """Import every package of :data:`ENTRY_POINT_GROUP` (once per process), fedad's own
    (:data:`BUILTIN`) always among them: their ``declare_*`` calls fill the catalog. A
    plugin that fails to import is a one-line :class:`~fedad.core.errors.FedadError` naming
    it."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    points = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    if not any(p.value == BUILTIN.value for p in points):
        points.insert(0, BUILTIN)
    for point in points:
        try:
            point.load()
        except Exception as err:
            _discovered = False
            raise FedadError(
                f"the methods of plugin '{point.name}' ({point.value}) failed to import: "
                f"{type(err).__name__}: {err}",
                "reinstall or remove the package that provides it",
            ) from err


def declare_method(
    name: str,
    module: str,
    summary: str,
    kinds: tuple[str, ...],
    detectors: tuple[str, ...] = (),
) -> None:
    """Declare a method defined (and registered with ``@register``) in ``module``."""
    entry = MethodEntry(name, module, summary, kinds, detectors)
    if _METHODS.get(name, entry) != entry:
        raise ValueError(f"method '{name}' declared twice")
    _METHODS[name] = entry


def declare_detector(
    name: str, module: str, exporter: str | None = None, export_refusal: str | None = None
) -> None:
    """Declare a detector class defined (and registered with ``@register_detector``) in
    ``module``; its ONNX exporter registered by importing ``exporter``, or why it has none
    (``export_refusal``)."""
    entry = DetectorEntry(name, module, exporter, export_refusal)
    if _DETECTORS.get(name, entry) != entry:
        raise ValueError(f"detector '{name}' declared twice")
    _DETECTORS[name] = entry


def method_entries() -> dict[str, MethodEntry]:
    """Every declared method by name, sorted."""
    discover()
    return dict(sorted(_METHODS.items()))


def detector_entries() -> dict[str, DetectorEntry]:
    """Every declared detector class by name, sorted."""
    discover()
    return dict(sorted(_DETECTORS.items()))


def import_method(name: str) -> bool:
    """Import the module that defines the declared method ``name``; ``False`` when no such
    method is declared."""
    discover()
    entry = _METHODS.get(name)
    if entry is None:
        return False
    importlib.import_module(entry.module)
    return True


def import_detector(name: str) -> bool:
    """Import the module that defines the declared detector ``name``; ``False`` when no such
    detector is declared."""
    discover()
    entry = _DETECTORS.get(name)
    if entry is None:
        return False
    importlib.import_module(entry.module)
    return True
