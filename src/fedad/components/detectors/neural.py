"""Baseline detectors (autoencoder, Deep SVDD) under the detector contract.

Each wraps a network from :mod:`.model` and the loop from :mod:`.train`. Federated
algorithms drive the same object through :meth:`TorchDetector.build`,
:meth:`TorchDetector.train_epochs`, :meth:`get_arrays` and :meth:`set_arrays`; ``fit`` is the
stand-alone (centralised) use.

Deep SVDD also takes graphs (``kind = "graph"``, samples a
:class:`~fedad.core.types.GraphSet`): ``input_shape`` is then ``[width]``, the node-feature
width, and the network a bias-free GIN (:mod:`.model`). The width follows the data: ``fit``
builds for the graphs it is given, and ``set_arrays`` for the width of the arrays' input
layer, so one saved configuration loads the detectors of clients whose widths differ.
:meth:`TorchDetector.width_keys` names the tensors whose shape is that width.
"""

from __future__ import annotations

import copy
import math
from abc import abstractmethod
from typing import Annotated, Any, ClassVar, Literal, Self

import numpy as np
import torch
from pydantic import ConfigDict, Field, field_validator, model_validator
from torch import nn

from fedad.components.nn.model import (
    GRAPH_INPUT_LAYER,
    AutoEncoder,
    DeepSVDDNet,
    fix_center,
    latent_size,
)
from fedad.components.train import batched, train_epochs
from fedad.core.detector import (
    DEFAULT_CONTAMINATION,
    BaseDetector,
    DetectorParams,
    check_network_arrays,
    register_detector,
)
from fedad.core.rng import torch_seeded
from fedad.core.types import Features, GraphSet, dense

MAX_FEATURES = 1 << 24
"""Largest input (product of ``input_shape``) a saved torch baseline may declare."""


class TorchDetectorParams(DetectorParams):
    """The ``__init__`` arguments of a torch baseline, as a checkpoint may give them."""

    model_config = ConfigDict(allow_inf_nan=False)

    kind: Literal["vector", "image", "graph"] = "vector"
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
        if self.kind == "graph" and len(self.input_shape) != 1:
            raise ValueError("a graph detector's input_shape is (node-feature width,)")
        return self


