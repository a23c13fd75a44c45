"""The optional packages ``fedad export`` needs: ``onnx`` and ``onnxruntime``, the extra
``export`` (``pip install 'fedad[export]'``). Without them: one line naming the extra."""

from __future__ import annotations

import importlib
from types import ModuleType

from fedad.core.errors import FedadError

EXTRA = "export"
PACKAGES = ("onnx", "onnxruntime")


def require(name: str) -> ModuleType:
    """The module ``name`` (one of :data:`PACKAGES`), or a one-line :class:`FedadError`
    naming the extra that installs it."""
    try:
        return importlib.import_module(name)
    except ImportError:
        raise FedadError(
            f"fedad export needs the package '{name}', which is not installed",
            f"pip install 'fedad[{EXTRA}]' (onnx and onnxruntime)",
        ) from None


def onnx() -> ModuleType:
    """The ``onnx`` package (:func:`require`)."""
    return require("onnx")


def onnxruntime() -> ModuleType:
    """The ``onnxruntime`` package (:func:`require`)."""
    return require("onnxruntime")
