"""PyOD's detectors (``pyod-iforest``, ``pyod-ecod``, ``pyod-knn``, ``pyod-ocsvm``): not
exportable. They hold PyOD's models, refitted from their training data when loaded
(:mod:`fedad.components.detectors.pyod_reference`), and no exporter writes those models as
ONNX graphs; ``fedad export`` says so in one line (exit status 2)."""

from __future__ import annotations

from fedad.export.registry import refuse

WHY = (
    "it is PyOD's model, refitted from its training data when loaded, which fedad does "
    "not write as an ONNX graph; use fedad score, or fedad's own detectors"
)

for _name in ("pyod-iforest", "pyod-ecod", "pyod-knn", "pyod-ocsvm"):
    refuse(_name, WHY)
