"""The ProtoFL detector: a frozen trunk :math:`f_\\theta` and a one-class head on
:math:`h = f_\\theta(x)` ([ProtoFL Sec. 4.4, Table 4]).

Heads: ``flow`` (the paper's OC-NF: RealNVP trained by [ProtoFL eq. 11], score = negative
log-likelihood [ProtoFL eq. 9]), ``kde`` (Gaussian kernel density, Scott's bandwidth, score
= negative log-density), ``gaussian`` (Ledoit-Wolf shrinkage Gaussian, score = squared
Mahalanobis distance) and ``ocsvm`` (RBF one-class SVM, ``gamma = "scale"``, score = minus
its decision function). Every head is fit on what it will score: the clean training
representations (``head_data = "clean"``, the default; ``"views"`` fits it on augmented view
pairs instead, the paper's flow training, kept to measure the difference), standardised with
their own mean and standard deviation (for the flow an affine bijection whose
log-determinant is kept in the score, so the NLL stays honest); the Gaussian head's are only
centred (see :meth:`ProtoFLDetector._standardise`).

Saved state: named arrays only (``trunk.*`` the trunk's state dict, ``flow.*`` the flow's,
``shift``/``scale`` the standardisation, the other heads' fitted arrays, ``threshold_``);
:func:`fedad.core.detector.detector_from_config` rebuilds it by its registered name.
"""

from __future__ import annotations

import copy
import math
from contextlib import AbstractContextManager
from typing import Any, Self

import numpy as np
import torch

from fedad.components.detectors.ocsvm import fit_rbf_ocsvm, rbf_ocsvm_score
from fedad.core.detector import (
    BaseDetector,
    check_network_arrays,
    register_detector,
)
from fedad.core.rng import torch_seeded
from fedad.methods.protofl.augment import augmentation
from fedad.methods.protofl.detector_params import (
    ProtoFLDetectorParams,
)
from fedad.methods.protofl.features import (
    embed,
    prefix_maps,
    prefix_shape,
    tail_start,
    view_features,
    view_prefix_maps,
)
from fedad.methods.protofl.heads import ledoit_wolf, scott_bandwidth
from fedad.methods.protofl.memo import RowMemo, batch_key
from fedad.methods.protofl.model import Encoder, PretrainedTail, Trunk, flow_nll, make_flow
from fedad.methods.protofl.train import (
    choose_flow_epochs,
    mean_flow_loss,
    one_thread_below_grain,
    represent,
    select_flow,
    train_encoder,
    train_flow,
    view_representations,
)


def seeded(seed: int) -> AbstractContextManager[None]:
    """Torch's CPU generator at ``seed`` (any int, folded into torch's range) inside, restored
    after (initial weights)."""
    return torch_seeded(seed % (1 << 63))


