"""The PatchCore-style detector ``patchcore``: FedDyMem's "all parameters aggregated" baseline.

PatchCore (Roth et al., CVPR 2022) scores an image patch by its distance to the nearest
entry of a memory bank of normal training patches. Here, on the same frozen multi-level
features as FedDyMem (:mod:`fedad.resources.multilevel`, [FedDyMem eq. 8]) followed by
PatchCore's local neighbourhood aggregation (3x3 average pooling):

* the **frozen features** of images resized to ``image_size`` (the generic methods: the
  images' own side kept within [64, 224], as FedDyMem's), computed once per set of images
  and process (:func:`_cache_features`: a client's images are not re-encoded every round);
  the backbone is never part of the arrays or of a message;
* a trainable **projection**, a 1x1 convolution initialised to the identity and kept
  linear (no activation), so that the untrained detector is PatchCore exactly;
* a **memory bank** of projected training patches: PatchCore's greedy k-center coreset
  (a seeded random projection to 128 dimensions for the selection) of ``coreset`` (10%) of
  the patches, at most :data:`MAX_BANK` entries;
* **training** of the projection with FedDyMem's metric loss [FedDyMem eq. 12] (the mean
  over patches and their K = 3 nearest bank entries of max(0, distance - 0.01)) against a
  bank rebuilt from the current projection at the start of every training call (a seeded
  random 10% of the patches there, at most 1,024: the greedy coreset and a full-size bank
  cost seconds per call), each batch's loss on a random 512 of its patches (an unbiased
  estimate of the mean); Adam, lr 1e-3, weight decay 5e-4, batches of 10 images. The loss
  pulls patches towards their neighbours, so its minimum is a collapsed feature space, and
  it does shrink it: measured on two texture types (120 training images, 128 pixels, 10
  epochs), the loss fell from 17.3 to 11.9, the patches' spread by half and the projection's
  smallest singular value from 1 to 0.06, normal test scores by 31% and defective ones by
  9%; image and pixel AUROC stayed (1.000, 0.988 -> 0.985). A slow, partial collapse that
  costs nothing there, not hidden: longer training keeps shrinking it (weight decay too);
* **scoring** as FedDyMem's (:mod:`fedad.components.nn.patchscore`): nearest-bank distance maps,
  bilinear upsampling, Gaussian smoothing with sigma 4, image score the maximum.
* **threshold** from held-out scores (:meth:`PatchCoreDetector.training_scores`): each half
  of the training images scored against a coreset bank of the other half, since against a
  bank of their own patches training images score far below unseen normal ones.

In ``fedavg``/``fedprox`` only the projection travels; each client's final detector is the
global projection with a coreset bank of its own training images, computed on the client
(personalised, like the ``contrastive`` detector). ``centralized``: the pooled data's bank.
``local``: each client's own projection and bank.

Arrays: the projection (``weight``, ``bias``), ``bank_`` and ``threshold_``.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal, Self

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from torch import nn

from fedad.components.detectors.neural import MAX_FEATURES, TorchDetector, TorchDetectorParams
from fedad.components.nn.patchscore import anomaly_maps, image_scores, knn_distances
from fedad.core.detector import register_detector
from fedad.core.errors import ConfigError
from fedad.core.rng import rng as seeded_rng
from fedad.core.types import Features, dense
from fedad.resources.base import check_stages
from fedad.resources.multilevel import MultiLevelFeatures, check_backbone, stage_channels

PATCHCORE = "patchcore"
BANK = "bank_"
MAX_BANK = 16_384
"""Most entries of a coreset bank."""
TRAIN_BANK_SHARE = 0.1
LOSS_PATCHES = 512
"""Patches per batch the loss is computed on (a random subset, when a batch has more)."""
TRAIN_BANK_MAX = 1024
"""The training bank: a random 10% of the patches, at most this many (the kNN of eq. 12
against every patch of every batch is the cost of a round)."""
SELECT_DIM = 128
PATCHCORE_BATCH = 10
"""Images per training batch by default (FedDyMem's); the generic methods' ``batch_size``
default (64) does not apply to this detector unless the config sets it."""
FEATURE_CACHE_BYTES = 1 << 30
"""Most bytes of frozen features kept in memory (per process, over all detectors)."""

_FEATURES: OrderedDict[tuple[Any, ...], np.ndarray] = OrderedDict()
_FEATURES_LOCK = threading.Lock()


def _cached_features(key: tuple[Any, ...]) -> np.ndarray | None:
    with _FEATURES_LOCK:
        hit = _FEATURES.get(key)
        if hit is not None:
            _FEATURES.move_to_end(key)
        return hit


def _cache_features(key: tuple[Any, ...], feats: np.ndarray) -> None:
    """Keep ``feats`` under ``key``, dropping the least recently used beyond
    :data:`FEATURE_CACHE_BYTES` (an array larger than that is not kept)."""
    if feats.nbytes > FEATURE_CACHE_BYTES:
        return
    with _FEATURES_LOCK:
        _FEATURES[key] = feats
        _FEATURES.move_to_end(key)
        total = sum(v.nbytes for v in _FEATURES.values())
        while total > FEATURE_CACHE_BYTES:
            _, old = _FEATURES.popitem(last=False)
            total -= old.nbytes


def _images(x: Features) -> np.ndarray:
    """``x`` as a contiguous float32 image array (one-line error for other data)."""
    return np.ascontiguousarray(dense(x, "the patchcore detector"), dtype=np.float32)


def clear_feature_cache() -> None:
    """Forget every cached feature array (tests; memory)."""
    with _FEATURES_LOCK:
        _FEATURES.clear()


Backbone = Literal["efficientnet-lite0", "wide_resnet50_2"]
BACKBONE: Backbone = "efficientnet-lite0"
DEFAULT_STAGES: dict[str, tuple[int, ...]] = {
    "efficientnet-lite0": (3, 5),
    "wide_resnet50_2": (2, 3),
}
"""Fused stages by default: stride 8 and 16 (PatchCore's WRN-50 ``layer2`` and ``layer3``).
``stages`` picks others, e.g. stride 4: ``[2, 3, 5]`` (EfficientNet-Lite0) or ``[1, 2, 3]``
(WRN-50, the FedDyMem paper's levels)."""
DEFAULT_CORESET = 0.1
MIN_IMAGE_SIZE, MAX_IMAGE_SIZE = 32, 1024
"""Bounds of the ``image_size`` method key (the ``pretrained`` detector's too)."""


class PatchCoreOptions(BaseModel):
    """``[methods.params]`` of the generic methods that apply to ``detector = "patchcore"``.

    All default to ``None`` (= the detector's default), so they do not appear in the
    resolved config of runs with another detector; setting one with another detector is an
    error (:func:`check_patchcore`). ``image_size`` is shared with ``detector =
    "pretrained"`` (:class:`~fedad.components.detectors.pretrained.PretrainedOptions`).
    """

    model_config = ConfigDict(extra="forbid")

    backbone: Backbone | None = Field(
        default=None, description="frozen feature extractor (default efficientnet-lite0)"
    )
    backbone_path: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="torchvision weights file of wide_resnet50_2",
    )
    coreset: float | None = Field(
        default=None,
        gt=0.0,
        le=1.0,
        description=f"share of training patches kept in the bank (default {DEFAULT_CORESET})",
    )
    stages: list[int] | None = Field(
        default=None,
        min_length=1,
        max_length=7,
        description="backbone stages fused (default: stride 8 and 16; [2, 3, 5]: stride 4)",
    )
    image_size: int | None = Field(
        default=None,
        ge=MIN_IMAGE_SIZE,
        le=MAX_IMAGE_SIZE,
        description="backbone input side (default: the images' side kept within [64, 224])",
    )


PATCHCORE_OPTIONS = tuple(PatchCoreOptions.model_fields)
SHARED_OPTIONS = ("image_size",)
"""Keys of :class:`PatchCoreOptions` that the ``pretrained`` detector takes too."""


def check_patchcore(method: str, detector: str | None, takes: tuple[str, ...], params: Any) -> None:
    """One-line :class:`ConfigError` when ``params`` set a ``patchcore`` key that does not
    apply: with another detector (``image_size`` is also ``pretrained``'s, when the method
    ``takes`` that detector), or ``backbone_path`` without ``backbone = "wide_resnet50_2"``
    and that backbone without its weights file
    (:func:`~fedad.resources.multilevel.check_backbone`)."""
    given = [f for f in PATCHCORE_OPTIONS if getattr(params, f, None) is not None]
    if detector != PATCHCORE:
        for f in given:
            owners = [PATCHCORE] + (
                ["pretrained"] if f in SHARED_OPTIONS and "pretrained" in takes else []
            )
            if detector in owners:
                continue
            names = " and ".join(f"'{o}'" for o in owners)
            usable = [f'"{o}"' for o in owners if o in takes]
            raise ConfigError(
                f"parameter '{f}' of method '{method}' applies to detector"
                f"{'s' if len(owners) > 1 else ''} {names} only",
                f"remove it or set detector = {' or '.join(usable)}" if usable else "remove it",
            )
        return
    backbone = getattr(params, "backbone", None) or "efficientnet-lite0"
    check_backbone(method, backbone, getattr(params, "backbone_path", None))
    stages = getattr(params, "stages", None)
    if stages is not None:
        count = len(stage_channels(backbone))
        try:
            check_stages(tuple(stages), count)
        except ValueError as err:
            raise ConfigError(
                f"parameter 'stages' of method '{method}': {err} for {backbone}",
                f"give increasing stage numbers in 1..{count}, e.g. [3, 5]",
            ) from None


class PatchCoreParams(TorchDetectorParams):
    """The ``__init__`` arguments of :class:`PatchCoreDetector`, as a checkpoint may give them."""

    kind: Literal["vector", "image", "graph"] = "image"
    input_shape: list[Annotated[int, Field(ge=1, le=MAX_FEATURES)]] = Field(
        default=[3, 128, 128], min_length=3, max_length=3
    )
    epochs: int = Field(default=1, ge=0, le=1_000_000)
    batch_size: int = Field(default=10, ge=1, le=1 << 24)
    backbone: Backbone = "efficientnet-lite0"
    backbone_path: str | None = Field(default=None, max_length=4096)
    image_size: int = Field(default=128, ge=8, le=1024)
    coreset: float = Field(default=DEFAULT_CORESET, gt=0.0, le=1.0)
    stages: tuple[int, ...] | None = Field(default=None, min_length=1, max_length=7)

    @field_validator("stages")
    @classmethod
    def _stages(cls, v: tuple[int, ...] | None, info: ValidationInfo) -> tuple[int, ...] | None:
        if v is not None:
            check_stages(tuple(v), len(stage_channels(info.data.get("backbone", BACKBONE))))
        return v

    @field_validator("kind")
    @classmethod
    def _images(cls, kind: str) -> str:
        if kind != "image":
            raise ValueError("the patchcore detector takes images")
        return kind


CDIST_MM_ROWS = 25
"""``torch.cdist`` (p = 2, its default compute mode) uses the matrix-product form above this
many rows."""


def distances_to_one(x: torch.Tensor) -> Callable[[int], torch.Tensor]:
    """``i -> torch.cdist(x, x[i : i + 1])[:, 0]``, bit for bit, at a fraction of the cost.

    Above :data:`CDIST_MM_ROWS` rows ``torch.cdist`` computes
    ``sqrt(max(0, [-2x, |x|^2, 1] @ [y, 1, |y|^2]^T))`` and rebuilds the left factor, a pass
    over all of ``x``, at every call; here it is built once (the greedy coreset asks for one
    column per selected patch: 16,384 calls on 184,320 pooled patches). Below, it is
    ``torch.cdist`` itself."""
    if x.shape[0] <= CDIST_MM_ROWS:
        return lambda i: torch.cdist(x, x[i : i + 1])[:, 0]
    norm = x.pow(2).sum(-1, keepdim=True)
    left = torch.cat([x.mul(-2), norm, torch.ones_like(norm)], -1)

    def one(i: int) -> torch.Tensor:
        y = x[i : i + 1]
        y_norm = y.pow(2).sum(-1, keepdim=True)
        right = torch.cat([y, torch.ones_like(y_norm), y_norm], -1)
        return left.matmul(right.mT).clamp_min_(0).sqrt_()[:, 0]

    return one


def greedy_coreset(patches: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    """Indices of ``n`` patches chosen by greedy k-center selection (PatchCore's coreset):
    start from a seeded random patch, then repeatedly add the patch farthest from the chosen
    ones, distances measured after a seeded Gaussian random projection to 128 dimensions.

    Shapes: ``(P, C)`` -> ``(n,)`` int64.
    """
    p = int(patches.shape[0])
    n = min(n, p)
    g = torch.Generator().manual_seed(seed % (2**63))
    x = patches
    if x.shape[1] > SELECT_DIM:
        proj = torch.randn(x.shape[1], SELECT_DIM, generator=g) / math.sqrt(SELECT_DIM)
        x = x @ proj.to(x)
    distance_to = distances_to_one(x)
    chosen = torch.empty(n, dtype=torch.int64)
    chosen[0] = int(torch.randint(p, (1,), generator=g))
    dist = distance_to(int(chosen[0]))
    for i in range(1, n):
        chosen[i] = int(dist.argmax())
        dist = torch.minimum(dist, distance_to(int(chosen[i])))
    return chosen


@register_detector(PATCHCORE)
class PatchCoreDetector(TorchDetector):
    """Frozen patch features, a trainable identity-initialised projection, a coreset bank."""

    name = PATCHCORE
    ParamsModel = PatchCoreParams
    params: PatchCoreParams
    default_weight_decay = 5e-4
    bank_: np.ndarray
    _arrays_only: ClassVar[tuple[str, ...]] = ("threshold_", BANK)

    def __init__(self, *, device: str = "cpu", **params: Any) -> None:
        """``params``: fields of :class:`PatchCoreParams` (``stages``: default, the
        backbone's)."""
        super().__init__(device=device, **params)
        p = self.params
        if p.kind != "image":
            raise ValueError("the patchcore detector takes images")
        stages = tuple(p.stages) if p.stages else DEFAULT_STAGES[p.backbone]
        self.params = p.model_copy(update={"stages": stages})
        self._version = 0
        """Bumped whenever the projection or the bank changes (invalidates the map memo)."""
        self._memo: tuple[tuple[Any, ...], np.ndarray] | None = None

    def get_params(self) -> dict[str, Any]:
        """:meth:`BaseDetector.get_params` with ``stages`` as a list (as checkpoints hold it)."""
        params = super().get_params()
        params["stages"] = list(self.stages)
        return params

    @property
    def stages(self) -> tuple[int, ...]:
        """The backbone stages the features come from (resolved: never ``None``)."""
        return tuple(self.params.stages or DEFAULT_STAGES[self.params.backbone])

    def extractor(self) -> MultiLevelFeatures:
        return MultiLevelFeatures(
            self.params.backbone,
            self.stages,
            self.params.image_size,
            self.params.backbone_path,
            self.device,
        )

    def build(self) -> Self:
        super().build()
        self._changed()
        return self

    def expected_input(self) -> tuple[str, tuple[int, ...]] | None:
        """Not declared: images of any size are resized for the backbone."""
        return None

    def _make_model(self, latent: int) -> nn.Module:
        c = self.extractor().channels
        conv = nn.Conv2d(c, c, 1)
        with torch.no_grad():
            conv.weight.copy_(torch.eye(c).view(c, c, 1, 1))
        assert conv.bias is not None
        nn.init.zeros_(conv.bias)
        return conv

    def loss(self, batch: torch.Tensor) -> torch.Tensor:  # pragma: no cover - own loop
        raise NotImplementedError("PatchCoreDetector trains on cached features")

    # -- features ------------------------------------------------------------------------------
    def _key(self, xs: np.ndarray) -> tuple[Any, ...]:
        digest = hashlib.blake2b(xs.tobytes(), digest_size=16).digest()
        return (
            self.params.backbone,
            self.stages,
            self.params.backbone_path,
            self.params.image_size,
            xs.shape,
            digest,
        )

    def features(self, x: Features) -> np.ndarray:
        """Frozen features ``(n, C, h, w)`` after 3x3 average pooling (PatchCore's local
        neighbourhood aggregation). Computed once per set of images and kept in a
        process-wide cache (at most :data:`FEATURE_CACHE_BYTES`), keyed by the backbone, the
        resize side and a hash of the images: the backbone is frozen, so a client's images
        go through it once in a run, not once per round. Do not modify the result."""
        xs = _images(x)
        key = self._key(xs)
        hit = _cached_features(key)
        if hit is None:
            f = torch.from_numpy(self.extractor()(xs))
            hit = F.avg_pool2d(f, 3, stride=1, padding=1, count_include_pad=False).numpy()
            _cache_features(key, hit)
        return hit

    def _changed(self) -> None:
        self._version += 1
        self._memo = None

    def _project(self, feats: np.ndarray, grad: bool = False) -> torch.Tensor:
        dev = next(self.model_.parameters()).device
        with torch.set_grad_enabled(grad):
            out: torch.Tensor = self.model_(torch.as_tensor(feats).to(dev))
        return out

    def _patches(self, feats: np.ndarray) -> torch.Tensor:
        parts = [
            self._project(feats[i : i + 64]).permute(0, 2, 3, 1).flatten(0, 2)
            for i in range(0, len(feats), 64)
        ]
        return torch.cat(parts)

    # -- bank ----------------------------------------------------------------------------------
    def set_bank(self, x: Features) -> Self:
        """The coreset bank of ``x``'s projected patches (the data whose patches count as
        normal: the holder's training images)."""
        self._ensure_built()
        self.bank_ = self._coreset_bank(self.features(x))
        self._changed()
        return self

    def _coreset_bank(self, feats: np.ndarray) -> np.ndarray:
        """The greedy coreset of ``coreset`` of the projected patches of ``feats``."""
        patches = self._patches(feats).cpu()
        n = min(MAX_BANK, max(1, math.ceil(self.params.coreset * len(patches))))
        idx = greedy_coreset(patches, n, int(seeded_rng(self.params.seed, 0xC0E).integers(2**62)))
        return patches[idx].numpy().astype(np.float32)

    def training_scores(self, x_train: Features) -> np.ndarray:
        """Held-out scores of the training images for the threshold: the images split in two
        halves at random (seeded), each half scored against a coreset bank of the other
        half's patches. Scored against a bank that holds their own patches, training images
        score far below unseen normal ones (a coreset covers its own patches), and a
        threshold from those scores flags nearly every test image; scores against a bank of
        half the images are slightly above the full bank's (a conservative threshold).
        Fewer than two images: :meth:`score`."""
        xs = _images(x_train)
        if len(xs) < 2:
            return self.score(xs)
        self._ensure_built()
        feats = self.features(xs)
        order = seeded_rng(self.params.seed, 0x7E1D).permutation(len(xs))
        halves = (np.sort(order[: len(xs) // 2]), np.sort(order[len(xs) // 2 :]))
        size = (int(xs.shape[2]), int(xs.shape[3]))
        out = np.empty(len(xs), dtype=np.float64)
        for held, kept in (halves, halves[::-1]):
            maps = self._maps(feats[held], self._coreset_bank(feats[kept]), size)
            out[held] = image_scores(torch.from_numpy(maps)).double().numpy()
        return out

    # -- training ------------------------------------------------------------------------------
    def train_epochs(
        self, x: Features, epochs: int, rng: np.random.Generator, prox_mu: float = 0.0
    ) -> float:
        """``epochs`` of [FedDyMem eq. 12] against a bank of a random 10% (at most 1,024) of
        the current projected patches (with the FedProx term around the starting weights when
        ``prox_mu > 0``); the last epoch's mean loss."""
        self._ensure_built()
        feats = self.features(x)
        patches = self._patches(feats)
        take = min(TRAIN_BANK_MAX, max(1, math.ceil(TRAIN_BANK_SHARE * len(patches))))
        bank = patches[torch.from_numpy(rng.permutation(len(patches))[:take])].detach()
        params = list(self.model_.parameters())
        anchor = [p.detach().clone() for p in params]
        wd = (
            self.default_weight_decay
            if self.params.weight_decay is None
            else self.params.weight_decay
        )
        opt = torch.optim.Adam(params, lr=self.params.lr, weight_decay=wd)
        last = 0.0
        self.model_.train()
        for _ in range(epochs):
            order = rng.permutation(len(feats))
            total = 0.0
            for s in range(0, len(order), self.params.batch_size):
                idx = np.sort(order[s : s + self.params.batch_size])
                out = self._project(feats[idx], grad=True).permute(0, 2, 3, 1).flatten(0, 2)
                if len(out) > LOSS_PATCHES:  # an unbiased estimate of eq. 12's mean
                    out = out[torch.from_numpy(rng.permutation(len(out))[:LOSS_PATCHES])]
                loss = torch.clamp(knn_distances(out, bank, 3) - 0.01, min=0.0).mean()
                objective = loss
                if prox_mu > 0:
                    prox = sum(((p - a) ** 2).sum() for p, a in zip(params, anchor, strict=True))
                    objective = loss + 0.5 * prox_mu * prox
                opt.zero_grad(set_to_none=True)
                objective.backward()  # type: ignore[no-untyped-call]
                opt.step()
                total += float(loss.detach()) * len(idx)
            last = total / max(len(feats), 1)
        self.model_.eval()
        if hasattr(self, "bank_"):
            del self.bank_  # the projection changed: the bank must be rebuilt
        self._changed()
        return last

    def fit(self, x: Features) -> Self:
        self.build()
        self.train_epochs(x, self.params.epochs, np.random.default_rng(self.params.seed))
        self.set_bank(x)
        return self.set_threshold(x)  # type: ignore[arg-type]

    # -- scoring -------------------------------------------------------------------------------
    def score_maps(self, x: np.ndarray) -> np.ndarray:
        """Anomaly maps ``(N, H, W)`` float32 at the images' resolution."""
        if not hasattr(self, "bank_"):
            raise RuntimeError("PatchCoreDetector has no memory bank: call set_bank or fit")
        xs = _images(x)
        key = (self._version, *self._key(xs))
        if self._memo is not None and self._memo[0] == key:
            return self._memo[1].copy()  # score and score_maps of one test set: one kNN
        result = self._maps(self.features(xs), self.bank_, (int(xs.shape[2]), int(xs.shape[3])))
        self._memo = (key, result)
        return result.copy()

    def _maps(self, feats: np.ndarray, bank: np.ndarray, size: tuple[int, int]) -> np.ndarray:
        """Anomaly maps ``(N, H, W)`` float32 of frozen features ``feats`` against ``bank``,
        32 images at a time."""
        on = torch.as_tensor(bank, device=next(self.model_.parameters()).device)
        out = []
        with torch.no_grad():
            for s in range(0, len(feats), 32):
                maps = anomaly_maps(self._project(feats[s : s + 32]), on, size)
                out.append(maps.float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, *size), np.float32)

    def score(self, x: Features) -> np.ndarray:
        """The image score: the maximum of the anomaly map."""
        maps = torch.from_numpy(self.score_maps(dense(x, "the patchcore detector")))
        return image_scores(maps).double().numpy()

    # -- persistence ---------------------------------------------------------------------------
    def get_arrays(self) -> dict[str, np.ndarray]:
        out = super().get_arrays()
        if hasattr(self, "bank_"):
            out[BANK] = self.bank_.copy()
        return out

    def model_arrays(self) -> dict[str, np.ndarray]:
        return {k: v for k, v in self.get_arrays().items() if k not in self._arrays_only}

    def set_arrays(self, arrays: dict[str, np.ndarray]) -> Self:
        bank = arrays.get(BANK)
        super().set_arrays({k: v for k, v in arrays.items() if k != BANK})
        if bank is not None:
            b = np.asarray(bank, dtype=np.float32)
            c = self.extractor().channels
            if b.ndim != 2 or b.shape[1] != c or not 1 <= b.shape[0] <= MAX_BANK:
                raise ValueError(f"bank_ must be (n <= {MAX_BANK}, {c}), got {b.shape}")
            if not np.isfinite(b).all():
                raise ValueError("bank_ holds non-finite values")
            self.bank_ = b
        self._changed()
        return self
