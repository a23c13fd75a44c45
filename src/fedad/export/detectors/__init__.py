"""The exporters of fedad's detectors, one module per family; importing this package
registers them (:func:`fedad.export.registry.register_exporter`)."""

from fedad.export.detectors import baselines, graphs, onlad

__all__ = ["baselines", "graphs", "onlad"]
