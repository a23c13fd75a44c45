"""fedad.load and fedad report on crafted or damaged run directories."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

import fedad
from fedad.cli.app import app
from fedad.core.detector import detector_classes, detector_from_config
from fedad.core.errors import FedadError
from tests.hostile.conftest import one_line_error, runner

ATTACKS = [
    # the hole this closes: a fedad function that starts a process from its parameters
    ("fedad.cli.flower:run_foreground", {"argv": ["touch", "{sentinel}"]}),
    ("os:system", {"command": "touch {sentinel}"}),
    ("subprocess:Popen", {"args": ["touch", "{sentinel}"]}),
    ("builtins:eval", {"source": "open('{sentinel}', 'w')"}),
    ("fedad.core.detector:BaseDetector", {}),
    ("fedad.fl.flower.deploy.processes:Supervisor", {"logdir": "{sentinel}"}),
    (["autoencoder"], {}),
    (None, {}),
]


def _meta(run: Path, label: str = "fedavg-ae") -> Path:
    return run / "checkpoints" / label / "detector.json"


@pytest.mark.parametrize(("cls", "params"), ATTACKS)
def test_crafted_detector_class_executes_nothing(
    run_copy: Path, tmp_path: Path, cls: object, params: dict[str, object]
) -> None:
    sentinel = tmp_path / "pwned"
    meta = json.loads(_meta(run_copy).read_text())
    text = json.dumps(params).replace("{sentinel}", str(sentinel))
    meta["detector"] = {"class": cls, "params": json.loads(text)}
    _meta(run_copy).write_text(json.dumps(meta))
    with pytest.raises(FedadError, match="not a registered detector"):
        fedad.load(str(run_copy))
    assert not sentinel.exists()


def test_registry_names_only_detectors() -> None:
    classes = detector_classes()
    assert {"autoencoder", "deepsvdd", "oselm-autoencoder"} <= set(classes)
    for name, cls in classes.items():
        assert cls.registry_name == name
        assert isinstance(cls.ParamsModel, type)


@pytest.mark.parametrize(
    "name",
    [
        "fedad.methods.baselines.detectors:AutoEncoderDetector",  # before fedad.components
        "fedad.components.detectors.neural:AutoEncoderDetector",
    ],
)
def test_old_import_path_names_still_load(run_copy: Path, name: str) -> None:
    meta = json.loads(_meta(run_copy).read_text())
    meta["detector"]["class"] = name
    _meta(run_copy).write_text(json.dumps(meta))
    det = fedad.load(str(run_copy)).detector("fedavg-ae", 0)
    assert det.registry_name == "autoencoder"


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"argv": ["sh"]}, "argv"),
        ({"input_shape": [1 << 20, 1 << 20]}, "input_shape"),
        ({"input_shape": [-3]}, "input_shape"),
        ({"lr": "nan"}, "lr"),
        ({"kind": "graph"}, "kind"),
        ({"epochs": 10**12}, "epochs"),
    ],
)
def test_detector_params_are_validated_by_the_class_schema(
    run_copy: Path, params: dict[str, object], needle: str
) -> None:
    meta = json.loads(_meta(run_copy).read_text())
    meta["detector"]["params"].update(params)
    _meta(run_copy).write_text(json.dumps(meta))
    with pytest.raises(FedadError, match=needle):
        fedad.load(str(run_copy))


def test_arrays_that_do_not_fit_are_one_line_errors(run_copy: Path) -> None:
    np.savez(run_copy / "checkpoints" / "fedavg-ae" / "global.npz", weight=np.zeros(3))
    with pytest.raises(FedadError, match="do not fit"):
        fedad.load(str(run_copy))
    meta = json.loads(_meta(run_copy, "onlad").read_text())
    with pytest.raises(FedadError, match="do not fit"):
        detector_from_config(meta["detector"], {"alpha": np.array(["x"])})


@pytest.mark.parametrize("cid", ["../../../etc/passwd", "/abs", "0/../1", "-1", "1e3", "x" * 50])
def test_client_ids_are_not_paths(run_copy: Path, cid: str) -> None:
    meta = json.loads(_meta(run_copy, "local-svdd").read_text())
    meta["thresholds"] = {cid: 0.5}
    _meta(run_copy, "local-svdd").write_text(json.dumps(meta))
    with pytest.raises(FedadError, match="client id"):
        fedad.load(str(run_copy))


def test_links_out_of_the_run_are_refused(run_copy: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    (run_copy / "checkpoints" / "fedavg-ae").rename(outside)
    os.symlink(outside, run_copy / "checkpoints" / "fedavg-ae")
    with pytest.raises(FedadError, match="link"):
        fedad.load(str(run_copy))


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "empty":
        path.write_bytes(b"")
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "binary":
        path.write_bytes(bytes(range(256)) * 4)
    elif how == "latin1":
        path.write_bytes("mÃ©thode,round\n\xe9\xff\xfe,1\n".encode("latin-1"))
    elif how == "nul":
        path.write_bytes(b"method,round\nx\x00y,1\n")
    elif how == "deep":
        path.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    elif how == "wrong-type":
        path.write_text('["a list", 1, 2]')
    elif how == "missing":
        path.unlink()
    elif how == "directory":
        path.unlink()
        path.mkdir()


FILES = [
    "metrics.json",
    "config.toml",
    "history.csv",
    "scores.npz",
    "checkpoints/fedavg-ae/detector.json",
    "checkpoints/fedavg-ae/global.npz",
    "checkpoints/local-svdd/client_1.npz",
]
HOWS = ["empty", "truncated", "binary", "latin1", "nul", "deep", "wrong-type", "missing"]
HOWS += ["directory"]


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("how", HOWS)
def test_damaged_files_give_one_line_errors(run_copy: Path, name: str, how: str) -> None:
    _damage(run_copy / name, how)
    try:
        run = fedad.load(str(run_copy))
    except FedadError as err:
        assert "\n" not in str(err)
    else:  # a damaged checkpoint is never accepted; other files may be empty or unused
        assert not name.startswith("checkpoints/"), f"load accepted a damaged {name} ({how})"
        assert run.detectors
    res = runner.invoke(app, ["report", str(run_copy)])
    if res.exit_code != 0:
        one_line_error(res)
    else:
        assert (run_copy / "report.html").is_file()


def test_zip_bomb_is_refused(run_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fedad.rundir.load as runs

    monkeypatch.setattr(runs, "MAX_NPZ_BYTES", 1000)
    with pytest.raises(FedadError, match="would unpack"):
        fedad.load(str(run_copy))
    assert zipfile.is_zipfile(run_copy / "checkpoints" / "fedavg-ae" / "global.npz")


def test_report_of_a_directory_without_a_run(tmp_path: Path) -> None:
    one_line_error(runner.invoke(app, ["report", str(tmp_path)]))


def test_loaded_detectors_still_score(finished_run: Path) -> None:
    run = fedad.load(str(finished_run))
    x = np.zeros((3, 1, 8, 8), dtype=np.float32)  # digits: 8 x 8 grey images
    for label in ("fedavg-ae", "local-svdd", "onlad"):
        assert run.detector(label, 1).score(x).shape == (3,)
