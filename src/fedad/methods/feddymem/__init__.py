"""FedDyMem: federated anomaly detection with dynamic memory and memory-reduce (Chen et al.,
2025). Paper label: ``FedDyMem``.

=========================================  ===================================================
paper                                      code
=========================================  ===================================================
eq. 8 (multi-level feature fusion)         :mod:`fedad.resources.multilevel`
eq. 9 (projection)                         ``model.Projection``
eq. 10-11 (CoordConv, grid sampling)       ``model.MemoryGenerator``
eq. 12 (metric loss)                       ``losses.metric_loss``
eq. 13-16, Algorithm 2 (memory-reduce)     ``memory.memory_reduce``, ``memory.reduce_weights``
Algorithm 3 (k-means aggregation)          ``memory.aggregate_banks``
Algorithm 4 (initialisation)               ``federated.FedDyMem.client_init``
Algorithm 5 (training)                     ``federated.FedDyMem``, ``train.train_epoch``
scoring (Sec. VI-E, Fig. 9)                ``detector.FedDyMemDetector``,
                                           :mod:`fedad.components.nn.patchscore`
not in the paper: the spread division      ``model.FedDyMemNet`` (``spread``),
(``feature_norm``), the score              ``detector.FedDyMemDetector.set_spread``,
                                           ``detector.FedDyMemDetector.calibrate``
normalisation (``score_norm``)
=========================================  ===================================================
"""

from fedad.core.catalog import declare_detector, declare_method

declare_method(
    "feddymem",
    "fedad.methods.feddymem.federated",
    "FedDyMem: memory banks shared instead of models, pixel-level anomaly maps",
    ("image",),
)
declare_detector(
    "feddymem", "fedad.methods.feddymem.detector", exporter="fedad.methods.feddymem.export"
)
