"""The arguments of :class:`~.detector.ProtoFLDetector` as a checkpoint may give them: one
pydantic model with the bounds a crafted checkpoint is held to, and the reading of
checkpoints written before a field existed."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from fedad.core.detector import DEFAULT_CONTAMINATION, DetectorParams
from fedad.methods.protofl.augment import Auto

__all__ = [
    "HEADS",
    "MAX_FEATURES",
    "Head",
    "HeadData",
    "Normalize",
    "ProtoFLDetectorParams",
    "VectorNorm",
]

HEADS = ("flow", "kde", "gaussian", "ocsvm")
Head = Literal["auto", "flow", "kde", "gaussian", "ocsvm"]
HeadData = Literal["clean", "views"]
Normalize = Literal["auto", "none", "l2"]
VectorNorm = Literal["group", "none"]
MAX_FEATURES = 1 << 22


class ProtoFLDetectorParams(DetectorParams):
    """The ``__init__`` arguments of :class:`ProtoFLDetector`, as a checkpoint may give them."""

    model_config = ConfigDict(allow_inf_nan=False)

    kind: Literal["vector", "image"] = "image"
    input_shape: list[Annotated[int, Field(ge=1, le=MAX_FEATURES)]] = Field(
        default=[1, 8, 8], min_length=1, max_length=3
    )
    rep_dim: int = Field(default=64, ge=2, le=2048)
    width: int = Field(default=32, ge=1, le=512)
    head: Head = "auto"
    head_data: HeadData = "clean"
    normalize: Normalize = "auto"
    vector_norm: VectorNorm = "none"
    flow_layers: int = Field(default=8, ge=1, le=64)
    flow_hidden: int = Field(default=64, ge=1, le=4096)
    flow_epochs: int = Field(default=100, ge=0, le=100_000)
    flow_val: float = Field(default=0.2, ge=0.0, lt=1.0)
    flow_patience: int = Field(default=10, ge=1, le=100_000)
    flow_lr: float = Field(default=1e-3, gt=0.0, le=1.0)
    flow_views: int = Field(default=2, ge=1, le=64)
    flow_batch: int = Field(default=256, ge=2, le=1 << 16)
    lam: float = Field(default=0.01, ge=0.0, le=1e3)
    epochs: int = Field(default=10, ge=0, le=100_000)
    lr: float = Field(default=1e-3, gt=0.0, le=1.0)
    batch_size: int = Field(default=64, ge=1, le=1 << 16)
    flip: bool | Auto = "auto"
    crop: Annotated[float, Field(ge=0.05, le=1.0)] | Auto = "auto"
    noise: float = Field(default=0.1, ge=0.0, le=10.0)
    nu: float = Field(default=0.1, gt=0.0, le=1.0)
    contamination: float = Field(default=DEFAULT_CONTAMINATION, ge=0.0, lt=1.0)
    seed: int = Field(default=0, ge=-(1 << 63), lt=1 << 63)
    trunk_input: Literal["raw", "pretrained", "efficientnet"] = "raw"
    tune_stages: int = Field(default=1, ge=0, le=7)
    backbone: str = Field(default="efficientnet-lite0", max_length=64)
    feature_size: int = Field(default=64, ge=32, le=1024)
    feature_views: int = Field(default=4, ge=2, le=64)
    max_samples: int = Field(default=1024, ge=16, le=1 << 30)

    @model_validator(mode="before")
    @classmethod
    def _older_checkpoint(cls, data: Any) -> Any:
        """A checkpoint written before ``normalize`` existed fit its head on unnormalised
        representations, and one written before ``vector_norm`` has group norm in its MLP
        trunk: read their absence so, so that it scores as it did."""
        if isinstance(data, dict) and "normalize" not in data and "input_shape" in data:
            data = {**data, "normalize": "none"}
        if isinstance(data, dict) and "vector_norm" not in data and "input_shape" in data:
            data = {**data, "vector_norm": "group"}  # written before it existed: group norm
        return data

    @model_validator(mode="after")
    def _shape(self) -> ProtoFLDetectorParams:
        if self.trunk_input == "efficientnet" and self.kind != "image":
            raise ValueError("an efficientnet trunk takes images")
        if self.trunk_input == "pretrained":
            from fedad.resources import resource_names

            if self.backbone not in resource_names():
                raise ValueError(f"unknown pretrained resource {self.backbone!r}")
            if self.kind != "image":
                raise ValueError("a pretrained trunk takes images")
        if math.prod(self.input_shape) > MAX_FEATURES:
            raise ValueError(f"input_shape {self.input_shape} exceeds {MAX_FEATURES} features")
        if self.kind == "image" and len(self.input_shape) != 3:
            raise ValueError("an image detector's input_shape is (channels, height, width)")
        return self
