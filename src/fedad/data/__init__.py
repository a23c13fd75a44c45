"""Data: real loaders behind a registry, seeded partitions, and the federation builder.

- :func:`load_dataset`, :func:`list_datasets`, :func:`register_dataset` (:mod:`.registry`);
  the built-in loaders are in :mod:`.sources`.
- :mod:`.partition`: pure, seeded partition functions over index arrays.
- :mod:`.federation`: the ``[data]`` and ``[partition]`` sections -> a plan ->
  :class:`Federation`, following the protocol in ``docs/data.md`` (a whole config, attacks
  included: :func:`fedad.federation.build_federation`).
"""

from __future__ import annotations

from fedad.core.types import ClientData, Dataset, Federation
from fedad.data.registry import list_datasets, load_dataset, register_dataset

__all__ = [
    "ClientData",
    "Dataset",
    "Federation",
    "list_datasets",
    "load_dataset",
    "register_dataset",
]
