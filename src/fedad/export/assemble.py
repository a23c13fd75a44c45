"""One exported model: the preprocessing, the detector's scoring graph, the threshold.

The graph reads the user's inputs (:mod:`fedad.export.preprocess`), computes the model
inputs, runs the detector's scoring graph (:class:`fedad.export.registry.Core`, traced by
:func:`fedad.export.torchgraph.to_onnx`, its names prefixed ``core/``) and writes:

* ``score``: float32 ``[N]``, higher = more anomalous (NaN for a row fedad would refuse);
* ``anomaly``: int64 ``[N]``, 1 unless the score is at most the threshold, compared in
  float64 as :func:`fedad.core.detector.flag` does (a float64 score is compared before it is
  rounded to float32), so a NaN score is flagged;
* ``map``: float32 ``[N, H, W]``, the anomaly maps, for a detector that localises.

One threshold, or, for a model that serves several clients whose thresholds differ (a
global method's one detector, each client's threshold from its own training data), the
thresholds of all of them and an int64 input ``client`` (``[N]`` or ``[1]``: each row's
client, or one for all) that picks each row's. A ``client`` that is not that (an id outside
``0 .. C-1``, a negative one included, which ONNX ``Gather`` would otherwise wrap round to
the last clients' thresholds, or a length other than ``N`` or 1) makes onnxruntime raise: a
``Reshape`` to an impossible shape, named :data:`CLIENT_CHECK` (its text names the valid
ids), runs before the threshold is picked. A wrong id is the caller's mistake, not a row
to score: a NaN or a third ``anomaly`` value would be read as a decision by a caller that
does not look for it, and fedad's own ``fedad score`` refuses an unknown client too.

An empty batch (``N = 0``) gives empty outputs: the detector's graph (whose reshapes
cannot infer an axis of an empty tensor) is fed one row of zeros when there is none, and
its outputs are cut back to the ``N`` rows given.
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

__all__ = ["CLIENT_CHECK", "assemble"]

PREFIX = "core/"
CLIENT_CHECK = "fedad/check: client must hold ids 0 to {last}, one per row or one for all"
"""The name of the node that fails (an onnxruntime error names it) on a wrong ``client``."""


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
    front = Preprocessing()  # the nodes between the preprocessing and the detector's graph
    rows = _feed_at_least_one_row(front)
    post = Preprocessing()  # the same node and constant helpers, for the nodes after
    dtype = np.float64 if core.score_dtype == "float64" else np.float32
    score = _first_rows(post, PREFIX + "score", rows, "score")
    if pre.bad is not None:
        nan = post.const("nan", np.array(np.nan, dtype=dtype))
        score = post.node("Where", [pre.bad, nan, score], "score_checked")
    wide = score if dtype == np.float64 else post.node("Cast", [score], "score64", to=tp.DOUBLE)
    graph_inputs = list(pre.inputs)
    distinct = sorted(set(float(t) for t in thresholds))
    if len(distinct) == 1:
        threshold = post.const("threshold", np.array(distinct[0], dtype=np.float64))
    else:
        threshold = _client_threshold(post, thresholds, rows)
        graph_inputs.append(helper.make_tensor_value_info("client", tp.INT64, ["C"]))
    normal = post.node("LessOrEqual", [wide, threshold], "normal")
    flagged = post.node("Not", [normal], "flagged")
    post.nodes.append(
        helper.make_node("Cast", [flagged], ["anomaly"], name="fedad/anomaly", to=tp.INT64)
    )
    post.nodes.append(helper.make_node("Cast", [score], ["score"], name="fedad/score", to=1))
    outputs = [
        helper.make_tensor_value_info("score", tp.FLOAT, ["N"]),
        helper.make_tensor_value_info("anomaly", tp.INT64, ["N"]),
    ]
    if core.maps:
        _map_output(post, pre.bad, rows)
        outputs.append(helper.make_tensor_value_info("map", tp.FLOAT, ["N", "H", "W"]))
    parts = (pre, front, post)
    out = helper.make_graph(
        [*pre.nodes, *front.nodes, *inner.graph.node, *post.nodes],
        name,
        graph_inputs,
        outputs,
        initializer=[*inner.graph.initializer, *(t for p in parts for t in p.initializers)],
    )
    opsets = [helper.make_opsetid("", OPSET)]
    if pre.uses_ml:
        opsets.append(helper.make_opsetid("ai.onnx.ml", ML_OPSET))
    model: onnx_t.ModelProto = helper.make_model(out, opset_imports=opsets, producer_name="fedad")
    model.ir_version = graph.ir_version
    return model


def _feed_at_least_one_row(front: Preprocessing) -> str:
    """Nodes that feed :data:`X` to the detector's graph with ``max(1 - N, 0)`` rows of
    zeros after its ``N`` (one when the batch is empty, else none); the name of ``[N]``."""
    helper = deps.onnx().helper
    rows = front.node("Shape", [X], "batch/rows", start=0, end=1)
    one = front.const("batch/one", np.array([1]))
    missing = front.node("Sub", [one, front.node("Min", [rows, one], "batch/some")], "batch/pad")
    zero = front.const("batch/zero", np.array([0]))
    pads = front.node("Concat", [zero, missing], "batch/pads", axis=0)
    axes = front.const("batch/axis", np.array([0]))
    front.nodes.append(
        helper.make_node("Pad", [X, pads, "", axes], [PREFIX + INPUT], name="fedad/in")
    )
    return rows


def _first_rows(post: Preprocessing, tensor: str, rows: str, tag: str) -> str:
    """``tensor[:N]``: the detector's outputs for the rows given (none for its row of
    padding)."""
    start = post.const(f"{tag}/start", np.array([0]))
    axis = post.const(f"{tag}/axis", np.array([0]))
    return post.node("Slice", [tensor, start, rows, axis], f"{tag}/rows")


def _client_threshold(post: Preprocessing, thresholds: Sequence[float], rows: str) -> str:
    """Each row's threshold, picked by the input ``client`` after :data:`CLIENT_CHECK`:
    ``client`` reshaped to ``[0]`` (its own length) when its ids all lie in ``0 .. C-1``
    and its length is ``N`` or 1, else to ``[-2]``, which onnxruntime refuses."""
    helper = deps.onnx().helper
    table = post.const("thresholds", np.asarray(thresholds, dtype=np.float64))
    below = post.node("Less", ["client", post.const("client/first", np.array(0))], "client/below")
    count = post.const("client/count", np.array(len(thresholds)))
    above = post.node("GreaterOrEqual", ["client", count], "client/above")
    wrong = post.node("Or", [below, above], "client/wrong")
    n_wrong = post.node(
        "ReduceSum",
        [post.node("Cast", [wrong], "client/wrong64", to=7)],
        "client/nwrong",
        keepdims=0,
    )
    ids_ok = post.node("Equal", [n_wrong, post.const("client/none", np.array(0))], "client/ids_ok")
    length = post.node("Shape", ["client"], "client/length")
    per_row = post.node("Equal", [length, rows], "client/per_row")
    for_all = post.node("Equal", [length, post.const("client/one", np.array([1]))], "client/all")
    ok = post.node("And", [ids_ok, post.node("Or", [per_row, for_all], "client/fits")], "client/ok")
    same = post.const("client/same", np.array([0]))
    refused = post.const("client/refused", np.array([-2]))
    shape = post.node("Where", [ok, same, refused], "client/shape")
    checked = "fedad/client/checked"
    check = CLIENT_CHECK.format(last=len(thresholds) - 1)
    post.nodes.append(helper.make_node("Reshape", ["client", shape], [checked], name=check))
    return post.node("Gather", [table, checked], "threshold", axis=0)


def _map_output(post: Preprocessing, bad: str | None, rows: str) -> None:
    """The output ``map``: the detector's maps of the rows given, NaN for a refused row."""
    helper = deps.onnx().helper
    maps = _first_rows(post, PREFIX + "map", rows, "map")
    if bad is not None:
        where = post.node("Unsqueeze", [bad, post.const("hw", np.array([1, 2]))], "bad3")
        nan32 = post.const("nan32", np.array(np.nan, dtype=np.float32))
        maps = post.node("Where", [where, nan32, maps], "map_checked")
    post.nodes.append(helper.make_node("Identity", [maps], ["map"], name="fedad/map"))
