"""scikit-learn's small bundled tables as data sets: offline, no path, seconds to load.

================= ==== ============================ ==========================================
name              rows features                     labels
================= ==== ============================ ==========================================
``breast_cancer`` 569  30 (cell-nucleus measures)   fixed: malignant (212, 37.3%) anomalous
``wine``          178  13 (chemical analysis)       classes class_0, class_1, class_2
``iris``          150  4 (sepal and petal sizes)    classes setosa, versicolor, virginica
================= ==== ============================ ==========================================

``breast_cancer`` (Wisconsin Diagnostic, Street et al. 1993) has a fixed definition, as the
ODDS sets do, so a config omits ``data.normal`` and ``data.anomaly``; it is not
``odds_breastw`` (the Wisconsin *Original* set: 9 cytology scores, 683 rows). ``wine`` and
``iris`` are classification sets: ``data.normal`` and ``data.anomaly`` pick classes by index.
None has an official test split.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from fedad.core.types import Dataset
from fedad.data.registry import register_dataset

__all__ = ["load_breast_cancer", "load_iris", "load_wine"]


@lru_cache(maxsize=3)
def _bunch(name: str) -> Any:
    from sklearn import datasets

    return getattr(datasets, f"load_{name}")()


def _features(name: str) -> tuple[np.ndarray, tuple[str, ...], np.ndarray]:
    bunch = _bunch(name)
    x = np.ascontiguousarray(bunch.data, dtype=np.float32)  # a fresh copy every call
    return x, tuple(str(c) for c in bunch.feature_names), np.asarray(bunch.target, np.int64)


@register_dataset(
    "breast_cancer",
    description="sklearn breast cancer (Wisconsin Diagnostic): 569 x 30, malignant 37% anomalies",
    kind="vector",
)
def load_breast_cancer(path: str | None = None, size: int | None = None) -> Dataset:
    """Malignant tumours (scikit-learn's target 0) are anomalies, benign ones normal."""
    del path, size
    x, columns, target = _features("breast_cancer")
    anomaly = (target == 0).astype(np.int64)
    return Dataset(
        "breast_cancer",
        x,
        anomaly,
        "vector",
        ("normal", "anomaly"),
        fixed_split=True,
        columns=columns,
    )


def _classes(name: str) -> Dataset:
    x, columns, target = _features(name)
    classes = tuple(str(c) for c in _bunch(name).target_names)
    return Dataset(name, x, target, "vector", classes, columns=columns)


@register_dataset(
    "wine", description="sklearn wine: 178 x 13, 3 cultivars as classes", kind="vector"
)
def load_wine(path: str | None = None, size: int | None = None) -> Dataset:
    """The three cultivars (``class_0``, ``class_1``, ``class_2``) as classes."""
    del path, size
    return _classes("wine")


@register_dataset("iris", description="sklearn iris: 150 x 4, 3 species as classes", kind="vector")
def load_iris(path: str | None = None, size: int | None = None) -> Dataset:
    """The three species (setosa, versicolor, virginica) as classes."""
    del path, size
    return _classes("iris")
