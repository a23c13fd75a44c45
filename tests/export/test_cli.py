"""``fedad export``: what it writes, and its one-line errors (exit status 2)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from fedad.cli.app import app
from fedad.export.check import session
from tests.hostile.conftest import one_line_error, runner


def export(run: Path, method: str, out: Path, *more: str) -> object:
    return runner.invoke(app, ["export", str(run), "--method", method, "--out", str(out), *more])


def test_a_global_method_is_one_model_with_each_clients_threshold(
    image_run: Path, tmp_path: Path
) -> None:
    out = tmp_path / "e"
    result = export(image_run, "fedavg-ae", out)
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    assert sorted(p.name for p in out.iterdir()) == ["global.onnx", "model.json"]
    meta = json.loads((out / "model.json").read_text())
    assert meta["method"] == "fedavg-ae" and meta["detector"] == "autoencoder"
    assert meta["personalized"] is False
    thresholds = json.loads((image_run / "checkpoints/fedavg-ae/detector.json").read_text())
    assert {str(c["id"]): c["threshold"] for c in meta["clients"]} == thresholds["thresholds"]
    (model,) = meta["models"]
    blob = (out / "global.onnx").read_bytes()
    assert model["sha256"] == hashlib.sha256(blob).hexdigest()
    assert model["check"]["max_rel_diff"] <= 1e-5 and model["check"]["decisions_differ"] == 0
    assert model["client_input"] is True  # fedavg's clients set their own thresholds
    sess = session(blob)
    assert [i.name for i in sess.get_inputs()] == ["image", "client"]
    assert [o.name for o in sess.get_outputs()] == ["score", "anomaly", "map"]
    assert meta["inputs"][0] == {"name": "image", "type": "float32", "shape": ["N", 1, 8, 8],
                                 "what": "images in [0, 1] at the training size"}  # fmt: skip


def test_a_personal_method_is_one_model_per_client(image_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "e"
    assert export(image_run, "local-svdd", out).exit_code == 0  # type: ignore[attr-defined]
    assert sorted(p.name for p in out.iterdir()) == ["client-0.onnx", "client-1.onnx",
                                                     "model.json"]  # fmt: skip
    meta = json.loads((out / "model.json").read_text())
    assert meta["personalized"] is True
    assert [c["file"] for c in meta["clients"]] == ["client-0.onnx", "client-1.onnx"]


def test_one_client_of_a_global_method(image_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "e"
    assert export(image_run, "onlad", out, "--client", "1").exit_code == 0  # type: ignore[attr-defined]
    meta = json.loads((out / "model.json").read_text())
    assert [c["id"] for c in meta["clients"]] == [1]
    assert meta["models"][0]["score_dtype"] == "float64"
    sess = session((out / "client-1.onnx").read_bytes())
    assert [i.name for i in sess.get_inputs()] == ["image"]  # one threshold: no client input


def test_the_table_run_takes_one_input_per_column(table_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "e"
    assert export(table_run, "local-ocsvm", out).exit_code == 0  # type: ignore[attr-defined]
    meta = json.loads((out / "model.json").read_text())
    assert [(i["name"], i["type"]) for i in meta["inputs"]] == [
        ("age", "float32"),
        ("pressure", "float32"),
        ("dose", "float32"),
        ("device", "string"),
    ]
    assert meta["inputs"][3]["categories"] == ["acme", "omni", "zeta"]
    assert meta["client_column"] == "site"
    assert [c["name"] for c in meta["clients"]] == ["centre", "north", "south"]
    sess = session((out / "client-0.onnx").read_bytes())
    feeds = {"age": np.array([[50.0], [np.nan]], np.float32),
             "pressure": np.array([[120.0], [121.0]], np.float32),
             "dose": np.array([[1.0], [1.0]], np.float32),
             "device": np.array([["acme"], [""]], dtype=object)}  # fmt: skip
    score, anomaly = sess.run(["score", "anomaly"], feeds)
    assert score.dtype == np.float32 and anomaly.dtype == np.int64 and np.isfinite(score).all()


def test_out_must_be_new_or_empty_or_a_previous_export(image_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "e"
    assert export(image_run, "onlad", out).exit_code == 0  # type: ignore[attr-defined]
    assert "is not empty" in one_line_error(export(image_run, "onlad", out))
    assert export(image_run, "local-svdd", out, "--force").exit_code == 0  # type: ignore[attr-defined]
    assert not (out / "global.onnx").exists()  # replaced whole, nothing stale kept
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert "not a fedad export" in one_line_error(export(image_run, "onlad", mine, "--force"))
    assert (mine / "notes.txt").read_text() == "keep me"
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    assert "symbolic link" in one_line_error(export(image_run, "onlad", link))
    assert not (tmp_path / "elsewhere").exists()


def test_unknown_method_and_client(image_run: Path, tmp_path: Path) -> None:
    assert "has no method 'nope'" in one_line_error(export(image_run, "nope", tmp_path / "a"))
    err = one_line_error(export(image_run, "onlad", tmp_path / "b", "--client", "9"))
    assert "is not a client of the run" in err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_without_the_extra_the_error_names_it(
    image_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime: ImportError
    err = one_line_error(export(image_run, "onlad", tmp_path / "e"))
    assert "fedad[export]" in err and "onnxruntime" in err
    assert not (tmp_path / "e").exists()
