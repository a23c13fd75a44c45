"""FedDyMem ([FedDyMem]: Chen et al., 2025): the FL protocol, method ``feddymem``.

Clients share memory banks, never models [FedDyMem Algorithm 5]:

0. **Initialisation** (Algorithm 4, phase ``init``, before round 1's training): each client
   builds its projection and memory generator from its own random seed, computes the
   memory features of all its training images and reduces them with weights 1
   (Algorithm 2 at t = 0); the server clusters the banks into the global bank
   :math:`\\bar M^0` (Algorithm 3).
1. **Round t** (phase ``train``): each client loads :math:`\\bar M^{t-1}` as its bank
   :math:`M'`, trains its projection and generator for ``local_epochs`` epochs of eq. 12
   against it, recomputes its memory features and replies with the memory-reduced bank
   (eq. 13-16, :math:`\\alpha = 1/(t+1)`); the server clusters the replies into
   :math:`\\bar M^t` (Algorithm 3, k-means with ``K = H x W`` clusters).
   In the last round, with ``final_bank = "fresh"`` (the default; not in the paper), the
   client replies with Algorithm 4's reduce of its final memory features alone instead:
   eq. 16 averages a bank over every round's networks, and the networks keep moving, so
   the EMA bank lags the networks that score with it.
   With ``lr_schedule = "cosine"`` (the default; not in the paper) round t's Adam runs at
   :func:`~fedad.methods.feddymem.train.cosine_factor` ``(t, rounds)`` times ``lr``, sent
   by the server as the scalar ``lr_scale``: the networks settle as the run ends.

Each client keeps its networks in its own state; what travels up is one ``(K, C)`` bank
per client and round, and down the global bank. That is statistics, not a model update, so
no phase is declared an update phase: ``[privacy]`` and the model attacks of ``[attack]``
have nothing to act on and say so when configured.

At evaluation each client scores its test images with its own networks and the final
global bank (Algorithm 5 line 9); anomaly maps go through the evaluate reply, so pixel
AUROC and PRO are computed on data with defect masks.

Ablations of [FedDyMem Table III]: ``projection = false``, ``generator = false``,
``aggregation = "mean"`` (the banks averaged position by position instead of k-means).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator

from fedad.core.algorithm import (
    Algorithm,
    ClientState,
    Handler,
    Params,
    Requirements,
    ServerResult,
    Setup,
    register,
)
from fedad.core.context import ServerContext
from fedad.core.detector import shared_field
from fedad.core.messages import Message, prefixed, unprefixed
from fedad.core.rng import rng as seeded_rng
from fedad.core.rounds import close_round, log_weighted_scalars
from fedad.core.types import ClientData
from fedad.core.validate import ArraySpec
from fedad.evaluation.families import MetricFamily
from fedad.methods.feddymem.detector import (
    BANK,
    SCALE_REF,
    FeatureNorm,
    FedDyMemDetector,
    FedDyMemDetectorParams,
    ScoreNorm,
    check_backbone_stages,
)
from fedad.methods.feddymem.memory import aggregate_banks, memory_reduce
from fedad.methods.feddymem.train import cosine_factor, feature_scale
from fedad.resources.multilevel import check_backbone

INIT = "init"
TRAIN = "train"
OWN = "own"
FEATURES = "features"
"""Client state: the frozen backbone's features of the client's training images."""


class FedDyMemParams(Params):
    """``[methods.params]`` of ``feddymem``; every default works on any data set size."""

    forwarded: ClassVar[frozenset[str]] = frozenset({"feature_norm", "score_norm"})

    backbone: Literal["efficientnet-lite0", "wide_resnet50_2"] = shared_field(
        FedDyMemDetectorParams, "backbone", description="frozen feature extractor"
    )
    backbone_path: str | None = shared_field(
        FedDyMemDetectorParams,
        "backbone_path",
        description="torchvision weights of wide_resnet50_2",
    )
    stages: list[int] | None = Field(
        default=None, min_length=1, max_length=7, description="default: stride 8 and 16"
    )
    image_size: int | None = Field(
        default=None, ge=8, le=1024, description="backbone input side (default: see below)"
    )
    channels: int | None = shared_field(
        FedDyMemDetectorParams, "channels", description="memory channels (default: the input's)"
    )
    grid: int = shared_field(
        FedDyMemDetectorParams, "grid", description="H_G = W_G of the trainable grid"
    )
    k: int = shared_field(FedDyMemDetectorParams, "k", description="nearest bank entries in eq. 12")
    th: float = shared_field(FedDyMemDetectorParams, "th", description="margin of eq. 12")
    local_epochs: int = Field(default=1, ge=1, le=10_000)
    batch_size: int = shared_field(FedDyMemDetectorParams, "batch_size")
    lr: float = shared_field(FedDyMemDetectorParams, "lr", description="Adam")
    weight_decay: float = shared_field(FedDyMemDetectorParams, "weight_decay")
    sigma: float = shared_field(FedDyMemDetectorParams, "sigma", description="map smoothing")
    projection: bool = shared_field(
        FedDyMemDetectorParams, "projection", description="Table III: false = no projection"
    )
    generator: bool = shared_field(
        FedDyMemDetectorParams, "generator", description="Table III: false = no generator"
    )
    aggregation: Literal["kmeans", "mean"] = Field(
        default="kmeans", description="Algorithm 3, or the position-wise mean (Table III)"
    )
    score_norm: ScoreNorm = Field(
        default="none",
        description="train: each client's maps and scores on its training scores' scale",
    )
    feature_norm: FeatureNorm = Field(
        default="spread",
        description="spread: memory features divided by the client's training spread",
    )
    final_bank: Literal["fresh", "ema"] = Field(
        default="fresh",
        description="fresh: the last round's banks from the final networks alone (no eq. 16)",
    )
    lr_schedule: Literal["constant", "cosine"] = Field(
        default="cosine",
        description="cosine: round t's lr times (1 + cos(pi (t - 1) / rounds)) / 2",
    )
    keep_scale: float = shared_field(
        FedDyMemDetectorParams,
        "keep_scale",
        description="weight of the scale floor against feature collapse (0: eq. 12 alone)",
    )
    neighbourhood: int = shared_field(
        FedDyMemDetectorParams,
        "neighbourhood",
        description="side of the mean over each patch's neighbours (1: none)",
    )
    bank_dtype: Literal["float16", "float32"] = Field(
        default="float16", description="dtype of the banks in the messages"
    )
    bank_order: Literal["matched", "kmeans"] = Field(
        default="matched", description="how k-means centres are placed on the H x W map"
    )

    @field_validator("stages")
    @classmethod
    def _stages_of_backbone(cls, v: list[int] | None, info: ValidationInfo) -> list[int] | None:
        if "backbone" in info.data:  # else the backbone's own error is reported
            check_backbone_stages(info.data["backbone"], v)
        return v


@register
class FedDyMem(Algorithm):
    """FedDyMem: shared dynamic memory banks, personal projection and generator."""

    name = "feddymem"
    personalized = True
    ParamsModel = FedDyMemParams
    params: FedDyMemParams
    metric_families: ClassVar[tuple[MetricFamily, ...]] = ()

    def __init__(self, params: Params, setup: Setup, detector: str | None = None) -> None:
        super().__init__(params, setup, detector)
        check_backbone(self.name, self.params.backbone, self.params.backbone_path)

    @classmethod
    def requirements(cls, params: dict[str, Any]) -> Requirements:
        """Images; the named backbone; no update phase (banks are not model updates)."""
        p = FedDyMemParams.model_validate(params)
        resources = ("efficientnet-lite0",) if p.backbone == "efficientnet-lite0" else ()
        return Requirements(resources=resources, update_phases=())

    def image_size(self) -> int:
        """The backbone's input side: ``image_size``, else the images' own side kept within
        [64, 224] (the paper resizes to 224; the backbone is fully convolutional, so smaller
        images are read at their own scale, and tiny ones are enlarged to 64 so that the
        patch grid has at least 8 x 8 positions)."""
        if self.params.image_size is not None:
            return self.params.image_size
        shape = self.setup.feature_shape
        side = max(int(shape[-1]), int(shape[-2])) if len(shape) == 3 else 224
        return min(224, max(64, side))

    def make_detector(self, seed: int | None = None) -> FedDyMemDetector:
        p = self.params
        return FedDyMemDetector.configured(
            p,
            stages=tuple(p.stages) if p.stages else None,
            image_size=self.image_size(),
            epochs=p.local_epochs,
            contamination=self.contamination,
            seed=self.setup.seed if seed is None else seed,
            device=self.setup.device,
        )

    def bank_spec(self) -> dict[str, ArraySpec]:
        det = self.make_detector()
        return {BANK: ArraySpec((det.bank_size, det.channels), self.params.bank_dtype)}

    def _wire(self, bank: np.ndarray) -> np.ndarray:
        """A bank as it travels: ``bank_dtype``, values clipped to that dtype's finite range."""
        dtype = np.dtype(self.params.bank_dtype)
        top = float(np.finfo(dtype).max)
        out: np.ndarray = np.clip(bank, -top, top).astype(dtype)
        return out

    # -- client -----------------------------------------------------------------------------
    def handlers(self) -> dict[str, Handler]:
        return {**super().handlers(), INIT: self.client_init, TRAIN: self.client_train}

    def _client_seed(self, client_id: int) -> int:
        return int(seeded_rng(self.setup.seed, client_id, 0xFD).integers(2**62))

    def _restore(self, state: ClientState, data: ClientData) -> tuple[FedDyMemDetector, np.ndarray]:
        """The client's detector (built from its seed the first time) and its features."""
        det = self.make_detector(self._client_seed(data.client_id))
        x = np.asarray(data.x_train, dtype=np.float32)
        feats = state.get(FEATURES)
        if feats is None:
            feats = det.features(x)
            state[FEATURES] = feats
        else:
            det.remember(x, feats)  # calibration and the threshold score x again
        own = unprefixed(state, OWN)
        if own:
            det.set_net(own)
            if SCALE_REF in own:
                det.set_scale_ref(own[SCALE_REF])
        else:
            det.build()
        return det, feats

    def _keep(self, state: ClientState, det: FedDyMemDetector) -> None:
        for key in [k for k in state if k.startswith(f"{OWN}/")]:
            del state[key]
        state.update(prefixed({k: v for k, v in det.get_arrays().items() if k != BANK}, OWN))

    def client_init(self, state: ClientState, data: ClientData, msg: Message) -> Message:
        """Algorithm 4, lines 2-8: random networks, memory-reduce with weights 1."""
        det, feats = self._restore(state, data)
        memories = det.spread_memories(feats)
        self._keep(state, det)
        bank = memory_reduce(memories, None, 0)
        return Message(INIT, {BANK: self._wire(bank)}, {"num_examples": data.n_train})

    def _train(
        self,
        state: ClientState,
        data: ClientData,
        bank: np.ndarray,
        t: int,
        last: bool = False,
        lr_scale: float = 1.0,
    ) -> tuple[FedDyMemDetector, np.ndarray, dict[str, float]]:
        """Eq. 12 against ``bank``, then Algorithm 2; the scalars ``loss`` and ``scale`` (the
        memory features' scale after training, :func:`feature_scale`: the collapse monitor).
        In the ``last`` round with ``final_bank = "fresh"`` the reduce is Algorithm 4's (the
        current memory features alone, weights 1), not eq. 14-16's mix with the old bank.
        Adam runs at ``lr_scale`` times ``lr`` (the server's schedule)."""
        det, feats = self._restore(state, data)
        det.set_bank(bank)
        rng = seeded_rng(self.setup.seed, t, data.client_id, 0xFE)
        loss = det.train_epochs(feats, self.params.local_epochs, rng, lr_scale)
        memories = det.spread_memories(feats)  # the spread refreshed, from the same pass
        fresh = last and self.params.final_bank == "fresh"
        reduced = (
            memory_reduce(memories, None, 0) if fresh else memory_reduce(memories, det.bank_, t)
        )
        self._keep(state, det)
        return det, reduced, {"loss": loss, "scale": feature_scale(memories)}

    def client_train(self, state: ClientState, data: ClientData, msg: Message) -> Message:
        """Algorithm 5, ClientUpdate: eq. 12 against the global bank, then Algorithm 2."""
        t = int(msg.get("round", 1))
        last = bool(msg.get("last", 0.0))
        lr_scale = float(msg.get("lr_scale", 1.0))
        if not 0.0 <= lr_scale <= 1.0:  # a crafted server cannot blow the optimiser up
            raise ValueError(f"lr_scale {lr_scale} is outside [0, 1]")
        _, reduced, stats = self._train(state, data, msg.arrays[BANK], t, last, lr_scale)
        scalars = {"num_examples": data.n_train, **stats}
        return Message(TRAIN, {BANK: self._wire(reduced)}, scalars)

    def client_detector(
        self, state: ClientState, data: ClientData, msg: Message
    ) -> FedDyMemDetector:
        """The client's own networks with the final global bank (with ``score_norm =
        "train"`` calibrated on the client's own training images)."""
        det, _ = self._restore(state, data)
        det.set_bank(msg.arrays[BANK])
        return det.calibrate(np.asarray(data.x_train, dtype=np.float32))

    def score_scale(self) -> str | None:
        """How the clients' scores were put on one scale (``feature_norm``, ``score_norm``)."""
        parts = []
        if self.params.feature_norm == "spread":
            parts.append(
                "each client's memory features are divided by their spread on its own training "
                'images, set after every round (feature_norm = "spread")'
            )
        if self.params.score_norm == "train":
            parts.append(
                "each client's maps and scores are (raw - median) / interquartile range of its "
                'own training images\' raw scores (score_norm = "train")'
            )
        return "; ".join(parts) + "; no test data is used" if parts else None

    # -- server -----------------------------------------------------------------------------
    def _aggregate(self, ctx: ServerContext, replies: dict[int, Message], r: int) -> np.ndarray:
        """Algorithm 3 over the replies' banks; the global bank in ``bank_dtype``."""
        p = self.params
        ids = sorted(replies)
        bank = aggregate_banks(
            [replies[i].arrays[BANK] for i in ids],
            seed=int(seeded_rng(self.setup.seed, r, 0xA6).integers(2**31)),
            weights=[float(replies[i].scalars["num_examples"]) for i in ids],
            method=p.aggregation,
            order=p.bank_order,
        )
        return self._wire(bank)

    def server(self, ctx: ServerContext) -> ServerResult:
        spec = self.bank_spec()
        bank: np.ndarray | None = None
        for r in range(1, ctx.rounds + 1):
            if bank is None:  # Algorithm 4 (repeated next round if nobody answered)
                init = ctx.send(
                    {i: Message(INIT, {}, {}) for i in ctx.sample()},
                    arrays=spec,
                    scalars=["num_examples"],
                )
                if not init:
                    ctx.event("no valid init replies; initialisation is repeated next round")
                    ctx.end_round(r)
                    continue
                bank = self._aggregate(ctx, init, 0)
            meta = {"round": r, "last": float(r == ctx.rounds)}
            if self.params.lr_schedule == "cosine":
                meta["lr_scale"] = cosine_factor(r, ctx.rounds)
            msgs = {i: Message(TRAIN, {BANK: bank}, dict(meta)) for i in ctx.sample()}
            replies = ctx.send(msgs, arrays=spec, scalars=["num_examples", "loss", "scale"])
            if replies:
                bank = self._aggregate(ctx, replies, r)
                log_weighted_scalars(ctx, replies, ["loss", "scale"])
            else:
                ctx.event("no valid replies; the global bank is unchanged")
            close_round(ctx, r, ServerResult({BANK: bank}, {}), eval_last=False)
        if bank is None:
            raise RuntimeError("FedDyMem: no client ever answered the initialisation")
        return ServerResult({BANK: bank}, {})
