"""FedStar (Tan et al., AAAI 2023): shared structure encoder, personal feature encoder."""

from fedad.core.catalog import GRAPHS_NOT_EXPORTABLE, declare_detector, declare_method

declare_method(
    "fedstar",
    "fedad.methods.fedstar.federated",
    "FedStar: shared structure encoder, personal feature encoder, Deep SVDD",
    ("graph",),
)
declare_detector("fedstar", "fedad.methods.fedstar.detector", export_refusal=GRAPHS_NOT_EXPORTABLE)
