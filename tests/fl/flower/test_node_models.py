"""Personalised models stay home (fast): a deployment's evaluate reply holds no model arrays.

The node saves its detector in its models directory (``fedad-models-dir``) as a small run
directory that ``fedad.load`` reads, and the reply names the folder; crafted labels, ids
and links cannot make it write anywhere else. A simulation keeps the in-process behaviour.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedad.config import parse_config
from fedad.core.algorithm import EVALUATE
from fedad.core.errors import ConfigError, FedadError
from fedad.core.messages import Message

pytest.importorskip("flwr", reason="flwr (the flower extra) is not installed")

from fedad import load
from fedad.federation import build_federation
from fedad.fl.flower.app import keep_detector_home, node_model_dir
from fedad.fl.flower.codec import NODE_MODEL
from fedad.fl.flower.server import serve
from fedad.fl.flower.spec import RunSpec, method_label
from fedad.resolve import build_algorithms
from fedad.rundir.checkpoints import save_checkpoint
from fedad.runner import run_method, summarize
from tests.fl.flower.fake_flower import FakeFlowerGrid, as_server_app

CFG: dict[str, Any] = {
    "seed": 5,
    "rounds": 2,
    "data": {
        "name": "digits",
        "normal": [0, 1, 2],
        "anomaly": [7, 8],
        "max_train_per_client": 40,
        "max_test": 60,
    },
    "partition": {"scheme": "iid", "clients": 3, "contamination": 0.05},
    "methods": [
        {"name": "local", "label": "mine", "detector": "autoencoder", "params": {"batch_size": 16}}
    ],
}


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    as_server_app(monkeypatch)


@pytest.fixture(scope="module")
def trained() -> tuple[Any, Any, Any, Any]:
    """The config, federation, algorithm and in-process outcome of ``local``."""
    cfg = parse_config(CFG)
    fed = build_federation(cfg)
    alg = build_algorithms(cfg, fed)["mine"]
    return cfg, fed, alg, run_method(cfg, alg, fed)


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


def _keep(reply: Message, models: Any, cfg: Any, alg: Any, **kw: Any) -> Message:
    args: dict[str, Any] = {"run_id": 7, "partition_id": 1, "label": "mine"}
    args.update(kw)
    return keep_detector_home(reply, models, algorithm=alg, config=cfg, **args)


def test_reply_loses_its_model_and_the_node_keeps_a_loadable_detector(
    trained: tuple[Any, Any, Any, Any], tmp_path: Path
) -> None:
    cfg, fed, alg, ref = trained
    reply = ref.evaluations[1]
    assert any(k.startswith("detector/") for k in reply.arrays)  # in-process: it travels
    models = tmp_path / "models"
    out = _keep(reply, models, cfg, alg)

    assert not any(k.startswith("detector/") for k in out.arrays)
    assert set(out.arrays) == {"score", "label", "pred"}
    for k in out.arrays:
        np.testing.assert_array_equal(out.arrays[k], reply.arrays[k])
    folder = models / "run-7" / "client-1"
    assert out.scalars[NODE_MODEL] == str(folder.resolve())
    assert {k: v for k, v in out.scalars.items() if k != NODE_MODEL} == dict(reply.scalars)
    assert out.nbytes < reply.nbytes / 10  # the model was most of the reply

    # everything written lies in the node's folder, nothing beside it
    assert {p.relative_to(tmp_path) for p in _files(tmp_path)} == {
        Path(p)
        for p in (
            "models",
            "models/run-7",
            "models/run-7/client-1",
            "models/run-7/client-1/metrics.json",
            "models/run-7/client-1/config.toml",
            "models/run-7/client-1/checkpoints",
            "models/run-7/client-1/checkpoints/mine",
            "models/run-7/client-1/checkpoints/mine/detector.json",
            "models/run-7/client-1/checkpoints/mine/client_1.npz",
        )
    }
    facts = json.loads((folder / "metrics.json").read_text())["experiment"]
    assert facts["flower_run_id"] == 7 and facts["client"] == 1 and facts["label"] == "mine"

    # fedad.load reads it and the detector scores the client's test set as on the node
    run = load(str(folder))
    det = run.detector("mine", 1)
    np.testing.assert_allclose(det.score(fed.clients[1].x_test), reply.arrays["score"], rtol=1e-6)
    assert det.threshold_ == reply.scalars["threshold"]
    assert run.config["seed"] == cfg.seed

    # a later evaluation of the same run replaces the folder
    again = _keep(reply, models, cfg, alg)
    assert again.scalars[NODE_MODEL] == out.scalars[NODE_MODEL]
    assert not [p for p in (models / "run-7").iterdir() if p.name != "client-1"]


def test_a_reply_without_a_model_is_left_alone(
    trained: tuple[Any, Any, Any, Any], tmp_path: Path
) -> None:
    cfg, _, alg, ref = trained
    plain = Message(
        EVALUATE,
        {k: v for k, v in ref.evaluations[0].arrays.items() if not k.startswith("detector/")},
        ref.evaluations[0].scalars,
    )
    assert _keep(plain, tmp_path / "models", cfg, alg) is plain
    assert _keep(plain, None, cfg, alg) is plain  # no models dir needed either
    assert not (tmp_path / "models").exists()


@pytest.mark.parametrize(
    "kw",
    [
        {"label": "../../evil"},
        {"label": "a/b"},
        {"label": ".."},
        {"label": ""},
        {"label": "x" * 65},
        {"run_id": -1},
        {"partition_id": -3},
        {"partition_id": "0/../../x"},
    ],
)
def test_crafted_names_cannot_lead_out(
    trained: tuple[Any, Any, Any, Any], tmp_path: Path, kw: dict[str, Any]
) -> None:
    cfg, _, alg, ref = trained
    with pytest.raises(ValueError):
        _keep(ref.evaluations[1], tmp_path / "models", cfg, alg, **kw)
    assert _files(tmp_path) <= {tmp_path / "models"}


def test_a_link_out_of_the_models_dir_is_refused(
    trained: tuple[Any, Any, Any, Any], tmp_path: Path
) -> None:
    cfg, _, alg, ref = trained
    models, outside = tmp_path / "models", tmp_path / "outside"
    models.mkdir()
    outside.mkdir()
    (models / "run-7").symlink_to(outside)
    with pytest.raises(FedadError, match="is a symbolic link"):  # fedad.rundir.files refuses it
        _keep(ref.evaluations[1], models, cfg, alg)
    assert not any(outside.iterdir())


def test_no_models_dir_or_an_unwritable_one_is_a_one_line_error(
    trained: tuple[Any, Any, Any, Any], tmp_path: Path
) -> None:
    cfg, _, alg, ref = trained
    with pytest.raises(ConfigError, match="--models-dir") as e:
        _keep(ref.evaluations[1], None, cfg, alg)
    assert "\n" not in str(e.value)
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(FedadError, match="could not save its detector") as e2:
        _keep(ref.evaluations[1], blocker, cfg, alg)
    assert "--models-dir" in str(e2.value) and "--out" not in str(e2.value)


def test_node_model_dir_is_absolute_and_made_of_integers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert node_model_dir("m", 12, 3) == tmp_path.resolve() / "m" / "run-12" / "client-3"
    with pytest.raises(ValueError):
        node_model_dir("m", "1/..", 0)  # type: ignore[arg-type]


# ------------------------------------------------------------------------- through Flower


def test_deployment_evaluate_replies_hold_no_model_arrays(
    trained: tuple[Any, Any, Any, Any], tmp_path: Path
) -> None:
    """The real ClientApp on the fake wire, as in a deployment: every evaluate reply that
    reaches the server holds scores and a folder name, no model; each folder loads."""
    cfg, fed, alg, ref = trained
    spec = RunSpec.build(cfg, alg)
    assert spec.label == "mine"
    fake = FakeFlowerGrid(spec, models_dir=tmp_path / "nodes")
    out = serve(fake, spec, alg, poll_interval=0.0)
    assert sorted(out.evaluations) == [0, 1, 2]
    for cid, m in out.evaluations.items():
        assert set(m.arrays) == {"score", "label", "pred"}, cid
        np.testing.assert_array_equal(m.arrays["score"], ref.evaluations[cid].arrays["score"])
        folder = Path(str(m.scalars[NODE_MODEL]))
        assert folder.parent.parent == (tmp_path / "nodes").resolve()
        assert folder.name == f"client-{cid}"
        det = load(str(folder)).detector("mine", cid)
        np.testing.assert_allclose(det.score(fed.clients[cid].x_test), m.arrays["score"], rtol=1e-6)
    # the run directory says where: one event per client (metrics.json's events)
    assert out.events == [
        f"client {cid}: its personalised detector stays on its node, in "
        f"{out.evaluations[cid].scalars[NODE_MODEL]}"
        for cid in (0, 1, 2)
    ]
    # the runner takes such an outcome without a model
    metrics, _ = summarize("mine", alg, out)
    assert metrics["events"] == out.events
    assert metrics["node_models"] == {
        str(c): out.evaluations[c].scalars[NODE_MODEL] for c in out.evaluations
    }
    run_dir = tmp_path / "run"
    save_checkpoint(run_dir, "mine", alg, out)
    # the run directory records the nodes' folders, holds no model of theirs, and loads
    assert not list((run_dir / "checkpoints" / "mine").glob("client_*.npz"))
    (run_dir / "metrics.json").write_text(json.dumps({"methods": {"mine": metrics}}))
    run = load(str(run_dir))
    assert run.node_models["mine"] == {
        c: str(out.evaluations[c].scalars[NODE_MODEL]) for c in out.evaluations
    }
    with pytest.raises(FedadError) as err:
        run.detector("mine", 1)
    msg = str(err.value)
    assert "stayed on its node" in msg and str(out.evaluations[1].scalars[NODE_MODEL]) in msg
    assert "\n" not in msg


def test_simulation_replies_still_carry_the_model(trained: tuple[Any, Any, Any, Any]) -> None:
    cfg, _, alg, ref = trained
    spec = RunSpec.build(cfg, alg)
    out = serve(FakeFlowerGrid(spec, sim_spec=True, models_dir=""), spec, alg, poll_interval=0.0)
    assert out.events == []
    for cid, m in out.evaluations.items():
        assert NODE_MODEL not in m.scalars
        assert set(m.arrays) == set(ref.evaluations[cid].arrays)


def test_a_node_without_a_models_dir_fails_its_evaluation(
    trained: tuple[Any, Any, Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    cfg, _, alg, _ = trained
    spec = RunSpec.build(cfg, alg)
    with pytest.raises(FedadError, match="answered 'evaluate'"):
        serve(FakeFlowerGrid(spec, models_dir=""), spec, alg, poll_interval=0.0)
    assert "fedad-models-dir" in caplog.text


def test_method_label_names_the_configured_method() -> None:
    raw = {
        **CFG,
        "methods": [
            {"name": "local", "params": {"batch_size": 16}},
            {"name": "local", "params": {"batch_size": 8}},
            {"name": "fedavg", "detector": "autoencoder"},
        ],
    }
    cfg = parse_config(raw)
    fed = build_federation(cfg)
    algs = build_algorithms(cfg, fed)
    assert list(algs) == ["local", "local-2", "fedavg"]
    for label, alg in algs.items():
        assert method_label(cfg, alg) == label
        assert RunSpec.from_run_config(RunSpec.build(cfg, alg).to_run_config()).label == label


def test_supernode_gets_its_models_dir_in_node_config(tmp_path: Path) -> None:
    from fedad.cli.flower import check_models_dir
    from fedad.fl.flower.deploy.launch import supernode_argv

    argv = supernode_argv("h:1", 0, 2, 9, models_dir="/srv/models")
    assert argv[argv.index("--node-config") + 1] == (
        'partition-id=0 num-partitions=2 fedad-models-dir="/srv/models"'
    )
    with pytest.raises(ConfigError, match="double quote"):
        supernode_argv("h:1", 0, 2, 9, models_dir='/a"b')
    made = check_models_dir(tmp_path / "a" / "b")
    assert made.is_dir() and made.is_absolute()
    (tmp_path / "f").write_text("")
    with pytest.raises(FedadError, match="--models-dir"):
        check_models_dir(tmp_path / "f")


def test_local_deployment_nodes_share_a_models_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fedad run`` on flower-deployment: every local SuperNode gets the same models dir
    (each writes its own ``run-R/client-I``), by default beside its work directory."""
    from fedad.fl.flower.deploy.local import LocalDeployment

    started: dict[str, list[str]] = {}
    dep = LocalDeployment(tmp_path / "w", 2, tmp_path / "keep")
    monkeypatch.setattr(
        dep.supervisor, "start", lambda name, argv, env: started.update({name: argv})
    )
    dep.address = "127.0.0.1:1"
    dep._start_node(0)
    dep._start_node(1)
    for i in (0, 1):
        argv = started[f"supernode-{i}"]
        assert f'fedad-models-dir="{tmp_path / "keep"}"' in argv[argv.index("--node-config") + 1]
    assert not (tmp_path / "keep").exists()  # made only when a node saves a detector
    assert LocalDeployment(tmp_path / "w", 2).models_dir == tmp_path / "w" / "node-models"
