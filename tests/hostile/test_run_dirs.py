"""Output directories: never mixed, never lost, resumable."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fedad
from fedad.cli.app import app
from fedad.config import dump_toml, parse_config
from fedad.core.errors import FedadError, Interrupted, RunError
from fedad.rundir.claim import RunDir
from fedad.rundir.read import read_history
from fedad.runner import TIMING_KEYS, run_experiment
from tests.hostile.conftest import SMALL_RUN, one_line_error, runner


def _config_file(tmp_path: Path, raw: dict[str, Any] | None = None) -> Path:
    p = tmp_path / "exp.toml"
    p.write_text(dump_toml(raw or SMALL_RUN))
    return p


def _run(cfg: Path, out: Path, *extra: str) -> Any:
    return runner.invoke(app, ["run", str(cfg), "--out", str(out), "-q", *extra])


def _untimed(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _untimed(v) for k, v in d.items() if k not in (*TIMING_KEYS, "total_seconds")}
    if isinstance(d, list):
        return [_untimed(v) for v in d]
    return d


def _same(a: Any, b: Any) -> bool:
    """Equal nested dicts of float arrays (NaN equal to NaN)."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(np.array_equal(a, b, equal_nan=True))


def test_existing_run_is_refused_then_forced(tmp_path: Path, finished_run: Path) -> None:
    import shutil

    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    (out / "notes.txt").write_text("mine")
    raw = {**SMALL_RUN, "methods": [{"name": "onlad", "params": SMALL_RUN["methods"][2]["params"]}]}
    cfg = _config_file(tmp_path, raw)
    before = (out / "metrics.json").read_bytes()
    assert "holds a fedad run already" in one_line_error(_run(cfg, out))
    assert (out / "metrics.json").read_bytes() == before
    res = _run(cfg, out, "--force")
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["onlad"]
    assert list(json.loads((out / "metrics.json").read_text())["methods"]) == ["onlad"]
    assert sorted(fedad.load(str(out)).detectors) == ["onlad"]
    assert (out / "notes.txt").read_text() == "mine"  # --force clears only fedad's files


@pytest.mark.parametrize("flag", [(), ("--force",), ("--resume",)])
def test_foreign_directory_is_never_written(tmp_path: Path, flag: tuple[str, ...]) -> None:
    home = tmp_path / "project"
    home.mkdir()
    (home / "config.toml").write_text("my own file")
    cfg = _config_file(tmp_path)
    one_line_error(_run(cfg, home, *flag))
    assert sorted(p.name for p in home.iterdir()) == ["config.toml"]
    assert (home / "config.toml").read_text() == "my own file"


def test_empty_out_names_the_current_directory_and_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _config_file(tmp_path)
    (tmp_path / "config.toml").write_text("user's")
    monkeypatch.chdir(tmp_path)
    assert "not empty" in one_line_error(_run(cfg, Path("")))
    assert (tmp_path / "config.toml").read_text() == "user's"


@pytest.mark.parametrize("target", ["file", "/dev/null"])
def test_out_that_is_not_a_directory(tmp_path: Path, target: str) -> None:
    out = tmp_path / "f" if target == "file" else Path(target)
    if target == "file":
        out.write_text("x")
    assert "not a directory" in one_line_error(_run(_config_file(tmp_path), out))


def test_a_second_run_into_a_locked_directory_stops(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with RunDir.claim(out):
        msg = one_line_error(_run(_config_file(tmp_path), out))
    assert "another fedad run" in msg and str(os.getpid()) in msg
    res = _run(_config_file(tmp_path), out)  # lock released: the directory is usable again
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_write_errors_are_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    import fedad.rundir.files as outdir

    real = outdir._atomic

    def failing(path: Path, write: Any) -> None:
        if path.name == "scores.npz":
            err = OSError(code, os.strerror(code))
            raise outdir.output_error(path, err)
        real(path, write)

    monkeypatch.setattr(outdir, "_atomic", failing)
    msg = one_line_error(_run(_config_file(tmp_path), tmp_path / "run"))
    assert os.strerror(code) in msg and "scores.npz" in msg


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Any:
    """A read-only file system (a tmpfs mounted ro); skipped where mounting is not allowed."""
    mnt = tmp_path / "ro"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mnt)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip("cannot mount a read-only file system here")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=False)


@pytest.mark.parametrize("sub", ["", "new/deeper"])
def test_read_only_out_fails_before_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read_only_dir: Path, sub: str
) -> None:
    import fedad.resolve as resolve_mod

    def never(*a: object, **k: object) -> None:
        raise AssertionError("the federation was built before the output was checked")

    monkeypatch.setattr(resolve_mod, "build_federation", never)
    msg = one_line_error(_run(_config_file(tmp_path), read_only_dir / sub))
    assert "Read-only file system" in msg