@register_detector("protofl")
class ProtoFLDetector(BaseDetector):
    """Frozen trunk + one-class head. ``fit(x)`` alone (no federation, no prototype) trains
    the trunk with the positive cosine loss [ProtoFL eq. 5] for ``epochs`` and then the
    head; the federated method sets the trunk from the global model and calls
    :meth:`fit_head` [ProtoFL Alg. 2]."""

    ParamsModel = ProtoFLDetectorParams
    params: ProtoFLDetectorParams

    def __init__(self, *, device: str = "cpu", **params: Any) -> None:
        """``params``: fields of :class:`ProtoFLDetectorParams` (``input_shape`` is kept as a
        list of ints); ``device`` is where the networks run: a property of the machine, not
        of the model (not saved)."""
        super().__init__(**params)
        shape = [int(s) for s in self.params.input_shape]
        self.params = self.params.model_copy(update={"input_shape": shape})
        self.device = device
        self._memo = RowMemo()
        self._train_scores: tuple[np.ndarray, np.ndarray] | None = None

    # -- networks ---------------------------------------------------------------------------
    @property
    def head(self) -> str:
        """The head: ``params.head``, or with ``"auto"`` the Gaussian on the efficientnet
        trunk's 1280 frozen features and the paper's flow on the CNN and MLP trunks (the
        choice for images was made on development federations by the rule registered in
        ``benchmarks/suites/protofl-default-screen.toml``; docs/methods/protofl.md)."""
        if self.params.head != "auto":
            return self.params.head
        return "gaussian" if self.params.trunk_input == "efficientnet" else "flow"

    @property
    def trunk_shape(self) -> tuple[int, ...]:
        """The trunk's input: the data's shape, the backbone's feature width, or the shape
        of EfficientNet-Lite0's frozen prefix maps (``efficientnet``)."""
        if self.params.trunk_input == "efficientnet":
            return prefix_shape(self.params.tune_stages, self.params.feature_size)
        if self.params.trunk_input == "pretrained":
            from fedad.resources import resource_info

            return (resource_info(self.params.backbone).feature_dim,)
        return tuple(self.params.input_shape)

    def augmentation(self) -> tuple[bool, float]:
        """``(flip, crop)`` with ``"auto"`` resolved for this detector's images
        (:func:`.augment.augmentation`: no flip for grey images such as digits)."""
        shape = tuple(self.params.input_shape) if self.params.kind == "image" else ()
        return augmentation(shape, self.params.flip, self.params.crop)

    @property
    def h_dim(self) -> int:
        """The dimension of :math:`h = f(x)`: ``rep_dim``, or 1280 for the efficientnet trunk."""
        return 1280 if self.params.trunk_input == "efficientnet" else self.params.rep_dim

    def features(self, x: np.ndarray) -> np.ndarray:
        """What the trunk takes: ``x`` itself, its frozen backbone features, or the frozen
        prefix maps of EfficientNet-Lite0 (``efficientnet``)."""
        if self.params.trunk_input == "efficientnet":
            return prefix_maps(x, self.params.tune_stages, self.params.feature_size, self.device)
        if self.params.trunk_input == "pretrained":
            return embed(self.params.backbone, x, self.params.feature_size, self.device)
        return x

    def view_features(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
        """``(feature_views, N, ...)`` trunk inputs of augmented views (a frozen backbone in
        front of the trunk: ``pretrained``, ``efficientnet``), else None."""
        flip, crop = self.augmentation()
        if self.params.trunk_input == "efficientnet":
            return view_prefix_maps(
                x,
                self.params.feature_views,
                self.params.tune_stages,
                self.params.feature_size,
                rng,
                flip,
                crop,
                self.device,
            )
        if self.params.trunk_input != "pretrained":
            return None
        return view_features(
            self.params.backbone,
            x,
            self.params.feature_views,
            self.params.feature_size,
            rng,
            flip,
            self.device,
            crop,
        )

    def _new_trunk(self) -> torch.nn.Module:
        """The trunk's architecture, untrained (seeded) or, for ``efficientnet``, random."""
        if self.params.trunk_input == "efficientnet":
            return PretrainedTail(tail_start(self.params.tune_stages))
        p = self.params
        return Trunk(self.trunk_shape, p.rep_dim, p.width, self.trunk_group_norm)

    def step_elements(self, batch: int) -> int:
        """The size of the largest tensor of a trunk training step on ``batch`` samples:
        the batch times the widest layer for an MLP trunk on raw vectors; for an image
        trunk its input batch (a convolution's maps are larger still)."""
        p = self.params
        if p.kind == "vector" and p.trunk_input == "raw":
            return batch * max(math.prod(self.trunk_shape), 4 * p.width, p.rep_dim)
        return batch * math.prod(p.input_shape)

    @property
    def trunk_group_norm(self) -> bool:
        """Whether an MLP trunk has group norm: always on the pretrained features, on raw
        vectors as ``vector_norm`` says."""
        return self.params.kind != "vector" or self.params.vector_norm == "group"

    def make_trunk(self) -> torch.nn.Module:
        """The initial trunk: seeded weights, or EfficientNet-Lite0's shipped ones."""
        with seeded(self.params.seed):
            trunk = self._new_trunk()
        if isinstance(trunk, PretrainedTail):
            trunk.load_pretrained()
        return trunk.to(self.device).eval()

    def make_encoder(self, proto_dim: int) -> Encoder:
        r""":math:`\phi = g \circ f` around :meth:`make_trunk`, seeded, on the CPU."""
        if self.params.trunk_input != "efficientnet":
            with seeded(self.params.seed):  # the trunk's initial weights, then g's
                return Encoder(
                    self.trunk_shape,
                    self.params.rep_dim,
                    proto_dim,
                    self.params.width,
                    self._new_trunk(),
                )
        return Encoder(
            self.trunk_shape,
            self.params.rep_dim,
            proto_dim,
            self.params.width,
            self.make_trunk().cpu(),
        )

    def make_flow(self) -> torch.nn.Module:
        with seeded(self.params.seed + 1):
            flow = make_flow(self.h_dim, self.params.flow_layers, self.params.flow_hidden)
        out: torch.nn.Module = flow.to(self.device).eval()
        return out

    def build(self) -> Self:
        """A seeded, untrained trunk (and flow, for the flow head)."""
        self.trunk_ = self.make_trunk()
        self._forget()
        if self.head == "flow":
            self.flow_ = self.make_flow()
        return self

    def expected_input(self) -> tuple[str, tuple[int, ...]] | None:
        """Images of exactly ``input_shape``, or vectors of its size; with a pretrained
        trunk input, not declared (the backbone resizes)."""
        if self.params.trunk_input == "pretrained":
            return None
        shape = tuple(self.params.input_shape)
        return ("image", shape) if self.params.kind == "image" else ("vector", (math.prod(shape),))

    def check_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """The trunk the parameters declare (its size follows ``input_shape``), measured on
        torch's meta device, must be in ``arrays`` (before :meth:`set_arrays` builds it)."""
        check_network_arrays(self._new_trunk, arrays, "trunk.")

    def set_trunk(self, arrays: dict[str, np.ndarray]) -> Self:
        """Load the trunk's state dict (the global model's ``trunk.*`` arrays, unprefixed)."""
        if not hasattr(self, "trunk_"):
            self.trunk_ = self.make_trunk()
        state = {k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in arrays.items()}
        self.trunk_.load_state_dict(state, strict=True)
        self._forget()
        return self

    def _forget(self) -> None:
        """Drop what was kept for the trunk before (:mod:`.memo`)."""
        self._memo.clear()
        self._train_scores = None

    @property
    def l2(self) -> bool:
        """Whether the heads see :math:`h / \\lVert h \\rVert_2`: ``normalize = "l2"``, or with
        ``"auto"`` for the efficientnet trunk, whose h are the off-the-shelf model's own
        pooled features (their length follows how much of the image is lit and textured,
        not what it shows; the usual treatment of such features for nearest-neighbour and
        Gaussian anomaly scores). The CNN and MLP trunks keep h as it is."""
        n = self.params.normalize
        return n == "l2" or (n == "auto" and self.params.trunk_input == "efficientnet")

    def _normed(self, h: torch.Tensor) -> torch.Tensor:
        """``h`` ``(N, d)`` as the heads see it (:attr:`l2`)."""
        return torch.nn.functional.normalize(h, dim=1, eps=1e-12) if self.l2 else h

    @property
    def float64(self) -> bool:
        """Whether :math:`h` is computed in float64: the CNN and MLP trunks (from the images,
        the table rows or the backbone's float32 features). The flow head amplifies a
        relative change of :math:`10^{-7}` in :math:`h` (float32 rounding, which differs
        between torch's and onnxruntime's convolutions) to :math:`10^{-4}` in its
        negative log-likelihood: the standardisation divides features whose spread is a
        small share of their mean, and each affine coupling scales by up to
        :math:`10^3`. The efficientnet trunk stays float32 (as the ``pretrained``
        detector), its heads on L2-normalised features do not amplify so."""
        return self.params.trunk_input != "efficientnet"

    def represent(self, x: np.ndarray) -> np.ndarray:
        """:math:`h = f_\\theta(x)` as float64 numpy (L2-normalised where :attr:`l2`;
        computed in float64 where :attr:`float64`). The last batch's representations are
        kept by each sample's bytes (:class:`.memo.RowMemo`): the trunk is frozen, and the
        evaluation scores training and test samples more than once."""
        held = self._memo.get(x)
        if held is not None:
            return held
        feats = np.ascontiguousarray(self.features(x), dtype=np.float32)
        if self.float64:
            trunk = copy.deepcopy(self.trunk_).double()
            h = self._normed(represent(trunk, torch.from_numpy(feats).double()))
        else:
            h = self._normed(represent(self.trunk_, torch.from_numpy(feats)))
        out = np.asarray(h.numpy(), dtype=np.float64)
        self._memo.put(np.asarray(x), out)
        return out

    # -- training ---------------------------------------------------------------------------
    def fit(self, x: np.ndarray) -> Self:
        self.build()
        if self.params.epochs > 0:
            enc = self.make_encoder(self.h_dim).to(self.device)
            rng = np.random.default_rng(self.params.seed)
            views = self.view_features(x, rng)
            flip, crop = self.augmentation()
            train_encoder(
                enc,
                x,
                None,
                self.params.epochs,
                self.params.batch_size,
                self.params.lr,
                rng,
                flip=flip,
                noise=self.params.noise,
                views=views,
                crop=crop,
            )
            self.trunk_ = enc.trunk.eval()
            self._forget()
        self.fit_head(x, np.random.default_rng([self.params.seed, 2]))
        return self.set_threshold(x)

    def fit_head(
        self, x: np.ndarray, rng: np.random.Generator, views: np.ndarray | None = None
    ) -> float:
        """[ProtoFL Alg. 2]: the head on the frozen trunk's representations of ``x``.

        ``head_data = "clean"``: on :math:`h = f(x)` of the clean training samples, what the
        head will score. ``"views"``: on ``flow_views`` pairs of augmented views (the flow with
        [ProtoFL eq. 10] over each pair, the other heads on both views); ``views`` are then
        the pretrained trunk's cached view features (computed here when absent).
        Returns the final head loss (the flow's [ProtoFL eq. 11]; 0 for the other heads)."""
        self._train_scores = None
        h, h_hat = self.head_inputs(x, rng, views)
        z = self._standardise(
            h.double().numpy() if h_hat is None else torch.cat([h, h_hat]).double().numpy(),
            scale=self.head != "gaussian",
        )
        if self.head == "flow":
            return self._fit_flow(h.float(), None if h_hat is None else h_hat.float(), len(x), rng)
        if self.head == "kde":
            self.train_ = z
            self.bandwidth_ = float(scott_bandwidth(len(z), z.shape[1]))
        elif self.head == "gaussian":
            self.mean_, self.precision_ = ledoit_wolf(z)
        else:
            gamma = 1.0 / (z.shape[1] * max(float(z.var()), 1e-12))
            self.sv_, self.coef_, self.intercept_ = fit_rbf_ocsvm(z, self.params.nu, gamma)
            self.gamma_ = gamma
        return 0.0

    def head_inputs(
        self, x: np.ndarray, rng: np.random.Generator, views: np.ndarray | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """What the head is fit on: ``(h, None)``, the clean representations of ``x``, or
        (``head_data = "views"``) ``(h, h_hat)``, ``flow_views`` pairs of augmented views."""
        if self.params.head_data == "clean":
            return torch.from_numpy(self.represent(x)), None
        if views is None:
            views = self.view_features(x, rng)
        flip, crop = self.augmentation()
        a, b = view_representations(
            self.trunk_, x, self.params.flow_views, rng, flip, self.params.noise, views, crop
        )
        return self._normed(a), self._normed(b)

    def _fit_flow(
        self, h: torch.Tensor, h_hat: torch.Tensor | None, n: int, rng: np.random.Generator
    ) -> float:
        """Standardise (``shift_``/``scale_`` already set), pick the epoch count on held-out
        training samples, train the flow [ProtoFL eq. 11]; returns its last loss.

        A client with more than ``max_samples`` samples fits the flow on a seeded random
        ``max_samples`` of them (all their views) and keeps the flow of the epoch-count
        selection at its best epoch rather than training a second one: the flow's cost grows
        with the samples times its epochs, and on the ODDS shuttle table (6,382 rows a
        client) the two trainings over all rows were three quarters of ``protofl``'s time.
        Clients with up to ``max_samples`` samples train as before. A flow whose batches are
        small tensors trains on one thread (:func:`.train.one_thread_below_grain`)."""
        p = self.params
        with one_thread_below_grain(p.flow_batch * max(self.h_dim, p.flow_hidden)):
            return self._fit_flow_threads(h, h_hat, n, rng)

    def _fit_flow_threads(
        self, h: torch.Tensor, h_hat: torch.Tensor | None, n: int, rng: np.random.Generator
    ) -> float:
        shift = torch.as_tensor(self.shift_, dtype=torch.float32)
        scale = torch.as_tensor(self.scale_, dtype=torch.float32)
        a = (h - shift) / scale
        b = None if h_hat is None else (h_hat - shift) / scale
        p = self.params
        budget = (p.flow_batch, p.flow_lr, p.lam, rng)
        if n > p.max_samples and p.flow_val > 0:
            keep = np.sort(rng.permutation(n)[: p.max_samples])
            pairs = len(a) // n
            rows = torch.from_numpy((np.arange(pairs)[:, None] * n + keep[None, :]).reshape(-1))
            a, b, n = a[rows], None if b is None else b[rows], len(keep)
            epochs, flow = select_flow(
                self.make_flow, a, b, n, p.flow_val, p.flow_epochs, p.flow_patience, *budget
            )
            if flow is not None:
                self.flow_epochs_used_, self.flow_ = epochs, flow
                return mean_flow_loss(flow, a, b, p.lam)
        epochs = p.flow_epochs
        if p.flow_val > 0:
            epochs = choose_flow_epochs(
                self.make_flow, a, b, n, p.flow_val, epochs, p.flow_patience, *budget
            )
        self.flow_epochs_used_ = epochs
        self.flow_ = self.make_flow()
        return train_flow(self.flow_, a, b, epochs, *budget)

    def _standardise(self, h: np.ndarray, scale: bool = True) -> np.ndarray:
        """Set ``shift_``/``scale_`` from ``h``: its mean and standard deviation (a floor
        keeps constant features finite), or with ``scale = False`` its mean and ones.

        The Gaussian head is fit centred only. Its Ledoit-Wolf covariance shrinks towards a
        multiple of the identity, which is the natural target in the trunk's own coordinates
        (one layer's features, one unit) and the wrong one after per-feature
        standardisation, which gives a nearly silent feature the weight of an informative
        one: with the efficientnet trunk's 1280 frozen features and 600 images that cost
        0.010 (64 px) and 0.014 (96 px) mean AUROC on the development federation
        (docs/methods/protofl.md, "Standardisation before the head")."""
        self.shift_ = h.mean(0) if len(h) else np.zeros(self.h_dim)
        sd = h.std(0) if len(h) > 1 and scale else np.ones(self.h_dim)
        floor = 1e-3 * float(np.mean(sd)) + 1e-6
        self.scale_ = np.maximum(sd, floor) if scale else sd
        return np.asarray((h - self.shift_) / self.scale_, dtype=np.float64)

    # -- scoring ----------------------------------------------------------------------------
    def score(self, x: np.ndarray) -> np.ndarray:
        z = (self.represent(x) - self.shift_) / self.scale_
        if self.head == "flow":  # in float64: see :attr:`float64`
            flow = copy.deepcopy(self.flow_).double().cpu()
            zt = torch.from_numpy(np.ascontiguousarray(z, dtype=np.float64))
            with torch.no_grad():
                nll = (
                    torch.cat([flow_nll(flow, zt[i : i + 1024]) for i in range(0, len(zt), 1024)])
                    if len(zt)
                    else torch.zeros(0, dtype=torch.float64)
                )
            # the standardisation is part of the bijection: log|det| = -sum log scale
            return nll.numpy() + float(np.sum(np.log(self.scale_)))
        if self.head == "kde":
            from sklearn.neighbors import KernelDensity

            kde = KernelDensity(bandwidth=self.bandwidth_).fit(self.train_)
            return np.asarray(-kde.score_samples(z), dtype=np.float64)
        if self.head == "gaussian":
            d = z - self.mean_
            return np.asarray(((d @ self.precision_) * d).sum(1), dtype=np.float64)
        return rbf_ocsvm_score(z, self.sv_, self.coef_, self.intercept_, self.gamma_)

    def keep_training_scores(self, x: np.ndarray, scores: np.ndarray) -> Self:
        """Answer :meth:`training_scores` of exactly ``x`` (the same rows in the same order)
        with ``scores``: what this head gave them when it was fit (a client keeps them
        beside its head, so that its evaluation does not run the trunk over its training
        samples again)."""
        self._train_scores = (batch_key(np.asarray(x)), np.asarray(scores, dtype=np.float64))
        return self

    def training_scores(self, x_train: np.ndarray) -> np.ndarray:
        """:meth:`score` of the training samples, or the scores kept for exactly them
        (:meth:`keep_training_scores`)."""
        kept = self._train_scores
        if kept is not None and np.array_equal(kept[0], batch_key(np.asarray(x_train))):
            return kept[1].copy()
        return self.score(x_train)

    # -- persistence ------------------------------------------------------------------------
    def get_arrays(self) -> dict[str, np.ndarray]:
        out = {
            f"trunk.{k}": v.detach().cpu().numpy().copy()
            for k, v in self.trunk_.state_dict().items()
        }
        out["shift"] = np.asarray(self.shift_, dtype=np.float64)
        out["scale"] = np.asarray(self.scale_, dtype=np.float64)
        if self.head == "flow":
            out.update(
                {
                    f"flow.{k}": v.detach().cpu().numpy().copy()
                    for k, v in self.flow_.state_dict().items()
                }
            )
        elif self.head == "kde":
            out["train"] = self.train_
            out["bandwidth"] = np.asarray(self.bandwidth_)
        elif self.head == "gaussian":
            out["mean"], out["precision"] = self.mean_, self.precision_
        else:
            out["sv"], out["coef"] = self.sv_, self.coef_
            out["intercept"], out["gamma"] = np.asarray(self.intercept_), np.asarray(self.gamma_)
        if hasattr(self, "threshold_"):
            out["threshold_"] = np.asarray(self.threshold_, dtype=np.float64)
        return out

    def set_arrays(self, arrays: dict[str, np.ndarray]) -> Self:
        self.set_trunk({k[6:]: v for k, v in arrays.items() if k.startswith("trunk.")})
        self.shift_ = np.asarray(arrays["shift"], dtype=np.float64).reshape(-1)
        self.scale_ = np.asarray(arrays["scale"], dtype=np.float64).reshape(-1)
        if self.shift_.shape != (self.h_dim,) or self.scale_.shape != (self.h_dim,):
            raise ValueError(f"shift and scale must have {self.h_dim} entries")
        if not np.all(self.scale_ > 0):
            raise ValueError("scale must be positive")
        if self.head == "flow":
            self.flow_ = self.make_flow()
            state = {
                k[5:]: torch.from_numpy(np.array(v))
                for k, v in arrays.items()
                if k.startswith("flow.")
            }
            self.flow_.load_state_dict(state, strict=True)
        elif self.head == "kde":
            self.train_ = np.asarray(arrays["train"], dtype=np.float64)
            self.bandwidth_ = float(arrays["bandwidth"])
        elif self.head == "gaussian":
            self.mean_ = np.asarray(arrays["mean"], dtype=np.float64)
            self.precision_ = np.asarray(arrays["precision"], dtype=np.float64)
        else:
            self.sv_ = np.asarray(arrays["sv"], dtype=np.float64)
            self.coef_ = np.asarray(arrays["coef"], dtype=np.float64).reshape(-1)
            self.intercept_ = float(arrays["intercept"])
            self.gamma_ = float(arrays["gamma"])
        if "threshold_" in arrays:
            self.threshold_ = float(arrays["threshold_"])
        return self

    def head_arrays(self) -> dict[str, np.ndarray]:
        """Everything but the trunk (what a client keeps of its own after phase 2)."""
        return {
            k: v
            for k, v in self.get_arrays().items()
            if not k.startswith("trunk.") and k != "threshold_"
        }
