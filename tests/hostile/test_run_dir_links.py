"""Run directories never make fedad follow a symbolic link.

A run directory someone shared may hold links planted where fedad writes, locks or
deletes. Every case below must end in a one-line error (or correct handling) with nothing
outside the run written, truncated or deleted: a ``victim/`` folder and an ``important``
file outside the run are compared before and after.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

import fedad.rundir.files as outdir
from fedad.cli.app import app
from fedad.config import dump_toml
from fedad.core.errors import FedadError
from fedad.rundir.claim import RunDir
from fedad.rundir.files import staged_dir, write_text
from tests.hostile.conftest import SMALL_RUN, one_line_error, runner

LINK_ERROR = "is a symbolic link; fedad does not follow links inside a run directory"


def _snapshot(path: Path) -> dict[str, str]:
    """Every entry below ``path`` (``path`` itself when a file) with a digest of its bytes."""
    if path.is_file():
        return {".": hashlib.sha256(path.read_bytes()).hexdigest()}
    out = {}
    for p in sorted(path.rglob("*")):
        rel = str(p.relative_to(path))
        out[rel] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A folder of someone's files outside every run (with a file named ``lock``)."""
    d = tmp_path / "victim"
    d.mkdir()
    (d / "thesis.tex").write_text("years of work")
    (d / "lock").write_text("not fedad's")
    (d / "data").mkdir()
    (d / "data" / "table.csv").write_text("a,b\n1,2\n")
    return d


@pytest.fixture
def important(tmp_path: Path) -> Path:
    p = tmp_path / "important"
    p.write_text("keep me exactly like this\n")
    return p


def _config(tmp_path: Path, raw: dict[str, Any] | None = None) -> Path:
    p = tmp_path / "exp.toml"
    p.write_text(dump_toml(raw or SMALL_RUN))
    return p


def _run(cfg: Path, out: Path, *flags: str) -> Any:
    return runner.invoke(app, ["run", str(cfg), "--out", str(out), "-q", *flags])


def _link_error(result: Any, path: Path) -> None:
    msg = one_line_error(result)
    assert LINK_ERROR in msg and f"'{path}'" in msg, msg


