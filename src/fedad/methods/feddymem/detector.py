"""FedDyMem's detector ``feddymem``: nearest-memory distance maps [FedDyMem Sec. IV, Fig. 9].

A test image goes through the frozen backbone (multi-level features, eq. 8), the client's
projection and memory generator (eq. 9-11); each patch's memory feature is scored by its
Euclidean distance to the nearest entry of the global memory bank; the patch map is
upsampled to the image and smoothed with a Gaussian of sigma 4
(:mod:`fedad.components.nn.patchscore`); the image score is the map's maximum. ``threshold_``
comes from the training images' scores.

Stand-alone (:meth:`FedDyMemDetector.fit`) it is FedDyMem with one client: the bank of
Algorithm 4 from its own data, then ``epochs`` rounds of local training (eq. 12) and
memory-reduce (Algorithm 2); with one client the aggregation of Algorithm 3 returns the
client's bank unchanged.

Optional ``score_norm = "train"`` (not in the paper; off by default): every client's maps,
and so its image scores, are put on the scale of its own normal training images, ``(map -
m) / q``, with ``m`` the median and ``q`` the interquartile range of the raw image scores of
the detector's own training images (:meth:`FedDyMemDetector.calibrate`). A monotone map per
detector, so a client's own ranking, AUROC and flags are unchanged; what changes is how the
scores of different clients compare when they are pooled: each client's networks are its
own, so raw distances are on per-client scales.

Arrays: ``net.*`` (projection and generator), ``bank`` ``(K, C)``, ``threshold_``, and with
``score_norm = "train"`` ``score_loc_`` and ``score_scale_``. The backbone is a named
resource or a user's weights file and is never stored.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Annotated, Any, Literal, Self

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import AfterValidator, ConfigDict, Field, ValidationInfo, field_validator

from fedad.components.nn.patchscore import anomaly_maps, image_scores
from fedad.core.detector import (
    DEFAULT_CONTAMINATION,
    BaseDetector,
    DetectorParams,
    register_detector,
)
from fedad.core.rng import rng as seeded_rng
from fedad.core.rng import torch_seeded
from fedad.devices import resolve_device
from fedad.methods.feddymem.memory import memory_reduce
from fedad.methods.feddymem.model import FedDyMemNet
from fedad.methods.feddymem.train import feature_scale, memory_features, train_epoch
from fedad.resources.base import check_stages
from fedad.resources.multilevel import MultiLevelFeatures, stage_channels

THRESHOLD = "threshold_"
BANK = "bank"
LOC = "score_loc_"
SCALE = "score_scale_"
SCALE_REF = "scale_ref_"
"""The memory features' scale before training: the reference of the scale floor."""
ScoreNorm = Literal["none", "train"]
FeatureNorm = Literal["none", "spread"]
NET = "net."
DEFAULT_STAGES = {"efficientnet-lite0": (3, 5), "wide_resnet50_2": (2, 3)}
"""Mid-level stages per backbone: stride 8 and 16, PatchCore's WRN-50 ``layer2`` and
``layer3``. Not the paper's: its 5.62M-float memory is 56 x 56 x 1792, WRN-50 layers 1-3 at
stride 4 (``stages = [1, 2, 3]`` with ``backbone = "wide_resnet50_2"``; with EfficientNet-Lite0
``[2, 3, 5]``: 24 + 40 + 112 channels at stride 4). The bank has one entry per position, so
stride 4 makes it, and every upload, 4 times larger (1,024 entries at 128 pixels)."""

Backbone = Literal["efficientnet-lite0", "wide_resnet50_2"]


def _odd_side(v: int) -> int:
    if v % 2 != 1:
        raise ValueError("neighbourhood must be an odd side (1: none, 3: 3 x 3)")
    return v


OddSide = Annotated[int, AfterValidator(_odd_side)]
"""A window's side: odd, so that it has a centre. Part of the type, so that a method's
params that share the field (:func:`fedad.core.detector.shared_field`) check it too."""