class TorchDetector(BaseDetector):
    """Common machinery of the torch baseline detectors."""

    name: ClassVar[str]
    ParamsModel = TorchDetectorParams
    params: TorchDetectorParams
    default_weight_decay: ClassVar[float] = 0.0
    monitor_keys: ClassVar[tuple[str, ...]] = ()
    """Scalars :meth:`train_monitor` gives after :meth:`train_epochs` (clients send them
    beside ``loss`` and servers log them per round; e.g. the collapse guard's columns,
    :mod:`fedad.core.collapse`)."""

    def __init__(self, *, device: str = "cpu", **params: Any) -> None:
        """``params``: fields of the ``ParamsModel`` (``input_shape`` is kept as a list of
        ints)."""
        super().__init__(**params)
        shape = [int(s) for s in self.params.input_shape]
        self.params = self.params.model_copy(update={"input_shape": shape})
        self.device = device
        """Torch device of the network: a property of where it runs, not of the model, so
        not in :meth:`get_params` (a checkpoint loads on any machine, on the CPU)."""

    # -- model ------------------------------------------------------------------------------
    @abstractmethod
    def _make_model(self, latent: int) -> nn.Module: ...

    @abstractmethod
    def loss(self, batch: torch.Tensor) -> torch.Tensor:
        """Mean training objective over a batch."""

    def build(self) -> Self:
        """Create ``model_`` with seeded initial weights (identical for equal seeds)."""
        if self.params.kind == "graph" and not 1 <= int(self.params.input_shape[0]) <= MAX_FEATURES:
            raise ValueError(
                f"node-feature width {self.params.input_shape[0]} is not in [1, {MAX_FEATURES}]"
            )
        latent = latent_size(
            self.params.kind, tuple(self.params.input_shape), self.params.latent_dim
        )
        with torch_seeded(self.params.seed):  # on the CPU: equal initial weights on every device
            self.model_ = self._make_model(latent)
        self.model_.to(self.device).eval()
        return self

    def _ensure_built(self) -> None:
        if not hasattr(self, "model_"):
            self.build()

    # -- graphs -----------------------------------------------------------------------------
    def width_keys(self) -> tuple[str, ...]:
        """The tensors whose shape is the input width: on graphs the GIN's input layer (the
        node-feature width may differ between clients), else none."""
        return (GRAPH_INPUT_LAYER,) if self.params.kind == "graph" else ()

    def build_for(self, x: Features) -> Self:
        """:meth:`build` for the samples ``x``: on graphs for their node-feature width."""
        if self.params.kind == "graph":
            self.params = self.params.model_copy(update={"input_shape": [graph_width(x)]})
        return self.build()

    def _inputs(self, x: Features) -> Features:
        """``x`` checked against the detector's kind (graphs of its width, or dense rows)."""
        self._ensure_built()
        if self.params.kind != "graph":
            return dense(x, f"the {self.name} detector built for {self.params.kind} data")
        width, takes = graph_width(x), int(self.params.input_shape[0])
        if width != takes:
            raise ValueError(f"graphs with {width} node features; this detector takes {takes}")
        return x

    def train_epochs(
        self, x: Features, epochs: int, rng: np.random.Generator, prox_mu: float = 0.0
    ) -> float:
        """Train in place for ``epochs``; return the last epoch's mean loss."""
        x = self._inputs(x)
        return train_epochs(
            self.model_,
            self.loss,
            x,
            epochs=epochs,
            batch_size=self.params.batch_size,
            lr=self.params.lr,
            rng=rng,
            weight_decay=(
                self.default_weight_decay
                if self.params.weight_decay is None
                else self.params.weight_decay
            ),
            prox_mu=prox_mu,
        )

    def train_monitor(self) -> dict[str, float]:
        """:data:`monitor_keys`' values over the last :meth:`train_epochs` call (none here)."""
        return {}

    def prepare(self, x: Features) -> Self:
        """Anything to do on the data before training (Deep SVDD sets its centre)."""
        return self

    def fit(self, x: Features) -> Self:
        self.build_for(x)
        self.prepare(x)
        self.train_epochs(x, self.params.epochs, np.random.default_rng(self.params.seed))
        return self.set_threshold(x)  # type: ignore[arg-type]

    def expected_input(self) -> tuple[str, tuple[int, ...]] | None:
        """Images of exactly ``input_shape``, or vectors of its size; graphs: not declared
        (their width is checked by :meth:`_inputs`)."""
        if self.params.kind == "graph":
            return None
        shape = tuple(int(s) for s in self.params.input_shape)
        return ("image", shape) if self.params.kind == "image" else ("vector", (math.prod(shape),))

    # -- persistence ------------------------------------------------------------------------
    def check_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """The network's tensors, measured on torch's meta device, must all be in
        ``arrays`` with their shapes (on graphs for the width of the arrays' input layer,
        as :meth:`set_arrays` builds)."""
        shape = tuple(int(s) for s in self.params.input_shape)
        first = arrays.get(GRAPH_INPUT_LAYER) if self.params.kind == "graph" else None
        if first is not None and np.ndim(first) == 2:
            shape = (int(np.shape(first)[1]),)
        if self.params.kind == "graph" and not 1 <= shape[0] <= MAX_FEATURES:
            raise ValueError(f"node-feature width {shape[0]} is not in [1, {MAX_FEATURES}]")
        probe = copy.copy(self)
        probe.params = self.params.model_copy(update={"input_shape": list(shape)})
        latent = latent_size(self.params.kind, shape, self.params.latent_dim)
        check_network_arrays(lambda: probe._make_model(latent), arrays)

    def get_arrays(self) -> dict[str, np.ndarray]:
        self._ensure_built()
        out = {k: v.detach().cpu().numpy().copy() for k, v in self.model_.state_dict().items()}
        if hasattr(self, "threshold_"):
            out["threshold_"] = np.asarray(self.threshold_, dtype=np.float64)
        return out

    def model_arrays(self) -> dict[str, np.ndarray]:
        """Only the network's state (what federated rounds exchange)."""
        return {k: v for k, v in self.get_arrays().items() if k != "threshold_"}

    def shared_arrays(self) -> dict[str, np.ndarray]:
        """:meth:`model_arrays` without the :meth:`width_keys` (what every width can load)."""
        return {k: v for k, v in self.model_arrays().items() if k not in self.width_keys()}

    def set_shared(self, arrays: dict[str, np.ndarray]) -> Self:
        """Load :meth:`shared_arrays` (all of them), keeping this detector's width keys."""
        self._ensure_built()
        own = self.model_.state_dict()
        want = set(own) - set(self.width_keys())
        if set(arrays) != want:
            odd = sorted(set(arrays) ^ want)
            raise KeyError(f"shared arrays of the {self.name} detector differ at '{odd[0]}'")
        state = {k: torch.from_numpy(np.array(v, copy=True)) for k, v in arrays.items()}
        state.update({k: own[k] for k in self.width_keys()})
        self.model_.load_state_dict(state, strict=True)
        return self

    def set_arrays(self, arrays: dict[str, np.ndarray]) -> Self:
        """Load the whole state; on graphs first rebuilt for the width of the arrays' input
        layer when it differs from the configured one."""
        first = arrays.get(GRAPH_INPUT_LAYER) if self.params.kind == "graph" else None
        if first is not None and np.ndim(first) == 2:
            width = int(np.shape(first)[1])
            if width != int(self.params.input_shape[0]) or not hasattr(self, "model_"):
                self.params = self.params.model_copy(update={"input_shape": [width]})
                self.build()
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


