"""FedStar's detector ``fedstar``: Deep SVDD on the structure and feature encoders.

Score :math:`\\lVert \\phi(G) - c \\rVert^2` (:mod:`.model`). Stand-alone (:meth:`fit`) it is
FedStar without collaboration: the centre from the initial embeddings of the detector's own
graphs, then ``epochs`` of Deep SVDD on them.

Arrays: the network's state (``struct.*``, ``feat.*``, ``center``) and ``threshold_``. The
node-feature width is read back from the feature encoder's input layer, so one saved
configuration serves clients whose graphs differ in width.
"""

from __future__ import annotations

from typing import Any, Self

import numpy as np
import torch
from pydantic import ConfigDict, Field

from fedad.components.detectors.neural import graph_width
from fedad.components.nn.model import fix_center
from fedad.components.train import batched, train_epochs
from fedad.core.detector import (
    DEFAULT_CONTAMINATION,
    BaseDetector,
    DetectorParams,
    register_detector,
)
from fedad.core.rng import torch_seeded
from fedad.core.types import Features
from fedad.devices import resolve_device
from fedad.methods.fedstar.model import FEATURE_INPUT_LAYER, STRUCT, FedStarNet

THRESHOLD = "threshold_"
MAX_WIDTH = 1 << 16
"""Widest node features a detector accepts (a checkpoint is untrusted)."""


class FedStarDetectorParams(DetectorParams):
    """The ``__init__`` arguments of :class:`FedStarDetector`, as a checkpoint may give them."""

    model_config = ConfigDict(allow_inf_nan=False)

    width: int = Field(default=1, ge=1, le=MAX_WIDTH)
    hidden: int = Field(default=64, ge=1, le=1024)
    layers: int = Field(default=3, ge=1, le=16)
    n_rw: int = Field(default=16, ge=1, le=256)
    n_dg: int = Field(default=16, ge=1, le=4096)
    epochs: int = Field(default=20, ge=0, le=100_000)
    lr: float = Field(default=1e-3, gt=0.0, le=10.0)
    weight_decay: float = Field(default=1e-6, ge=0.0, le=10.0)
    batch_size: int = Field(default=64, ge=1, le=1 << 16)
    contamination: float = Field(default=DEFAULT_CONTAMINATION, ge=0.0, lt=1.0)
    seed: int = Field(default=0, ge=0, le=2**63 - 1)


