"""``[methods.params]`` of ``fadngs`` and ``fadngs-nosed``: one pydantic model, every field with
a default that fits any data size; the detector's fields are shared with
:class:`~.detector.FADngsDetectorParams` (bounds and validators written once)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fedad.core.algorithm import Params
from fedad.core.detector import shared_field
from fedad.methods.fadngs.detector import FADngsDetectorParams
from fedad.methods.fadngs.losses import SedForm

__all__ = ["FADngsParams"]


class FADngsParams(Params):
    """``[methods.params]`` of ``fadngs`` and ``fadngs-nosed``; defaults fit any data size."""

    warmup_rounds: int | None = Field(
        default=None, ge=0, le=100_000, description="SimCLR rounds first (default rounds // 5)"
    )
    local_epochs: int = Field(default=1, ge=1, le=10_000, description="E_l, epochs per round")
    batch_size: int = shared_field(FADngsDetectorParams, "batch_size")
    lr: float = shared_field(FADngsDetectorParams, "lr", description="SGD, cosine decay")
    weight_decay: float = Field(default=1e-4, ge=0.0, le=1.0)
    temperature: float = shared_field(
        FADngsDetectorParams, "temperature", description="tau of eq. 7"
    )
    n_plus: int = shared_field(FADngsDetectorParams, "n_plus", description="T+ views per sample")
    crop_min: float = shared_field(
        FADngsDetectorParams, "crop_min", description="smallest share of an image a T+ crop keeps"
    )
    jitter: float = shared_field(FADngsDetectorParams, "jitter")
    width: int = shared_field(
        FADngsDetectorParams, "width", description="channels of the first stage"
    )
    head_norm: Literal["batch", "none"] = shared_field(
        FADngsDetectorParams,
        "head_norm",
        description="the projection head's hidden norm (SimCLR's BN or none)",
    )
    depth: int = shared_field(
        FADngsDetectorParams, "depth", description="residual blocks per stage"
    )
    stem_stride: Literal["auto", 1, 2] = shared_field(
        FADngsDetectorParams,
        "stem_stride",
        description="stride of the encoder's first conv (auto: 2 from 16 px on, else 1)",
    )
    proj_dim: int = shared_field(FADngsDetectorParams, "proj_dim", description="dimension of z")
    k_c: int = shared_field(FADngsDetectorParams, "k_c", description="clusters per client (K_c)")
    kmeans_iters: int = shared_field(
        FADngsDetectorParams, "kmeans_iters", description="weak k-means steps"
    )
    rho: float = shared_field(FADngsDetectorParams, "rho", description="shrinkage of eq. 3")
    quantile: float = shared_field(FADngsDetectorParams, "quantile", description="delta of eq. 8")
    density: Literal["global", "local", "none"] = Field(
        default="global", description="Table III: what is shared"
    )
    loss: Literal["crad", "simclr", "csi"] = shared_field(
        FADngsDetectorParams, "loss", description="Table IV"
    )
    con_form: Literal["eq7", "mean-log"] = shared_field(
        FADngsDetectorParams,
        "con_form",
        description="CSI's code (mean of log-probabilities, default) or eq. 7 as printed",
    )
    density_noise: float = Field(
        default=0.0, ge=0.0, le=1e6, description="Gaussian mechanism on the statistics (sigma)"
    )
    density_delta: float = Field(default=1e-5, gt=0.0, lt=1.0, description="delta of its eps")
    noise_source: Literal["private", "seeded"] = Field(
        default="private",
        description="the mechanism's noise: OS entropy, or the run's seed (reproducible)",
    )
    public_set: str = Field(default="procedural", description="SED's public data set")
    public_n: int = Field(default=512, ge=2, le=1_000_000, description="public samples")
    distill_epochs: int = Field(default=1, ge=1, le=10_000, description="E_g of SED")
    distill_lr: float = Field(
        default=0.003,
        gt=0.0,
        le=10.0,
        description="SED's SGD (the paper's 0.03 undoes each round's CRAD: docs)",
    )
    distill_batch: int = Field(default=64, ge=2, le=1 << 16)
    queue_size: int = Field(default=2048, ge=1, le=1 << 20, description="|D_c| of SED (seed form)")
    sed_temperature: float = Field(
        default=0.2,
        gt=0.0,
        le=100.0,
        description="student's tau of eq. 12, seed form (SEED's code: 0.07)",
    )
    sed_teacher_temperature: float = Field(
        default=1e-4, gt=0.0, le=100.0, description="teacher's tau of eq. 11, seed form (SEED's)"
    )
    sed_positive: bool = Field(
        default=True,
        description="seed form: the teacher's own representation leads the queue (code)",
    )
    sed_queues: Literal["persist", "round"] = Field(
        default="round",
        description="seed form: keep the queues across rounds or renew them each round",
    )
    sed_form: SedForm = Field(
        default="cosine", description="a cosine pull without queue (docs) or eq. 11-13 (seed)"
    )
    privacy_measure: bool = Field(default=True, description="distance correlation (Fig. 9)")
