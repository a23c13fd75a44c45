"""The ``pretrained`` detector: frozen pretrained features, no training.

Images are embedded by a frozen resource of :mod:`fedad.resources` (default EfficientNet-Lite0
with ImageNet weights): resized to ``image_size`` (default 96), grey replicated to RGB,
normalised as the resource expects, global-average-pooled. The detector stores the training
features and scores a sample by

* ``score = "knn"`` (default): the mean Euclidean distance to its ``k`` nearest training
  features (default ``k = 2``). A query that coincides with a stored feature (distance at
  most 1e-4 of the features' RMS norm: in practice a training image itself) is scored
  without that entry, i.e. leave-one-out, so that training scores, from which the
  threshold is set, are not biased towards zero.
* ``score = "gaussian"``: the squared Mahalanobis distance to the mean of the training
  features under a Ledoit-Wolf shrinkage covariance (:class:`ShrinkageGaussian`).

It is the strong, no-training reference an image method has to beat. Checkpoints hold the
training features (``features_``) and ``threshold_``, never the resource's weights: the
resource is referred to by name and loaded from the installed package.

With the generic methods it is ``detector = "pretrained"`` of ``local`` (each client keeps
its own features) and ``centralized`` (the server embeds the pooled uploads).
"""

from __future__ import annotations

from typing import Any, Literal, Self

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from fedad.components.detectors.fit_once import FitOnce
from fedad.core.detector import (
    DEFAULT_CONTAMINATION,
    BaseDetector,
    DetectorParams,
    quantile_threshold,
    register_detector,
)
from fedad.core.errors import ConfigError
from fedad.core.types import DataKind
from fedad.resources import Backbone, check_available, get_resource, resource_info, resource_names

__all__ = [
    "DEFAULT_IMAGE_SIZE",
    "DEFAULT_K",
    "DEFAULT_RESOURCE",
    "PRETRAINED",
    "PretrainedDetector",
    "PretrainedOptions",
    "check_pretrained",
    "make_pretrained",
]

PRETRAINED = "pretrained"
DEFAULT_RESOURCE = "efficientnet-lite0"
DEFAULT_K = 2
DEFAULT_IMAGE_SIZE = 96
MIN_IMAGE_SIZE, MAX_IMAGE_SIZE = 32, 1024
MAX_K = 1000
SELF_MATCH_TOL = 1e-4
"""Distance (relative to the RMS norm of the training features) under which a query is
taken to be a stored training sample and left out of its own neighbours."""

ScoreKind = Literal["knn", "gaussian"]


def _known_resource(name: str) -> str:
    if name not in resource_names():
        raise ValueError(f"unknown resource '{name}' (known: {', '.join(resource_names())})")
    return name


class PretrainedDetectorParams(DetectorParams):
    """The ``__init__`` arguments of :class:`PretrainedDetector`, as a checkpoint may give them."""

    model_config = ConfigDict(allow_inf_nan=False)

    resource: str = DEFAULT_RESOURCE
    score: ScoreKind = "knn"
    k: int = Field(default=DEFAULT_K, ge=1, le=MAX_K)
    image_size: int = Field(default=DEFAULT_IMAGE_SIZE, ge=MIN_IMAGE_SIZE, le=MAX_IMAGE_SIZE)
    batch_size: int = Field(default=64, ge=1, le=1 << 16)
    contamination: float = Field(default=DEFAULT_CONTAMINATION, ge=0.0, lt=1.0)

    _resource = field_validator("resource")(_known_resource)


