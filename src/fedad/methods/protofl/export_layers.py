"""ProtoFL's CNN and MLP trunks in float64, as operations onnxruntime runs in float64.

The detector computes these trunks in float64 (:attr:`fedad.methods.protofl.detector.
ProtoFLDetector.float64`: the flow head turns float32 rounding of the trunk, which differs
between torch's and onnxruntime's convolutions by about 3e-7, into 2e-4 of its score).
onnxruntime has no float64 ``Conv`` (nor ``InstanceNormalization``, which torch's exporter
makes of a group norm), so :func:`float64_trunk` rebuilds the trunk from operations it has
in float64:

* a convolution (groups of one, as the CNN trunk's) is a sum over its kernel's offsets of
  a strided slice of the zero-padded input times that offset's weight matrix,
  :math:`y = b + \\sum_{u,v} W_{:,:,u,v} \\, x_{\\text{pad}}[:, :, u::s, v::s]`;
* group norm is its definition, :math:`(x - \\mu_g) / \\sqrt{\\sigma_g^2 + \\epsilon}`
  with the biased variance of each sample's group, then the affine map;
* global average pooling is a mean; linear layers, ReLU, flatten are kept (as float64).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn


class Conv64(nn.Module):
    """``nn.Conv2d`` (groups 1, square kernel, stride and padding) in float64."""

    weight: torch.Tensor
    bias: torch.Tensor

    def __init__(self, conv: nn.Conv2d) -> None:
        super().__init__()
        if conv.groups != 1 or conv.dilation != (1, 1) or isinstance(conv.padding, str):
            raise ValueError("only plain convolutions (groups 1, no dilation) are rewritten")
        self.register_buffer("weight", conv.weight.detach().double().clone())
        bias = conv.bias if conv.bias is not None else torch.zeros(conv.out_channels)
        self.register_buffer("bias", bias.detach().double().clone().view(1, -1, 1, 1))
        self.k = (int(conv.kernel_size[0]), int(conv.kernel_size[1]))
        self.stride = (int(conv.stride[0]), int(conv.stride[1]))
        pad = conv.padding
        self.pad = (int(pad[1]), int(pad[1]), int(pad[0]), int(pad[0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = int(x.shape[2]), int(x.shape[3])
        xp = F.pad(x, self.pad)
        ho = (h + self.pad[2] + self.pad[3] - self.k[0]) // self.stride[0] + 1
        wo = (w + self.pad[0] + self.pad[1] - self.k[1]) // self.stride[1] + 1
        out = self.bias
        for u in range(self.k[0]):
            for v in range(self.k[1]):
                part = xp[
                    :,
                    :,
                    u : u + self.stride[0] * (ho - 1) + 1 : self.stride[0],
                    v : v + self.stride[1] * (wo - 1) + 1 : self.stride[1],
                ]
                out = out + torch.einsum("oc,nchw->nohw", self.weight[:, :, u, v], part)
        return out


class GroupNorm64(nn.Module):
    """``nn.GroupNorm`` by its definition, in float64, on ``(N, C)`` or ``(N, C, H, W)``."""

    weight: torch.Tensor
    bias: torch.Tensor

    def __init__(self, norm: nn.GroupNorm) -> None:
        super().__init__()
        self.groups = int(norm.num_groups)
        self.eps = float(norm.eps)
        c = int(norm.num_channels)
        w = norm.weight if norm.weight is not None else torch.ones(c)
        b = norm.bias if norm.bias is not None else torch.zeros(c)
        self.register_buffer("weight", w.detach().double().clone())
        self.register_buffer("bias", b.detach().double().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        y = x.reshape(shape[0], self.groups, -1)
        mean = y.mean(-1, keepdim=True)
        var = ((y - mean) ** 2).mean(-1, keepdim=True)
        y = ((y - mean) / torch.sqrt(var + self.eps)).reshape(shape)
        view = (1, -1) + (1,) * (len(shape) - 2)
        return y * self.weight.view(view) + self.bias.view(view)


class GlobalMean(nn.Module):
    """``nn.AdaptiveAvgPool2d(1)``: the mean over height and width, kept as 1 x 1."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(2, 3), keepdim=True)


def _layer(m: nn.Module) -> nn.Module:
    if isinstance(m, nn.Conv2d):
        return Conv64(m)
    if isinstance(m, nn.GroupNorm):
        return GroupNorm64(m)
    if isinstance(m, nn.AdaptiveAvgPool2d):
        if m.output_size not in (1, (1, 1)):
            raise ValueError("only global average pooling is rewritten")
        return GlobalMean()
    if isinstance(m, nn.Linear | nn.ReLU | nn.Flatten | nn.Identity):
        return copy.deepcopy(m).double()
    raise ValueError(f"no float64 form of {type(m).__name__}")


class Float64Trunk(nn.Module):
    """The CNN or MLP trunk (:class:`fedad.methods.protofl.model.Trunk`) on float64 inputs."""

    def __init__(self, trunk: nn.Module) -> None:
        super().__init__()
        net = getattr(trunk, "net", None)
        if not isinstance(net, nn.Sequential):
            raise ValueError("a ProtoFL CNN or MLP trunk (a Sequential 'net') is expected")
        self.net = nn.Sequential(*(_layer(m) for m in net))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out
