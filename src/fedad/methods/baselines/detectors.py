"""Baseline detectors (autoencoder, Deep SVDD) under the detector contract.

Each wraps a network from :mod:`.model` and the loop from :mod:`.train`. Federated
algorithms drive the same object through :meth:`TorchDetector.build`,
:meth:`TorchDetector.train_epochs`, :meth:`get_arrays` and :meth:`set_arrays`; ``fit`` is the
stand-alone (centralised) use.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import Annotated, Any, ClassVar, Literal, Self

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import nn

from fedad.detector import DEFAULT_CONTAMINATION, BaseDetector, register_detector
from fedad.methods.baselines.model import AutoEncoder, DeepSVDDNet, fix_center, latent_size
from fedad.methods.baselines.train import batched, train_epochs
from fedad.seeding import torch_seeded

MAX_FEATURES = 1 << 24
"""Largest input (product of ``input_shape``) a saved torch baseline may declare."""


class TorchDetectorParams(BaseModel):
    """The ``__init__`` arguments of a torch baseline, as a checkpoint may give them."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    kind: Literal["vector", "image"] = "vector"
    input_shape: list[Annotated[int, Field(ge=1, le=MAX_FEATURES)]] = Field(
        default=[1], min_length=1, max_length=4
    )
    latent_dim: int | None = Field(default=None, ge=1, le=1 << 16)
    lr: float = Field(default=1e-3, gt=0.0)
    epochs: int = Field(default=10, ge=0, le=1_000_000)
    batch_size: int = Field(default=64, ge=1, le=1 << 24)
    weight_decay: float | None = Field(default=None, ge=0.0)
    contamination: float = Field(default=DEFAULT_CONTAMINATION, ge=0.0, lt=1.0)
    seed: int = Field(default=0, ge=-(1 << 63), lt=1 << 63)

    @model_validator(mode="after")
    def _size(self) -> TorchDetectorParams:
        if math.prod(self.input_shape) > MAX_FEATURES:
            raise ValueError(f"input_shape {self.input_shape} exceeds {MAX_FEATURES} features")
        if self.kind == "image" and len(self.input_shape) != 3:
            raise ValueError("an image detector's input_shape is (channels, height, width)")
        return self


class TorchDetector(BaseDetector):
    """Common machinery of the torch baseline detectors."""

    name: ClassVar[str]
    ParamsModel = TorchDetectorParams
    default_weight_decay: ClassVar[float] = 0.0

    def __init__(
        self,
        kind: str = "vector",
        input_shape: tuple[int, ...] | list[int] = (1,),
        latent_dim: int | None = None,
        lr: float = 1e-3,
        epochs: int = 10,
        batch_size: int = 64,
        weight_decay: float | None = None,
        contamination: float = DEFAULT_CONTAMINATION,
        seed: int = 0,
        device: str = "cpu",
    ) -> None:
        super().__init__(contamination=contamination)
        self.device = device
        """Torch device of the network: a property of where it runs, not of the model, so
        not in :meth:`get_params` (a checkpoint loads on any machine, on the CPU)."""
        self.kind = kind
        self.input_shape = input_shape
        self.latent_dim = latent_dim
        self.lr = lr
        self.epochs = epochs
        self.batch_size = batch_size
        self.weight_decay = weight_decay
        self.seed = seed

    def get_params(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "input_shape": [int(s) for s in self.input_shape],
            "latent_dim": self.latent_dim,
            "lr": self.lr,
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "weight_decay": self.weight_decay,
            "contamination": self.contamination,
            "seed": self.seed,
        }

    # -- model ------------------------------------------------------------------------------
    @abstractmethod
    def _make_model(self, latent: int) -> nn.Module: ...

    @abstractmethod
    def loss(self, batch: torch.Tensor) -> torch.Tensor:
        """Mean training objective over a batch."""

    def build(self) -> Self:
        """Create ``model_`` with seeded initial weights (identical for equal seeds)."""
        latent = latent_size(self.kind, tuple(self.input_shape), self.latent_dim)
        with torch_seeded(self.seed):  # on the CPU: equal initial weights on every device
            self.model_ = self._make_model(latent)
        self.model_.to(self.device).eval()
        return self

    def _ensure_built(self) -> None:
        if not hasattr(self, "model_"):
            self.build()

    def train_epochs(
        self, x: np.ndarray, epochs: int, rng: np.random.Generator, prox_mu: float = 0.0
    ) -> float:
        """Train in place for ``epochs``; return the last epoch's mean loss."""
        self._ensure_built()
        return train_epochs(
            self.model_,
            self.loss,
            x,
            epochs=epochs,
            batch_size=self.batch_size,
            lr=self.lr,
            rng=rng,
            weight_decay=(
                self.default_weight_decay if self.weight_decay is None else self.weight_decay
            ),
            prox_mu=prox_mu,
        )

    def prepare(self, x: np.ndarray) -> Self:
        """Anything to do on the data before training (Deep SVDD sets its centre)."""
        return self

    def fit(self, x: np.ndarray) -> Self:
        self.build()
        self.prepare(x)
        self.train_epochs(x, self.epochs, np.random.default_rng(self.seed))
        return self.set_threshold(x)

    # -- persistence ------------------------------------------------------------------------
    def get_arrays(self) -> dict[str, np.ndarray]:
        self._ensure_built()
        out = {k: v.detach().cpu().numpy().copy() for k, v in self.model_.state_dict().items()}
        if hasattr(self, "threshold_"):
            out["threshold_"] = np.asarray(self.threshold_, dtype=np.float64)
        return out

    def model_arrays(self) -> dict[str, np.ndarray]:
        """Only the network's state (what federated rounds exchange)."""
        return {k: v for k, v in self.get_arrays().items() if k != "threshold_"}

    def set_arrays(self, arrays: dict[str, np.ndarray]) -> Self:
        self._ensure_built()
        state = {
            k: torch.from_numpy(np.array(v, copy=True))
            for k, v in arrays.items()
            if k != "threshold_"
        }
        self.model_.load_state_dict(state, strict=True)
        if "threshold_" in arrays:
            self.threshold_ = float(arrays["threshold_"])
        return self


