"""Wide-ResNet-50-2 (Zagoruyko & Komodakis, 2016; torchvision's ``wide_resnet50_2``).

The patch-level detectors' paper backbone (PatchCore, FedDyMem): a ResNet-50 whose
bottleneck blocks are twice as wide inside. Our own definition with torchvision's parameter
names, so that a torchvision state dict (``wide_resnet50_2-*.pth``, e.g. the ImageNet
weights torchvision publishes) loads strictly; fedad does not download it. The file comes
from a user path and is read with ``torch.load(weights_only=True)``, which restores tensors
only (no code runs), and must hold every parameter of the network with the right shape.

Inputs: RGB in [0, 1] normalised with the ImageNet mean and standard deviation; native
size 224. Stages 1..4 are ``layer1``..``layer4`` (256, 512, 1024, 2048 channels at strides
4, 8, 16, 32); PatchCore and FedDyMem use stages 2 and 3.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from fedad.core.errors import ConfigError
from fedad.resources.base import Backbone, InputSpec, check_stages

__all__ = ["INPUT_SPEC", "STAGE_CHANNELS", "WideResNet50", "load_wide_resnet50_2"]

INPUT_SPEC = InputSpec(size=224, channels=3, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
STAGE_CHANNELS: tuple[int, ...] = (256, 512, 1024, 2048)
FEATURE_DIM = 2048
_BLOCKS = (3, 4, 6, 3)
_WIDTH = 128  # base width 64 x 2 (the "wide" in the name)


class Bottleneck(nn.Module):
    """torchvision's ``Bottleneck`` (stride on the 3x3 convolution, ResNet v1.5)."""

    def __init__(self, cin: int, planes: int, stride: int, downsample: bool) -> None:
        super().__init__()
        mid = planes * _WIDTH // 64
        cout = planes * 4
        self.conv1 = nn.Conv2d(cin, mid, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(mid)
        self.conv2 = nn.Conv2d(mid, mid, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(mid)
        self.conv3 = nn.Conv2d(mid, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.downsample = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))
            if downsample
            else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        h = self.bn3(self.conv3(h))
        skip = x if self.downsample is None else self.downsample(x)
        return F.relu(h + skip)


class WideResNet50(Backbone):
    """Wide-ResNet-50-2 without its classifier: stem, ``layer1``..``layer4``."""

    input_spec = INPUT_SPEC
    feature_dim = FEATURE_DIM

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        cin = 64
        for i, (blocks, planes) in enumerate(zip(_BLOCKS, (64, 128, 256, 512), strict=True)):
            stride = 1 if i == 0 else 2
            layer = []
            for b in range(blocks):
                layer.append(Bottleneck(cin, planes, stride if b == 0 else 1, b == 0))
                cin = planes * 4
            setattr(self, f"layer{i + 1}", nn.Sequential(*layer))

    def stage_maps(self, x: torch.Tensor, stages: tuple[int, ...]) -> list[torch.Tensor]:
        """Outputs of ``layer{s}`` for ``s`` in ``stages`` (1..4)."""
        check_stages(stages, 4)
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, stride=2, padding=1)
        out: list[torch.Tensor] = []
        for s in range(1, stages[-1] + 1):
            x = getattr(self, f"layer{s}")(x)
            if s in stages:
                out.append(x)
        return out

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.stage_maps(x, (4,))[0].mean(dim=(2, 3))


def load_wide_resnet50_2(path: str | Path) -> WideResNet50:
    """Wide-ResNet-50-2 with the torchvision-format weights at ``path`` (CPU, eval mode).

    The classifier (``fc.*``) is ignored when present; anything else missing, extra or of
    the wrong shape is a one-line :class:`ConfigError`.
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(
            f"backbone 'wide_resnet50_2' needs its weights file; {p} is not a file",
            "set params.backbone_path to torchvision's wide_resnet50_2 .pth file",
        )
    try:
        with warnings.catch_warnings():  # torch warns about crafted pickle protocols
            warnings.simplefilter("ignore", UserWarning)
            state = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as err:  # corrupt or crafted files: any unpickling error
        raise ConfigError(
            f"cannot read {p} as a state dict of tensors ({type(err).__name__})",
            "use torchvision's wide_resnet50_2 weights file",
        ) from None
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise ConfigError(f"{p} is not a state dict of tensors", "use a torchvision .pth file")
    model = WideResNet50()
    ours = model.state_dict()
    state = {k: v for k, v in state.items() if not k.startswith("fc.")}
    missing = sorted(set(ours) - set(state))
    extra = sorted(set(state) - set(ours))
    wrong = sorted(k for k in set(ours) & set(state) if ours[k].shape != state[k].shape)
    if missing or extra or wrong:
        what = (
            f"missing {missing[0]}"
            if missing
            else f"unexpected {extra[0]}"
            if extra
            else f"{wrong[0]} has shape {tuple(state[wrong[0]].shape)}"
        )
        raise ConfigError(
            f"{p} is not a wide_resnet50_2 state dict ({what})",
            "use torchvision's wide_resnet50_2 weights file",
        )
    model.load_state_dict(state, strict=True)
    return model.eval()