def test_interrupt_keeps_finished_methods_and_resume_completes(tmp_path: Path) -> None:
    cfg = parse_config(SMALL_RUN)
    ref = run_experiment(cfg, tmp_path / "ref")
    ref_hist = tmp_path / "ref" / "history.csv"
    out = tmp_path / "run"

    def stop_at(label: str) -> None:
        if label == "local-svdd":
            raise KeyboardInterrupt

    with pytest.raises(Interrupted) as info:
        run_experiment(cfg, out, on_method=stop_at)
    assert info.value.kept == ("fedavg-ae",) and info.value.signum == signal.SIGINT
    partial = json.loads((out / "metrics.json").read_text())
    assert list(partial["methods"]) == ["fedavg-ae"]
    assert partial["experiment"]["status"] == "partial"
    assert partial["experiment"]["pending"] == ["local-svdd", "onlad"]
    assert (out / "report.html").is_file()
    assert sorted(fedad.load(str(out)).detectors) == ["fedavg-ae"]

    with pytest.raises(FedadError, match="holds a fedad run"):
        run_experiment(cfg, out)
    changed = parse_config({**SMALL_RUN, "rounds": 2})
    with pytest.raises(FedadError, match="'rounds' was 1, now 2"):
        run_experiment(changed, out, resume=True)

    seen: list[str] = []
    final = run_experiment(cfg, out, resume=True, on_method=seen.append)
    assert seen == ["local-svdd", "onlad"]  # the finished method is not run again
    assert _untimed(final) == _untimed(ref)
    assert _untimed(json.loads((out / "metrics.json").read_text())) == _untimed(
        json.loads((tmp_path / "ref" / "metrics.json").read_text())
    )
    hist = [_untimed(h) for h in (read_history(out / "history.csv"), read_history(ref_hist))]
    assert _same(*hist)


def test_interrupt_before_any_result_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "run"

    def stop(label: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(Interrupted) as info:
        run_experiment(parse_config(SMALL_RUN), out, on_method=stop)
    assert info.value.kept == ()
    assert not out.exists()


def test_a_failed_method_keeps_the_finished_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fedad.methods.baselines.federated import Local

    def broken(self: Any, state: Any, data: Any, msg: Any) -> Any:
        raise ValueError("disk on fire")

    monkeypatch.setattr(Local, "client_train", broken)
    out = tmp_path / "run"
    msg = one_line_error(_run(_config_file(tmp_path), out))
    assert "no client answered in any round" in msg
    kept = json.loads((out / "metrics.json").read_text())
    assert list(kept["methods"]) == ["fedavg-ae"]
    with pytest.raises(RunError):
        run_experiment(parse_config(SMALL_RUN), out, resume=True)


def _default_sigint() -> None:
    """In the child before exec: SIGINT back to its default disposition."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_real_signal_exits_128_plus_signum(tmp_path: Path, sig: signal.Signals) -> None:
    raw = {
        **SMALL_RUN,
        "rounds": 3,
        "methods": [
            {"name": "onlad", "params": {"init_samples": 20, "observed": 40}},
            {"name": "fedavg", "params": {"local_epochs": 2000}},
        ],
    }
    cfg = _config_file(tmp_path, raw)
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedad.cli", "run", str(cfg), "--out", str(out), "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A shell that starts pytest in the background (`... &`) hands SIGINT down ignored,
        # and an ignored SIGINT stays ignored in fedad (as it should): give the child the
        # default, as an interactive shell would.
        preexec_fn=_default_sigint,
    )
    done = out / ".fedad" / "done" / "onlad.json"
    deadline = time.monotonic() + 120
    while not done.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert done.exists(), proc.communicate(timeout=30)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, stdout + stderr
    assert "Traceback" not in stderr
    assert f"interrupted by {sig.name}: kept onlad" in stderr and "--resume" in stderr
    kept = json.loads((out / "metrics.json").read_text())
    assert list(kept["methods"]) == ["onlad"]
    assert json.loads((out / ".fedad" / "run.json").read_text())["state"] == "interrupted"


def test_flower_logs_of_a_resultless_run_are_kept_and_the_folder_reusable(tmp_path: Path) -> None:
    out = tmp_path / "run"
    rd = RunDir.claim(out)
    logs = out / ".flower" / "fedavg-x" / "logs"
    logs.mkdir(parents=True)
    (logs / "superlink.log").write_text("why it failed")
    rd.discard_if_empty()
    rd.release()
    assert (logs / "superlink.log").read_text() == "why it failed"
    with RunDir.claim(out):  # no results to protect: the next run takes the folder
        assert not (out / ".flower").exists()
