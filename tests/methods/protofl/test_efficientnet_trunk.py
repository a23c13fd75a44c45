"""The pretrained-initialised trunk (``trunk = "efficientnet"``): the shipped weights, the
frozen prefix, phase 1 moving only the tail, determinism and Flower's in-memory grid."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from fedad.core.algorithm import Setup, build_algorithm
from fedad.core.types import Federation, dense
from fedad.fl.drive import RunOutcome
from fedad.fl.engine import run_inprocess
from fedad.methods.protofl.detector import ProtoFLDetector
from fedad.methods.protofl.features import prefix_maps, prefix_shape
from fedad.methods.protofl.federated import ProtoFL
from fedad.resources import get_resource
from tests.conftest import failures, make_federation

FAST: dict[str, Any] = {
    "trunk": "efficientnet", "phase1": "federated", "trunk_size": 32, "trunk_views": 2,
    "head": "kde", "public_n": 8, "proto_size": 32, "batch_size": 16,
}  # fmt: skip


def _run(fed: Federation, seed: int = 3, **params: Any) -> tuple[ProtoFL, RunOutcome]:
    setup = Setup(fed.kind, fed.feature_shape, rounds=1, seed=seed, contamination=0.1,
                  num_clients=len(fed.clients))  # fmt: skip
    algo = build_algorithm("protofl", {**FAST, **params}, setup)
    assert isinstance(algo, ProtoFL)
    return algo, run_inprocess(algo, fed, rounds=1, seed=seed)


@pytest.mark.parametrize("tune_stages", [0, 1, 3])
def test_the_untrained_trunk_is_the_shipped_network(tune_stages: int) -> None:
    x = np.random.default_rng(0).random((6, 1, 28, 28)).astype(np.float32)
    det = ProtoFLDetector(input_shape=[1, 28, 28], trunk_input="efficientnet",
                          tune_stages=tune_stages, feature_size=64)  # fmt: skip
    trunk = det.make_trunk()
    maps = det.features(x)
    assert maps.shape[1:] == prefix_shape(tune_stages, 64) == det.trunk_shape
    net = get_resource("efficientnet-lite0", "cpu")
    with torch.no_grad():
        h = trunk(torch.from_numpy(maps))
        logits = net.fc(h)  # type: ignore[operator]
        ref = net(net.prepare(torch.from_numpy(x), 64))  # the reference module's logits
    torch.testing.assert_close(logits, ref, rtol=1e-4, atol=1e-4)
    assert det.h_dim == h.shape[1] == 1280
    # the encoder's phi is the off-the-shelf model itself: no projection to the prototypes
    enc = det.make_encoder(1280)
    with torch.no_grad():
        torch.testing.assert_close(enc(torch.from_numpy(maps)), h)


def test_phase_1_trains_the_tail_from_the_shipped_weights_and_keeps_bn_statistics() -> None:
    fed = make_federation("image", clients=3)
    algo, out = _run(fed)
    assert failures(out.events) == []
    shipped = algo.make_detector().make_trunk().state_dict()
    got = out.result.arrays
    conv = "trunk.conv_head.weight"
    assert got[conv].shape == tuple(shipped["conv_head.weight"].shape)
    assert not np.allclose(got[conv], shipped["conv_head.weight"].numpy())  # it trained
    for key in ("bn1.running_mean", "bn1.running_var"):  # ImageNet statistics, kept
        np.testing.assert_array_equal(got[f"trunk.{key}"], shipped[key].numpy())
    # the frozen prefix is not part of the model: only the tail is averaged and sent
    assert not any(k.startswith("trunk.conv_stem") for k in got)
    _, again = _run(fed)
    for cid, m in out.evaluations.items():
        np.testing.assert_array_equal(m.arrays["score"], again.evaluations[cid].arrays["score"])


def test_saved_detector_scores_as_in_the_run() -> None:
    fed = make_federation("image", clients=3)
    algo, out = _run(fed, head="flow", flow_epochs=2)
    for cid, m in out.evaluations.items():
        arrays = {k[len("detector/") :]: v for k, v in m.arrays.items()
                  if k.startswith("detector/")}  # fmt: skip
        det = ProtoFLDetector(**algo.make_detector().get_params())
        det.check_arrays(arrays)
        det.set_arrays(arrays)
        x = dense(fed.clients[cid].x_test)
        np.testing.assert_allclose(det.score(x), m.arrays["score"], rtol=1e-6)


def test_efficientnet_trunk_on_flower_in_memory_grid(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower's in-memory grid with the real ClientApp gives the in-process replies."""
    pytest.importorskip("flwr")
    from fedad.config import parse_config
    from fedad.fl.flower import app as flower_app
    from fedad.fl.flower.server import serve
    from fedad.fl.flower.spec import RunSpec
    from tests.fl.flower.fake_flower import FakeFlowerGrid, as_server_app

    as_server_app(monkeypatch)
    fed = make_federation("image", clients=3)
    algo, ref = _run(fed)
    cfg = parse_config({"seed": 3, "rounds": 1, "partition": {"clients": 3},
                        "data": {"name": "digits", "normal": [0], "anomaly": [1]},
                        "methods": [{"name": "protofl", "params": FAST}]})  # fmt: skip
    monkeypatch.setattr(flower_app, "_FEDERATIONS", {flower_app.data_key(cfg): fed.clients})
    spec = RunSpec.build(cfg, algo)
    out = serve(
        FakeFlowerGrid(spec, partitions=3, sim_spec=True), spec, algo, poll_interval=0.0,
        server_data=fed.server_normal,
    )  # fmt: skip
    assert out.events == ref.events and failures(out.events) == []
    for cid, m in ref.evaluations.items():
        for k, a in m.arrays.items():
            np.testing.assert_array_equal(out.evaluations[cid].arrays[k], a, err_msg=k)


def test_efficientnet_trunk_needs_images() -> None:
    from fedad.core.errors import ConfigError

    setup = Setup("vector", (6,), rounds=1, seed=0, contamination=0.1, num_clients=2)
    with pytest.raises(ConfigError, match="efficientnet"):
        build_algorithm("protofl", {"trunk": "efficientnet"}, setup)
    assert prefix_maps(np.zeros((0, 1, 8, 8), np.float32), 1, 32, "cpu").shape == (0, 192, 1, 1)


def test_per_sample_distillation_targets_each_images_own_features(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fedad.methods.protofl import federated, train

    seen: list[np.ndarray] = []
    real = train.train_encoder

    def spy(*args: Any) -> dict[str, float]:
        seen.append(np.asarray(args[2]))
        return real(*args)

    monkeypatch.setattr(federated, "train_encoder", spy)
    fed = make_federation("image", clients=2)
    _, out = _run(fed, distill="sample")
    assert failures(out.events) == []
    net = get_resource("efficientnet-lite0", "cpu")
    want = [net.embed(dense(c.x_train), size=32) for c in fed.clients]
    assert len(seen) == 2
    for got in seen:  # one target per training image: F(x_i), not one prototype
        assert any(got.shape == w.shape and np.allclose(got, w, atol=1e-6) for w in want)
    from fedad.core.errors import ConfigError

    with pytest.raises(ConfigError, match="image"):
        setup = Setup("vector", (6,), rounds=1, seed=0, contamination=0.1, num_clients=2)
        build_algorithm("protofl", {"distill": "sample"}, setup)
