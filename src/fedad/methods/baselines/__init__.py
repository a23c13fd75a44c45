"""Generic baselines: local, centralized, FedAvg, FedProx with autoencoder / Deep SVDD; PyOD's
detectors as reference rows of local and centralized."""

from fedad.core.catalog import declare_detector, declare_method

PYOD_DETECTORS = ("pyod-iforest", "pyod-ecod", "pyod-knn", "pyod-ocsvm")
"""PyOD's detectors with PyOD's defaults, the reference rows of ``local``/``centralized``
(:mod:`fedad.components.detectors.pyod_reference`; the ``pyod`` extra)."""

declare_method(
    "centralized",
    "fedad.methods.baselines.federated",
    "Centralized: clients upload their data, one model on the pool (upper reference)",
    ("vector", "image"),
    (
        "autoencoder",
        "deepsvdd",
        "contrastive",
        "patchcore",
        "pretrained",
        "ocsvm",
        *PYOD_DETECTORS,
    ),
)
declare_method(
    "fedavg",
    "fedad.methods.baselines.federated",
    "FedAvg: example-weighted mean of client models each round",
    ("vector", "image", "graph"),
    ("autoencoder", "deepsvdd", "contrastive", "patchcore"),
)
declare_method(
    "fedprox",
    "fedad.methods.baselines.federated",
    "FedProx: FedAvg with a proximal term mu/2 ||w - w_global||^2 on clients",
    ("vector", "image", "graph"),
    ("autoencoder", "deepsvdd", "contrastive", "patchcore"),
)
declare_method(
    "local",
    "fedad.methods.baselines.federated",
    "Local: each client trains alone (no federation), lower reference",
    ("vector", "image", "graph"),
    (
        "autoencoder",
        "deepsvdd",
        "contrastive",
        "patchcore",
        "pretrained",
        "ocsvm",
        *PYOD_DETECTORS,
    ),
)
_EXPORTER = "fedad.export.detectors.baselines"
declare_detector("autoencoder", "fedad.components.detectors.neural", exporter=_EXPORTER)
declare_detector("contrastive", "fedad.components.detectors.contrastive", exporter=_EXPORTER)
declare_detector("deepsvdd", "fedad.components.detectors.neural", exporter=_EXPORTER)
declare_detector("ocsvm", "fedad.components.detectors.ocsvm", exporter=_EXPORTER)
declare_detector("patchcore", "fedad.components.detectors.patchcore", exporter=_EXPORTER)
declare_detector("pretrained", "fedad.components.detectors.pretrained", exporter=_EXPORTER)
PYOD_NOT_EXPORTABLE = (
    "it is PyOD's model, refitted from its training data when loaded, which fedad does "
    "not write as an ONNX graph; use fedad score, or fedad's own detectors"
)
for _name in PYOD_DETECTORS:
    declare_detector(
        _name, "fedad.components.detectors.pyod_reference", export_refusal=PYOD_NOT_EXPORTABLE
    )
