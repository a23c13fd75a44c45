"""``fedad export``: a trained detector as an ONNX model that scores raw inputs with
onnxruntime alone, with the run's preprocessing inside the graph and identical scores.

Modules: :mod:`.registry` (exporters by detector name), :mod:`.torchgraph` (torch's
exporter), :mod:`.preprocess` (``inputs.json`` as ONNX nodes), :mod:`.assemble` (one
model: preprocessing, score, threshold), :mod:`.check` (the checks every model passes),
:mod:`.sidecar` (``model.json``), :mod:`.detectors` (the exporters), :mod:`.api`
(:func:`export_run`). Needs the optional extra ``export`` (onnx, onnxruntime).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedad.export.api import Exported, export_run

__all__ = ["Exported", "export_run"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from fedad.export import api

        return getattr(api, name)
    raise AttributeError(name)
