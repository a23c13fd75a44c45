"""ONLAD detector: the OS-ELM autoencoder under the detector contract."""

from __future__ import annotations

from typing import Any, Self

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fedad.detector import DEFAULT_CONTAMINATION, BaseDetector, register_detector
from fedad.methods.onlad.model import (
    hidden,
    init_input_weights,
    init_phase,
    reconstruction_error,
    sequential_phase,
    sequential_phase_residual,
)


class OSELMParams(BaseModel):
    """The ``__init__`` arguments of :class:`OSELMAutoEncoder`, as a checkpoint may give them."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    n_hidden: int | None = Field(default=64, ge=1, le=1 << 16)
    alpha_scale: float = Field(default=1.0, gt=0.0)
    ridge: float = Field(default=1e-3, gt=0.0)
    forgetting: float = Field(default=1.0, gt=0.0, le=1.0)
    contamination: float = Field(default=DEFAULT_CONTAMINATION, ge=0.0, lt=1.0)
    seed: int = Field(default=0, ge=-(1 << 63), lt=1 << 63)


@register_detector("oselm-autoencoder")
class OSELMAutoEncoder(BaseDetector):
    """OS-ELM autoencoder (ONLAD): score = mean squared reconstruction error.

    ``fit(X)`` runs the initial phase (eq. 4) on ``X``; ``partial_fit(X)`` the sequential
    phase (eq. 5), or the initial phase when nothing was learned yet.
    """

    ParamsModel = OSELMParams

    def __init__(
        self,
        n_hidden: int = 64,
        alpha_scale: float = 1.0,
        ridge: float = 1e-3,
        forgetting: float = 1.0,
        contamination: float = DEFAULT_CONTAMINATION,
        seed: int = 0,
    ) -> None:
        super().__init__(contamination=contamination)
        self.n_hidden = n_hidden
        self.alpha_scale = alpha_scale
        self.ridge = ridge
        self.forgetting = forgetting
        self.seed = seed

    def get_params(self) -> dict[str, Any]:
        return {
            "n_hidden": self.n_hidden,
            "alpha_scale": self.alpha_scale,
            "ridge": self.ridge,
            "forgetting": self.forgetting,
            "contamination": self.contamination,
            "seed": self.seed,
        }

    def init_weights(self, n_inputs: int) -> Self:
        """Draw the fixed :math:`\\alpha, b` (seeded: equal seeds give equal weights)."""
        self.alpha_, self.bias_ = init_input_weights(
            n_inputs, self.n_hidden, self.seed, self.alpha_scale
        )
        return self

    def hidden(self, x: np.ndarray) -> np.ndarray:
        return hidden(x, self.alpha_, self.bias_)

    def _flat(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x, dtype=np.float64).reshape(len(x), -1)

    def fit(self, x: np.ndarray) -> Self:
        xf = self._flat(x)
        self.init_weights(xf.shape[1])
        self.beta_, self.p_ = init_phase(self.hidden(xf), xf, self.ridge)
        return self.set_threshold(xf)

    def partial_fit(self, x: np.ndarray) -> Self:
        """Learn one chunk (eq. 5); the first chunk ever runs eq. 4 instead."""
        if len(x) == 0:
            return self
        xf = self._flat(x)
        if not hasattr(self, "alpha_"):
            self.init_weights(xf.shape[1])
        if not hasattr(self, "beta_"):
            self.beta_, self.p_ = init_phase(self.hidden(xf), xf, self.ridge)
        else:
            self.beta_, self.p_ = sequential_phase(
                self.beta_, self.p_, self.hidden(xf), xf, self.forgetting
            )
        return self

    def detect_and_learn(self, x: np.ndarray, tau: float | None) -> np.ndarray:
        """ONLAD's runtime step on one chunk: flag samples scoring above ``tau``, learn the rest.

        Uses the model as it is before the chunk (prequential); the hidden layer and the
        residual of the detection step are reused by the update (eq. 5). ``tau = None``
        learns every sample. Returns the 0/1 flags.
        """
        xf = self._flat(x)
        h = self.hidden(xf)
        residual = xf - h @ self.beta_
        scores = np.mean(residual**2, axis=1)
        flagged = np.zeros(len(xf), dtype=bool) if tau is None else scores > tau
        keep = ~flagged
        self.beta_, self.p_ = sequential_phase_residual(
            self.beta_, self.p_, h[keep], residual[keep], self.forgetting
        )
        return flagged.astype(np.int64)

    def score(self, x: np.ndarray) -> np.ndarray:
        xf = self._flat(x)
        return reconstruction_error(xf, self.hidden(xf), self.beta_)

    def get_arrays(self) -> dict[str, np.ndarray]:
        out = {"alpha": self.alpha_, "bias": self.bias_, "beta": self.beta_, "p": self.p_}
        if hasattr(self, "threshold_"):
            out["threshold_"] = np.asarray(self.threshold_, dtype=np.float64)
        return out

    def set_arrays(self, arrays: dict[str, np.ndarray]) -> Self:
        self.alpha_ = np.asarray(arrays["alpha"], dtype=np.float64)
        self.bias_ = np.asarray(arrays["bias"], dtype=np.float64)
        self.beta_ = np.asarray(arrays["beta"], dtype=np.float64)
        self.p_ = np.asarray(arrays["p"], dtype=np.float64)
        if "threshold_" in arrays:
            self.threshold_ = float(arrays["threshold_"])
        return self