@register_detector("fedstar")
class FedStarDetector(BaseDetector):
    """Shared structure encoder, personal feature encoder, Deep SVDD [FedStar Sec. 4]."""

    ParamsModel = FedStarDetectorParams
    params: FedStarDetectorParams

    def __init__(self, *, device: str = "cpu", **params: Any) -> None:
        """``params``: fields of the ``ParamsModel``; ``device`` is where it trains and scores
        (not saved)."""
        super().__init__(**params)
        self.device = device

    # -- network ----------------------------------------------------------------------------
    def build(self, width: int | None = None) -> Self:
        """``model_`` with seeded initial weights for ``width`` node features (default: the
        configured one; on the CPU, so equal on every device). The structure encoder is
        built first, so its initial weights do not depend on the width."""
        if width is not None:
            self.params = self.params.model_copy(update={"width": int(width)})
        if not 1 <= self.params.width <= MAX_WIDTH:
            raise ValueError(f"node-feature width {self.params.width} is not in [1, {MAX_WIDTH}]")
        with torch_seeded(self.params.seed):
            p = self.params
            net = FedStarNet(p.width, p.hidden, p.layers, p.n_rw, p.n_dg)
        self.model_ = net.to(resolve_device(self.device)).eval()
        return self

    def _ensure_built(self) -> None:
        if not hasattr(self, "model_"):
            self.build()

    def _graphs(self, x: Features) -> Features:
        self._ensure_built()
        width = graph_width(x)
        if width != self.params.width:
            raise ValueError(
                f"graphs with {width} node features; this detector takes {self.params.width}"
            )
        return x

    def model_arrays(self) -> dict[str, np.ndarray]:
        """The network's state (both encoders and the centre)."""
        self._ensure_built()
        return {k: v.detach().cpu().numpy().copy() for k, v in self.model_.state_dict().items()}

    def shared_arrays(self) -> dict[str, np.ndarray]:
        """The structure encoder's tensors: all that FedStar shares."""
        return {k: v for k, v in self.model_arrays().items() if k.startswith(f"{STRUCT}.")}

    def set_shared(self, arrays: dict[str, np.ndarray]) -> Self:
        """Load the structure encoder (exactly its tensors), keeping everything else."""
        self._ensure_built()
        state = self.model_.state_dict()
        want = {k for k in state if k.startswith(f"{STRUCT}.")}
        if set(arrays) != want:
            odd = sorted(set(arrays) ^ want)
            raise KeyError(f"the structure encoder's arrays differ at '{odd[0]}'")
        for k, v in arrays.items():
            t = torch.as_tensor(np.asarray(v, dtype=np.float32))
            if t.shape != state[k].shape:
                raise ValueError(f"tensor '{k}' has shape {tuple(t.shape)}")
            state[k].copy_(t)
        return self

    # -- Deep SVDD --------------------------------------------------------------------------
    def set_center(self, x: Features) -> Self:
        """Fix :math:`c` := the mean embedding of ``x`` under the current weights
        (:func:`~fedad.components.nn.model.fix_center` applied)."""
        x = self._graphs(x)
        z = batched(self.model_.embed, x)
        c = torch.as_tensor(z.mean(0) if len(z) else np.zeros(self.model_.out_dim))
        self.model_.center.copy_(fix_center(c.to(torch.float32)))  # type: ignore[operator]
        return self

    def _loss(self, batch: Any) -> torch.Tensor:
        loss: torch.Tensor = self.model_.score(batch).mean()
        return loss

    def train_epochs(self, x: Features, epochs: int, rng: np.random.Generator) -> float:
        """``epochs`` of Deep SVDD (Adam, both encoders); the last epoch's mean loss."""
        x = self._graphs(x)
        p = self.params
        return train_epochs(
            self.model_,
            self._loss,
            x,
            epochs=epochs,
            batch_size=p.batch_size,
            lr=p.lr,
            rng=rng,
            weight_decay=p.weight_decay,
        )

    def fit(self, x: np.ndarray) -> Self:
        self.build(graph_width(x))
        self.set_center(x)
        self.train_epochs(x, self.params.epochs, np.random.default_rng(self.params.seed))
        return self.set_threshold(x)

    def score(self, x: np.ndarray) -> np.ndarray:
        return batched(self.model_.score, self._graphs(x))

    # -- persistence ------------------------------------------------------------------------
    def get_arrays(self) -> dict[str, np.ndarray]:
        out = self.model_arrays()
        if hasattr(self, "threshold_"):
            out[THRESHOLD] = np.asarray(self.threshold_, dtype=np.float64)
        return out

    def set_arrays(self, arrays: dict[str, np.ndarray]) -> Self:
        """Load the whole state, first rebuilt for the width of the arrays' input layer."""
        first = arrays.get(FEATURE_INPUT_LAYER)
        if first is None or np.ndim(first) != 2:
            raise KeyError(f"fedstar arrays lack '{FEATURE_INPUT_LAYER}'")
        width = int(np.shape(first)[1]) - self.params.layers * self.params.hidden
        if width != self.params.width or not hasattr(self, "model_"):
            self.build(width)
        state = {
            k: torch.from_numpy(np.array(v, dtype=np.float32, copy=True))
            for k, v in arrays.items()
            if k != THRESHOLD
        }
        self.model_.load_state_dict(state, strict=True)
        if THRESHOLD in arrays:
            self.threshold_ = float(arrays[THRESHOLD])
        return self
