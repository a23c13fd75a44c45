"""The data set registry: names, descriptions, errors."""

from __future__ import annotations

import numpy as np
import pytest

from fedad.core.errors import DataError, FedadError
from fedad.core.types import Dataset
from fedad.data.registry import (
    dataset_info,
    list_datasets,
    load_dataset,
    register_dataset,
    unregister_dataset,
)

BUILTIN = {
    "fashion_mnist", "mnist", "kmnist", "digits", "cifar10",
    "odds_shuttle", "odds_satellite", "odds_breastw", "odds_ionosphere",
}  # fmt: skip


def test_list_has_builtins_with_one_line_descriptions() -> None:
    listed = dict(list_datasets())
    assert set(listed) >= BUILTIN
    for name in BUILTIN:
        assert listed[name] and "\n" not in listed[name]
    names = [n for n, _ in list_datasets()]
    assert names == sorted(names)


def test_unknown_name_is_one_line_and_lists_available() -> None:
    with pytest.raises(DataError) as err:
        load_dataset("fashion_mnits")
    msg = str(err.value)
    assert "\n" not in msg
    assert "'fashion_mnits'" in msg
    assert "did you mean 'fashion_mnist'" in msg
    for name in BUILTIN:
        assert name in msg


def test_names_are_normalized() -> None:
    assert dataset_info("Fashion-MNIST").name == "fashion_mnist"


def test_register_decorator_and_unregister() -> None:
    @register_dataset("tiny_test_set", description="three rows", kind="vector")
    def tiny(path: str | None = None, size: int | None = None) -> Dataset:
        x = np.zeros((3, 2), np.float32)
        return Dataset("tiny_test_set", x, np.zeros(3, np.int64), "vector", ("a",))

    try:
        assert ("tiny_test_set", "three rows") in list_datasets()
        assert load_dataset("tiny_test_set").x.shape == (3, 2)
        with pytest.raises(ValueError, match="already registered"):
            register_dataset("tiny_test_set", tiny, "again", "vector")
        register_dataset("tiny_test_set", tiny, "replaced", "vector", overwrite=True)
        assert ("tiny_test_set", "replaced") in list_datasets()
    finally:
        unregister_dataset("tiny_test_set")
    with pytest.raises(FedadError):
        load_dataset("tiny_test_set")


def test_size_is_rejected_for_vector_sets() -> None:
    with pytest.raises(DataError, match=r"data\.size=28 applies to image data sets only"):
        load_dataset("synth_vec", size=28)