class ShrinkageGaussian:
    """A Gaussian with the Ledoit-Wolf shrinkage covariance; scores are Mahalanobis distances.

    The same estimator as :class:`sklearn.covariance.LedoitWolf` (shrinkage from
    :func:`sklearn.covariance.ledoit_wolf_shrinkage`, covariance
    :math:`(1 - a) S + a \\mu I` with :math:`\\mu = \\operatorname{tr} S / p`) and the same
    squared distances as its ``mahalanobis``, but the precision comes from the eigenvectors
    of the smaller of :math:`X^T X` and :math:`X X^T`: with fewer images than features (600
    x 1280, say) that is an ``n x n`` problem instead of a ``p x p`` pseudo-inverse.
    """

    RTOL = 1e-12

    def __init__(self, x: np.ndarray) -> None:
        from scipy.linalg import eigh
        from sklearn.covariance import ledoit_wolf_shrinkage

        n, p = x.shape
        self.mean = x.mean(axis=0)
        xc = x - self.mean
        shrink = float(ledoit_wolf_shrinkage(xc, assume_centered=True)) if p > 1 else 0.0
        self.c = shrink * float(np.einsum("ij,ij->", xc, xc)) / (n * p)  # a * mu
        if n >= p:
            lam, vec = eigh(xc.T @ xc / n)
        else:
            lam, w = eigh(xc @ xc.T / n)
            keep = lam > self.RTOL * max(float(lam.max()), 0.0)
            lam, w = lam[keep], w[:, keep]
            vec = xc.T @ (w / np.sqrt(n * lam))  # unit eigenvectors of X^T X / n
        den = (1.0 - shrink) * np.clip(lam, 0.0, None) + self.c
        cutoff = self.RTOL * max(float(den.max(initial=0.0)), self.c)
        keep = den > cutoff
        self.vec, self.inv = vec[:, keep], 1.0 / den[keep]
        # outside the span of the data the covariance is c * I (when c > 0)
        self.rest = n < p and self.c > cutoff

    def mahalanobis(self, q: np.ndarray) -> np.ndarray:
        """Squared Mahalanobis distances of the rows of ``q``."""
        z = q - self.mean
        proj = z @ self.vec
        d = (proj * proj) @ self.inv
        if self.rest:
            d = d + (np.einsum("ij,ij->i", z, z) - np.einsum("ij,ij->i", proj, proj)) / self.c
        return np.asarray(np.maximum(d, 0.0), dtype=np.float64)


@register_detector(PRETRAINED)
class PretrainedDetector(FitOnce, BaseDetector):
    """k-NN or shrinkage-Gaussian scores on frozen pretrained image features.

    ``device`` is where the resource runs (``"cpu"``, ``"cuda"``, ...); it is not saved:
    a loaded detector runs on the CPU unless told otherwise.
    """

    ParamsModel = PretrainedDetectorParams
    params: PretrainedDetectorParams
    fitted_attr = "features_"
    features_: np.ndarray

    def __init__(self, *, device: str = "cpu", **params: Any) -> None:
        """``params``: fields of :class:`PretrainedDetectorParams`; ``device`` is where the
        resource runs (not saved)."""
        super().__init__(**params)
        self.device = device

    # -- features ---------------------------------------------------------------------------
    def backbone(self) -> Backbone:
        """The frozen resource (loaded once per process and device)."""
        return get_resource(self.params.resource, self.device)

    def embed(self, x: np.ndarray) -> np.ndarray:
        """Pooled features ``(N, D)`` of images ``(N, 1 or 3, H, W)`` in [0, 1]."""
        x = np.asarray(x)
        if x.ndim != 4 or x.shape[1] not in (1, 3):
            raise ConfigError(
                f"detector 'pretrained' takes grey or RGB images (N, C, H, W), got shape {x.shape}"
            )
        return self.backbone().embed(
            x, size=self.params.image_size, batch_size=self.params.batch_size
        )

    # -- fitting ----------------------------------------------------------------------------
    def fit(self, x: np.ndarray) -> Self:
        self.set_features(self.embed(x))
        # training scores are leave-one-out for knn (see score_features)
        self.threshold_ = quantile_threshold(
            self.score_features(self.features_), self.contamination
        )
        return self

    def set_features(self, features: np.ndarray) -> Self:
        """Use ``features`` (``(N, D)``) as the training features; rebuild the scorer."""
        f = np.ascontiguousarray(features, dtype=np.float32)
        dim = resource_info(self.params.resource).feature_dim
        if f.ndim != 2 or f.shape[1] != dim or f.shape[0] < 1:
            raise ValueError(f"features_ must have shape (N >= 1, {dim}), got {f.shape}")
        if not np.all(np.isfinite(f)):
            raise ValueError("features_ holds NaN or infinite values")
        if self.params.score == "gaussian" and f.shape[0] < 2:
            raise ValueError("the gaussian score needs at least 2 training images")
        self.features_ = f
        self._build_scorer()
        return self

    def _build_scorer(self) -> None:
        f = self.features_.astype(np.float64)
        if self.params.score == "gaussian":
            self._gauss = ShrinkageGaussian(f)
        else:
            from sklearn.neighbors import NearestNeighbors

            self._nn = NearestNeighbors(algorithm="brute").fit(f)
            rms = float(np.sqrt(np.mean(np.sum(f * f, axis=1))))
            self._tol = SELF_MATCH_TOL * max(rms, 1e-12)

    # -- the baselines' federated interface (FitOnce; fedad.methods.baselines.federated) ----
    def fit_data(self, x: np.ndarray) -> None:
        """Embed ``x`` as the training features (no threshold)."""
        self.set_features(self.embed(x))

    def model_arrays(self) -> dict[str, np.ndarray]:
        """The training features (what the baselines keep or send as the model)."""
        return {"features_": self.features_.copy()} if self.fitted else {}

    # -- scoring ----------------------------------------------------------------------------
    def score(self, x: np.ndarray) -> np.ndarray:
        self._check_fitted()
        return self.score_features(self.embed(x))

    def _check_fitted(self) -> None:
        if not self.fitted:
            raise RuntimeError("PretrainedDetector has no features_: call fit first")

    def score_features(self, f: np.ndarray) -> np.ndarray:
        """Scores of precomputed features ``(N, D)`` (what :meth:`score` does after embedding)."""
        self._check_fitted()
        q = np.asarray(f, dtype=np.float64)
        if len(q) == 0:
            return np.zeros(0, dtype=np.float64)
        if self.params.score == "gaussian":
            return np.asarray(self._gauss.mahalanobis(q), dtype=np.float64)
        n = len(self.features_)
        dist, _ = self._nn.kneighbors(q, n_neighbors=min(self.params.k + 1, n))
        plain = dist[:, : min(self.params.k, n)].mean(axis=1)
        if n == 1:
            return np.asarray(plain, dtype=np.float64)
        loo = dist[:, 1 : 1 + min(self.params.k, n - 1)].mean(axis=1)
        return np.asarray(np.where(dist[:, 0] <= self._tol, loo, plain), dtype=np.float64)

    # -- persistence ------------------------------------------------------------------------
    def set_arrays(self, arrays: dict[str, np.ndarray]) -> Self:
        self.check_names(arrays, {"features_"})
        self.set_features(np.asarray(arrays["features_"]))
        if "threshold_" in arrays:
            self.threshold_ = float(np.asarray(arrays["threshold_"]))
        return self


