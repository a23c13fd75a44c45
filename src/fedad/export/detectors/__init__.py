"""The exporters of the generic detectors (:mod:`.baselines`, with the building blocks in
:mod:`.images`). A method's own exporter lives in its folder (``methods/<m>/export.py``);
each detector's declaration in the catalog names the module that registers its exporter,
and :func:`fedad.export.registry.exporter_for` imports it when it is needed."""