def _plant(path: Path, target: Path) -> None:
    """Replace ``path`` with a link to ``target``."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    path.symlink_to(target)


# -- the cases ------------------------------------------------------------------------


def test_force_never_clears_a_linked_state_folder(
    tmp_path: Path, run_copy: Path, victim: Path
) -> None:
    before = _snapshot(victim)
    _plant(run_copy / ".fedad", victim)
    _link_error(_run(_config(tmp_path), run_copy, "--force"), run_copy / ".fedad")
    assert _snapshot(victim) == before
    assert (run_copy / "metrics.json").is_file()  # the run itself is kept as it was


@pytest.mark.parametrize("data_error", [True, False], ids=["data-error", "would-succeed"])
def test_a_fresh_out_holding_only_a_linked_state_folder(
    tmp_path: Path, victim: Path, data_error: bool
) -> None:
    out = tmp_path / "fresh"
    out.mkdir()
    (out / ".fedad").symlink_to(victim)
    raw: dict[str, Any] = SMALL_RUN
    if data_error:  # a data error after the directory is claimed used to empty victim/
        raw = {**SMALL_RUN, "data": {"name": "table", "path": str(tmp_path / "missing.csv")}}
    before = _snapshot(victim)
    _link_error(_run(_config(tmp_path, raw), out), out / ".fedad")
    assert _snapshot(victim) == before
    assert sorted(p.name for p in out.iterdir()) == [".fedad"]


def test_a_linked_lock_file_is_never_truncated(tmp_path: Path, important: Path) -> None:
    out = tmp_path / "X"
    (out / ".fedad").mkdir(parents=True)
    (out / ".fedad" / "lock").symlink_to(important)
    before = important.read_bytes()
    _link_error(_run(_config(tmp_path), out), out / ".fedad" / "lock")
    assert important.read_bytes() == before


def test_a_hard_linked_lock_file_is_never_truncated(tmp_path: Path, important: Path) -> None:
    out = tmp_path / "X"
    (out / ".fedad").mkdir(parents=True)
    os.link(important, out / ".fedad" / "lock")
    before = important.read_bytes()
    msg = one_line_error(_run(_config(tmp_path), out))
    assert "not a plain file of its own" in msg and "lock" in msg
    assert important.read_bytes() == before


@pytest.mark.parametrize("linked", ["checkpoints", "checkpoints/onlad", ".fedad/done"])
def test_resume_never_writes_through_a_linked_folder(
    tmp_path: Path, run_copy: Path, linked: str
) -> None:
    where = run_copy / linked
    target = tmp_path / "elsewhere"
    shutil.copytree(where, target)  # what --resume would have found there, and rewritten
    before = _snapshot(target)
    _plant(where, target)
    _link_error(_run(_config(tmp_path), run_copy, "--resume"), where)
    assert _snapshot(target) == before


def test_report_never_writes_through_planted_temporary_files(
    run_copy: Path, important: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fedad.report.html as html

    before = important.read_bytes()
    # the old names were predictable (``.report.html.tmp-PID``): plant one for this process
    planted = run_copy / f".report.html.tmp-{os.getpid()}"
    planted.symlink_to(important)
    # reading the run refuses it (a link in the run's structure, test_run_dir_links_read) ...
    _link_error(runner.invoke(app, ["report", str(run_copy)]), planted)
    assert important.read_bytes() == before
    # ... and the write alone, past the reading, never opens it: it writes a fresh name
    monkeypatch.setattr(html, "render_report", lambda run: "<html>report</html>")
    res = runner.invoke(app, ["report", str(run_copy)])
    assert res.exit_code == 0, res.output
    assert important.read_bytes() == before
    report = run_copy / "report.html"
    assert report.is_file() and not report.is_symlink()
    assert report.read_text() == "<html>report</html>"
    assert planted.is_symlink()  # left alone: never opened, never followed


def test_report_refuses_a_linked_report(
    run_copy: Path, important: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fedad.report.html as html

    monkeypatch.setattr(html, "render_report", lambda run: "<html>report</html>")
    before = important.read_bytes()
    _plant(run_copy / "report.html", important)
    _link_error(runner.invoke(app, ["report", str(run_copy)]), run_copy / "report.html")
    assert important.read_bytes() == before


def test_resume_refuses_a_planted_temporary_file(
    tmp_path: Path, run_copy: Path, important: Path
) -> None:
    before = important.read_bytes()
    planted = run_copy / f".metrics.json.tmp-{os.getpid()}"
    planted.symlink_to(important)
    _link_error(_run(_config(tmp_path), run_copy, "--resume"), planted)
    assert important.read_bytes() == before


def test_resume_on_a_deeply_nested_config_is_one_line(tmp_path: Path, run_copy: Path) -> None:
    depth = 3000  # High 8: tomllib's recursion used to end in a RecursionError traceback
    (run_copy / "config.toml").write_text("x = " + "[" * depth + "]" * depth + "\n")
    msg = one_line_error(_run(_config(tmp_path), run_copy, "--resume"))
    assert "config.toml' is damaged (nested too deeply)" in msg


# -- every path a run holds --------------------------------------------------------------------


def test_a_link_at_any_path_of_a_run_is_refused(
    tmp_path: Path, finished_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plant a link at each path of a finished run, pointing at an outside copy of what
    was there; ``--force``, ``--resume``, a plain run and ``fedad report``'s write leave the
    copy as it was, and the runs stop with a one-line error naming the link."""
    import fedad.report.html as html

    # the report's readers are tested in test_load_safety; here what its write does
    monkeypatch.setattr(html, "render_report", lambda run: "<html>report</html>")
    cfg = _config(tmp_path)
    paths = sorted(p.relative_to(finished_run) for p in finished_run.rglob("*"))
    assert len(paths) > 20 and Path(".fedad/lock") in paths and Path("checkpoints") in paths
    for i, rel in enumerate(paths):
        run = tmp_path / f"run-{i}"
        shutil.copytree(finished_run, run)
        target = tmp_path / "outside" / str(i)
        target.parent.mkdir(exist_ok=True)
        copy = shutil.copytree if (run / rel).is_dir() else shutil.copyfile
        copy(run / rel, target)
        before = _snapshot(target)
        _plant(run / rel, target)
        for flags in (("--force",), ("--resume",), ()):
            _link_error(_run(cfg, run, *flags), run / rel)
        res = runner.invoke(app, ["report", str(run)])  # its reads: test_run_dir_links_read
        if rel == Path("report.html"):
            _link_error(res, run / rel)
        else:
            assert res.exit_code == 0, (rel, res.output)
            assert not (run / "report.html").is_symlink()
        assert _snapshot(target) == before, rel
        shutil.rmtree(run)


