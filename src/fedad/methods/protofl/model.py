"""ProtoFL's math in torch: the encoder, the phase-1 losses, the phase-2 flow.

Every function cites [ProtoFL eq. N] (Kim et al., ICCV 2023).

Normalisation: group normalisation, never batch normalisation (and on tables, by the
detector's default ``vector_norm = "none"``, none at all: :class:`Trunk`). FedAvg averages
parameters; batch-norm running statistics are per-client estimates of *local* activation
moments, and in a one-vs-rest federation (each client holds one class) their average
describes no client's data, while each client trains with its own batch statistics: the
averaged model is then evaluated under statistics it was never trained with. Group norm
normalises each sample on its own and has no running statistics, so the averaged model
behaves the same on every client ([ProtoFL Sec. 5.2], after Hosseini et al. 2021).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
import zuko
from torch import nn

from fedad.resources import get_resource
from fedad.resources.efficientnet_lite0 import STAGES, EfficientNetLite0


def _groups(channels: int) -> int:
    """Largest of 8, 4, 2, 1 that divides ``channels``."""
    return next(g for g in (8, 4, 2, 1) if channels % g == 0)


class Trunk(nn.Module):
    """The representation :math:`h = f_\\theta(x)` (the part of :math:`\\phi` kept by the
    detector): a small CNN with group norm for images of any size ``(C, H, W)`` (three
    3x3 convolutions, the last two of stride 2, then global average pooling and a linear
    layer), or, for vectors, three linear layers with ReLU and group norm (the paper's
    tabular model, [ProtoFL Sec. 5.2]); ``vector_norm = False`` leaves the vector model's
    group norm out (here the default is the paper's; the detector's is without). Group norm
    rescales each sample's hidden units to zero mean and unit variance, so a table row that
    is anomalous by its overall size (every feature large, as malignant tumours in the
    breast-cancer table) looks like a normal one to the heads."""

    def __init__(
        self, input_shape: tuple[int, ...], rep_dim: int, width: int = 32, vector_norm: bool = True
    ) -> None:
        super().__init__()
        self.rep_dim = rep_dim
        layers: list[nn.Module]
        if len(input_shape) == 3:
            c = input_shape[0]
            w = [width, 2 * width, 4 * width]
            layers = [
                nn.Conv2d(c, w[0], 3, padding=1),
                nn.GroupNorm(_groups(w[0]), w[0]),
                nn.ReLU(),
                nn.Conv2d(w[0], w[1], 3, stride=2, padding=1),
                nn.GroupNorm(_groups(w[1]), w[1]),
                nn.ReLU(),
                nn.Conv2d(w[1], w[2], 3, stride=2, padding=1),
                nn.GroupNorm(_groups(w[2]), w[2]),
                nn.ReLU(),
                nn.AdaptiveAvgPool2d(1),
                nn.Flatten(),
                nn.Linear(w[2], rep_dim),
            ]
        else:
            n = math.prod(input_shape)
            hdim = 4 * width

            def norm() -> nn.Module:
                return nn.GroupNorm(_groups(hdim), hdim) if vector_norm else nn.Identity()

            layers = [
                nn.Flatten(),
                nn.Linear(n, hdim),
                norm(),
                nn.ReLU(),
                nn.Linear(hdim, hdim),
                norm(),
                nn.ReLU(),
                nn.Linear(hdim, rep_dim),
            ]
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out


class Encoder(nn.Module):
    """:math:`\\phi(\\cdot;\\theta) = g(f(\\cdot))`: the trunk ``f`` and a projection ``g`` to
    the prototype dimension :math:`D` ([ProtoFL Sec. 4.3]: :math:`\\phi` and the off-the-shelf
    :math:`\\mathcal{F}` both map to :math:`\\mathbb{R}^D`). ``g`` is ReLU then a linear layer;
    the phase-1 losses act on :math:`r = \\phi(x) \\in \\mathbb{R}^D`, the phase-2 head on
    :math:`h = f(x)` (see ``docs/methods/protofl.md``). FedAvg averages both. ``trunk``: a
    ready trunk instead of the CNN/MLP (:class:`PretrainedTail`, whose 1280 features already
    live in the prototypes' space: no projection then)."""

    def __init__(
        self,
        input_shape: tuple[int, ...],
        rep_dim: int,
        proto_dim: int,
        width: int = 32,
        trunk: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.trunk = Trunk(input_shape, rep_dim, width) if trunk is None else trunk
        rep_dim = int(getattr(self.trunk, "rep_dim", rep_dim))
        self.proj: nn.Module
        if isinstance(self.trunk, PretrainedTail) and rep_dim == proto_dim:
            self.proj = nn.Identity()  # phi starts as the off-the-shelf model itself
        else:
            self.proj = nn.Sequential(nn.ReLU(), nn.Linear(rep_dim, proto_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """:math:`r = \\phi(x)` [ProtoFL eq. 4]."""
        out: torch.Tensor = self.proj(self.trunk(x))
        return out


def positive_cosine_loss(r: torch.Tensor, r_hat: torch.Tensor) -> torch.Tensor:
    """[ProtoFL eq. 2, 5]: :math:`\\frac1N\\sum_i [1 - d(r_i, \\hat r_i)]`, cosine :math:`d`."""
    return (1.0 - F.cosine_similarity(r, r_hat, dim=1, eps=1e-8)).mean()


def distillation_kl(v: torch.Tensor, r: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """:math:`\\frac1N\\sum_i \\mathcal{KL}(v \\,\\|\\, r_i)` with both vectors turned into
    distributions by a softmax at ``temperature`` (one term of [ProtoFL eq. 7]; the paper does
    not say how representations become distributions: the softmax is our documented choice).

    ``v`` is ``(D,)`` (one prototype for the whole batch) or ``(N, D)``.
    """
    log_p = F.log_softmax(v / temperature, dim=-1)
    log_q = F.log_softmax(r / temperature, dim=-1)
    if log_p.dim() == 1:
        log_p = log_p.expand_as(log_q)
    return (log_p.exp() * (log_p - log_q)).sum(dim=1).mean()


def prototype_distillation_loss(
    v: torch.Tensor, r: torch.Tensor, r_hat: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """[ProtoFL eq. 7]:
    :math:`\\frac1N\\sum_i [\\mathcal{KL}(v\\|r_i) + \\mathcal{KL}(v\\|\\hat r_i)]`."""
    return distillation_kl(v, r, temperature) + distillation_kl(v, r_hat, temperature)


def phase1_loss(
    v: torch.Tensor | None,
    r: torch.Tensor,
    r_hat: torch.Tensor,
    alpha: float = 0.1,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[ProtoFL eq. 8]: :math:`(1-\\alpha) L_{pd} + \\alpha L_p`; returns (total, L_pd, L_p).

    Without a prototype (``v = None``: a stand-alone fit) only :math:`L_p` is left."""
    lp = positive_cosine_loss(r, r_hat)
    if v is None:
        return lp, torch.zeros((), device=r.device), lp
    lpd = prototype_distillation_loss(v, r, r_hat, temperature)
    return (1.0 - alpha) * lpd + alpha * lp, lpd, lp


NCE_TEMPERATURE = 0.1
"""Temperature of :func:`instance_contrastive_loss` (SimCLR's usual value; not tuned)."""


def instance_contrastive_loss(
    r: torch.Tensor, r_hat: torch.Tensor, temperature: float = NCE_TEMPERATURE
) -> torch.Tensor:
    r"""Instance-contrastive loss over a client's own batch (ours, not the paper's): view
    :math:`\hat r_i` is the positive of :math:`r_i` and the other samples' views
    :math:`\hat r_j` its negatives, symmetrised,

    .. math::

        L_{nce} = -\frac{1}{2N} \sum_i \Big[\log
        \frac{e^{c_{ii}/\tau}}{\sum_j e^{c_{ij}/\tau}}
        + \log \frac{e^{c_{ii}/\tau}}{\sum_j e^{c_{ji}/\tau}}\Big],
        \quad c_{ij} = d(r_i, \hat r_j)

    with cosine :math:`d`. On a client that holds one class the negatives are other images
    of that class, so the term keeps the variation *within* the class that eq. 7 alone
    lets the encoder discard. A batch of one has no negative: 0."""
    if len(r) < 2:
        return torch.zeros((), device=r.device)
    a = F.normalize(r, dim=1, eps=1e-8)
    b = F.normalize(r_hat, dim=1, eps=1e-8)
    logits = a @ b.T / temperature
    target = torch.arange(len(r), device=r.device)
    return 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target))


def make_flow(features: int, layers: int = 8, hidden: int = 64) -> zuko.flows.Flow:
    """The local flow :math:`\\mathfrak{t}(\\cdot;\\psi_k)`: RealNVP with ``layers`` affine
    coupling layers (alternating masks), each an MLP with two hidden layers of ``hidden``
    units, standard normal base ([ProtoFL Sec. 5.2], Dinh et al. 2017)."""
    return zuko.flows.RealNVP(
        features=features, transforms=layers, hidden_features=(hidden, hidden)
    )


def flow_latent(flow: zuko.flows.Flow, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:math:`z = \\mathfrak{t}^{-1}(r)` and :math:`\\log|\\det \\mathbf{j}|` per sample."""
    z, ladj = flow().transform.call_and_ladj(r)
    return z, ladj


def flow_nll(flow: zuko.flows.Flow, r: torch.Tensor) -> torch.Tensor:
    """The per-sample negative log-likelihood :math:`-\\log p_R(r)` = :math:`\\lVert z\\rVert^2/2
    - \\log|\\det\\mathbf{j}| + \\frac{D}{2}\\log 2\\pi` ([ProtoFL eq. 3, 9] with the constant
    kept, so it is an honest NLL; negative values are legitimate)."""
    z, ladj = flow_latent(flow, r)
    d = z.shape[-1]
    return 0.5 * (z**2).sum(-1) - ladj + 0.5 * d * math.log(2 * math.pi)


def phase2_loss(
    flow: zuko.flows.Flow, r: torch.Tensor, r_hat: torch.Tensor | None, lam: float = 0.01
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[ProtoFL eq. 11]: :math:`L_{mle} + \\lambda L_{reg}`; returns (total, L_mle, L_reg).

    :math:`L_{mle}` [ProtoFL eq. 9] over both views (each view is a sample of the local
    distribution), :math:`L_{reg} = \\frac1N\\sum_i [1 - d(z_i, \\hat z_i)]` [ProtoFL eq. 10].
    ``r_hat = None`` (clean representations, no second view): :math:`L_{mle}` alone.
    """
    z, ladj = flow_latent(flow, r)
    if r_hat is None:
        mle_only = (0.5 * (z**2).sum(-1) - ladj).mean()
        return mle_only, mle_only, torch.zeros((), device=r.device)
    z_hat, ladj_hat = flow_latent(flow, r_hat)
    mle = 0.5 * (
        (0.5 * (z**2).sum(-1) - ladj).mean() + (0.5 * (z_hat**2).sum(-1) - ladj_hat).mean()
    )
    reg = positive_cosine_loss(z, z_hat)
    return mle + lam * reg, mle, reg


class PretrainedTail(nn.Module):
    """The trainable tail of EfficientNet-Lite0, initialised from the shipped ImageNet
    weights (the off-the-shelf model :math:`\\mathcal{F}` of [ProtoFL eq. 6] itself): the
    MBConv blocks of stages ``start..7``, the head convolution and its batch norm, global
    average pooling; its input is the frozen prefix's output
    (:func:`fedad.methods.protofl.features.prefix_maps`), its output the 1280 features of
    :math:`\\mathcal{F}`, so :math:`\\phi` starts as :math:`\\mathcal{F}` and the prototypes
    live in its own space. Batch norm stays in eval mode (ImageNet statistics, frozen):
    FedAvg of per-client batch statistics would describe no client's data (the reason the
    CNN trunk uses group norm); its affine weights train. Built without weights (on torch's
    meta device): :meth:`load_pretrained` (or a state dict loaded with ``assign``) gives them."""

    def __init__(self, start: int) -> None:
        super().__init__()
        import itertools

        first = [0, *itertools.accumulate(s[0] for s in STAGES)][start - 1]
        with torch.device("meta"):  # no random draws: the weights come from load_pretrained
            net = EfficientNetLite0()
        self.blocks = nn.ModuleList(list(net.blocks)[first:])
        self.conv_head = net.conv_head
        self.bn1 = net.bn1
        self.rep_dim = int(net.bn1.num_features)
        self.first_block = first

    def load_pretrained(self) -> PretrainedTail:
        """Copy the shipped weights' entries of these layers (the full network's keys; the
        network is loaded and checked once per process by :mod:`fedad.resources`)."""
        full = get_resource("efficientnet-lite0", "cpu").state_dict()
        own = {}
        for key in self.state_dict():
            if key.startswith("blocks."):
                i, rest = key[len("blocks.") :].split(".", 1)
                own[key] = full[f"blocks.{int(i) + self.first_block}.{rest}"].clone()
            else:
                own[key] = full[key].clone()
        self.load_state_dict(own, strict=True, assign=True)
        return self

    def train(self, mode: bool = True) -> PretrainedTail:
        """Batch norm never leaves eval mode (see the class docstring)."""
        super().train(mode)
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.eval()
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        out: torch.Tensor = F.relu6(self.bn1(self.conv_head(x))).mean(dim=(2, 3))
        return out
