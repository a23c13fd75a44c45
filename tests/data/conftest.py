"""Fixtures for the data-layer tests (helpers live in ``datahelpers.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fedad.data.registry import register_dataset, unregister_dataset
from tests.data.datahelpers import SYNTHETIC


@pytest.fixture(scope="session", autouse=True)
def synthetic_datasets() -> Iterator[list[str]]:
    """Register the synthetic data sets of ``datahelpers`` for the session."""
    for name, (loader, kind) in SYNTHETIC.items():
        register_dataset(name, loader, f"test data set {name}", kind, overwrite=True)
    yield list(SYNTHETIC)
    for name in SYNTHETIC:
        unregister_dataset(name)
