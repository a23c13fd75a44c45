"""FedUV's detector: the shared network plus one client's secret code.

The arrays of a :class:`FedUVDetector` are the network's state (what FedAvg exchanges:
:meth:`FedUVDetector.model_arrays`), its ``code`` (the client's secret, never in
``model_arrays``) and ``threshold_``. A saved run holds one detector per client, each with
its own code.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, Self

import numpy as np
import torch
from pydantic import ConfigDict, Field, model_validator

from fedad.components.train import batched, train_epochs
from fedad.core.detector import (
    DEFAULT_CONTAMINATION,
    BaseDetector,
    DetectorParams,
    check_network_arrays,
    register_detector,
)
from fedad.core.rng import rng as seeded_rng
from fedad.core.rng import torch_seeded
from fedad.methods.feduv.model import FedUVNet, feduv_loss, feduv_score, secret_code

CODE = "code"
THRESHOLD = "threshold_"
MAX_FEATURES = 1 << 24
MAX_CODE = 4096
MAX_HIDDEN = 4096
STANDALONE_CODE_SALT = 0xC0DE
"""Stream of the code a stand-alone ``fit`` draws when none was set."""


class FedUVDetectorParams(DetectorParams):
    """The ``__init__`` arguments of :class:`FedUVDetector`, as a checkpoint may give them."""

    model_config = ConfigDict(allow_inf_nan=False)

    kind: Literal["vector", "image"] = "vector"
    input_shape: list[Annotated[int, Field(ge=1, le=MAX_FEATURES)]] = Field(
        default=[1], min_length=1, max_length=4
    )
    code_length: int = Field(default=64, ge=2, le=MAX_CODE)
    hidden: int = Field(default=64, ge=1, le=MAX_HIDDEN)
    margin: float = Field(default=1.0, gt=0.0, le=1.0)
    lr: float = Field(default=1e-3, gt=0.0, le=10.0)
    epochs: int = Field(default=10, ge=0, le=1_000_000)
    batch_size: int = Field(default=64, ge=1, le=1 << 24)
    contamination: float = Field(default=DEFAULT_CONTAMINATION, ge=0.0, lt=1.0)
    seed: int = Field(default=0, ge=-(1 << 63), lt=1 << 63)

    @model_validator(mode="after")
    def _size(self) -> FedUVDetectorParams:
        if int(np.prod(self.input_shape)) > MAX_FEATURES:
            raise ValueError(f"input_shape {self.input_shape} exceeds {MAX_FEATURES} features")
        if self.kind == "image" and len(self.input_shape) != 3:
            raise ValueError("an image detector's input_shape is (channels, height, width)")
        return self


@register_detector("feduv")
class FedUVDetector(BaseDetector):
    """Score :math:`-\\rho(x)`, the negative cosine between :math:`f(x)` and the own code."""

    ParamsModel = FedUVDetectorParams
    params: FedUVDetectorParams

    def __init__(self, *, device: str = "cpu", **params: Any) -> None:
        """``params``: fields of the ``ParamsModel`` (``input_shape`` is kept as a list of
        ints); ``device`` is where it trains and scores (not saved)."""
        super().__init__(**params)
        shape = [int(s) for s in self.params.input_shape]
        self.params = self.params.model_copy(update={"input_shape": shape})
        self.device = device

    # -- network and code -------------------------------------------------------------------
    def build(self) -> Self:
        """Create ``model_`` with seeded initial weights (identical for equal seeds)."""
        with torch_seeded(self.params.seed):  # on the CPU: equal initial weights on every device
            self.model_ = FedUVNet(
                self.params.kind,
                tuple(self.params.input_shape),
                self.params.hidden,
                self.params.code_length,
            )
        self.model_.to(self.device).eval()
        return self

    def _ensure_built(self) -> None:
        if not hasattr(self, "model_"):
            self.build()

    def expected_input(self) -> tuple[str, tuple[int, ...]] | None:
        """Images of exactly ``input_shape``, or vectors of its size."""
        shape = tuple(int(s) for s in self.params.input_shape)
        return ("image", shape) if self.params.kind == "image" else ("vector", (math.prod(shape),))

    def check_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """The network the parameters declare, measured on torch's meta device, must be
        in ``arrays`` (before :meth:`set_arrays` builds it)."""
        shape = tuple(int(s) for s in self.params.input_shape)
        check_network_arrays(
            lambda: FedUVNet(self.params.kind, shape, self.params.hidden, self.params.code_length),
            arrays,
        )

    def set_code(self, code: np.ndarray) -> Self:
        """Set the secret code: ``code_length`` values, each -1 or +1."""
        c = np.asarray(code)
        if c.shape != (self.params.code_length,):
            raise ValueError(f"code has shape {c.shape}, expected ({self.params.code_length},)")
        if not np.all((c == 1.0) | (c == -1.0)):
            raise ValueError("code values must be -1 or +1")
        self.code_ = torch.as_tensor(c.astype(np.float32))
        return self

    def _code(self) -> torch.Tensor:
        if not hasattr(self, "code_"):
            raise RuntimeError("FedUVDetector has no code: call set_code or fit first")
        return self.code_.to(self.device)

    # -- training and scoring ---------------------------------------------------------------
    def loss(self, batch: torch.Tensor) -> torch.Tensor:
        return feduv_loss(self.model_(batch), self._code(), self.params.margin)

    def train_epochs(self, x: np.ndarray, epochs: int, rng: np.random.Generator) -> float:
        """Train in place for ``epochs`` against the own code; the last epoch's mean loss."""
        self._ensure_built()
        self._code()
        return train_epochs(
            self.model_,
            self.loss,
            x,
            epochs=epochs,
            batch_size=self.params.batch_size,
            lr=self.params.lr,
            rng=rng,
        )

    def fit(self, x: np.ndarray) -> Self:
        """Stand-alone training (one party): draws a code from the seed if none was set."""
        self.build()
        if not hasattr(self, "code_"):
            rng = seeded_rng(self.params.seed, STANDALONE_CODE_SALT)
            self.set_code(secret_code(rng, self.params.code_length))
        self.train_epochs(x, self.params.epochs, np.random.default_rng(self.params.seed))
        return self.set_threshold(x)

    def _score_t(self, batch: torch.Tensor) -> torch.Tensor:
        return feduv_score(self.model_(batch), self._code())

    def score(self, x: np.ndarray) -> np.ndarray:
        self._ensure_built()
        self._code()
        return batched(self._score_t, x)

    # -- persistence ------------------------------------------------------------------------
    def model_arrays(self) -> dict[str, np.ndarray]:
        """The network's state only: what federated rounds exchange (never the code)."""
        self._ensure_built()
        return {k: v.detach().cpu().numpy().copy() for k, v in self.model_.state_dict().items()}

    def set_model(self, arrays: dict[str, np.ndarray]) -> Self:
        """Load the network's state (e.g. the global model); code and threshold untouched."""
        self._ensure_built()
        state = {k: torch.from_numpy(np.array(v, copy=True)) for k, v in arrays.items()}
        self.model_.load_state_dict(state, strict=True)
        return self

    def get_arrays(self) -> dict[str, np.ndarray]:
        out = self.model_arrays()
        out[CODE] = self._code().cpu().numpy().copy()
        if hasattr(self, "threshold_"):
            out[THRESHOLD] = np.asarray(self.threshold_, dtype=np.float64)
        return out

    def set_arrays(self, arrays: dict[str, np.ndarray]) -> Self:
        if CODE not in arrays:
            raise KeyError("FedUV detector arrays lack 'code'")
        model = {k: v for k, v in arrays.items() if k not in (CODE, THRESHOLD)}
        self.set_model(model)
        self.set_code(arrays[CODE])
        if THRESHOLD in arrays:
            self.threshold_ = float(arrays[THRESHOLD])
        return self
