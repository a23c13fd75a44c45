"""Data: real loaders behind a registry, seeded partitions, and the federation builder.

- :func:`load_dataset`, :func:`list_datasets`, :func:`register_dataset` (:mod:`.registry`);
  the built-in loaders are in :mod:`.sources`.
- :mod:`.partition`: pure, seeded partition functions over index arrays.
- :func:`build_federation` (:mod:`.federation`): config -> :class:`Federation`, following the
  protocol in ``docs/data.md``.
"""

from __future__ import annotations

from fedad.data.federation import build_federation
from fedad.data.registry import list_datasets, load_dataset, register_dataset
from fedad.data.types import ClientData, Dataset, Federation

__all__ = [
    "ClientData",
    "Dataset",
    "Federation",
    "build_federation",
    "list_datasets",
    "load_dataset",
    "register_dataset",
]