# -- the generic methods' side ------------------------------------------------------------------


class PretrainedOptions(BaseModel):
    """``[methods.params]`` of ``local``/``centralized`` that apply to ``detector = "pretrained"``.

    All default to ``None`` (= the detector's default), so they do not appear in the resolved
    config of runs with another detector; setting one with another detector is an error.
    """

    resource: str | None = Field(
        default=None, description=f"pretrained resource (default {DEFAULT_RESOURCE})"
    )
    score: ScoreKind | None = Field(default=None, description='"knn" (default) or "gaussian"')
    k: int | None = Field(
        default=None, ge=1, le=MAX_K, description=f"neighbours for knn (default {DEFAULT_K})"
    )
    image_size: int | None = Field(
        default=None,
        ge=MIN_IMAGE_SIZE,
        le=MAX_IMAGE_SIZE,
        description=f"side images are resized to (default {DEFAULT_IMAGE_SIZE})",
    )

    @field_validator("resource")
    @classmethod
    def _resource(cls, v: str | None) -> str | None:
        return None if v is None else _known_resource(v)


OPTION_NAMES = tuple(PretrainedOptions.model_fields)


def check_pretrained(
    method: str, detector: str | None, kind: DataKind, params: Any, also: tuple[str, ...] = ()
) -> None:
    """One-line :class:`ConfigError` when a method's detector choice and params do not fit
    (``also``: option names that the chosen detector takes too, e.g. ``patchcore``'s
    ``image_size``)."""
    if detector != PRETRAINED:
        given = [f for f in OPTION_NAMES if f not in also and getattr(params, f, None) is not None]
        if given:
            raise ConfigError(
                f"parameter '{given[0]}' of method '{method}' applies to detector "
                f"'{PRETRAINED}' only",
                f'remove it or set detector = "{PRETRAINED}"',
            )
        return
    if kind != "image":
        raise ConfigError(
            f"detector '{PRETRAINED}' of method '{method}' needs image data, not {kind} data",
            "use detector autoencoder or deepsvdd",
        )
    check_available(getattr(params, "resource", None) or DEFAULT_RESOURCE)


def make_pretrained(params: Any, contamination: float, device: str = "cpu") -> PretrainedDetector:
    """The detector a method's params ask for (unset options take the detector's defaults)."""
    return PretrainedDetector(
        resource=getattr(params, "resource", None) or DEFAULT_RESOURCE,
        score=getattr(params, "score", None) or "knn",
        k=getattr(params, "k", None) or DEFAULT_K,
        image_size=getattr(params, "image_size", None) or DEFAULT_IMAGE_SIZE,
        batch_size=int(getattr(params, "batch_size", 64)),
        contamination=contamination,
        device=device,
    )