class FedDyMemDetectorParams(DetectorParams):
    """The ``__init__`` arguments of :class:`FedDyMemDetector`, as a checkpoint may give them."""

    model_config = ConfigDict(allow_inf_nan=False)

    backbone: Backbone = "efficientnet-lite0"
    backbone_path: str | None = Field(default=None, max_length=4096)
    stages: tuple[int, ...] | None = Field(default=None, min_length=1, max_length=7)
    image_size: int = Field(default=224, ge=8, le=1024)
    channels: int | None = Field(default=None, ge=1, le=4096)
    grid: int = Field(default=8, ge=1, le=256)
    k: int = Field(default=3, ge=1, le=1024)
    th: float = Field(default=0.01, ge=0.0, le=1e6)
    epochs: int = Field(default=10, ge=0, le=100_000)
    batch_size: int = Field(default=10, ge=1, le=1 << 16)
    lr: float = Field(default=1e-3, gt=0.0, le=10.0)
    weight_decay: float = Field(default=5e-4, ge=0.0, le=10.0)
    sigma: float = Field(default=4.0, ge=0.0, le=256.0)
    projection: bool = True
    generator: bool = True
    score_norm: ScoreNorm = "none"
    feature_norm: FeatureNorm = "none"
    keep_scale: float = Field(default=0.0, ge=0.0, le=1e6)
    neighbourhood: OddSide = Field(default=1, ge=1, le=7)
    contamination: float = Field(default=DEFAULT_CONTAMINATION, ge=0.0, lt=1.0)
    seed: int = Field(default=0, ge=0, le=2**63 - 1)

    @field_validator("stages")
    @classmethod
    def _increasing(cls, v: tuple[int, ...] | None, info: ValidationInfo) -> tuple[int, ...] | None:
        if v is not None and (list(v) != sorted(set(v)) or v[0] < 1):
            raise ValueError("stages must be increasing stage numbers from 1")
        if "backbone" in info.data:  # else the backbone's own error is reported
            check_backbone_stages(info.data["backbone"], v)
        return v


def check_backbone_stages(backbone: str, stages: Sequence[int] | None) -> None:
    """``ValueError`` unless ``stages`` (``None``: the default) are stages the backbone has:
    increasing numbers from 1 to its stage count (4 for wide_resnet50_2, 7 for
    efficientnet-lite0). Both schemas, a config's and a checkpoint's, check it."""
    if stages is not None:
        check_stages(tuple(stages), len(stage_channels(backbone)))


