"""Where torch work runs: ``[engine] device`` resolved to a torch device string.

``"auto"`` (the default) is the first CUDA GPU when one is available, else the CPU; ``"cpu"``,
``"cuda"``, ``"cuda:N"`` and ``"mps"`` name a device explicitly. A device that is not there
is a one-line :class:`~fedad.core.errors.ConfigError`. Every random draw of fedad is made on the
CPU (numpy generators, torch's CPU generator for initial weights), so a seed gives the same
initial model and the same shuffles on every device; on CUDA, cuDNN is put in deterministic
mode, so repeated runs on one device agree. Results on different devices may differ in the
last digits (different kernels).
"""

from __future__ import annotations

import re
from functools import lru_cache

import torch

from fedad.core.errors import ConfigError

DEVICE_SPEC = re.compile(r"auto|cpu|cuda|cuda:[0-9]{1,3}|mps")
"""What ``[engine] device`` accepts."""


def _cuda_count() -> int:
    try:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except RuntimeError:  # a broken driver counts as no GPU
        return 0


def _mps() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


@lru_cache(maxsize=16)
def resolve_device(spec: str = "auto") -> str:
    """The torch device for ``spec`` (``"auto"`` -> ``"cuda:0"`` if present, else ``"cpu"``)."""
    if not DEVICE_SPEC.fullmatch(spec):
        raise ConfigError(
            f"unknown device '{spec}' at engine.device",
            "use auto, cpu, cuda, cuda:N or mps",
        )
    if spec == "cpu":
        return "cpu"
    n = _cuda_count()
    if spec == "auto":
        return _deterministic("cuda:0") if n else "cpu"
    if spec == "mps":
        if not _mps():
            raise ConfigError(
                "engine.device = 'mps' but this machine has no Apple GPU (MPS)",
                "use device = 'auto' or 'cpu'",
            )
        return "mps"
    index = int(spec.partition(":")[2] or 0)
    if index >= n:
        have = f"{n} CUDA device(s)" if n else "no CUDA device (or a CPU-only torch)"
        raise ConfigError(
            f"engine.device = '{spec}' but this machine has {have}",
            "use device = 'auto' or 'cpu'" + (f", or cuda:0..cuda:{n - 1}" if n else ""),
        )
    return _deterministic(f"cuda:{index}")


def _deterministic(device: str) -> str:
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    return device
