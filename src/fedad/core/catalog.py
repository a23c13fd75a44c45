"""The catalog of methods and detectors: what exists, by name, without importing any of it.

Each method folder declares its entries in its torch-free ``__init__.py``
(:func:`declare_method`, :func:`declare_detector`): a name, the module that defines the
class, and the facts ``fedad list methods`` and the config checks need (summary, data
kinds, detectors). Importing :mod:`fedad.methods` (the composition root does: the CLI, the
runner, :func:`fedad.load`, the Flower apps) reads those declarations and nothing heavy;
the module behind a name is imported when that name is looked up
(:func:`import_method`, :func:`import_detector`), so a run imports only the methods and
detectors its config or checkpoint names. A contract test checks every declaration against
the class it names (``tests/test_catalog.py``).

Names from untrusted input (a checkpoint, a config) only select among declared entries:
the module paths come from the declarations in code, never from the input.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

__all__ = [
    "GRAPHS_NOT_EXPORTABLE",
    "DetectorEntry",
    "MethodEntry",
    "declare_detector",
    "declare_method",
    "detector_entries",
    "import_detector",
    "import_method",
    "method_entries",
]


@dataclass(frozen=True)
class MethodEntry:
    """A declared method: ``name`` (the ``[[methods]]`` name), the ``module`` whose import
    registers its :class:`~fedad.fl.algorithm.Algorithm`, a one-line ``summary``, the data
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
    return dict(sorted(_METHODS.items()))


def detector_entries() -> dict[str, DetectorEntry]:
    """Every declared detector class by name, sorted."""
    return dict(sorted(_DETECTORS.items()))


def import_method(name: str) -> bool:
    """Import the module that defines the declared method ``name``; ``False`` when no such
    method is declared."""
    entry = _METHODS.get(name)
    if entry is None:
        return False
    importlib.import_module(entry.module)
    return True


def import_detector(name: str) -> bool:
    """Import the module that defines the declared detector ``name``; ``False`` when no such
    detector is declared."""
    entry = _DETECTORS.get(name)
    if entry is None:
        return False
    importlib.import_module(entry.module)
    return True