def neighbourhood_mean(features: np.ndarray, side: int) -> np.ndarray:
    """Each position's features averaged over its ``side`` x ``side`` neighbourhood (those
    inside the map: zero padding not counted), PatchCore's local neighbourhood aggregation
    (``avg_pool2d`` with stride 1, ``count_include_pad=False``); ``side = 1`` returns
    ``features`` unchanged. Shapes: ``(n, C, H, W)`` -> the same."""
    if side <= 1:
        return features
    f = torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32))
    out = F.avg_pool2d(f, side, stride=1, padding=side // 2, count_include_pad=False)
    return out.numpy()


@register_detector("feddymem")
class FedDyMemDetector(BaseDetector):
    """Frozen multi-level features, projection, memory generator, global memory bank."""

    ParamsModel = FedDyMemDetectorParams
    params: FedDyMemDetectorParams

    def __init__(self, *, device: str = "cpu", **params: Any) -> None:
        """``params``: fields of :class:`FedDyMemDetectorParams`, with ``stages`` (default:
        the backbone's) and ``channels`` (default, or without a projection: the input's)
        resolved; ``device`` is where it runs (not saved)."""
        super().__init__(**params)
        p = self.params
        stages = tuple(p.stages) if p.stages else DEFAULT_STAGES[p.backbone]
        self.cin = int(sum(stage_channels(p.backbone)[s - 1] for s in stages))
        channels = self.cin if p.channels is None or not p.projection else int(p.channels)
        self.params = p.model_copy(update={"stages": stages, "channels": channels})
        self.device = device
        self._cache: dict[bytes, np.ndarray] = {}

    def get_params(self) -> dict[str, Any]:
        """:meth:`BaseDetector.get_params` with ``stages`` as a list (as checkpoints hold it)."""
        params = super().get_params()
        params["stages"] = list(self.params.stages or ())
        return params

    @property
    def stages(self) -> tuple[int, ...]:
        """The backbone stages the features come from (resolved: never ``None``)."""
        return tuple(self.params.stages or DEFAULT_STAGES[self.params.backbone])

    @property
    def channels(self) -> int:
        """The memory's channels (resolved: never ``None``)."""
        return int(self.params.channels or self.cin)

    # -- frozen features ---------------------------------------------------------------------
    def extractor(self) -> MultiLevelFeatures:
        return MultiLevelFeatures(
            self.params.backbone,
            self.stages,
            self.params.image_size,
            self.params.backbone_path,
            resolve_device(self.device),
        )

    @property
    def bank_size(self) -> int:
        """``K = H x W``: entries of a memory bank (one per position of the patch grid)."""
        return int(self.extractor().side ** 2)

    def features(self, x: np.ndarray) -> np.ndarray:
        """Frozen fused features ``(n, C_in, H, W)`` of images ``x``, averaged over each
        position's ``neighbourhood`` x ``neighbourhood`` neighbours when that is above 1
        (:func:`neighbourhood_mean`, PatchCore's local aggregation); the last few inputs'
        are kept (the backbone is the expensive part and never changes)."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        hit = self._cache.get(self._key(x))
        if hit is None:
            hit = neighbourhood_mean(self.extractor()(x), self.params.neighbourhood)
            self.remember(x, hit)
        return hit

    @staticmethod
    def _key(x: np.ndarray) -> bytes:
        return hashlib.blake2b(x.tobytes(), digest_size=16).digest() + str(x.shape).encode()

    def remember(self, x: np.ndarray, features: np.ndarray) -> None:
        """Keep ``features`` as :meth:`features` of ``x`` (they must be: e.g. a client's
        training images' features kept in its state), so they are not recomputed."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        if len(self._cache) >= 4:
            self._cache.pop(next(iter(self._cache)))
        self._cache[self._key(x)] = features

    # -- networks ----------------------------------------------------------------------------
    def build(self) -> Self:
        """``net_`` with seeded initial weights (on the CPU, so equal on every device)."""
        with torch_seeded(self.params.seed):
            net = FedDyMemNet(
                self.cin,
                self.channels,
                self.params.grid,
                self.params.projection,
                self.params.generator,
                spread=self.params.feature_norm == "spread",
            )
        self.net_ = net.to(resolve_device(self.device)).eval()
        if hasattr(self, SCALE_REF):
            del self.scale_ref_  # the reference belongs to the networks it was measured on
        return self

    def _ensure_built(self) -> None:
        if not hasattr(self, "net_"):
            self.build()

    def optimizer(self, lr_scale: float = 1.0) -> torch.optim.Optimizer | None:
        """Adam, lr 1e-3 (times ``lr_scale``, a schedule's factor), weight decay 5e-4
        [FedDyMem Sec. VI-A3]; ``None`` when nothing trains."""
        self._ensure_built()
        params = list(self.net_.parameters())
        if not params:
            return None
        lr = self.params.lr * lr_scale
        return torch.optim.Adam(params, lr=lr, weight_decay=self.params.weight_decay)

    def memories(self, features: np.ndarray) -> np.ndarray:
        """Memory features ``(n, K, C)`` of frozen features (Algorithm 1)."""
        self._ensure_built()
        return memory_features(self.net_, features, device=self._dev())

    def _dev(self) -> torch.device:
        return next(iter(self.net_.parameters()), torch.zeros(0)).device

    def train_epochs(
        self, features: np.ndarray, epochs: int, rng: np.random.Generator, lr_scale: float = 1.0
    ) -> float:
        """``epochs`` of eq. 12 (plus ``keep_scale`` times the scale floor) against
        ``bank_`` with Adam at ``lr_scale`` times ``lr``; the last epoch's mean loss (0 if
        nothing trains, e.g. both ablations on).

        The floor's reference ``scale_ref_`` is the scale of the memory features of
        ``features`` (the training images) with the networks as they are at the first call,
        i.e. before any training; it is kept (and saved) with the networks. The spread is
        not refreshed here: :meth:`spread_memories` does, with the features memory-reduce
        needs."""
        opt = self.optimizer(lr_scale)
        loss = 0.0
        if opt is None:
            return loss
        if not hasattr(self, SCALE_REF):
            self.scale_ref_ = feature_scale(self.memories(features))
        for _ in range(epochs):
            loss = train_epoch(
                self.net_,
                opt,
                features,
                self.bank_,
                k=self.params.k,
                th=self.params.th,
                batch_size=self.params.batch_size,
                keep_scale=self.params.keep_scale,
                scale_ref=self.scale_ref_,
                rng=rng,
                device=self._dev(),
            )
        return loss

    def _set_spread(self, features: np.ndarray) -> tuple[np.ndarray, torch.Tensor] | None:
        """:meth:`set_spread`; the undivided memory features the spread was measured on and
        the spread buffer (``None`` without a spread)."""
        self._ensure_built()
        spread = self.net_.spread
        if self.params.feature_norm != "spread" or spread is None:
            return None
        spread.fill_(1.0)
        undivided = self.memories(features)
        spread.fill_(max(feature_scale(undivided), 1e-30))
        return undivided, spread

    def set_spread(self, features: np.ndarray) -> Self:
        """With ``feature_norm = "spread"``: ``net_.spread`` set to the spread
        (:func:`~fedad.methods.feddymem.train.feature_scale`) of the networks' undivided
        memory features of ``features`` (the training images', never test data), as the
        networks are now; floored at 1e-30. A no-op otherwise."""
        self._set_spread(features)
        return self

    def spread_memories(self, features: np.ndarray) -> np.ndarray:
        """:meth:`set_spread`, then the memory features of ``features`` as the networks now
        give them (Algorithm 1), from the same pass: the undivided features divided by the
        new spread as the networks' forward divides them (bit for bit). Call it after
        training, before memory-reduce (Algorithm 2)."""
        measured = self._set_spread(features)
        if measured is None:
            return self.memories(features)
        undivided, spread = measured
        return (torch.from_numpy(undivided) / spread.cpu()).numpy()

    def fit(self, x: np.ndarray) -> Self:
        """FedDyMem with one client: Algorithm 4, then ``epochs`` x (eq. 12, Algorithm 2)."""
        feats = self.features(x)
        self.bank_ = memory_reduce(self.build().spread_memories(feats), None, 0)
        rng = seeded_rng(self.params.seed, 0xFD)
        for t in range(1, self.params.epochs + 1):
            self.train_epochs(feats, 1, rng)
            self.bank_ = memory_reduce(self.spread_memories(feats), self.bank_, t)
        return self.calibrate(x).set_threshold(x)

    def calibrate(self, x: np.ndarray) -> Self:
        """With ``score_norm = "train"``: ``score_loc_`` and ``score_scale_``, the median and
        the interquartile range of the raw image scores of ``x``, the detector's own normal
        training images (never test data); from then on maps and scores are ``(raw - loc) /
        scale``. Call it after the networks and the bank are final. A no-op otherwise.

        The scale is floored at 1e-6 of the median's magnitude (and at 1e-12), so that a
        client whose training scores are all equal gets a finite transform."""
        if self.params.score_norm != "train":
            return self
        for attr in (LOC, SCALE):
            if hasattr(self, attr):
                delattr(self, attr)
        raw = self.score(x)
        if raw.size == 0:
            raise ValueError("score_norm = 'train' needs at least one training image")
        q25, med, q75 = np.quantile(raw, [0.25, 0.5, 0.75])
        self.score_loc_ = float(med)
        self.score_scale_ = float(max(q75 - q25, 1e-6 * abs(med), 1e-12))
        return self

    # -- scoring -----------------------------------------------------------------------------
    def score_maps(self, x: np.ndarray) -> np.ndarray:
        """Anomaly maps ``(N, H, W)`` float32 at the images' resolution."""
        if not hasattr(self, "bank_"):
            raise RuntimeError("FedDyMemDetector has no memory bank: fit it or set its arrays")
        if x.ndim != 4:
            raise ValueError(f"expected images (N, C, H, W), got shape {x.shape}")
        self._ensure_built()
        feats = self.features(x)
        dev = self._dev()
        bank = torch.as_tensor(self.bank_, dtype=torch.float32, device=dev)
        out = []
        with torch.no_grad():
            for s in range(0, len(feats), 32):
                m = self.net_(torch.as_tensor(feats[s : s + 32]).to(dev))
                maps = anomaly_maps(m, bank, (int(x.shape[2]), int(x.shape[3])), self.params.sigma)
                out.append(maps.float().cpu().numpy())
        if not out:
            return np.zeros((0, int(x.shape[2]), int(x.shape[3])), np.float32)
        result = np.concatenate(out)
        if self.params.score_norm == "train" and hasattr(self, SCALE):
            result = ((result - self.score_loc_) / self.score_scale_).astype(np.float32)
        return result

    def score(self, x: np.ndarray) -> np.ndarray:
        """The image score: the maximum of the anomaly map."""
        maps = self.score_maps(x)
        return image_scores(torch.from_numpy(maps)).double().numpy()

    # -- persistence ---------------------------------------------------------------------------
    def get_arrays(self) -> dict[str, np.ndarray]:
        self._ensure_built()
        out = {NET + k: v.detach().cpu().numpy().copy() for k, v in self.net_.state_dict().items()}
        if hasattr(self, "bank_"):
            out[BANK] = np.asarray(self.bank_, dtype=np.float32).copy()
        if hasattr(self, SCALE_REF):
            out[SCALE_REF] = np.asarray(self.scale_ref_, dtype=np.float64)
        if hasattr(self, "threshold_"):
            out[THRESHOLD] = np.asarray(self.threshold_, dtype=np.float64)
        if hasattr(self, SCALE):
            out[LOC] = np.asarray(self.score_loc_, dtype=np.float64)
            out[SCALE] = np.asarray(self.score_scale_, dtype=np.float64)
        return out

    def set_net(self, arrays: dict[str, np.ndarray]) -> Self:
        """Load the network's tensors (``net.*``; every one, each with its exact shape)."""
        self._ensure_built()
        state = self.net_.state_dict()
        given = {k[len(NET) :]: v for k, v in arrays.items() if k.startswith(NET)}
        if set(given) != set(state):
            gap = sorted(set(state) ^ set(given))
            raise KeyError(f"FedDyMem detector arrays: missing or unknown tensor 'net.{gap[0]}'")
        spread = given.get("spread")
        if spread is not None and not (
            np.size(spread) == 1 and np.all(np.isfinite(spread)) and np.all(np.asarray(spread) > 0)
        ):
            raise ValueError("tensor 'net.spread' must be one finite number > 0")
        for key, value in given.items():
            t = torch.as_tensor(np.asarray(value, dtype=np.float32))
            if t.shape != state[key].shape:
                raise ValueError(
                    f"tensor 'net.{key}' has shape {tuple(t.shape)}, not {tuple(state[key].shape)}"
                )
            state[key].copy_(t)
        return self

    def set_bank(self, bank: np.ndarray) -> Self:
        """The global memory bank ``(K, C)``: finite, ``C`` the memory's channels."""
        b = np.asarray(bank, dtype=np.float32)
        if b.ndim != 2 or b.shape[1] != self.channels or b.shape[0] < 1:
            raise ValueError(f"bank must be (K, {self.channels}), got shape {b.shape}")
        if not np.isfinite(b).all():
            raise ValueError("bank holds non-finite values")
        self.bank_ = b
        return self

    def set_scale_ref(self, value: np.ndarray) -> Self:
        """The scale floor's reference: one finite number >= 0."""
        v = np.asarray(value, dtype=np.float64)
        if v.shape != () or not np.isfinite(v) or v < 0:
            raise ValueError(f"'{SCALE_REF}' must be one finite number >= 0")
        self.scale_ref_ = float(v)
        return self

    def set_arrays(self, arrays: dict[str, np.ndarray]) -> Self:
        self.build().set_net(arrays)
        if SCALE_REF in arrays:
            self.set_scale_ref(arrays[SCALE_REF])
        if BANK in arrays:
            self.set_bank(arrays[BANK])
        if THRESHOLD in arrays:
            t = np.asarray(arrays[THRESHOLD], dtype=np.float64)
            if t.shape != () or not np.isfinite(t):
                raise ValueError("threshold_ must be one finite number")
            self.threshold_ = float(t)
        given = [k for k in (LOC, SCALE) if k in arrays]
        if given and self.params.score_norm != "train":
            raise ValueError(f"'{given[0]}' is given, but score_norm is '{self.params.score_norm}'")
        if given:
            if len(given) != 2:
                raise ValueError(f"'{LOC}' and '{SCALE}' come together")
            loc = np.asarray(arrays[LOC], dtype=np.float64)
            scale = np.asarray(arrays[SCALE], dtype=np.float64)
            if loc.shape != () or scale.shape != () or not np.isfinite([loc, scale]).all():
                raise ValueError(f"'{LOC}' and '{SCALE}' must be single finite numbers")
            if scale <= 0:
                raise ValueError(f"'{SCALE}' must be positive")
            self.score_loc_, self.score_scale_ = float(loc), float(scale)
        elif self.params.score_norm == "train":
            raise ValueError(f"score_norm is 'train', but '{LOC}' and '{SCALE}' are missing")
        return self
