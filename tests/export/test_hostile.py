"""Crafted or damaged run directories given to ``fedad export``: a one-line error (exit
status 2), nothing written, and no ONNX file of the run directory ever loaded (every model
is built from the detector's arrays)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from fedad.export import check
from tests.export.test_cli import export
from tests.hostile.conftest import one_line_error


@pytest.fixture
def run(image_run: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(image_run, dst)
    return dst


def refused(run: Path, tmp_path: Path, needle: str, method: str = "onlad") -> None:
    out = tmp_path / "out"
    err = one_line_error(export(run, method, out))
    assert needle in err, err
    assert not out.exists()


def test_a_link_in_the_run_is_refused(run: Path, tmp_path: Path) -> None:
    (run / "checkpoints/onlad/extra.npz").symlink_to("/etc/passwd")
    refused(run, tmp_path, "symbolic link")


def test_a_truncated_checkpoint(run: Path, tmp_path: Path) -> None:
    path = run / "checkpoints/onlad/global.npz"
    path.write_bytes(path.read_bytes()[:100])
    refused(run, tmp_path, "global.npz")


def test_a_checkpoint_naming_a_class_to_import(run: Path, tmp_path: Path) -> None:
    meta_path = run / "checkpoints/onlad/detector.json"
    meta = json.loads(meta_path.read_text())
    meta["detector"]["class"] = "os:system"
    meta_path.write_text(json.dumps(meta))
    refused(run, tmp_path, "not a registered detector")


def test_no_inputs_json(run: Path, tmp_path: Path) -> None:
    (run / "inputs.json").unlink()
    refused(run, tmp_path, "has no inputs.json")


def test_inputs_json_at_odds_with_the_detector(run: Path, tmp_path: Path) -> None:
    path = run / "inputs.json"
    raw = json.loads(path.read_text())
    raw["feature_shape"] = [1, 9, 9]
    path.write_text(json.dumps(raw))
    refused(run, tmp_path, "inputs.json", "local-svdd")


def test_a_crafted_column_name_cannot_become_an_output(run: Path, tmp_path: Path) -> None:
    path = run / "inputs.json"
    raw = json.loads(path.read_text())
    raw.update(kind="vector", feature_shape=[64], columns=["score", *[f"c{i}" for i in range(63)]])
    path.write_text(json.dumps(raw))
    refused(run, tmp_path, "cannot name an input")


def test_no_onnx_file_of_the_run_is_loaded(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planted .onnx files and a model.json in the run are never opened: onnxruntime only
    ever gets bytes that fedad built, and onnx loads only what torch's exporter wrote."""
    import onnx

    for where in ("global.onnx", "checkpoints/onlad/global.onnx", "model.json"):
        (run / where).write_bytes(b"planted")
    seen: list[Any] = []
    real_session = check.session

    def watch(model: Any) -> Any:
        seen.append(model)
        return real_session(model)

    loads: list[Any] = []
    real_load = onnx.load_from_string
    monkeypatch.setattr(check, "session", watch)
    monkeypatch.setattr(onnx, "load", lambda *a, **k: loads.append(a) or None)
    monkeypatch.setattr(onnx, "load_model", lambda *a, **k: loads.append(a) or None)
    monkeypatch.setattr(onnx, "load_from_string", lambda b: loads.append(b) or real_load(b))
    result = export(run, "onlad", tmp_path / "out")
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    assert seen and not any(isinstance(m, str | Path) for m in seen)
    assert all(isinstance(a, bytes) and a != b"planted" for a in loads)
