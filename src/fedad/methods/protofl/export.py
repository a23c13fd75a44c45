"""ProtoFL's detector: the frozen trunk's representation :math:`h = f_\\theta(x)` (of the
images, of their frozen backbone features with ``trunk_input = "pretrained"``, or of
EfficientNet-Lite0's frozen prefix maps with ``trunk_input = "efficientnet"``, the trunk
then being the network's tail; the CNN and MLP trunks in float64, as the detector computes
them, :mod:`.protofl_layers`), standardised in float64, and the one-class head
[ProtoFL Sec. 4.4]:

* ``flow``: the RealNVP's negative log-likelihood [ProtoFL eq. 3, 9] in float64, plus the
  standardisation's log-determinant. The flow (zuko's ``RealNVP``: affine
  couplings on alternating halves, ``log a = s / (1 + |s / log(10^-3)|)``) is written out
  here from its own hyper-networks, because zuko's lazy transforms do not trace: the same
  operations in the same order as :func:`fedad.methods.protofl.model.flow_nll`;
* ``kde``: minus scikit-learn's Gaussian kernel log-density (Scott's bandwidth),
  :math:`-\\log \\frac{1}{n} \\sum_i \\mathcal N(z; z_i, h^2 I)`, a log-sum-exp in float64;
* ``gaussian``: the squared Mahalanobis distance under the Ledoit-Wolf precision, float64;
* ``ocsvm``: minus the RBF one-class SVM's decision function, float64.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch
from torch import nn

from fedad.core.detector import BaseDetector
from fedad.export.detectors.baselines import RBFOneClassSVM
from fedad.export.detectors.images import PooledFeatures, Prepare
from fedad.export.registry import Core, NotExportable, register_exporter
from fedad.methods.protofl.detector import ProtoFLDetector
from fedad.methods.protofl.export_layers import Float64Trunk
from fedad.methods.protofl.features import tail_start
from fedad.resources.base import Backbone

SLOPE = 1e-3
"""zuko's MonotonicAffineTransform's minimum slope (its default, which RealNVP keeps)."""


def _f64(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(a, dtype=np.float64, copy=True))


class RealNVPNLL(nn.Module):
    """``flow_nll(flow, r)`` of zuko's RealNVP ``flow`` (module docstring), in the dtype of
    ``r`` (float64 in the exported graph)."""

    def __init__(self, flow: nn.Module) -> None:
        super().__init__()
        layers = list(flow.transform.transforms)  # type: ignore[union-attr, arg-type]
        self.hypers = nn.ModuleList(copy.deepcopy(t.hyper).double() for t in layers)
        self.idx_a: list[list[int]] = []
        self.idx_b: list[list[int]] = []
        self.order: list[list[int]] = []
        for t in layers:
            mask = t.mask.cpu()
            a = mask.nonzero().squeeze(-1).tolist()
            b = (~mask).nonzero().squeeze(-1).tolist()
            self.idx_a.append(a)
            self.idx_b.append(b)
            self.order.append(np.argsort(a + b).tolist())  # [a, b] back to feature order
        self.features = int(layers[0].mask.numel())

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        x = r
        acc = torch.zeros((), dtype=r.dtype)
        for hyper, a, b, order in zip(self.hypers, self.idx_a, self.idx_b, self.order, strict=True):
            x_a, x_b = x[:, a], x[:, b]
            phi = hyper(x_a).unflatten(-1, (-1, 2))
            shift, scale = phi[..., 0], phi[..., 1]
            log_scale = scale / (1 + abs(scale / math.log(SLOPE)))
            y_b = x_b * log_scale.exp() + shift
            x = torch.cat([x_a, y_b], dim=1)[:, order]
            acc = acc + log_scale.sum(-1)
        return 0.5 * (x**2).sum(-1) - acc + 0.5 * self.features * math.log(2 * math.pi)


class KDEScore(nn.Module):
    """Minus the Gaussian kernel log-density of ``z`` float64 (scikit-learn's
    ``KernelDensity(bandwidth=h).score_samples``)."""

    train_t: torch.Tensor
    train_sq: torch.Tensor

    def __init__(self, train: np.ndarray, bandwidth: float) -> None:
        super().__init__()
        t = np.asarray(train, dtype=np.float64)
        self.register_buffer("train_t", _f64(t.T))
        self.register_buffer("train_sq", _f64((t * t).sum(1)))
        n, d = t.shape
        self.h = float(bandwidth)
        self.log_norm: float = math.log(n) + 0.5 * d * math.log(2 * math.pi) + d * math.log(self.h)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        sq = (z * z).sum(1, keepdim=True) - 2.0 * (z @ self.train_t) + self.train_sq[None, :]
        a = -0.5 * torch.clamp(sq, min=0.0) / (self.h * self.h)
        top: torch.Tensor = a.max(dim=1, keepdim=True).values
        lse: torch.Tensor = top[:, 0] + torch.log(torch.exp(a - top).sum(1))
        return -(lse - self.log_norm)


class GaussianHead(nn.Module):
    """:math:`(z - m)^\\top P (z - m)`, float64."""

    mean: torch.Tensor
    precision: torch.Tensor

    def __init__(self, mean: np.ndarray, precision: np.ndarray) -> None:
        super().__init__()
        self.register_buffer("mean", _f64(mean))
        self.register_buffer("precision", _f64(precision))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        d = z - self.mean
        return ((d @ self.precision) * d).sum(1)


class PrefixMaps(nn.Module):
    """:func:`fedad.methods.protofl.features.prefix_maps`: the images prepared for the
    backbone at ``size`` px (:class:`.images.Prepare`), then EfficientNet-Lite0's stem and its
    stages before the trainable tail (the stem alone when every stage trains)."""

    def __init__(self, net: Backbone, shape: tuple[int, ...], size: int, tune_stages: int):
        super().__init__()
        self.prepare = Prepare(net, shape, size)
        self.net = net
        self.stage = tail_start(tune_stages) - 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        prepared = self.prepare(x)
        if self.stage >= 1:
            return self.net.stage_maps(prepared, (self.stage,))[0]
        stem = self.net.bn0(self.net.conv_stem(prepared))  # type: ignore[operator]
        return nn.functional.relu6(stem)


class ProtoFLScore(nn.Module):
    """Trunk input (images or backbone features), trunk (float64 where the detector's is:
    :class:`.protofl_layers.Float64Trunk`), L2 normalisation where the detector has it,
    standardisation, head."""

    shift: torch.Tensor
    scale: torch.Tensor

    def __init__(self, features: nn.Module | None, trunk: nn.Module, det: ProtoFLDetector) -> None:
        super().__init__()
        self.features = features
        self.float64 = det.float64
        self.trunk = Float64Trunk(trunk) if det.float64 else trunk
        self.register_buffer("shift", _f64(det.shift_))
        self.register_buffer("scale", _f64(det.scale_))
        self.l2 = det.l2
        self.flow = det.head == "flow"
        self.head: nn.Module
        if det.head == "flow":
            self.head = RealNVPNLL(det.flow_)
            self.log_det = float(np.sum(np.log(det.scale_)))
        elif det.head == "kde":
            self.head = KDEScore(det.train_, det.bandwidth_)
        elif det.head == "gaussian":
            self.head = GaussianHead(det.mean_, det.precision_)
        else:
            self.head = RBFOneClassSVM(det.sv_, det.coef_, det.intercept_, det.gamma_)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inp = x if self.features is None else self.features(x)
        h = self.trunk(inp.double() if self.float64 else inp)
        if self.l2:  # as the detector does: in the trunk's dtype, before the float64 head
            h = nn.functional.normalize(h, dim=1, eps=1e-12)
        z = (h.double() - self.shift) / self.scale
        if self.flow:
            return self.head(z) + self.log_det  # type: ignore[no-any-return]
        out: torch.Tensor = self.head(z)
        return out


@register_exporter("protofl")
def protofl(det: BaseDetector, shape: tuple[int, ...]) -> Core:
    assert isinstance(det, ProtoFLDetector)
    if not hasattr(det, "shift_"):
        raise NotExportable("the 'protofl' detector has no fitted head to export")
    features: nn.Module | None = None
    if det.params.trunk_input != "raw":
        from fedad.resources import get_resource

        p = det.params
        if p.trunk_input == "efficientnet":
            net = get_resource("efficientnet-lite0", "cpu")
            features = PrefixMaps(net, shape, p.feature_size, p.tune_stages)
        else:
            features = PooledFeatures(get_resource(p.backbone, "cpu"), shape, p.feature_size)
    trunk = copy.deepcopy(det.trunk_).cpu().eval()
    module = ProtoFLScore(features, trunk, det)
    return Core(module, shape, "float64", scale=_scale(det, module.head))


def _scale(det: ProtoFLDetector, head: nn.Module) -> float:
    """The magnitude of the terms the head's score is a difference of (the SVM's offset,
    the log-density's normaliser, the flow's constant and log-determinant)."""
    if det.head == "ocsvm":
        return float(abs(det.intercept_))
    if isinstance(head, KDEScore):
        return abs(float(head.log_norm))
    if isinstance(head, RealNVPNLL):
        return 0.5 * head.features * math.log(2 * math.pi) + abs(float(np.sum(np.log(det.scale_))))
    return 0.0
