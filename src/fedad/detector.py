"""The detector contract, in the spirit of scikit-learn and PyOD.

``__init__`` only stores arguments; ``fit(X)`` returns ``self``; ``score(X)`` gives one float
per sample, higher = more anomalous; ``threshold_`` comes from *training* scores;
``predict(X)`` returns 0/1. Fitted attributes end in ``_``. A detector can be written to and
rebuilt from named arrays plus a JSON-able config, which is how runs are saved and loaded.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from typing import Any, Self

import numpy as np

DEFAULT_CONTAMINATION = 0.05
"""Threshold quantile used when neither the config nor the method gives a contamination."""


def quantile_threshold(train_scores: np.ndarray, contamination: float) -> float:
    """The :math:`(1 - c)` quantile of the training scores: a share ``c`` of them lie above."""
    if not 0.0 <= contamination < 1.0:
        raise ValueError(f"contamination must be in [0, 1), got {contamination}")
    s = np.asarray(train_scores, dtype=np.float64)
    if s.size == 0:
        raise ValueError("no training scores to set a threshold from")
    return float(np.quantile(s, 1.0 - contamination))


class BaseDetector(ABC):
    """Base class of every detector."""

    threshold_: float

    def __init__(self, contamination: float = DEFAULT_CONTAMINATION) -> None:
        self.contamination = contamination

    @abstractmethod
    def fit(self, x: np.ndarray) -> Self:
        """Train on (mostly normal) data and set ``threshold_`` from its scores."""

    @abstractmethod
    def score(self, x: np.ndarray) -> np.ndarray:
        """One anomaly score per sample, higher = more anomalous."""

    def set_threshold(self, x_train: np.ndarray) -> Self:
        """Set ``threshold_`` from the scores of training data (never test data)."""
        self.threshold_ = quantile_threshold(self.score(x_train), self.contamination)
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        """1 where the score exceeds ``threshold_``, else 0."""
        if not hasattr(self, "threshold_"):
            raise RuntimeError(f"{type(self).__name__} has no threshold_: call fit first")
        return (self.score(x) > self.threshold_).astype(np.int64)

    # -- persistence ----------------------------------------------------------------------
    @abstractmethod
    def get_params(self) -> dict[str, Any]:
        """The ``__init__`` arguments (JSON-able)."""

    @abstractmethod
    def get_arrays(self) -> dict[str, np.ndarray]:
        """Fitted state as named arrays (including ``threshold_`` when set)."""

    @abstractmethod
    def set_arrays(self, arrays: dict[str, np.ndarray]) -> Self:
        """Restore the fitted state written by :meth:`get_arrays`."""

    def to_config(self) -> dict[str, Any]:
        """What :func:`detector_from_config` needs, besides the arrays."""
        cls = type(self)
        return {"class": f"{cls.__module__}:{cls.__qualname__}", "params": self.get_params()}


def detector_from_config(config: dict[str, Any], arrays: dict[str, np.ndarray]) -> BaseDetector:
    """Rebuild a detector from :meth:`BaseDetector.to_config` and its arrays."""
    module, _, name = str(config["class"]).partition(":")
    if not module.startswith("fedad."):
        raise ValueError(f"refusing to load detector class {config['class']!r} outside fedad")
    cls = getattr(importlib.import_module(module), name)
    det: BaseDetector = cls(**config["params"])
    return det.set_arrays(arrays)
