"""The preprocessing of ``inputs.json`` as ONNX nodes, in front of an exported detector.

What an exported model takes is the raw input a user has:

* a **table** (a run on a table file with named columns): one input per feature column,
  named by the column, shape ``[N, 1]``; ``float32`` for a numeric column (NaN or an
  infinite value = missing, as fedad reads a number beyond float32's range) and ``string``
  for a text column, as skl2onnx does for DataFrames. A text cell is compared with the
  categories kept in training exactly as given (fedad strips spaces around a cell first:
  give cells stripped); a cell pandas reads as missing in a CSV (:data:`MISSING_TEXT`:
  empty, ``NA``, ``NaN``, ``null``, ...) is missing, unless training kept it as a category;
  a category training never saw encodes as all zeros. Then, as
  :meth:`fedad.rundir.inputs.Inputs.table` does: the one-hot encoding, missing values replaced by
  the training means (runs with ``data.missing = "impute-mean"``), the standardisation,
  every step in float32;
* **images**: one input ``image``, float32 ``[N, C, H, W]`` in [0, 1] at the training size;
* other **vectors** (data without named features): one input ``x``, float32 ``[N, D]``,
  the model inputs as :meth:`~fedad.core.detector.BaseDetector.score` takes them (fedad has no
  raw form of such data to preprocess either: ``fedad score`` needs named columns).

Where fedad would refuse a row (a missing value in a run that did not impute, a value that
standardises beyond float32's range) the model cannot raise an error: the row's score is
NaN and its ``anomaly`` 1, as fedad flags a score it cannot compute (fail closed,
:func:`fedad.core.detector.flag`). :class:`Preprocessing` holds the nodes; its ``bad`` tensor
marks those rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from fedad.export import deps
from fedad.export.registry import NotExportable

if TYPE_CHECKING:
    from fedad.rundir.inputs import Inputs

__all__ = ["MISSING_TEXT", "ML_OPSET", "OUTPUT_NAMES", "Preprocessing", "preprocessing"]

MISSING_TEXT: tuple[str, ...] = (
    "",
    "#N/A",
    "#N/A N/A",
    "#NA",
    "-1.#IND",
    "-1.#QNAN",
    "-NaN",
    "-nan",
    "1.#IND",
    "1.#QNAN",
    "<NA>",
    "N/A",
    "NA",
    "NULL",
    "NaN",
    "None",
    "n/a",
    "nan",
    "null",
)
"""The cells pandas reads as missing in a CSV by default (``pandas._libs.parsers.
STR_NA_VALUES`` of pandas 2 and 3), which is how fedad reads a table file."""
OUTPUT_NAMES = ("score", "anomaly", "map", "client")
"""Names an exported model keeps for its own outputs and inputs (never a column's)."""
X = "fedad/x"
BAD = "fedad/bad"
UNKNOWN, MISSING = -1, -2
"""What the text lookup gives a category never seen, and a missing cell."""

ML_OPSET = 3
"""Opset of the ``ai.onnx.ml`` domain (its ``LabelEncoder`` reads text categories)."""


@dataclass
class Preprocessing:
    """ONNX nodes from the user's inputs to the model inputs :data:`X`, float32
    ``(N, *feature_shape)``, and, when some row can be one fedad would refuse, :data:`BAD`
    (bool ``(N,)``)."""

    inputs: list[Any] = field(default_factory=list)
    """The graph inputs (``ValueInfoProto``), in the order of ``described``."""
    described: list[dict[str, Any]] = field(default_factory=list)
    """model.json's ``inputs``: name, type, shape and what it is, per graph input."""
    nodes: list[Any] = field(default_factory=list)
    initializers: list[Any] = field(default_factory=list)
    bad: str | None = None
    uses_ml: bool = False
    """Whether the nodes use the ``ai.onnx.ml`` domain (the text lookup)."""

    def const(self, name: str, value: np.ndarray) -> str:
        """An initializer ``fedad/name`` holding ``value``; its name."""
        numpy_helper = deps.onnx().numpy_helper
        full = f"fedad/{name}"
        self.initializers.append(numpy_helper.from_array(np.asarray(value), full))
        return full

    def node(self, op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        """A node ``op`` writing ``fedad/output``; its output's name."""
        helper = deps.onnx().helper
        out = output if output.startswith("fedad/") else f"fedad/{output}"
        domain = "ai.onnx.ml" if op == "LabelEncoder" else ""
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, domain=domain, **attrs))
        return out


