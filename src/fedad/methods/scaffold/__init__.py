"""SCAFFOLD (Karimireddy et al., ICML 2020): FedAvg with control variates."""

from fedad.core.catalog import declare_method

declare_method(
    "scaffold",
    "fedad.methods.scaffold.federated",
    "SCAFFOLD: FedAvg with control variates correcting client drift (SGD, option II)",
    ("vector", "image", "graph"),
    ("autoencoder", "deepsvdd", "contrastive"),
)