@register_detector("autoencoder")
class AutoEncoderDetector(TorchDetector):
    """Reconstruction-error detector; score :math:`\\lVert x - g(f(x)) \\rVert^2 / d`."""

    name = "autoencoder"

    def _make_model(self, latent: int) -> nn.Module:
        return AutoEncoder(self.kind, tuple(self.input_shape), latent)

    def loss(self, batch: torch.Tensor) -> torch.Tensor:
        loss: torch.Tensor = self.model_.score(batch).mean()  # type: ignore[operator]
        return loss

    def score(self, x: np.ndarray) -> np.ndarray:
        self._ensure_built()
        return batched(self.model_.score, x)  # type: ignore[arg-type]


@register_detector("deepsvdd")
class DeepSVDDDetector(TorchDetector):
    """One-class Deep SVDD (Ruff et al., 2018): bias-free network, fixed centre, distance score."""

    name = "deepsvdd"
    default_weight_decay = 1e-6  # Ruff et al.'s lambda

    def _make_model(self, latent: int) -> nn.Module:
        return DeepSVDDNet(self.kind, tuple(self.input_shape), latent)

    def embedding_sum(self, x: np.ndarray) -> np.ndarray:
        """:math:`\\sum_i \\phi(x_i)` with the current weights (for a federated centre)."""
        self._ensure_built()
        return np.asarray(batched(self.model_.embed, x).sum(0))  # type: ignore[arg-type]

    def set_center(self, center: np.ndarray) -> Self:
        """Fix :math:`c` (after the :func:`fix_center` adjustment)."""
        self._ensure_built()
        c = torch.as_tensor(np.asarray(center), dtype=torch.float32)
        self.model_.center.copy_(fix_center(c).to(self.device))  # type: ignore[operator]
        return self

    def prepare(self, x: np.ndarray) -> Self:
        """Centre = mean embedding of the training data after an initial forward pass."""
        return self.set_center(self.embedding_sum(x) / max(len(x), 1))

    def loss(self, batch: torch.Tensor) -> torch.Tensor:
        loss: torch.Tensor = self.model_.score(batch).mean()  # type: ignore[operator]
        return loss

    def score(self, x: np.ndarray) -> np.ndarray:
        self._ensure_built()
        return batched(self.model_.score, x)  # type: ignore[arg-type]


DETECTORS: dict[str, type[TorchDetector]] = {
    AutoEncoderDetector.name: AutoEncoderDetector,
    DeepSVDDDetector.name: DeepSVDDDetector,
}
