"""The ``contrastive`` detector: contrastive learning with rotation-shifted instances, CSI's
loss (Tack et al., NeurIPS 2020), scored by feature similarity to the training set. The CSI
baseline of FADngs's Table I.

Network: FADngs's encoder (:class:`fedad.components.nn.resnet.Encoder`), a small group-norm
ResNet :math:`f` (``width`` channels, default 16) and a projection head :math:`h`,
:math:`z(x) = h(f(x)) \\in \\mathbb{R}^D`, :math:`D` = ``latent_dim`` or 128.

Training: CSI's contrastive loss with shifted instances (:math:`\\mathcal L_{\\text{con-SI}}`,
Tack et al. 2020, eq. 4; its code's ``NT_xent`` over the rotated pairs). Per batch of
:math:`B` images, two normal-transform views :math:`T_+` of every sample (crop, flip,
jitter, blur or noise; :func:`fedad.components.augment.crad_views`), and each view
turned by 0, 90, 180 and 270 degrees: :math:`8B` views
(:func:`~fedad.components.augment.shifted_views`). Every
rotation of every sample is an *instance* of its own. With :math:`\\mathrm{sim}` the cosine
similarity and :math:`\\tau = 0.5`, every view :math:`v` is an anchor of

.. math::
    \\ell(v) = -\\log
        \\frac{\\exp(\\mathrm{sim}(z_v, z_{p(v)})/\\tau)}
             {\\sum_{a \\neq v} \\exp(\\mathrm{sim}(z_v, z_a)/\\tau)}

where :math:`p(v)` is the other view of the same instance (same sample, same rotation) and
the sum runs over every other view, the other rotations of :math:`v`'s own sample included
(:func:`~fedad.components.losses.shifted_instance_mask`,
:func:`~fedad.components.losses.contrastive_loss`); the
loss is the mean over the :math:`8B` anchors. Rotations are thus *shifted* instances: the
network learns to tell a normal image from its rotated self, which is what makes it
sensitive to anomalies. (CSI also trains a rotation classifier and ensembles over
rotations at test time; neither is here.)

Why rotated views are anchors too. Until 2026-11-25 they were negatives only (the T+ views
alone were anchors, and FADngs's Table IV ``loss = "csi"`` used the same pairs). Nothing
then spread the rotated views apart: the network sent all of them to one direction, away
from the upright anchors (mean pairwise cosine of the 90-degree turns
of the training images 0.97, against 0.15 for the images themselves; seed 0 of the
benchmark's Fashion-MNIST federation, ``centralized``). Test anomalies that look turned
(sandals, sneakers, boots, bags: wide where the normal clothes are tall) fell into that
direction too, and so did the training contaminants of those classes; one contaminant in the
bank then matched every such anomaly at a cosine near 1, and the detector ranked the 90-degree
turns of its own training images as *more* normal than the images (AUROC 0.25 of the
leave-one-out training scores against the turned ones' scores; test AUROC 0.42). With
CSI's loss the turned views spread (mean cosine 0.22) and the same check gives 0.96.

Score: CSI's similarity score without its norm factor. With :math:`\\hat z = z / \\lVert z
\\rVert` and the *bank* :math:`\\{\\hat z(x_j)\\}_{j=1}^{n}` of the detector's own training
images (un-augmented),

.. math::
    s(x) = -\\max_j \\langle \\hat z(x), \\hat z(x_j) \\rangle

higher = more anomalous, in :math:`[-1, 1]`. A query that *is* a bank image (the same
bytes: a training image scored for the threshold) is scored without its own entry
(leave-one-out), so that training scores, from which the threshold is set, are not all
:math:`-1`. The bank keeps a 64-bit hash of each image for this (``bank_keys_``). A test
image merely *close* to a training image keeps its match: an earlier rule that dropped any
entry within :math:`1 - \\cos \\le 10^{-5}` of the query dropped the nearest training
image of normal test images too when representations crowd together, and ranked them as
anomalies (measured below chance on Fashion-MNIST). The bank is computed after training
(:meth:`ContrastiveDetector.set_bank`) and dropped whenever the weights change; it is saved
(``bank_``, ``bank_keys_``) with the detector but is not part of
:meth:`~ContrastiveDetector.model_arrays`, the network that federated rounds exchange.

Images only, square (rotations); inputs in [0, 1] (the augmentations clamp to it).
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, ClassVar, Literal, Self

import numpy as np
import torch
from pydantic import Field, model_validator
from torch import nn

from fedad.components import augment, losses
from fedad.components.detectors.neural import MAX_FEATURES, TorchDetector, TorchDetectorParams
from fedad.components.nn.resnet import Encoder
from fedad.components.train import batched
from fedad.core.detector import register_detector
from fedad.core.types import Features, dense

CONTRASTIVE = "contrastive"
DEFAULT_WIDTH = 16
DEFAULT_PROJ_DIM = 128
N_PLUS = 2
"""Normal-transform views per sample (SimCLR's pair)."""
N_SHIFTS = 1 + len(augment.ROTATIONS)
"""Shifting transforms, the identity included: 0, 90, 180 and 270 degrees."""
BANK_KEYS = "bank_keys_"
MAX_BANK = 1 << 26
"""Most entries (rows x dimensions) a saved bank may hold (256 MB of float32)."""
QUERY_CHUNK = 512
BANK_CHUNK = 8192
"""Scoring compares at most ``QUERY_CHUNK x BANK_CHUNK`` similarities at a time."""
BANK = "bank_"


class ContrastiveDetectorParams(TorchDetectorParams):
    """The ``__init__`` arguments of :class:`ContrastiveDetector`, as a checkpoint may give
    them: a square image shape, the network width and the temperature besides the
    torch baselines' own."""

    kind: Literal["vector", "image", "graph"] = "image"
    input_shape: list[Annotated[int, Field(ge=1, le=MAX_FEATURES)]] = Field(
        default=[1, 28, 28], min_length=3, max_length=3
    )
    width: int = Field(default=DEFAULT_WIDTH, ge=1, le=512)
    temperature: float = Field(default=0.5, gt=0.0, le=100.0)

    @model_validator(mode="after")
    def _square(self) -> ContrastiveDetectorParams:
        _, h, w = self.input_shape
        if self.kind != "image" or h != w:
            raise ValueError(
                f"the contrastive detector needs square images, got {self.kind} data of "
                f"shape {self.input_shape}"
            )
        return self


@register_detector(CONTRASTIVE)
class ContrastiveDetector(TorchDetector):
    """Contrastive learning with rotation-shifted instances (CSI's loss); score :math:`-\\max_j
    \\cos(z(x), z(x_j))` over the training bank (see the module docstring).

    ``fit(x)`` trains, sets the bank to ``x`` and the threshold. Federated use:
    :meth:`train_epochs` (any number of times), then :meth:`set_bank` with the data whose
    neighbours should count as normal, then :meth:`score`.
    """

    name = CONTRASTIVE
    ParamsModel = ContrastiveDetectorParams
    params: ContrastiveDetectorParams
    default_weight_decay = 1e-6  # CSI's and SimCLR's
    monitor_keys = ("loss_collapsed", "rep_cos")
    bank_: np.ndarray
    """:math:`(n, D)` float32: the normalised projections of the training images."""
    aug_rng_: np.random.Generator
    """Draws the augmentations of :meth:`loss`; seeded from each :meth:`train_epochs` call's
    generator."""
    _arrays_only: ClassVar[tuple[str, ...]] = ("threshold_", BANK, BANK_KEYS)

    def __init__(self, *, device: str = "cpu", **params: Any) -> None:
        """``params``: fields of :class:`ContrastiveDetectorParams`."""
        super().__init__(device=device, **params)
        self._transform: nn.Module | None = None  # T+, made on first use (imports kornia)

    @property
    def proj_dim(self) -> int:
        """:math:`D`: ``latent_dim`` when given, else 128."""
        return DEFAULT_PROJ_DIM if self.params.latent_dim is None else int(self.params.latent_dim)

    # -- model ------------------------------------------------------------------------------
    def _make_model(self, latent: int) -> nn.Module:
        # ``latent`` is the autoencoder's bottleneck rule (32 for images); a projection head
        # takes ``latent_dim`` or SimCLR's 128 instead
        c, h, w = (int(s) for s in self.params.input_shape)
        if self.params.kind != "image" or h != w:
            raise ValueError(
                f"the contrastive detector needs square images (C, H, H), got {self.params.kind} "
                f"data of shape {tuple(self.params.input_shape)}"
            )
        return Encoder(c, self.params.width, self.proj_dim)

    @property
    def encoder(self) -> Encoder:
        self._ensure_built()
        assert isinstance(self.model_, Encoder)
        return self.model_

    def train_epochs(
        self, x: Features, epochs: int, rng: np.random.Generator, prox_mu: float = 0.0
    ) -> float:
        """Train in place; the augmentations draw from a generator seeded from ``rng`` (so
        equal generators give equal training). The bank, computed with the old weights, is
        dropped."""
        self._ensure_built()
        self.aug_rng_ = np.random.default_rng(int(rng.integers(0, 2**63)))
        self.drop_bank()
        self._monitor = np.zeros(4)
        return super().train_epochs(x, epochs, rng, prox_mu)

    def train_monitor(self) -> dict[str, float]:
        """The collapse guard's columns (:mod:`fedad.core.collapse`) over every batch of the last
        :meth:`train_epochs` call: ``loss_collapsed``, the loss's value when every
        similarity is equal, and ``rep_cos``, the mean pairwise cosine of the batches'
        upright first views."""
        m = getattr(self, "_monitor", np.zeros(4))
        return {
            "loss_collapsed": float(m[0] / m[1]) if m[1] else float("nan"),
            "rep_cos": float(m[2] / m[3]) if m[3] else float("nan"),
        }

    def loss(self, batch: torch.Tensor) -> torch.Tensor:
        """CSI's contrastive loss with shifted instances of a batch (module docstring): the
        :math:`2B` normal-transform views and their rotations, :math:`8B` views, each an
        anchor of :func:`~fedad.components.losses.shifted_instance_mask`'s pairs.

        Shapes:
            - batch: :math:`(B, C, H, H)` in [0, 1]
            - output: scalar
        """
        if not hasattr(self, "aug_rng_"):
            self.aug_rng_ = np.random.default_rng(self.params.seed)
        if self._transform is None:
            c, h, w = (int(s) for s in self.params.input_shape)
            self._transform = augment.normal_transform(c, h, w)
        b = batch.shape[0]
        views = augment.shifted_views(batch, N_PLUS, self.aug_rng_, self._transform)
        z = self.encoder.project(views)  # one forward pass over every view
        pos, neg = losses.shifted_instance_mask(b, N_PLUS, N_SHIFTS)
        if hasattr(self, "_monitor"):  # rows (s B + i) V + v: rotation 0 comes first
            self._monitor[:2] += (losses.collapsed_loss(pos, neg, "eq7") * b, b)
            if b > 1:
                first = z[: b * N_PLUS].view(b, N_PLUS, -1)[:, 0]
                self._monitor[2:] += (losses.mean_pairwise_cosine(first) * b, b)
        return losses.contrastive_loss(
            z, pos.to(z.device), neg.to(z.device), self.params.temperature
        )

    def fit(self, x: Features) -> Self:
        x = dense(x, "the contrastive detector")
        self.build()
        self.train_epochs(x, self.params.epochs, np.random.default_rng(self.params.seed))
        self.set_bank(x)
        return self.set_threshold(x)

    # -- the bank and the score -------------------------------------------------------------
    def embed(self, x: np.ndarray) -> np.ndarray:
        """:math:`\\hat z(x) = z(x) / \\lVert z(x) \\rVert`, without augmentation.

        Shapes:
            - x: :math:`(N, C, H, H)`
            - output: :math:`(N, D)` float64
        """
        return batched(self.encoder.normalized_projections, x)

    def set_bank(self, x: np.ndarray) -> Self:
        """The bank := :math:`\\hat z` of the images ``x`` ``(n, C, H, H)`` under the current
        weights (``n >= 1``), with each image's :func:`image_keys`."""
        if len(x) == 0:
            raise ValueError("the contrastive detector needs at least one image for its bank")
        self.bank_ = self.embed(x).astype(np.float32)
        self.bank_keys_ = image_keys(x)
        return self

    def drop_bank(self) -> None:
        for name in (BANK, BANK_KEYS):
            if hasattr(self, name):
                delattr(self, name)

    def score(self, x: np.ndarray) -> np.ndarray:
        """:math:`s(x) = -\\max_j \\langle \\hat z(x), \\hat z(x_j) \\rangle` over the bank,
        leave-one-out for a query that is a bank entry.

        Shapes:
            - x: :math:`(N, C, H, H)`
            - output: :math:`(N,)` float64
        """
        if not hasattr(self, BANK):
            raise RuntimeError("ContrastiveDetector has no bank_: call fit or set_bank first")
        exclude = None
        if hasattr(self, BANK_KEYS):
            index = {int(k): i for i, k in enumerate(self.bank_keys_)}
            exclude = np.array([index.get(int(k), -1) for k in image_keys(x)], dtype=np.int64)
        return -max_similarity(self.embed(x), self.bank_, exclude)

    # -- persistence ------------------------------------------------------------------------
    def get_arrays(self) -> dict[str, np.ndarray]:
        """The network's state, ``bank_`` (once set) and ``threshold_`` (once set)."""
        out = super().get_arrays()
        if hasattr(self, BANK):
            out[BANK] = self.bank_.copy()
        if hasattr(self, BANK_KEYS):
            out[BANK_KEYS] = self.bank_keys_.copy()
        return out

    def model_arrays(self) -> dict[str, np.ndarray]:
        """Only the network's state (what federated rounds exchange): no bank."""
        return {k: v for k, v in self.get_arrays().items() if k not in self._arrays_only}

    def set_arrays(self, arrays: dict[str, np.ndarray]) -> Self:
        """Restore the network, and the bank when ``arrays`` has one (else any bank is
        dropped: it belonged to other weights)."""
        bank = arrays.get(BANK)
        keys = arrays.get(BANK_KEYS)
        super().set_arrays({k: v for k, v in arrays.items() if k not in (BANK, BANK_KEYS)})
        self.drop_bank()
        if bank is not None:
            b = np.asarray(bank)
            if b.ndim != 2 or b.shape[1] != self.proj_dim or not 1 <= b.size <= MAX_BANK:
                raise ValueError(f"bank_ of shape {b.shape} does not fit (n, {self.proj_dim})")
            if not np.all(np.isfinite(b)):
                raise ValueError("bank_ holds non-finite values")
            self.bank_ = np.array(b, dtype=np.float32, copy=True)
            if keys is not None:
                k = np.asarray(keys)
                if k.shape != (len(b),) or k.dtype != np.int64:
                    raise ValueError(f"bank_keys_ must be ({len(b)},) int64, got {k.shape}")
                self.bank_keys_ = k.copy()
        return self


def image_keys(x: np.ndarray) -> np.ndarray:
    """A 64-bit BLAKE2b hash of each image's float32 bytes: equal images, equal keys.

    Shapes:
        - x: :math:`(N, \\dots)`
        - output: :math:`(N,)` int64
    """
    rows = np.ascontiguousarray(x, dtype=np.float32).reshape(len(x), -1)
    keys = [hashlib.blake2b(r.tobytes(), digest_size=8).digest() for r in rows]
    return np.array([int.from_bytes(k, "little", signed=True) for k in keys], dtype=np.int64)


def max_similarity(
    q: np.ndarray, bank: np.ndarray, exclude: np.ndarray | None = None
) -> np.ndarray:
    """:math:`\\max_j \\langle q_i, b_j \\rangle` per row of ``q``, without bank entry
    ``exclude[i]`` (the query itself; ``-1``: none), unless the bank has one entry only.
    Chunked: at most ``QUERY_CHUNK x BANK_CHUNK`` products at once.

    Shapes:
        - q: :math:`(N, D)` unit rows
        - bank: :math:`(n, D)` unit rows, :math:`n \\geq 1`
        - exclude: :math:`(N,)` int64 bank indices or -1
        - output: :math:`(N,)` float64
    """
    n = len(bank)
    skip = np.full(len(q), -1, dtype=np.int64) if exclude is None or n < 2 else exclude
    out = np.empty(len(q), dtype=np.float64)
    for i in range(0, len(q), QUERY_CHUNK):
        qi = np.asarray(q[i : i + QUERY_CHUNK], dtype=np.float64)
        si = skip[i : i + QUERY_CHUNK]
        best = np.full(len(qi), -np.inf)
        for j in range(0, n, BANK_CHUNK):
            sims = qi @ np.asarray(bank[j : j + BANK_CHUNK], dtype=np.float64).T
            rows = np.flatnonzero((si >= j) & (si < j + sims.shape[1]))
            sims[rows, si[rows] - j] = -np.inf
            best = np.maximum(best, sims.max(axis=1))
        out[i : i + len(qi)] = best
    return out
