"""A method declares what it needs (public set, pretrained resource); both engines supply it.

The toy method below lives only in this test: it asks for a procedural public set and a
(test-registered) resource, sends the public set's mean feature to the clients in its one
update phase, and scores by distance to that centre. Nothing in the engine, runner or report
knows about it.
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
from fedad.core import detector as detector_module
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
from fedad.core.detector import BaseDetector, register_detector
from fedad.core.errors import ConfigError
from fedad.core.messages import Message
from fedad.core.types import ClientData
from fedad.resources import InputSpec, register_resource
from fedad.resources.base import Backbone

PUBLIC_N = 12
SEEN: dict[str, Any] = {}


class _Tiny(Backbone):
    input_spec = InputSpec(size=8, channels=1, mean=(0.0,), std=(1.0,))
    feature_dim = 4

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(64, 4)
        torch.nn.init.eye_(self.lin.weight)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x.reshape(len(x), -1))


class _CenterParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    contamination: float = 0.05


class _CenterDetector(BaseDetector):
    ParamsModel = _CenterParams

    def __init__(self, contamination: float = 0.05) -> None:
        super().__init__(contamination)
        self.center_ = np.zeros(4)

    def _feat(self, x: np.ndarray) -> np.ndarray:
        from fedad.resources import get_resource

        with torch.no_grad():
            f = get_resource("toy-res").features(torch.from_numpy(x.astype(np.float32)))
        return f.numpy().astype(np.float64)

    def fit(self, x: np.ndarray) -> Self:
        return self.set_threshold(x)

    def score(self, x: np.ndarray) -> np.ndarray:
        return np.linalg.norm(self._feat(x) - self.center_, axis=1)

    def get_params(self) -> dict[str, Any]:
        return {"contamination": self.contamination}

    def get_arrays(self) -> dict[str, np.ndarray]:
        return {"center_": self.center_}

    def set_arrays(self, arrays: dict[str, np.ndarray]) -> Self:
        self.center_ = np.asarray(arrays["center_"], dtype=np.float64)
        return self


class _Toy(Algorithm):
    name = "toy-public"
    kinds = ("image",)

    @classmethod
    def requirements(cls, params: dict[str, Any]) -> Requirements:
        return Requirements(
            public=PublicRequest("procedural", PUBLIC_N),
            resources=("toy-res",),
            update_phases=("share",),
        )

    def handlers(self) -> dict[str, Handler]:
        return {**super().handlers(), "share": self.client_share}

    def client_share(self, state: ClientState, data: ClientData, msg: Message) -> Message:
        state["center"] = msg.arrays["center"]
        return Message("share", {}, {"num_examples": data.n_train})

    def server(self, ctx: ServerContext) -> ServerResult:
        assert ctx.public is not None
        SEEN["public"] = ctx.public.copy()
        center = _CenterDetector()._feat(ctx.public).mean(0)
        for r in range(1, ctx.rounds + 1):
            ctx.send({i: Message("share", {"center": center}) for i in ctx.sample()})
            ctx.end_round(r)
        return ServerResult({"center_": center}, {})

    def client_detector(self, state: ClientState, data: ClientData, msg: Message) -> BaseDetector:
        det = _CenterDetector(self.contamination)
        return det.set_arrays({"center_": msg.arrays["center_"]})

    def make_detector(self) -> BaseDetector:
        return _CenterDetector(self.contamination)


RAW = {
    "seed": 2,
    "rounds": 1,
    "data": {"name": "digits", "normal": [0, 1], "anomaly": [7], "max_test": 40},
    "partition": {"scheme": "iid", "clients": 2},
    "engine": {"progress": False},
    "methods": [{"name": "toy-public"}],
}


@pytest.fixture
def toy() -> Iterator[None]:
    register(_Toy)
    if "toy-center" not in detector_module._DETECTORS:
        register_detector("toy-center")(_CenterDetector)
    register_resource("toy-res", _Tiny, input_spec=_Tiny.input_spec, feature_dim=4, overwrite=True)
    SEEN.clear()
    yield
    algmod._REGISTRY.pop("toy-public", None)
    import fedad.resources as res

    res._REGISTRY.pop("toy-res", None)
    res.clear_cache()


def test_public_set_and_resource_reach_the_server_inprocess(toy: None, tmp_path: Path) -> None:
    from fedad.data.public import public_images
    from fedad.fl.server_inputs import PUBLIC_STREAM
    from fedad.runner import run_experiment

    data = run_experiment(parse_config(RAW), tmp_path / "run")
    want = public_images("procedural", PUBLIC_N, (1, 8, 8), (2 ^ PUBLIC_STREAM) % (1 << 63))
    np.testing.assert_array_equal(SEEN["public"], want)
    assert 0.0 <= data["methods"]["toy-public"]["auroc"] <= 1.0
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["methods"]


def test_same_public_set_on_flower(toy: None, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("flwr")
    from fedad.federation import build_federation
    from fedad.fl.flower.server import serve
    from fedad.fl.flower.spec import RunSpec
    from fedad.resolve import build_algorithms
    from fedad.runner import run_method
    from tests.fl.flower.fake_flower import FakeFlowerGrid, as_server_app

    as_server_app(monkeypatch)
    cfg = parse_config(RAW)
    fed = build_federation(cfg)
    alg = build_algorithms(cfg, fed)["toy-public"]
    ref = run_method(cfg, alg, fed)
    first = SEEN["public"]
    spec = RunSpec.build(cfg, alg)
    out = serve(FakeFlowerGrid(spec, partitions=2), spec, alg, poll_interval=0.0)
    np.testing.assert_array_equal(SEEN["public"], first)
    for cid, m in ref.evaluations.items():
        np.testing.assert_array_equal(out.evaluations[cid].arrays["score"], m.arrays["score"])


def test_unmet_requirements_are_one_line_errors(toy: None, tmp_path: Path) -> None:
    from fedad.runner import run_experiment

    class _Needs(_Toy):
        @classmethod
        def requirements(cls, params: dict[str, Any]) -> Requirements:
            return Requirements(resources=("no-such-net",))

    algmod._REGISTRY["toy-public"] = _Needs
    with pytest.raises(ConfigError, match="unknown pretrained resource 'no-such-net'"):
        run_experiment(parse_config(RAW), tmp_path / "a")

    class _Masks(_Toy):
        @classmethod
        def requirements(cls, params: dict[str, Any]) -> Requirements:
            return Requirements(fields=("x", "mask"))

    algmod._REGISTRY["toy-public"] = _Masks
    with pytest.raises(ConfigError, match=r"reads sample field\(s\) \['mask'\]"):
        run_experiment(parse_config(RAW), tmp_path / "b")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_onlad_declares_its_server_sets() -> None:
    from fedad.core.algorithm import registry

    req = registry()["onlad"].requirements({"init_samples": 10, "observed": 30})
    assert req.server_normal == 40 and req.update_phases == ("train",)
    assert registry()["fedavg"].requirements({}) == Requirements()
