"""Which tensors of a torch model belong to normalisation layers (FedBN's local part).

FedBN (Li et al., ICLR 2021, Algorithm 1) averages every parameter except those of the
batch-normalisation layers, which each client keeps. We take "normalisation layer" from the
modules themselves, never from tensor names: a module is one when it is an instance of
torch's batch, group, layer, instance, local-response or RMS normalisation classes, or of a
class defined in ``torch_geometric.nn.norm`` (PyG's ``GraphNorm``, ``LayerNorm``, ...).
Every tensor of its state (affine parameters, running statistics, the batch counter) is
then local.
"""

from __future__ import annotations

from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.instancenorm import _InstanceNorm

NORM_TYPES: tuple[type[nn.Module], ...] = tuple(
    t
    for t in (
        _BatchNorm,
        _InstanceNorm,
        nn.GroupNorm,
        nn.LayerNorm,
        nn.LocalResponseNorm,
        getattr(nn, "RMSNorm", None),
        getattr(nn, "SyncBatchNorm", None),
    )
    if isinstance(t, type)
)
"""torch's normalisation layer classes (``_BatchNorm`` covers BatchNorm1d/2d/3d and their
lazy forms, ``_InstanceNorm`` InstanceNorm1d/2d/3d)."""

PYG_NORM_MODULE = "torch_geometric.nn.norm"


def is_norm(module: nn.Module) -> bool:
    """Whether ``module`` is a normalisation layer (see the module docstring)."""
    return isinstance(module, NORM_TYPES) or type(module).__module__.startswith(PYG_NORM_MODULE)


def norm_keys(model: nn.Module) -> frozenset[str]:
    """The ``state_dict`` keys of ``model`` that belong to its normalisation layers.

    A normalisation module's own parameters and persistent buffers (not those of modules
    nested in it, except where they are normalisation layers too, e.g. PyG's ``BatchNorm``
    wrapping torch's). Empty for a model without normalisation layers.
    """
    state = set(model.state_dict())
    keys: set[str] = set()
    for name, module in model.named_modules():
        if not is_norm(module):
            continue
        prefix = f"{name}." if name else ""
        for k, _ in module.named_parameters(recurse=False):
            keys.add(prefix + k)
        for k, _ in module.named_buffers(recurse=False):
            keys.add(prefix + k)
    return frozenset(keys & state)