def preprocessing(inputs: Inputs) -> Preprocessing:
    """The nodes of ``inputs``' preprocessing (module docstring); a one-line
    :class:`NotExportable` for graph data or a column named like an output."""
    p = Preprocessing()
    onnx = deps.onnx()
    tp = onnx.TensorProto
    width = inputs.width
    if inputs.kind == "graph":
        raise NotExportable(
            "graph data cannot be exported to ONNX: a graph model takes graphs of any size "
            "(node features and edges), which the exported models' fixed inputs cannot hold"
        )
    shape = np.array([-1, *inputs.feature_shape], dtype=np.int64)
    if inputs.kind == "vector" and inputs.columns:
        flat = _standardise(p, inputs, _impute(p, inputs, _table(p, inputs)))
        p.node("Reshape", [flat, p.const("feature_shape", shape)], X)
        return p
    name = "image" if inputs.kind == "image" else "x"
    dims = ["N", *inputs.feature_shape] if inputs.kind == "image" else ["N", width]
    p.inputs.append(onnx.helper.make_tensor_value_info(name, tp.FLOAT, dims))
    p.described.append(
        {
            "name": name,
            "type": "float32",
            "shape": dims,
            "what": "images in [0, 1] at the training size"
            if inputs.kind == "image"
            else "model inputs, as the detector's score takes them",
        }
    )
    p.node("Reshape", [name, p.const("feature_shape", shape)], X)
    return p


def _check_name(column: str) -> None:
    if column in OUTPUT_NAMES or column.startswith("fedad/") or not column:
        raise NotExportable(
            f"the run's feature column '{column}' cannot name an input of the exported model "
            f"(the names {', '.join(OUTPUT_NAMES)}, empty names and 'fedad/...' are its own)",
            "rename the column in the table and run the experiment again",
        )


def _table(p: Preprocessing, inputs: Inputs) -> str:
    """One input per feature column, encoded as :meth:`Inputs.table` does: ``(N, width)``."""
    onnx = deps.onnx()
    tp = onnx.TensorProto
    parts: list[str] = []
    for j, column in enumerate(inputs.columns):
        _check_name(column)
        cats = inputs.categories.get(column)
        if cats is None:
            p.inputs.append(onnx.helper.make_tensor_value_info(column, tp.FLOAT, ["N", 1]))
            p.described.append(
                {
                    "name": column,
                    "type": "float32",
                    "shape": ["N", 1],
                    "what": "numbers; NaN or infinite = missing",
                }
            )
            parts.append(column)
            continue
        p.inputs.append(onnx.helper.make_tensor_value_info(column, tp.STRING, ["N", 1]))
        p.described.append(
            {
                "name": column,
                "type": "string",
                "shape": ["N", 1],
                "categories": list(cats),
                "what": "text, stripped; a category not listed encodes as all zeros",
            }
        )
        parts.append(_one_hot(p, j, column, cats))
    return p.node("Concat", parts, "encoded", axis=1) if len(parts) > 1 else parts[0]


