"""ONLAD detector: the OS-ELM autoencoder under the detector contract."""

from __future__ import annotations

import math
from typing import Self

import numpy as np
from pydantic import ConfigDict, Field

from fedad.core.detector import (
    DEFAULT_CONTAMINATION,
    BaseDetector,
    DetectorParams,
    register_detector,
)
from fedad.methods.onlad.model import (
    default_hidden,
    hidden,
    init_input_weights,
    init_phase,
    reconstruction_error,
    sequential_phase,
    sequential_phase_residual,
)


class OSELMParams(DetectorParams):
    """The ``__init__`` arguments of :class:`OSELMAutoEncoder`, as a checkpoint may give them."""

    model_config = ConfigDict(allow_inf_nan=False)

    n_hidden: int | None = Field(default=None, ge=1, le=1 << 16)
    alpha_scale: float = Field(default=1.0, gt=0.0)
    ridge: float = Field(default=1e-3, gt=0.0)
    forgetting: float = Field(default=1.0, gt=0.0, le=1.0)
    contamination: float = Field(default=DEFAULT_CONTAMINATION, ge=0.0, lt=1.0)
    seed: int = Field(default=0, ge=-(1 << 63), lt=1 << 63)


@register_detector("oselm-autoencoder")
class OSELMAutoEncoder(BaseDetector):
    """OS-ELM autoencoder (ONLAD): score = mean squared reconstruction error.

    ``fit(X)`` runs the initial phase [ONLAD eq. 4] on ``X``; ``partial_fit(X)`` the sequential
    phase [ONLAD eq. 5], or the initial phase when nothing was learned yet. ``n_hidden = None``
    takes :func:`~fedad.methods.onlad.model.default_hidden` of the input width when the
    weights are drawn (or read from ``alpha``'s shape by :meth:`set_arrays`); from then on
    :meth:`get_params` records the resolved width.
    """

    ParamsModel = OSELMParams
    params: OSELMParams

    def init_weights(self, n_inputs: int) -> Self:
        """Draw the fixed :math:`\\alpha, b` (seeded: equal seeds give equal weights)."""
        p = self.params
        n_hidden = default_hidden(n_inputs) if p.n_hidden is None else p.n_hidden
        self.params = p.model_copy(update={"n_hidden": n_hidden})
        self.alpha_, self.bias_ = init_input_weights(n_inputs, n_hidden, p.seed, p.alpha_scale)
        return self

    def set_scaling(self, shift: np.ndarray, scale: np.ndarray) -> Self:
        """Standardize every input as :math:`(x - \\text{shift}) / \\text{scale}` per feature."""
        self.shift_ = np.asarray(shift, dtype=np.float64).reshape(-1)
        self.scale_ = np.asarray(scale, dtype=np.float64).reshape(-1)
        if self.shift_.shape != self.scale_.shape or not (
            np.all(np.isfinite(self.shift_))
            and np.all(np.isfinite(self.scale_))
            and np.all(self.scale_ > 0)
        ):
            raise ValueError("shift and scale must be finite, of one length, scale > 0")
        return self

    def transform(self, x: np.ndarray) -> np.ndarray:
        """The model's input: ``x`` flattened to rows, standardized if a scaling is set."""
        a = np.asarray(x, dtype=np.float64)
        z = a.reshape(len(a), math.prod(a.shape[1:]))  # also for zero rows
        if hasattr(self, "shift_"):
            z = (z - self.shift_) / self.scale_
        return z

    def hidden(self, x: np.ndarray) -> np.ndarray:
        """:math:`H = G(z\\alpha + b)` of the raw input ``x`` (``z`` = :meth:`transform`)."""
        return self._h(self.transform(x))

    def _h(self, z: np.ndarray) -> np.ndarray:
        return hidden(z, self.alpha_, self.bias_)

    def fit(self, x: np.ndarray) -> Self:
        z = self.transform(x)
        self.init_weights(z.shape[1])
        self.beta_, self.p_ = init_phase(self._h(z), z, self.params.ridge)
        return self.set_threshold(x)

    def partial_fit(self, x: np.ndarray) -> Self:
        """Learn one chunk [ONLAD eq. 5]; the first chunk ever runs [ONLAD eq. 4] instead."""
        if len(x) == 0:
            return self
        z = self.transform(x)
        if not hasattr(self, "alpha_"):
            self.init_weights(z.shape[1])
        if not hasattr(self, "beta_"):
            self.beta_, self.p_ = init_phase(self._h(z), z, self.params.ridge)
        else:
            self.beta_, self.p_ = sequential_phase(
                self.beta_, self.p_, self._h(z), z, self.params.forgetting
            )
        return self

    def detect_and_learn(self, x: np.ndarray, tau: float | None) -> np.ndarray:
        """ONLAD's runtime step on one chunk: flag samples scoring above ``tau``, learn the rest.

        Uses the model as it is before the chunk (prequential); the hidden layer and the
        residual of the detection step are reused by the update [ONLAD eq. 5]. ``tau = None``
        learns every sample. Returns the 0/1 flags. An empty chunk changes nothing.
        """
        scores = self.score_and_learn(x, tau)
        flagged = np.zeros(len(scores), dtype=bool) if tau is None else scores > tau
        return flagged.astype(np.int64)

    def score_and_learn(self, x: np.ndarray, tau: float | None) -> np.ndarray:
        """:meth:`detect_and_learn`, returning the chunk's scores instead of the flags.

        The scores are those of the model before the chunk (prequential): the sample is
        flagged when its score exceeds ``tau``, and learned otherwise (every sample when
        ``tau`` is ``None``).
        """
        z = self.transform(x)
        h = self._h(z)
        residual = z - h @ self.beta_
        scores = np.asarray(np.mean(residual**2, axis=1))
        keep = np.ones(len(z), dtype=bool) if tau is None else ~(scores > tau)
        self.beta_, self.p_ = sequential_phase_residual(
            self.beta_, self.p_, h[keep], residual[keep], self.params.forgetting
        )
        return scores

    def expected_input(self) -> tuple[str, tuple[int, ...]] | None:
        """Samples of the input width its weights were drawn for (any kind: they are
        flattened); not declared before :meth:`init_weights`."""
        if not hasattr(self, "alpha_"):
            return None
        return ("flat", (int(self.alpha_.shape[0]),))

    def score(self, x: np.ndarray) -> np.ndarray:
        z = self.transform(x)
        return reconstruction_error(z, self._h(z), self.beta_)

    def get_arrays(self) -> dict[str, np.ndarray]:
        out = {"alpha": self.alpha_, "bias": self.bias_, "beta": self.beta_, "p": self.p_}
        if hasattr(self, "shift_"):
            out.update(shift=self.shift_, scale=self.scale_)
        if hasattr(self, "threshold_"):
            out["threshold_"] = np.asarray(self.threshold_, dtype=np.float64)
        return out

    def set_arrays(self, arrays: dict[str, np.ndarray]) -> Self:
        self.alpha_ = np.asarray(arrays["alpha"], dtype=np.float64)
        self.bias_ = np.asarray(arrays["bias"], dtype=np.float64)
        self.beta_ = np.asarray(arrays["beta"], dtype=np.float64)
        self.p_ = np.asarray(arrays["p"], dtype=np.float64)
        if self.alpha_.ndim != 2 or self.params.n_hidden not in (None, self.alpha_.shape[1]):
            raise ValueError(
                f"alpha has shape {self.alpha_.shape}, n_hidden is {self.params.n_hidden}"
            )
        self.params = self.params.model_copy(update={"n_hidden": int(self.alpha_.shape[1])})
        if ("shift" in arrays) != ("scale" in arrays):
            raise ValueError("shift and scale come together")
        if "shift" in arrays:
            self.set_scaling(arrays["shift"], arrays["scale"])
            if self.shift_.shape != (self.alpha_.shape[0],):
                raise ValueError(
                    f"shift has {self.shift_.size} features, alpha has {len(self.alpha_)}"
                )
        if "threshold_" in arrays:
            self.threshold_ = float(arrays["threshold_"])
        return self
