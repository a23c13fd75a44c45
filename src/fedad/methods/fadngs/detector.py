"""FADngs's detector: the encoder and a set of Gaussians, score [FADngs eq. 6].

:math:`s(x) = \\min_k (z(x) - \\hat\\mu_k)^\\top \\hat\\Sigma_k^{-1} (z(x) - \\hat\\mu_k)` with
:math:`z = h(f(x))` (unit-normalised when the densities were released under the Gaussian
mechanism, ``unit = True``, see :mod:`.privacy`). In the federation the Gaussians are the
global density set, the union of every client's shared ones; stand-alone (:meth:`fit`) they
are the detector's own.

Arrays: the encoder's state under its own names (``backbone.*``, ``head.*``), ``means``
:math:`(M, D)`, ``covs`` :math:`(M, D, D)` and ``threshold_``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

import numpy as np
import torch
from pydantic import ConfigDict, Field, model_validator

from fedad.components.nn.resnet import Encoder
from fedad.core.detector import (
    DEFAULT_CONTAMINATION,
    BaseDetector,
    DetectorParams,
    register_detector,
)
from fedad.core.rng import rng as seeded_rng
from fedad.core.rng import torch_seeded
from fedad.methods.fadngs.density import (
    fit_gaussians,
    min_mahalanobis,
    stable_cholesky,
    weak_kmeans,
)
from fedad.methods.fadngs.privacy import unit_rows
from fedad.methods.fadngs.train import embed, local_update

MEANS = "means"
COVS = "covs"
THRESHOLD = "threshold_"
MAX_SIDE = 1024
MAX_GAUSSIANS = 4096
MAX_COV_ENTRIES = 1 << 26
"""Most covariance entries a detector holds (512 MiB of float64): a checkpoint is untrusted."""


class FADngsDetectorParams(DetectorParams):
    """The ``__init__`` arguments of :class:`FADngsDetector`, as a checkpoint may give them."""

    model_config = ConfigDict(allow_inf_nan=False)

    input_shape: list[Annotated[int, Field(ge=1, le=MAX_SIDE)]] = Field(
        default=[1, 28, 28], min_length=3, max_length=3
    )
    width: int = Field(default=16, ge=1, le=256)
    depth: int = Field(default=1, ge=1, le=8)
    stem_stride: Literal["auto", 1, 2] = "auto"
    head_norm: Literal["batch", "none"] = "batch"
    proj_dim: int = Field(default=128, ge=2, le=2048)
    unit: bool = False
    k_c: int = Field(default=1, ge=1, le=MAX_GAUSSIANS)
    kmeans_iters: int = Field(default=2, ge=1, le=10_000)
    rho: float = Field(default=0.1, ge=0.0, le=1.0)
    quantile: float = Field(default=0.95, gt=0.0, lt=1.0)
    epochs: int = Field(default=10, ge=0, le=100_000)
    warmup_epochs: int = Field(default=2, ge=0, le=100_000)
    lr: float = Field(default=0.01, gt=0.0, le=10.0)
    batch_size: int = Field(default=32, ge=2, le=1 << 16)
    n_plus: int = Field(default=2, ge=1, le=64)
    crop_min: float = Field(default=1.0, gt=0.0, le=1.0)
    jitter: float = Field(
        default=0.0, ge=0.0, le=1.0, description="brightness/contrast jitter of T+ (0: none)"
    )
    temperature: float = Field(default=0.5, gt=0.0, le=100.0)
    loss: Literal["crad", "simclr", "csi"] = "crad"
    con_form: Literal["eq7", "mean-log"] = "mean-log"
    contamination: float = Field(default=DEFAULT_CONTAMINATION, ge=0.0, lt=1.0)
    seed: int = Field(default=0, ge=-(1 << 63), lt=1 << 63)

    @model_validator(mode="before")
    @classmethod
    def _before_head_norm(cls, data: Any) -> Any:
        """A checkpoint written before ``head_norm`` existed has a head without a norm, and
        one written before ``stem_stride`` a stem at stride 1: read their absence so, so that
        such runs still load and score as they did."""
        if isinstance(data, dict) and "head_norm" not in data and "input_shape" in data:
            data = {**data, "head_norm": "none"}
        if isinstance(data, dict) and "stem_stride" not in data and "input_shape" in data:
            # written before ``stem_stride`` existed: its encoder ran the stem at stride 1;
            # the weights alone cannot tell
            data = {**data, "stem_stride": 1}
        return data

    @model_validator(mode="after")
    def _square(self) -> FADngsDetectorParams:
        _, h, w = self.input_shape
        if h != w or h < 8:
            raise ValueError(f"FADngs needs square images of side >= 8, got {self.input_shape}")
        return self


@register_detector("fadngs")
class FADngsDetector(BaseDetector):
    """Minimum Mahalanobis distance of :math:`z(x)` to a set of Gaussians [FADngs eq. 6]."""

    ParamsModel = FADngsDetectorParams
    params: FADngsDetectorParams

    def __init__(self, *, device: str = "cpu", **params: Any) -> None:
        """``params``: fields of :class:`FADngsDetectorParams` (``input_shape`` is kept as a
        list of ints); ``device`` is where it trains and scores (not saved)."""
        super().__init__(**params)
        shape = [int(s) for s in self.params.input_shape]
        self.params = self.params.model_copy(update={"input_shape": shape})
        self.device = device

    # -- encoder ----------------------------------------------------------------------------
    @property
    def stem_stride(self) -> int:
        """The encoder stem's stride: ``stem_stride``, or with ``"auto"`` 2 for images of
        side 16 or more (28 px Fashion-MNIST: stage maps 14, 7, 4) and 1 below (8 px digits
        keep 8, 4, 2: at stride 2 their last stage would be one cell, which group norm
        normalises over two values per group)."""
        s = self.params.stem_stride
        if s == "auto":
            return 2 if int(self.params.input_shape[1]) >= 16 else 1
        return int(s)

    def build(self) -> Self:
        """``encoder_`` with seeded initial weights (on the CPU: equal on every device)."""
        with torch_seeded(self.params.seed):
            enc = Encoder(
                int(self.params.input_shape[0]),
                self.params.width,
                self.params.proj_dim,
                (self.params.depth,) * 3,
                head_norm=self.params.head_norm,
                stem_stride=self.stem_stride,
            )
        self.encoder_ = enc.to(self.device).eval()
        return self

    def _ensure_built(self) -> None:
        if not hasattr(self, "encoder_"):
            self.build()

    def model_arrays(self) -> dict[str, np.ndarray]:
        """The encoder's state: what the federation exchanges."""
        self._ensure_built()
        return {k: v.detach().cpu().numpy().copy() for k, v in self.encoder_.state_dict().items()}

    def set_model(self, arrays: dict[str, np.ndarray]) -> Self:
        """Load the encoder's state (strict: every key, no other)."""
        self._ensure_built()
        state = {k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in arrays.items()}
        self.encoder_.load_state_dict(state, strict=True)
        return self

    # -- densities --------------------------------------------------------------------------
    def represent(self, x: np.ndarray) -> np.ndarray:
        """:math:`z(x)`, unit-normalised when ``unit``.

        Shapes:
            - x: :math:`(N, C, H, W)`
            - output: :math:`(N, D)` float64
        """
        self._ensure_built()
        z = embed(self.encoder_, np.asarray(x, dtype=np.float32))
        return unit_rows(z) if self.params.unit else z

    def set_density(self, means: np.ndarray, covs: np.ndarray) -> Self:
        """The Gaussians of the score; checked for shape and finiteness."""
        mu = np.asarray(means, dtype=np.float64)
        sig = np.asarray(covs, dtype=np.float64)
        d = self.params.proj_dim
        if mu.ndim == 2 and mu.shape[0] * d * d > MAX_COV_ENTRIES:
            raise ValueError(
                f"{mu.shape[0]} covariances of {d}x{d} exceed {MAX_COV_ENTRIES} entries"
            )
        if mu.ndim != 2 or mu.shape[1] != d or not 1 <= mu.shape[0] <= MAX_GAUSSIANS:
            raise ValueError(
                f"means must be (M, {d}) with 1 <= M <= {MAX_GAUSSIANS}, got {mu.shape}"
            )
        if sig.shape != (mu.shape[0], d, d):
            raise ValueError(f"covs must be ({mu.shape[0]}, {d}, {d}), got {sig.shape}")
        if not (np.all(np.isfinite(mu)) and np.all(np.isfinite(sig))):
            raise ValueError("means and covs must be finite")
        if not np.allclose(sig, np.swapaxes(sig, 1, 2), rtol=1e-5, atol=1e-8):
            raise ValueError("covs must be symmetric")
        for k in range(len(sig)):
            try:
                stable_cholesky(sig[k])
            except np.linalg.LinAlgError:
                raise ValueError(f"covariance {k} is not positive definite") from None
        self.means_, self.covs_ = mu, sig
        return self

    def own_density(self, x: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """GetDensityFunctions [FADngs Algorithm 1] on ``x`` with the current encoder: weak
        k-means into ``min(k_c, N)`` clusters, one shrunk Gaussian each [FADngs eq. 1-5]."""
        return self.density_of(self.represent(x), rng)

    def density_of(self, z: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`own_density` from representations ``z`` :math:`(N, D)` already computed
        (:meth:`represent`)."""
        labels, _ = weak_kmeans(z, min(self.params.k_c, len(z)), self.params.kmeans_iters, rng)
        return fit_gaussians(z, labels, self.params.rho)

    # -- contract ---------------------------------------------------------------------------
    def expected_input(self) -> tuple[str, tuple[int, ...]] | None:
        """Images of exactly ``input_shape`` (the encoder and the rotations need them)."""
        return ("image", tuple(int(s) for s in self.params.input_shape))

    def score(self, x: np.ndarray) -> np.ndarray:
        if not hasattr(self, "means_"):
            raise RuntimeError("FADngsDetector has no densities: call fit or set_density first")
        return min_mahalanobis(self.represent(x), self.means_, self.covs_)

    def fit(self, x: np.ndarray) -> Self:
        """Stand-alone (one party): ``warmup_epochs`` of SimCLR, then ``epochs`` of ``loss``
        against its own densities (re-estimated every epoch), the final densities and the
        threshold from the training scores."""
        self.build()
        xs = np.asarray(x, dtype=np.float32)
        rng = seeded_rng(self.params.seed, 0xFAD)
        p = self.params
        kw: dict[str, Any] = dict(
            batch_size=p.batch_size,
            lr=p.lr,
            rng=rng,
            n_plus=p.n_plus,
            temperature=p.temperature,
            form=p.con_form,
            crop_min=p.crop_min,
            jitter=p.jitter,
        )
        if self.params.warmup_epochs:
            local_update(self.encoder_, xs, epochs=self.params.warmup_epochs, loss="simclr", **kw)
        for _ in range(self.params.epochs):
            means, covs = self.own_density(xs, rng)
            local_update(
                self.encoder_,
                xs,
                epochs=1,
                loss=self.params.loss,
                means=means,
                covs=covs,
                quantile=self.params.quantile,
                **kw,
            )
        self.set_density(*self.own_density(xs, rng))
        return self.set_threshold(xs)

    # -- persistence ------------------------------------------------------------------------
    def get_arrays(self) -> dict[str, np.ndarray]:
        out = self.model_arrays()
        if hasattr(self, "means_"):
            out[MEANS] = self.means_.copy()
            out[COVS] = self.covs_.copy()
        if hasattr(self, "threshold_"):
            out[THRESHOLD] = np.asarray(self.threshold_, dtype=np.float64)
        return out

    def set_arrays(self, arrays: dict[str, np.ndarray]) -> Self:
        model = {k: v for k, v in arrays.items() if k not in (MEANS, COVS, THRESHOLD)}
        self.set_model(model)
        if MEANS in arrays or COVS in arrays:
            if MEANS not in arrays or COVS not in arrays:
                raise KeyError("FADngs detector arrays need both 'means' and 'covs'")
            self.set_density(arrays[MEANS], arrays[COVS])
        if THRESHOLD in arrays:
            t = np.asarray(arrays[THRESHOLD], dtype=np.float64)
            if t.shape != () or not np.isfinite(t):
                raise ValueError("threshold_ must be one finite number")
            self.threshold_ = float(t)
        return self
