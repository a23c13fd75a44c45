"""Graphs and pixel masks reach a method on both engines; nothing else knows the method.

Two toy methods live only in this file. ``toy-graph`` declares the graph kind and the
``graph`` field: clients send the sum and count of their graphs' embeddings (mean node
features and mean degree, pooled with torch-geometric), the server averages them, and a
graph scores by its embedding's distance to that mean. ``toy-maps`` asks for a public set,
a pretrained resource and pixel masks: clients send their mean image, and a pixel scores
by its distance to the mean image (so it localises, and pixel AUROC and PRO apply). Both
run through the unchanged runner (in-process) and on Flower's in-memory grid.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import numpy as np
import pytest
import torch
from pydantic import BaseModel, ConfigDict

from fedad.config import parse_config
from fedad.core import algorithm as algmod
from fedad.core.algorithm import (
    Algorithm,
    ClientState,
    Handler,
    PublicRequest,
    Requirements,
    ServerResult,
    register,
)
from fedad.core.context import ServerContext
from fedad.core.detector import _DETECTORS, BaseDetector, register_detector
from fedad.core.messages import Message
from fedad.core.types import ClientData, GraphSet, dense
from fedad.core.validate import ArraySpec
from fedad.data.registry import register_dataset, unregister_dataset
from fedad.resources import InputSpec, register_resource
from fedad.resources.base import Backbone
from tests.data.datahelpers import synth_graphs, synth_masked

pytest.importorskip("torch_geometric")

SEEN: dict[str, Any] = {}


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    contamination: float = 0.05


# --------------------------------------------------------------------------- graphs


def embed(x: GraphSet) -> np.ndarray:
    """Per graph, pooled with torch-geometric over its nodes: the node features' mean and
    mean square, and the degree; three numbers whatever the node-feature width."""
    from torch_geometric.nn import global_mean_pool
    from torch_geometric.utils import degree

    b = x.batch()
    deg = degree(b.edge_index[0], num_nodes=b.num_nodes)
    f = b.x[:, 1:]  # column 0 holds the test sets' sample ids (datahelpers.synth_graphs)
    h = torch.stack([f.mean(1), f.pow(2).mean(1), deg], dim=1)
    pooled: torch.Tensor = global_mean_pool(h, b.batch, size=len(x))
    return pooled.numpy().astype(np.float64)


class _GraphMean(BaseDetector):
    ParamsModel = _Params

    def __init__(self, contamination: float = 0.05) -> None:
        super().__init__(contamination)
        self.mean_ = np.zeros(0)

    def fit(self, x: Any) -> Self:
        self.mean_ = embed(x).mean(0)
        return self.set_threshold(x)

    def score(self, x: Any) -> np.ndarray:
        assert isinstance(x, GraphSet), "a graph method is handed graphs"
        return np.asarray(np.linalg.norm(embed(x) - self.mean_, axis=1))

    def get_params(self) -> dict[str, Any]:
        return {"contamination": self.contamination}

    def get_arrays(self) -> dict[str, np.ndarray]:
        return {"mean_": self.mean_}

    def set_arrays(self, arrays: dict[str, np.ndarray]) -> Self:
        self.mean_ = np.asarray(arrays["mean_"], dtype=np.float64)
        return self


class _GraphToy(Algorithm):
    name = "toy-graph"
    kinds = ("graph",)

    @classmethod
    def requirements(cls, params: dict[str, Any]) -> Requirements:
        return Requirements(fields=("x", "graph"))

    def handlers(self) -> dict[str, Handler]:
        return {**super().handlers(), "train": self.client_train}

    def client_train(self, state: ClientState, data: ClientData, msg: Message) -> Message:
        assert isinstance(data.x_train, GraphSet)
        e = embed(data.x_train)
        SEEN.setdefault("widths", set()).add(data.x_train.shape[1])
        return Message("train", {"mean": e.mean(0)}, {"num_examples": data.n_train})

    def server(self, ctx: ServerContext) -> ServerResult:
        width = 3  # see embed
        mean = np.zeros(width)
        for r in range(1, ctx.rounds + 1):
            msgs = {i: Message("train") for i in ctx.sample()}
            got = ctx.mean(msgs, {"mean": ArraySpec((width,), "float64")}).arrays
            mean = mean if got is None else got["mean"]
            ctx.end_round(r)
        return ServerResult({"mean_": mean}, {})

    def client_detector(self, state: ClientState, data: ClientData, msg: Message) -> BaseDetector:
        return _GraphMean(self.contamination).set_arrays({"mean_": msg.arrays["mean_"]})

    def make_detector(self) -> BaseDetector:
        return _GraphMean(self.contamination)


# --------------------------------------------------------------------------- masks


class _Tiny(Backbone):
    input_spec = InputSpec(size=8, channels=1, mean=(0.0,), std=(1.0,))
    feature_dim = 2

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(64, 2)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.lin(x.reshape(len(x), -1))
        return out


class _MeanImage(BaseDetector):
    ParamsModel = _Params

    def __init__(self, contamination: float = 0.05) -> None:
        super().__init__(contamination)
        self.mean_ = np.zeros(0)

    def fit(self, x: np.ndarray) -> Self:
        self.mean_ = x.mean(0)
        return self.set_threshold(x)

    def score_maps(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(np.abs(x - self.mean_).mean(axis=1))

    def score(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self.score_maps(x).reshape(len(x), -1).max(axis=1), dtype=np.float64)

    def get_params(self) -> dict[str, Any]:
        return {"contamination": self.contamination}

    def get_arrays(self) -> dict[str, np.ndarray]:
        return {"mean_": self.mean_}

    def set_arrays(self, arrays: dict[str, np.ndarray]) -> Self:
        self.mean_ = np.asarray(arrays["mean_"], dtype=np.float32)
        return self


class _MapsToy(Algorithm):
    name = "toy-maps"
    kinds = ("image",)

    @classmethod
    def requirements(cls, params: dict[str, Any]) -> Requirements:
        return Requirements(
            public=PublicRequest("procedural", 6),
            resources=("toy-res-maps",),
            fields=("x", "mask"),
        )

    def handlers(self) -> dict[str, Handler]:
        return {**super().handlers(), "train": self.client_train}

    def client_train(self, state: ClientState, data: ClientData, msg: Message) -> Message:
        x = dense(data.x_train, self.name)
        return Message("train", {"mean": x.mean(0)}, {"num_examples": data.n_train})

    def server(self, ctx: ServerContext) -> ServerResult:
        from fedad.resources import get_resource

        assert ctx.public is not None
        SEEN["public"] = ctx.public.shape
        SEEN["resource"] = type(get_resource("toy-res-maps")).__name__
        shape = tuple(int(s) for s in self.setup.feature_shape)
        mean = np.zeros(shape, np.float32)
        for r in range(1, ctx.rounds + 1):
            msgs = {i: Message("train") for i in ctx.sample()}
            got = ctx.mean(msgs, {"mean": ArraySpec(shape, "float32")}).arrays
            mean = mean if got is None else got["mean"]
            ctx.end_round(r)
        return ServerResult({"mean_": mean}, {})

    def client_detector(self, state: ClientState, data: ClientData, msg: Message) -> BaseDetector:
        return _MeanImage(self.contamination).set_arrays({"mean_": msg.arrays["mean_"]})

    def make_detector(self) -> BaseDetector:
        return _MeanImage(self.contamination)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def toys() -> Iterator[None]:
    register(_GraphToy)
    register(_MapsToy)
    for name, cls in (("toy-graph-mean", _GraphMean), ("toy-mean-image", _MeanImage)):
        if name not in _DETECTORS:
            register_detector(name)(cls)
    register_resource("toy-res-maps", _Tiny, input_spec=_Tiny.input_spec, feature_dim=2,
                      overwrite=True)  # fmt: skip
    register_dataset("kinds_graph", lambda path=None, size=None: synth_graphs(0), "", "graph",
                     overwrite=True)  # fmt: skip
    register_dataset("kinds_graph_b",
                     lambda path=None, size=None: synth_graphs(10_000, width=5, seed=4), "",
                     "graph", overwrite=True)  # fmt: skip
    register_dataset("kinds_mask", lambda path=None, size=None: synth_masked(0), "", "image",
                     overwrite=True)  # fmt: skip
    SEEN.clear()
    yield
    for name in ("toy-graph", "toy-maps"):
        algmod._REGISTRY.pop(name, None)
    for name in ("kinds_graph", "kinds_graph_b", "kinds_mask"):
        unregister_dataset(name)
    import fedad.resources as res

    res._REGISTRY.pop("toy-res-maps", None)
    res.clear_cache()


GRAPH_RAW = {
    "seed": 1,
    "rounds": 2,
    "data": {"name": "kinds_graph", "normal": [0], "anomaly": [3, 4],
             "sources": ["kinds_graph_b"]},
    "partition": {"scheme": "by-source", "clients": 4},
    "engine": {"progress": False},
    "methods": [{"name": "toy-graph"}],
}  # fmt: skip
MASK_RAW = {
    "seed": 1,
    "rounds": 1,
    "data": {"name": "kinds_mask", "normal": [0], "anomaly": [3, 4]},
    "partition": {"scheme": "iid", "clients": 3},
    "engine": {"progress": False},
    "methods": [{"name": "toy-maps"}],
}


def _flower_equals_inprocess(raw: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    pytest.importorskip("flwr")
    from fedad.federation import build_federation
    from fedad.fl.flower.server import serve
    from fedad.fl.flower.spec import RunSpec
    from fedad.resolve import build_algorithms
    from fedad.runner import run_method
    from tests.fl.flower.fake_flower import FakeFlowerGrid, as_server_app

    as_server_app(monkeypatch)
    cfg = parse_config(raw)
    fed = build_federation(cfg)
    label = raw["methods"][0]["name"]
    alg = build_algorithms(cfg, fed)[label]
    ref = run_method(cfg, alg, fed)
    spec = RunSpec.build(cfg, alg)
    out = serve(FakeFlowerGrid(spec, partitions=len(fed.clients)), spec, alg, poll_interval=0.0)
    assert sorted(out.evaluations) == sorted(ref.evaluations)
    for cid, m in ref.evaluations.items():
        assert set(out.evaluations[cid].arrays) == set(m.arrays)
        for k, a in m.arrays.items():
            np.testing.assert_array_equal(out.evaluations[cid].arrays[k], a)
    return ref


# --------------------------------------------------------------------------- tests


def test_graph_method_runs_inprocess(toys: None, tmp_path: Path) -> None:
    from fedad.runner import run_experiment

    data = run_experiment(parse_config(GRAPH_RAW), tmp_path / "run")
    m = data["methods"]["toy-graph"]
    # clients of both sources (node-feature widths 3 and 5) trained on their own graphs
    assert SEEN["widths"] == {3, 5}
    # rings with features N(0, 1) against chorded rings with features N(3..4, 1)
    assert m["auroc"] > 0.9
    assert len(m["per_client"]) == 4
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert "pixel_auroc" not in saved["columns"]["summary"]


def test_graph_method_on_flower_equals_inprocess(
    toys: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FEDAD_FLOWER_CACHE", str(tmp_path / "cache"))
    _flower_equals_inprocess(GRAPH_RAW, monkeypatch)


def test_masks_public_set_and_resource_reach_a_localising_method(
    toys: None, tmp_path: Path
) -> None:
    from fedad.runner import run_experiment

    data = run_experiment(parse_config(MASK_RAW), tmp_path / "run")
    m = data["methods"]["toy-maps"]
    assert SEEN["public"] == (6, 1, 8, 8) and SEEN["resource"] == "_Tiny"
    # the stamped squares are far brighter than the mean image: they are found pixel-wise
    assert m["pixel_auroc"] > 0.8 and m["pro"] is not None
    assert all(r["pixel_auroc"] is not None for r in m["per_client"])
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert {"pixel_auroc", "pro"} <= set(saved["columns"]["summary"])
    assert (tmp_path / "run" / "maps.npz").is_file()


def test_localising_method_on_flower_equals_inprocess(
    toys: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = _flower_equals_inprocess(MASK_RAW, monkeypatch)
    assert all({"map", "mask"} <= set(m.arrays) for m in ref.evaluations.values())


def test_a_mask_method_on_data_without_masks_is_refused(toys: None, tmp_path: Path) -> None:
    from fedad.core.errors import ConfigError
    from fedad.runner import run_experiment

    raw = {**MASK_RAW, "data": {"name": "digits", "normal": [0], "anomaly": [7], "size": 8}}
    with pytest.raises(ConfigError, match=r"reads sample field\(s\) \['mask'\]"):
        run_experiment(parse_config(raw), tmp_path / "x")
