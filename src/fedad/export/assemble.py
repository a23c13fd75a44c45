"""One exported model: the preprocessing, the detector's scoring graph, the threshold.

The graph reads the user's inputs (:mod:`fedad.export.preprocess`), computes the model
inputs, runs the detector's scoring graph (:class:`fedad.export.registry.Core`, traced by
:func:`fedad.export.torchgraph.to_onnx`, its names prefixed ``core/``) and writes:

* ``score``: float32 ``[N]``, higher = more anomalous (NaN for a row fedad would refuse);
* ``anomaly``: int64 ``[N]``, 1 unless the score is at most the threshold, compared in
  float64 as :func:`fedad.detector.flag` does (a float64 score is compared before it is
  rounded to float32), so a NaN score is flagged;
* ``map``: float32 ``[N, H, W]``, the anomaly maps, for a detector that localises.

One threshold, or, for a model that serves several clients whose thresholds differ (a
global method's one detector, each client's threshold from its own training data), the
thresholds of all of them and an int64 input ``client`` (``[N]`` or ``[1]``: each row's
client, or one for all) that picks each row's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from fedad.export import deps
from fedad.export.preprocess import ML_OPSET, Preprocessing, X
from fedad.export.registry import Core
from fedad.export.torchgraph import INPUT, OPSET

if TYPE_CHECKING:
    import onnx as onnx_t

__all__ = ["assemble"]

PREFIX = "core/"


def assemble(
    pre: Preprocessing,
    core: Core,
    graph: onnx_t.ModelProto,
    thresholds: Sequence[float],
    name: str,
) -> onnx_t.ModelProto:
    """The exported model (module docstring) of one detector. ``thresholds``: one per
    client the model serves, in client order; several different ones add the ``client``
    input."""
    onnx = deps.onnx()
    helper, tp = onnx.helper, onnx.TensorProto
    inner = onnx.compose.add_prefix(graph, PREFIX)
    post = Preprocessing()  # the same node and constant helpers, for the nodes after
    nodes = [*pre.nodes, helper.make_node("Identity", [X], [PREFIX + INPUT], name="fedad/in")]
    nodes += list(inner.graph.node)
    dtype = np.float64 if core.score_dtype == "float64" else np.float32
    score = PREFIX + "score"
    if pre.bad is not None:
        nan = post.const("nan", np.array(np.nan, dtype=dtype))
        score = post.node("Where", [pre.bad, nan, score], "score_checked")
    wide = score if dtype == np.float64 else post.node("Cast", [score], "score64", to=tp.DOUBLE)
    graph_inputs = list(pre.inputs)
    distinct = sorted(set(float(t) for t in thresholds))
    if len(distinct) == 1:
        threshold = post.const("threshold", np.array(distinct[0], dtype=np.float64))
    else:
        table = post.const("thresholds", np.asarray(thresholds, dtype=np.float64))
        threshold = post.node("Gather", [table, "client"], "threshold", axis=0)
        graph_inputs.append(helper.make_tensor_value_info("client", tp.INT64, ["C"]))
    normal = post.node("LessOrEqual", [wide, threshold], "normal")
    post.nodes.append(
        helper.make_node("Cast", [post.node("Not", [normal], "flagged")], ["anomaly"],
                         name="fedad/anomaly", to=tp.INT64)
    )  # fmt: skip
    post.nodes.append(helper.make_node("Cast", [score], ["score"], name="fedad/score", to=1))
    outputs = [
        helper.make_tensor_value_info("score", tp.FLOAT, ["N"]),
        helper.make_tensor_value_info("anomaly", tp.INT64, ["N"]),
    ]
    if core.maps:
        maps = PREFIX + "map"
        if pre.bad is not None:
            rows = post.node("Unsqueeze", [pre.bad, post.const("hw", np.array([1, 2]))], "bad3")
            nan32 = post.const("nan32", np.array(np.nan, dtype=np.float32))
            maps = post.node("Where", [rows, nan32, maps], "map_checked")
        post.nodes.append(helper.make_node("Identity", [maps], ["map"], name="fedad/map"))
        outputs.append(helper.make_tensor_value_info("map", tp.FLOAT, ["N", "H", "W"]))
    out = helper.make_graph(
        nodes + post.nodes,
        name,
        graph_inputs,
        outputs,
        initializer=[*pre.initializers, *inner.graph.initializer, *post.initializers],
    )
    opsets = [helper.make_opsetid("", OPSET)]
    if pre.uses_ml:
        opsets.append(helper.make_opsetid("ai.onnx.ml", ML_OPSET))
    model: onnx_t.ModelProto = helper.make_model(out, opset_imports=opsets, producer_name="fedad")
    model.ir_version = graph.ir_version
    return model