class AutoEncoderParams(TorchDetectorParams):
    """The autoencoder's parameters: vectors or images only."""

    @field_validator("kind")
    @classmethod
    def _dense(cls, kind: str) -> str:
        if kind == "graph":
            raise ValueError("the autoencoder takes vectors or images, not graphs")
        return kind


@register_detector("autoencoder")
class AutoEncoderDetector(TorchDetector):
    """Reconstruction-error detector; score :math:`\\lVert x - g(f(x)) \\rVert^2 / d`."""

    name = "autoencoder"
    ParamsModel = AutoEncoderParams

    def _make_model(self, latent: int) -> nn.Module:
        if self.params.kind == "graph":
            raise ValueError("the autoencoder takes vectors or images, not graphs")
        return AutoEncoder(self.params.kind, tuple(self.params.input_shape), latent)

    def loss(self, batch: torch.Tensor) -> torch.Tensor:
        loss: torch.Tensor = self.model_.score(batch).mean()  # type: ignore[operator]
        return loss

    def score(self, x: Features) -> np.ndarray:
        return batched(self.model_.score, self._inputs(x))  # type: ignore[arg-type]

    def score_maps(self, x: np.ndarray) -> np.ndarray:
        """Images only: the reconstruction error per pixel, the squared error
        :math:`(x - g(f(x)))^2` averaged over channels, ``(N, H, W)`` float32. Its mean over
        pixels is the image score."""
        if self.params.kind != "image":
            raise ValueError("anomaly maps need image data; this autoencoder reads vectors")
        xs = torch.from_numpy(np.ascontiguousarray(self._inputs(x), dtype=np.float32))
        dev = next(self.model_.parameters()).device
        out = []
        self.model_.eval()
        with torch.no_grad():
            for i in range(0, len(xs), 256):
                b = xs[i : i + 256].to(dev)
                out.append(((b - self.model_(b)) ** 2).mean(dim=1).float().cpu().numpy())
        if not out:
            return np.zeros((0, *self.params.input_shape[1:]), np.float32)
        return np.concatenate(out)


@register_detector("deepsvdd")
class DeepSVDDDetector(TorchDetector):
    """One-class Deep SVDD (Ruff et al., 2018): bias-free network, fixed centre, distance score.

    On vectors, images or graphs (``kind``): the network of :class:`.model.DeepSVDDNet`."""

    name = "deepsvdd"
    default_weight_decay = 1e-6  # Ruff et al.'s lambda

    def _make_model(self, latent: int) -> nn.Module:
        return DeepSVDDNet(self.params.kind, tuple(self.params.input_shape), latent)

    def embedding_sum(self, x: Features) -> np.ndarray:
        """:math:`\\sum_i \\phi(x_i)` with the current weights (for a federated centre)."""
        x = self._inputs(x)
        return np.asarray(batched(self.model_.embed, x).sum(0))  # type: ignore[arg-type]

    def set_center(self, center: np.ndarray) -> Self:
        """Fix :math:`c` (after the :func:`fix_center` adjustment)."""
        self._ensure_built()
        c = torch.as_tensor(np.asarray(center), dtype=torch.float32)
        self.model_.center.copy_(fix_center(c).to(self.device))  # type: ignore[operator]
        return self

    def prepare(self, x: Features) -> Self:
        """Centre = mean embedding of the training data after an initial forward pass."""
        return self.set_center(self.embedding_sum(x) / max(len(x), 1))

    def loss(self, batch: torch.Tensor) -> torch.Tensor:
        loss: torch.Tensor = self.model_.score(batch).mean()  # type: ignore[operator]
        return loss

    def score(self, x: Features) -> np.ndarray:
        return batched(self.model_.score, self._inputs(x))  # type: ignore[arg-type]


def graph_width(x: Features) -> int:
    """The one node-feature width of the graphs ``x`` (one-line errors otherwise)."""
    if not isinstance(x, GraphSet):
        raise TypeError(f"a graph detector scores graphs (a GraphSet), not {type(x).__name__}")
    width = int(x.shape[1])
    if width < 1:
        raise ValueError("graphs of several node-feature widths; a detector takes one width")
    return width


DETECTORS: dict[str, type[TorchDetector]] = {
    AutoEncoderDetector.name: AutoEncoderDetector,
    DeepSVDDDetector.name: DeepSVDDDetector,
}
