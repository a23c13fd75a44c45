"""The generic baselines' detectors: autoencoder, Deep SVDD, one-class SVM, pretrained
(kNN or shrinkage Gaussian), contrastive, PatchCore-style.

The torch networks are exported as they are (:class:`~fedad.components.nn.model.
AutoEncoder` and :class:`~fedad.components.nn.model.DeepSVDDNet` compute their own
score); the one-class SVM's decision function is written out (RBF kernel against the support
vectors) in float64, the formula :func:`fedad.components.detectors.ocsvm.rbf_ocsvm_score`
evaluates; the frozen backbones and bank scores are :mod:`.images`' modules, each score in
the precision fedad computes it in (float64 for the kNN, Gaussian and cosine scores).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedad.components.detectors.contrastive import ContrastiveDetector
from fedad.components.detectors.neural import AutoEncoderDetector, DeepSVDDDetector, TorchDetector
from fedad.components.detectors.ocsvm import OCSVMDetector
from fedad.components.detectors.patchcore import PatchCoreDetector
from fedad.components.detectors.pretrained import PretrainedDetector
from fedad.core.catalog import GRAPHS_NOT_EXPORTABLE as GRAPHS
from fedad.core.detector import BaseDetector
from fedad.export.detectors.images import PatchMaps, PooledFeatures, StageFeatures
from fedad.export.registry import Core, NotExportable, register_exporter


def _network(det: TorchDetector) -> nn.Module:
    """A CPU copy of the detector's network in eval mode (the detector is left alone)."""
    if det.params.kind == "graph":
        raise NotExportable(
            f"the '{det.registry_name}' detector on graphs cannot be exported to ONNX: {GRAPHS}"
        )
    det._ensure_built()
    return copy.deepcopy(det.model_).cpu().eval()


class NetScore(nn.Module):
    """``net.score(x)``: the network's own per-sample score."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net.score(x)  # type: ignore[operator]
        return out


class AutoEncoderMaps(nn.Module):
    """The image autoencoder's score and per-pixel maps, the squared error averaged over
    channels (:meth:`~fedad.components.detectors.neural.AutoEncoderDetector.score_maps`)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        recon = self.net(x)
        score = (recon - x).pow(2).flatten(1).mean(1)
        maps = (x - recon).pow(2).mean(dim=1)
        return score, maps


@register_exporter("autoencoder")
def autoencoder(det: BaseDetector, shape: tuple[int, ...]) -> Core:
    assert isinstance(det, AutoEncoderDetector)
    net = _network(det)
    if det.params.kind == "image":
        return Core(AutoEncoderMaps(net), shape, maps=True)
    return Core(NetScore(net), shape)


@register_exporter("deepsvdd")
def deepsvdd(det: BaseDetector, shape: tuple[int, ...]) -> Core:
    assert isinstance(det, DeepSVDDDetector)
    return Core(NetScore(_network(det)), shape)


class RBFOneClassSVM(nn.Module):
    """Minus the RBF one-class SVM's decision function in float64:
    :math:`-(\\sum_i \\alpha_i e^{-\\gamma \\max(0, \\lVert z\\rVert^2 + \\lVert s_i\\rVert^2 -
    2 z \\cdot s_i)} + \\text{intercept})` of the flattened inputs ``z``."""

    sv_t: torch.Tensor
    sv_sq: torch.Tensor
    coef: torch.Tensor

    def __init__(self, sv: np.ndarray, coef: np.ndarray, intercept: float, gamma: float) -> None:
        super().__init__()
        self.register_buffer("sv_t", torch.from_numpy(np.array(sv, np.float64).T.copy()))
        self.register_buffer("sv_sq", torch.from_numpy((np.asarray(sv, np.float64) ** 2).sum(1)))
        self.register_buffer("coef", torch.from_numpy(np.array(coef, np.float64)))
        self.intercept = float(intercept)
        self.gamma = float(gamma)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = x.double().flatten(1)
        sq = (z**2).sum(1, keepdim=True) + self.sv_sq[None, :] - 2.0 * (z @ self.sv_t)
        k = torch.exp(-self.gamma * torch.clamp(sq, min=0.0))
        return -(k @ self.coef + self.intercept)


@register_exporter("ocsvm")
def ocsvm(det: BaseDetector, shape: tuple[int, ...]) -> Core:
    assert isinstance(det, OCSVMDetector)
    if not det.fitted:
        raise NotExportable("the 'ocsvm' detector is not fitted: there is nothing to export")
    svm = RBFOneClassSVM(det.sv_, det.coef_, det.intercept_, det.gamma_)
    return Core(svm, shape, "float64", scale=abs(det.intercept_))


# -- the image baselines -------------------------------------------------------------------


