"""The ``ocsvm`` detector: scikit-learn's one-class SVM on flattened inputs (Schölkopf et al.
2001), the classical baseline of the one-class papers (FADngs Table I, ProtoFL Table 4).

RBF kernel :math:`k(x, y) = \\exp(-\\gamma\\lVert x - y\\rVert^2)` with scikit-learn's
``gamma = "scale"`` rule, :math:`\\gamma = 1 / (D \\operatorname{Var}(X))` over the training
inputs; :math:`\\nu` = the contamination (the share of training samples the SVM may leave
outside, which is what the threshold flags too), at least 0.001. Score: minus the decision
function, :math:`s(x) = -(\\sum_i \\alpha_i k(x, s_i) - \\rho)` (scikit-learn keeps
:math:`-\\rho` as ``intercept_``), higher = more anomalous.

Nothing trains in epochs: the first :meth:`OCSVMDetector.train_epochs` call fits, later calls
do nothing (like the ``pretrained`` detector). Saved state: named arrays only (support
vectors, dual coefficients, :math:`\\rho`, :math:`\\gamma`, ``threshold_``); no pickle.

With the generic methods it is ``detector = "ocsvm"`` of ``local`` (each client fits its own)
and ``centralized`` (the server fits the pooled uploads).
"""

from __future__ import annotations

from typing import Self

import numpy as np
from pydantic import ConfigDict, Field

from fedad.components.detectors.fit_once import FitOnce
from fedad.core.detector import (
    DEFAULT_CONTAMINATION,
    BaseDetector,
    DetectorParams,
    quantile_threshold,
    register_detector,
)

OCSVM = "ocsvm"
MIN_NU = 1e-3
MAX_SUPPORT = 1 << 26
"""Most support-vector entries (rows x features) a saved detector may hold (512 MB)."""


class OCSVMDetectorParams(DetectorParams):
    """The ``__init__`` arguments of :class:`OCSVMDetector`, as a checkpoint may give them."""

    model_config = ConfigDict(allow_inf_nan=False)

    contamination: float = Field(default=DEFAULT_CONTAMINATION, ge=0.0, lt=1.0)


