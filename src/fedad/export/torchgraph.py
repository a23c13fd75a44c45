"""A torch module as an ONNX graph: torch's TorchScript-based exporter
(``torch.onnx.export(..., dynamo=False)``).

Why that exporter and not the ``torch.export``-based one (torch's default since 2.9): it
needs no further package (the other needs ``onnxscript``), it traces the small scoring
modules of :mod:`fedad.export.detectors` in well under a second, and the scores it gives
equal fedad's to about 3e-7 relative (float32 networks; float64 heads to rounding), which
``fedad export`` checks on every model it writes (:mod:`fedad.export.check`). Torch marks it
deprecated; should a torch release drop it, this module is the one place to change.
"""

from __future__ import annotations

import io
import warnings
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from fedad.export import deps

if TYPE_CHECKING:
    import onnx as onnx_t

OPSET = 18
"""ONNX opset of the default domain in every exported model (onnxruntime >= 1.14 runs it)."""
INPUT = "x"


def to_onnx(
    module: nn.Module, example: torch.Tensor, outputs: tuple[str, ...]
) -> onnx_t.ModelProto:
    """``module`` traced on ``example`` (its batch of at least two samples) as an ONNX model
    with the input :data:`INPUT` and the named ``outputs``, every first axis dynamic."""
    onnx = deps.onnx()
    module = module.eval()
    buf = io.BytesIO()
    axes: dict[str, Any] = {name: {0: "N"} for name in (INPUT, *outputs)}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the exporter's deprecation and tracer notes
        torch.onnx.export(
            module,
            (example,),
            buf,  # type: ignore[arg-type]
            dynamo=False,
            input_names=[INPUT],
            output_names=list(outputs),
            dynamic_axes=axes,
            opset_version=OPSET,
            do_constant_folding=True,
        )
    model: onnx_t.ModelProto = onnx.load_from_string(buf.getvalue())
    return model
