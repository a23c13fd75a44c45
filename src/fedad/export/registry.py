"""Exporters by detector registry name.

An exporter turns one fitted detector into a :class:`Core`: a torch module that computes the
detector's score (and, for a detector that localises, its anomaly maps) from the model
inputs, the arrays ``score`` takes after the run's preprocessing. The rest of an exported
model (the preprocessing of ``inputs.json``, the threshold) is built around it by
:mod:`fedad.export.assemble`. Exporters are registered under the name the detector's class
has in :func:`fedad.core.detector.register_detector`, so adding one touches only this package;
a detector without one is a one-line error naming it (:func:`exporter_for`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeVar

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
    """Record that detector ``name`` cannot be exported, and why (said in its error)."""
    _REFUSED[name] = why


def exporters() -> dict[str, Exporter]:
    """Every registered exporter by detector name (:mod:`fedad.export.detectors` registers
    fedad's own: :mod:`fedad.export.api`, the export's composition root, imports it)."""
    return dict(sorted(_EXPORTERS.items()))


def exporter_for(detector: BaseDetector, label: str = "") -> Exporter:
    """The exporter of ``detector``'s class, or a one-line :class:`NotExportable`."""
    name = type(detector).registry_name or type(detector).__name__
    fn = _EXPORTERS.get(name)
    if fn is not None:
        return fn
    of = f"method '{label}''s detector '{name}'" if label else f"the detector '{name}'"
    why = _REFUSED.get(name, "it has no ONNX exporter")
    raise NotExportable(
        f"{of} cannot be exported to ONNX: {why}",
        f"exportable detectors: {', '.join(sorted(_EXPORTERS))}",
    )