@register_detector(OCSVM)
class OCSVMDetector(FitOnce, BaseDetector):
    """One-class SVM with an RBF kernel on flattened inputs; ``nu`` from the contamination."""

    ParamsModel = OCSVMDetectorParams
    params: OCSVMDetectorParams
    fitted_attr = "sv_"
    sv_: np.ndarray

    @property
    def nu(self) -> float:
        """:math:`\\nu`: the contamination, at least 0.001 (scikit-learn needs it positive)."""
        return float(min(max(self.contamination, MIN_NU), 1.0))

    # -- fitting ----------------------------------------------------------------------------
    def fit(self, x: np.ndarray) -> Self:
        self.fit_data(x)
        self.threshold_ = quantile_threshold(self.score(x), self.contamination)
        return self

    def fit_data(self, x: np.ndarray) -> None:
        """Solve the SVM on ``x`` (no threshold)."""
        z = _flat(x)
        if len(z) < 2:
            raise ValueError("the one-class SVM needs at least 2 training samples")
        var = float(z.var())
        gamma = 1.0 / (z.shape[1] * var) if var > 0 else 1.0
        self._set(*fit_rbf_ocsvm(z, self.nu, gamma), gamma)

    def _set(self, sv: np.ndarray, coef: np.ndarray, intercept: float, gamma: float) -> None:
        if sv.ndim != 2 or len(sv) < 1 or coef.shape != (len(sv),):
            raise ValueError(f"support vectors {sv.shape} and coefficients {coef.shape} disagree")
        if sv.size > MAX_SUPPORT:
            raise ValueError(f"{sv.size} support-vector entries is more than a detector holds")
        if not (np.all(np.isfinite(sv)) and np.all(np.isfinite(coef))):
            raise ValueError("support vectors or coefficients hold NaN or infinite values")
        if not (np.isfinite(intercept) and np.isfinite(gamma) and gamma > 0):
            raise ValueError("intercept must be finite and gamma positive")
        self.sv_, self.coef_, self.intercept_, self.gamma_ = sv, coef, intercept, gamma

    # -- the baselines' federated interface (FitOnce; fedad.methods.baselines.federated) ----
    def model_arrays(self) -> dict[str, np.ndarray]:
        """The fitted SVM as named arrays (what the baselines keep or send as the model)."""
        if not self.fitted:
            return {}
        return {
            "sv": self.sv_.copy(),
            "coef": self.coef_.copy(),
            "intercept": np.asarray(self.intercept_, dtype=np.float64),
            "gamma": np.asarray(self.gamma_, dtype=np.float64),
        }

    # -- scoring ----------------------------------------------------------------------------
    def expected_input(self) -> tuple[str, tuple[int, ...]] | None:
        """Once fitted: samples of any kind with as many values as the support vectors
        (they are flattened)."""
        return ("flat", (int(self.sv_.shape[1]),)) if self.fitted else None

    def score(self, x: np.ndarray) -> np.ndarray:
        if not self.fitted:
            raise RuntimeError("OCSVMDetector is not fitted: call fit first")
        z = _flat(x)
        if z.shape[1] != self.sv_.shape[1]:
            raise ValueError(f"inputs have {z.shape[1]} features, the SVM {self.sv_.shape[1]}")
        return rbf_ocsvm_score(z, self.sv_, self.coef_, self.intercept_, self.gamma_)

    # -- persistence ------------------------------------------------------------------------
    def set_arrays(self, arrays: dict[str, np.ndarray]) -> Self:
        self.check_names(arrays, {"sv", "coef", "intercept", "gamma"})
        self._set(
            np.asarray(arrays["sv"], dtype=np.float64),
            np.asarray(arrays["coef"], dtype=np.float64).reshape(-1),
            float(np.asarray(arrays["intercept"]).reshape(-1)[0]),
            float(np.asarray(arrays["gamma"]).reshape(-1)[0]),
        )
        if "threshold_" in arrays:
            self.threshold_ = float(np.asarray(arrays["threshold_"]))
        return self


def fit_rbf_ocsvm(z: np.ndarray, nu: float, gamma: float) -> tuple[np.ndarray, np.ndarray, float]:
    """scikit-learn's RBF one-class SVM on the rows of ``z``, as named arrays: the support
    vectors ``(S, D)``, their dual coefficients :math:`\\alpha` ``(S,)`` and the intercept
    :math:`-\\rho`. Shared with ProtoFL's ``ocsvm`` head."""
    from sklearn.svm import OneClassSVM

    svm = OneClassSVM(kernel="rbf", gamma=gamma, nu=nu).fit(z)
    return (
        np.asarray(svm.support_vectors_, dtype=np.float64),
        np.asarray(svm.dual_coef_, dtype=np.float64).reshape(-1),
        float(np.asarray(svm.intercept_).reshape(-1)[0]),
    )


def rbf_ocsvm_score(
    z: np.ndarray, sv: np.ndarray, coef: np.ndarray, intercept: float, gamma: float
) -> np.ndarray:
    """Minus the SVM's decision function, :math:`-(\\sum_i \\alpha_i
    e^{-\\gamma\\lVert z - s_i\\rVert^2} - \\rho)`, per row of ``z`` ``(N, D)``; in blocks
    of 1,024 rows so memory stays at 1,024 x ``S`` kernel values."""
    out = np.empty(len(z), dtype=np.float64)
    sv_sq = (sv**2).sum(1)
    for i in range(0, len(z), 1024):
        q = z[i : i + 1024]
        sq = (q**2).sum(1)[:, None] + sv_sq[None, :] - 2.0 * q @ sv.T
        k = np.exp(-gamma * np.maximum(sq, 0.0))
        out[i : i + 1024] = -(k @ coef + intercept)
    return out


def _flat(x: np.ndarray) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    return a.reshape(len(a), -1)
