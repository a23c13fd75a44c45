"""Errors that say what is really wrong: a table separated by ';' (or tabs in a .csv, commas
in a .tsv), a FIFO or folder given where a file is read (or a file where a folder is), and a
column written twice in a crafted inputs.json."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fedad.cli.app import app
from fedad.core.errors import DataError, FedadError
from fedad.data.image_folder import list_images
from fedad.data.registry import load_dataset
from fedad.data.table import read_table
from fedad.rundir.inputs import read_inputs
from tests.data.test_table import frame
from tests.hostile.conftest import one_line_error, runner


def _table(path: Path, sep: str) -> Path:
    frame(30).to_csv(path, sep=sep, index=False)
    return path


@pytest.mark.parametrize(
    ("name", "sep", "needle", "fix"),
    [
        ("semi.csv", ";", "seems separated by ';', not commas", "save it with commas as .csv"),
        ("tabs.csv", "\t", "seems separated by tabs, not commas", "as .tsv: rename it"),
        ("commas.tsv", ",", "seems separated by commas, not tabs", "as .csv: rename it"),
        ("pipes.csv", "|", "seems separated by '|', not commas", "save it with commas"),
    ],
)
def test_a_table_with_another_separator_says_so(
    tmp_path: Path, name: str, sep: str, needle: str, fix: str
) -> None:
    path = _table(tmp_path / name, sep)
    with pytest.raises(DataError, match="its header reads as one column") as err:
        load_dataset("table", str(path), options={"label_column": "flag"})
    assert needle in str(err.value) and fix in str(err.value) and "more" not in str(err.value)


def test_a_one_column_table_without_another_separator_reads(tmp_path: Path) -> None:
    path = tmp_path / "one.csv"
    path.write_text("only\n1\n2\n")
    assert list(read_table(path).columns) == ["only"]


@pytest.fixture(scope="module")
def table_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small finished run on a table (three sites, a text column): one-class SVMs."""
    from fedad.config import parse_config
    from fedad.runner import run_experiment
    from tests.export.conftest import table_config, write_table

    root = tmp_path_factory.mktemp("hints")
    config = table_config(write_table(root / "records.csv", rows=60))
    config["methods"] = [{"name": "local", "detector": "ocsvm", "label": "local"}]
    run_experiment(parse_config(config), root / "run")
    return root / "run"


def test_fedad_score_names_the_separator(table_run: Path, tmp_path: Path) -> None:
    new = tmp_path / "new.csv"
    text = (table_run.parent / "records.csv").read_text()
    new.write_text(text.replace(",", ";"))
    line = one_line_error(runner.invoke(app, ["score", str(table_run), str(new), "-m", "local"]))
    assert "new.csv' seems separated by ';', not commas" in line and "lacks" not in line


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_table_path_that_is_no_regular_file(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "records.csv"
    if kind == "fifo":
        os.mkfifo(path)  # never opened: reading it would block
        said = "is a FIFO (named pipe), not a regular file"
    else:
        path.mkdir()
        said = "is a folder, not a regular file"
    with pytest.raises(DataError, match=r"set data\.path") as err:
        load_dataset("table", str(path), options={"label_column": "flag"})
    assert said in str(err.value) and "no file" not in str(err.value)
    with pytest.raises(DataError, match="give a table file") as err:
        read_table(path, "fedad score")
    assert said in str(err.value)
    with pytest.raises(DataError, match=r"no file '.*absent\.csv'"):
        read_table(tmp_path / "absent.csv")


@pytest.mark.parametrize("name", ["image_folder", "mvtec"])
def test_an_image_path_that_is_no_folder(tmp_path: Path, name: str) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(DataError, match=r"is a FIFO \(named pipe\), not a folder"):
        load_dataset(name, str(fifo))
    plain = tmp_path / "photos.zip"
    plain.write_bytes(b"PK")
    with pytest.raises(DataError, match=r"photos\.zip' is a regular file, not a folder"):
        load_dataset(name, str(plain))
    with pytest.raises(DataError, match=r"pipe' is a FIFO \(named pipe\), not a folder"):
        list_images(fifo)


def _column_twice(raw: dict[str, Any]) -> dict[str, Any]:
    return {**raw, "columns": [*raw["columns"], raw["columns"][0]]}


def _category_twice(raw: dict[str, Any]) -> dict[str, Any]:
    return {**raw, "categories": {k: [*v, v[0]] for k, v in raw["categories"].items()}}


@pytest.mark.parametrize(
    ("key", "edit"), [("columns", _column_twice), ("categories.device", _category_twice)]
)
def test_a_name_twice_in_inputs_json_is_named(
    table_run: Path, tmp_path: Path, key: str, edit: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    """Before, ``fedad export`` said the model it built was 'not valid ONNX: SSA form'."""
    pytest.importorskip("onnxruntime")
    run = tmp_path / "run"
    shutil.copytree(table_run, run)
    path = run / "inputs.json"
    path.write_text(json.dumps(edit(json.loads(path.read_text()))))
    with pytest.raises(FedadError, match=rf"inputs\.json': '{key}' holds '[^']+' twice"):
        read_inputs(run)
    argv = ["export", str(run), "-m", "local", "-o", str(tmp_path / "e")]
    line = one_line_error(runner.invoke(app, argv))
    assert f"'{key}' holds" in line and "ONNX" not in line
