"""Exporters by detector registry name.

An exporter turns one fitted detector into a :class:`Core`: a torch module that computes the
detector's score (and, for a detector that localises, its anomaly maps) from the model
inputs, the arrays ``score`` takes after the run's preprocessing. The rest of an exported
model (the preprocessing of ``inputs.json``, the threshold) is built around it by
:mod:`fedad.export.assemble`. Exporters are registered under the name the detector's class
has in :func:`fedad.core.detector.register_detector`; the detector's declaration in the
catalog names the module that registers it (a method's exporter lives in the method's
folder, ``export.py``), imported only when a detector of that name is exported. A detector
without one is a one-line error naming it and why (:func:`exporter_for`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeVar

from fedad.core.catalog import DetectorEntry, detector_entries
from fedad.core.errors import FedadError

if TYPE_CHECKING:
    from torch import nn

    from fedad.core.detector import BaseDetector

ScoreDtype = Literal["float32", "float64"]


@dataclass(frozen=True)
class Core:
    """The scoring part of an exported detector.

    ``module.forward(x)`` takes model inputs ``x``, float32 ``(N, *input_shape)``, and
    returns the score ``(N,)`` in ``score_dtype`` (float64 where fedad computes in float64),
    or ``(score, maps)`` with ``maps`` float32 ``(N, H, W)`` when ``maps`` is true.
    ``note``: how the exported score differs from fedad's, if it does anywhere (model.json
    and the docs say it). ``scale``: for a score that is a difference of larger terms (a
    one-class SVM's kernel sum minus its offset, a cosine, a normalised map), their
    magnitude, the scale at which the score's rounding is measured (0: the score's own,
    :mod:`fedad.export.check`)."""

    module: nn.Module
    input_shape: tuple[int, ...]
    score_dtype: ScoreDtype = "float32"
    maps: bool = False
    note: str = ""
    scale: float = 0.0


class NotExportable(FedadError):
    """A detector that has no ONNX exporter, or whose configuration the exporter cannot
    express: one line naming it, exit status 2."""


Exporter = Callable[["BaseDetector", tuple[int, ...]], Core]
"""``(detector, per-sample input shape of the run) -> Core``."""

_EXPORTERS: dict[str, Exporter] = {}
_REFUSED: dict[str, str] = {}
E = TypeVar("E", bound=Exporter)


def register_exporter(name: str) -> Callable[[E], E]:
    """Decorator: the exporter of the detectors registered as ``name``."""

    def add(fn: E) -> E:
        if name in _EXPORTERS and _EXPORTERS[name] is not fn:
            raise ValueError(f"exporter for '{name}' registered twice")
        _EXPORTERS[name] = fn
        return fn

    return add


def refuse(name: str, why: str) -> None:
    """Record that detector ``name`` cannot be exported, and why (said in its error); a
    declared detector says it in its declaration (``export_refusal``)."""
    _REFUSED[name] = why


def _import_exporter(entry: DetectorEntry | None) -> None:
    """Import the module that registers the exporter a detector's declaration names."""
    if entry is not None and entry.exporter is not None and entry.name not in _EXPORTERS:
        importlib.import_module(entry.exporter)


def exporters() -> dict[str, Exporter]:
    """Every exporter by detector name: each declared one (its module imported) and those
    registered without a declaration."""
    for entry in detector_entries().values():
        _import_exporter(entry)
    return dict(sorted(_EXPORTERS.items()))


def exporter_for(detector: BaseDetector, label: str = "") -> Exporter:
    """The exporter of ``detector``'s class (its declared exporter module imported the
    first time), or a one-line :class:`NotExportable`."""
    name = type(detector).registry_name or type(detector).__name__
    entry = detector_entries().get(name)
    _import_exporter(entry)
    fn = _EXPORTERS.get(name)
    if fn is not None:
        return fn
    of = f"method '{label}''s detector '{name}'" if label else f"the detector '{name}'"
    refusal = entry.export_refusal if entry is not None else None
    why = refusal or _REFUSED.get(name, "it has no ONNX exporter")
    raise NotExportable(
        f"{of} cannot be exported to ONNX: {why}",
        f"exportable detectors: {', '.join(sorted(exporters()))}",
    )
