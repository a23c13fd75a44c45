"""The generic baselines' federated interface for a detector that does not train in epochs.

``local`` and ``centralized`` drive every detector through ``build``, ``prepare``,
``train_epochs`` and ``model_arrays`` (see :mod:`.federated`). A detector that is fitted in
one go (``pretrained``: embed the training data; ``ocsvm``: solve the SVM) implements
:meth:`FitOnce.fit_data` and names the attribute that exists once it is fitted; the first
``train_epochs`` call fits, later calls do nothing.
"""

from __future__ import annotations

from typing import ClassVar, Self

import numpy as np


class FitOnce:
    """Mixin: ``build``/``prepare`` do nothing, ``train_epochs`` fits the first time."""

    fitted_attr: ClassVar[str]
    """The attribute that exists once the detector is fitted (e.g. ``features_``)."""

    def fit_data(self, x: np.ndarray) -> None:
        """Fit on ``x`` (the training data), without setting the threshold."""
        raise NotImplementedError

    def model_arrays(self) -> dict[str, np.ndarray]:
        """The fitted state as named arrays ({} before fitting)."""
        raise NotImplementedError

    def get_arrays(self) -> dict[str, np.ndarray]:
        """:meth:`model_arrays` and ``threshold_`` (once set)."""
        out = self.model_arrays()
        if hasattr(self, "threshold_"):
            out["threshold_"] = np.asarray(self.threshold_, dtype=np.float64)
        return out

    @staticmethod
    def check_names(arrays: dict[str, np.ndarray], allowed: set[str]) -> None:
        """A one-line :class:`KeyError` for arrays a checkpoint should not hold."""
        unknown = sorted(set(arrays) - allowed - {"threshold_"})
        if unknown:
            raise KeyError(f"unexpected arrays {', '.join(unknown)[:120]}")

    def build(self) -> Self:
        """Nothing to build."""
        return self

    def prepare(self, x: np.ndarray) -> Self:
        """Nothing to prepare before fitting."""
        return self

    @property
    def fitted(self) -> bool:
        return hasattr(self, self.fitted_attr)

    def train_epochs(
        self, x: np.ndarray, epochs: int, rng: np.random.Generator, prox_mu: float = 0.0
    ) -> float:
        """Fit on ``x`` the first time; later calls do nothing. Returns 0.0, the "loss" of a
        detector that does not train."""
        if not self.fitted:
            self.fit_data(x)
        return 0.0
