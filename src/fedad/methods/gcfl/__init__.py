"""GCFL / GCFL+ (Xie et al., NeurIPS 2021): clustered FL on graphs, with Deep SVDD."""

from fedad.core.catalog import declare_method

declare_method(
    "gcfl",
    "fedad.methods.gcfl.federated",
    "GCFL: clustered FL on graphs (clusters split by the clients' updates), Deep SVDD",
    ("graph",),
    ("deepsvdd",),
)
