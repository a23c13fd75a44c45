"""FedBN (Li et al., ICLR 2021): FedAvg with normalisation layers kept on their client."""

from fedad.core.catalog import declare_method

declare_method(
    "fedbn",
    "fedad.methods.fedbn.federated",
    "FedBN: FedAvg, but normalisation layers (params and statistics) stay local",
    ("vector", "image", "graph"),
    ("autoencoder", "deepsvdd", "contrastive", "patchcore"),
)
