"""The exporters of fedad's detectors, one module per family; importing this package
registers them (:func:`fedad.export.registry.register_exporter`)."""

from fedad.export.detectors import (
    baselines,
    fadngs,
    feddymem,
    feduv,
    graphs,
    onlad,
    protofl,
    pyod_refs,
)

__all__ = ["baselines", "fadngs", "feddymem", "feduv", "graphs", "onlad", "protofl", "pyod_refs"]
