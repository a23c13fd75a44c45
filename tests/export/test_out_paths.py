"""``--out`` of ``fedad export`` and ``fedad score`` is one path for the checks and the
writes: a path through a missing folder, ``.``, an empty path, a path below a file or
inside a run is one line (exit 2), and nothing outside ``--out`` changes."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedad.cli.app import app
from fedad.core.errors import FedadError
from fedad.rundir.files import refuse_inside_run, target_path
from tests.hostile.conftest import one_line_error, runner


@pytest.fixture
def in_tmp(tmp_path: Path) -> Iterator[Path]:
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(cwd)


def new_rows(table_run: Path) -> Path:
    return table_run.parent / "records.csv"


def test_export_through_a_missing_folder_deletes_nothing(table_run: Path, in_tmp: Path) -> None:
    (in_tmp / "victim").mkdir()
    (in_tmp / "victim" / "precious.txt").write_text("keep me")
    args = ["export", str(table_run), "--method", "fedavg-ae", "--out", "nonexist/../victim"]
    line = one_line_error(runner.invoke(app, args))
    assert "not empty" in line
    assert (in_tmp / "victim" / "precious.txt").read_text() == "keep me"
    assert not (in_tmp / "nonexist").exists()


def test_score_through_a_missing_folder_overwrites_nothing(table_run: Path, in_tmp: Path) -> None:
    (in_tmp / "victim.csv").write_text("keep me")
    args = ["score", str(table_run), str(new_rows(table_run)), "--method", "fedavg-ae"]
    line = one_line_error(runner.invoke(app, [*args, "--out", "nonexist/../victim.csv"]))
    assert "exists" in line
    assert (in_tmp / "victim.csv").read_text() == "keep me"


@pytest.mark.parametrize("out", [".", "", "..", "a/.."])
@pytest.mark.parametrize("command", ["export", "score"])
def test_an_out_that_names_no_entry_is_one_line(
    table_run: Path, in_tmp: Path, out: str, command: str
) -> None:
    (in_tmp / "mine.txt").write_text("keep me")
    if command == "export":
        args = ["export", str(table_run), "--method", "fedavg-ae", "--out", out, "--force"]
    else:
        args = ["score", str(table_run), str(new_rows(table_run)), "--method", "fedavg-ae"]
        args += ["--out", out, "--force"]
    one_line_error(runner.invoke(app, args))
    assert sorted(p.name for p in in_tmp.iterdir()) == ["mine.txt"]


def test_an_export_inside_a_run_is_refused(table_run: Path) -> None:
    before = sorted(p.name for p in (table_run / "checkpoints").iterdir())
    out = table_run / "checkpoints" / "exp"
    line = one_line_error(
        runner.invoke(app, ["export", str(table_run), "--method", "fedavg-ae", "--out", str(out)])
    )
    assert "inside the fedad run" in line
    assert sorted(p.name for p in (table_run / "checkpoints").iterdir()) == before


def test_an_out_below_a_file_names_the_file(table_run: Path, in_tmp: Path) -> None:
    (in_tmp / "f").write_text("x")
    line = one_line_error(
        runner.invoke(app, ["export", str(table_run), "--method", "fedavg-ae", "--out", "f/sub"])
    )
    assert "which is a file" in line and "File exists" not in line


def test_target_path_resolves_the_parent_and_keeps_the_leaf(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert target_path(tmp_path / "missing" / ".." / "x") == tmp_path / "x"
    assert target_path(tmp_path / "link" / "x") == tmp_path / "real" / "x"
    leaf = target_path(tmp_path / "link")
    assert leaf == tmp_path / "link" and leaf.is_symlink()  # a link at the leaf stays seen
    with pytest.raises(FedadError, match="empty"):
        target_path("")


def test_refuse_inside_run_sees_old_and_new_runs(tmp_path: Path) -> None:
    old = tmp_path / "old"
    old.mkdir()
    (old / "metrics.json").write_text("{}")
    (old / "config.toml").write_text("")
    with pytest.raises(FedadError, match="inside the fedad run"):
        refuse_inside_run(old / "sub" / "x")
    refuse_inside_run(tmp_path / "elsewhere")  # not a run: passes