def test_links_in_a_seed_folder_are_refused(
    tmp_path: Path, finished_run: Path, victim: Path
) -> None:
    out = tmp_path / "seeds"
    shutil.copytree(finished_run, out / "seed-3")
    shutil.copytree(finished_run / ".fedad", out / ".fedad")
    cfg = _config(tmp_path, {**{k: v for k, v in SMALL_RUN.items() if k != "seed"}, "seeds": [3]})
    before = _snapshot(victim)
    _plant(out / "seed-3" / "checkpoints", victim)
    _link_error(_run(cfg, out, "--force"), out / "seed-3" / "checkpoints")
    _plant(out / "seed-3", victim)
    _link_error(_run(cfg, out, "--resume"), out / "seed-3")
    assert _snapshot(victim) == before


# -- the mechanism itself (links planted after the claim, as in a race) ------------------------


def test_the_root_may_be_a_link_the_user_made(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "out").symlink_to(real)
    with RunDir.claim(tmp_path / "out") as rd:
        rd.set_state("running")
        write_text(rd.root / "metrics.json", "{}")
    assert (real / "metrics.json").read_text() == "{}"
    assert (real / ".fedad" / "run.json").is_file()


def test_writes_below_a_claimed_root_never_follow_a_link(tmp_path: Path, victim: Path) -> None:
    before = _snapshot(victim)
    with RunDir.claim(tmp_path / "run") as rd:
        (rd.root / "checkpoints").symlink_to(victim)
        with pytest.raises(FedadError, match=LINK_ERROR):
            write_text(rd.root / "checkpoints" / "lock", "x")
        with pytest.raises(FedadError, match=LINK_ERROR), staged_dir(rd.root / "checkpoints" / "m"):
            pass
        with pytest.raises(FedadError, match=LINK_ERROR):
            rd.clear()
        (rd.root / "checkpoints").unlink()
        (rd.root / "metrics.json").symlink_to(victim / "thesis.tex")
        with pytest.raises(FedadError, match=LINK_ERROR):
            write_text(rd.root / "metrics.json", "{}")
    assert _snapshot(victim) == before


def test_clearing_never_descends_into_a_link(tmp_path: Path, victim: Path) -> None:
    """A link deep in a folder fedad deletes: the link goes, never what it points to."""
    before = _snapshot(victim)
    with RunDir.claim(tmp_path / "run") as rd:
        deep = rd.root / "checkpoints" / "m"
        deep.mkdir(parents=True)
        (deep / "away").symlink_to(victim)
        rd.clear()
        assert not (rd.root / "checkpoints").exists()
    assert _snapshot(victim) == before


def test_temporary_names_are_fresh_and_still_recognised() -> None:
    names = {outdir._tmp_name("metrics.json") for _ in range(50)}
    assert len(names) == 50
    assert all(outdir._TMP.fullmatch(n) for n in names)
    assert outdir._TMP.fullmatch(".metrics.json.tmp-123")  # left by earlier versions