class KNNScore(nn.Module):
    """The ``pretrained`` detector's kNN score, float64: the mean Euclidean distance of a
    query's features to its ``k`` nearest training features, leave-one-out (the next ``k``)
    when the nearest is within ``tol`` (a training image itself). The distances as
    scikit-learn's brute search computes them, :math:`\\sqrt{\\max(0, \\lVert q\\rVert^2 - 2 q
    \\cdot f + \\lVert f\\rVert^2)}`."""

    feats_t: torch.Tensor
    feats_sq: torch.Tensor

    def __init__(self, features: np.ndarray, k: int, tol: float) -> None:
        super().__init__()
        f = np.asarray(features, dtype=np.float64)
        self.register_buffer("feats_t", torch.from_numpy(f.T.copy()))
        self.register_buffer("feats_sq", torch.from_numpy((f * f).sum(1)))
        self.n = len(f)
        self.k = min(int(k), self.n)
        self.tol = float(tol)

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        q = q.double()
        sq = (q * q).sum(1, keepdim=True) - 2.0 * (q @ self.feats_t) + self.feats_sq[None, :]
        dist = torch.clamp(sq, min=0.0).sqrt()
        near = torch.topk(dist, min(self.k + 1, self.n), dim=1, largest=False).values
        plain = near[:, : self.k].mean(1)
        if self.n == 1:
            return plain
        loo = near[:, 1 : 1 + min(self.k, self.n - 1)].mean(1)
        return torch.where(near[:, 0] <= self.tol, loo, plain)


class GaussianScore(nn.Module):
    """:meth:`fedad.components.detectors.pretrained.ShrinkageGaussian.mahalanobis`, float64."""

    mean: torch.Tensor
    vec: torch.Tensor
    inv: torch.Tensor

    def __init__(self, gauss: Any) -> None:
        super().__init__()
        for name in ("mean", "vec", "inv"):
            self.register_buffer(name, torch.from_numpy(np.array(getattr(gauss, name), np.float64)))
        self.rest = bool(gauss.rest)
        self.c = float(gauss.c)

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        z = q.double() - self.mean
        proj = z @ self.vec
        d = (proj * proj) @ self.inv
        if self.rest:
            d = d + ((z * z).sum(1) - (proj * proj).sum(1)) / self.c
        return torch.clamp(d, min=0.0)


class Then(nn.Module):
    """``head(features(x))``."""

    def __init__(self, features: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.features = features
        self.head = head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.features(x))
        return out


@register_exporter("pretrained")
def pretrained(det: BaseDetector, shape: tuple[int, ...]) -> Core:
    assert isinstance(det, PretrainedDetector)
    if not det.fitted:
        raise NotExportable("the 'pretrained' detector has no training features to export")
    features = PooledFeatures(det.backbone(), shape, det.params.image_size)
    if det.params.score == "gaussian":
        head: nn.Module = GaussianScore(det._gauss)
    else:
        head = KNNScore(det.features_, det.params.k, det._tol)
    return Core(Then(features, head), shape, "float64")


class CosineBank(nn.Module):
    """The ``contrastive`` detector's score: minus the largest cosine of a query's
    normalised projection with the bank's, float64."""

    bank_t: torch.Tensor

    def __init__(self, encoder: nn.Module, bank: np.ndarray) -> None:
        super().__init__()
        self.encoder = encoder
        self.register_buffer("bank_t", torch.from_numpy(np.array(bank, np.float64).T.copy()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z: torch.Tensor = self.encoder.normalized_projections(x).double()  # type: ignore[operator]
        best: torch.Tensor = (z @ self.bank_t).max(dim=1).values
        return -best


CONTRASTIVE_NOTE = (
    "fedad scores a training image itself without its own bank entry (it knows the training "
    "images by a hash of their bytes); the exported model matches it to itself (score -1). "
    "Every other image scores as in fedad."
)


@register_exporter("contrastive")
def contrastive(det: BaseDetector, shape: tuple[int, ...]) -> Core:
    assert isinstance(det, ContrastiveDetector)
    if not hasattr(det, "bank_"):
        raise NotExportable("the 'contrastive' detector has no bank to export")
    encoder = copy.deepcopy(det.encoder).cpu().eval()
    return Core(CosineBank(encoder, det.bank_), shape, "float64", note=CONTRASTIVE_NOTE, scale=1.0)


class PatchCoreScore(nn.Module):
    """The ``patchcore`` detector: frozen fused features, 3x3 average pooling (not counting
    the padding), the projection, the bank's anomaly maps; the score is each map's
    maximum."""

    def __init__(self, features: nn.Module, projection: nn.Module, maps: PatchMaps) -> None:
        super().__init__()
        self.features = features
        self.projection = projection
        self.maps = maps

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f = F.avg_pool2d(self.features(x), 3, stride=1, padding=1, count_include_pad=False)
        maps = self.maps(self.projection(f))
        return maps.flatten(1).amax(dim=1).double(), maps


@register_exporter("patchcore")
def patchcore(det: BaseDetector, shape: tuple[int, ...]) -> Core:
    assert isinstance(det, PatchCoreDetector)
    if not hasattr(det, "bank_"):
        raise NotExportable("the 'patchcore' detector has no memory bank to export")
    ext = det.extractor()
    features = StageFeatures(ext.net(), ext.stages, shape, ext.size)
    maps = PatchMaps(det.bank_, ext.side * ext.side, (int(shape[1]), int(shape[2])), 4.0)
    projection = copy.deepcopy(det.model_).cpu().eval()
    return Core(PatchCoreScore(features, projection, maps), shape, "float64", maps=True)