def _one_hot(p: Preprocessing, j: int, column: str, cats: tuple[str, ...]) -> str:
    """The 0/1 columns of one text input ``(N, len(cats))``: all zeros for a category not
    kept, NaN in each for a missing cell."""
    p.uses_ml = True
    keys = list(cats) + [m for m in MISSING_TEXT if m not in cats]
    values = list(range(len(cats))) + [MISSING] * (len(keys) - len(cats))
    idx = p.node(
        "LabelEncoder",
        [column],
        f"c{j}/index",
        keys_strings=keys,
        values_int64s=values,
        default_int64=UNKNOWN,
    )
    if not cats:  # no category kept: no columns (a missing cell then has none to mark)
        return p.node(
            "Slice",
            [
                p.const(f"c{j}/none", np.zeros((1, 0), np.float32)),
                p.const(f"c{j}/z", np.array([0])),
                p.const(f"c{j}/z2", np.array([0])),
            ],
            f"c{j}/empty",
        )
    ids = p.const(f"c{j}/ids", np.arange(len(cats), dtype=np.int64)[None, :])
    hot = p.node("Cast", [p.node("Equal", [idx, ids], f"c{j}/eq")], f"c{j}/hot", to=1)
    gone = p.node("Equal", [idx, p.const(f"c{j}/missing", np.array([[MISSING]]))], f"c{j}/na")
    nan = p.const(f"c{j}/nan", np.array([[np.nan]], dtype=np.float32))
    return p.node("Where", [gone, nan, hot], f"c{j}/onehot")


def _not_finite(p: Preprocessing, x: str, tag: str) -> str:
    nan = p.node("IsNaN", [x], f"{tag}/isnan")
    inf = p.node("IsInf", [x], f"{tag}/isinf")
    return p.node("Or", [nan, inf], f"{tag}/notfinite")


def _any_row(p: Preprocessing, flags: str, tag: str) -> str:
    """bool ``(N,)``: whether any value of each row of the bool ``(N, W)`` is set."""
    as_num = p.node("Cast", [flags], f"{tag}/num", to=1)
    axes = p.const(f"{tag}/axes", np.array([1]))
    most = p.node("ReduceMax", [as_num, axes], f"{tag}/rowmax", keepdims=0)
    return p.node("Greater", [most, p.const(f"{tag}/zero", np.array(0, np.float32))], f"{tag}/any")


def _mark_bad(p: Preprocessing, rows: str) -> None:
    p.bad = p.node("Or", [p.bad, rows], BAD + str(len(p.nodes))) if p.bad else rows


def _impute(p: Preprocessing, inputs: Inputs, x: str) -> str:
    """Missing values (NaN, infinite) replaced by the training means, or the rows marked."""
    gone = _not_finite(p, x, "missing")
    if inputs.impute_means is None:
        _mark_bad(p, _any_row(p, gone, "missing"))
        return x
    means = p.const("impute_means", inputs.impute_means.astype(np.float32)[None, :])
    return p.node("Where", [gone, means, x], "imputed")


def _standardise(p: Preprocessing, inputs: Inputs, x: str) -> str:
    """``(x - mean) / std`` in float32; rows beyond float32's range marked."""
    if inputs.mean is None or inputs.std is None:
        return x
    mean = p.const("mean", inputs.mean.astype(np.float32)[None, :])
    std = p.const("std", inputs.std.astype(np.float32)[None, :])
    z = p.node("Div", [p.node("Sub", [x, mean], "centred"), std], "standardised")
    _mark_bad(p, _any_row(p, _not_finite(p, z, "beyond"), "beyond"))
    return z


def standalone(p: Preprocessing) -> Any:
    """The preprocessing alone as an ONNX model (outputs :data:`X` and, when some row can
    be refused, :data:`BAD`): what its tests compare with :meth:`Inputs.table`."""
    from fedad.export.torchgraph import OPSET

    helper, tp = deps.onnx().helper, deps.onnx().TensorProto
    outputs = [helper.make_tensor_value_info(X, tp.FLOAT, None)]
    if p.bad is not None:
        outputs.append(helper.make_tensor_value_info(p.bad, tp.BOOL, ["N"]))
    graph = helper.make_graph(p.nodes, "preprocessing", p.inputs, outputs, p.initializers)
    opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid("ai.onnx.ml", ML_OPSET)]
    return helper.make_model(graph, opset_imports=opsets)
