"""``fedad run`` on hostile configs (issue 8, items 4, 7 and 8): one error line, exit 2.

Every case must stop in the config, before anything is written: no run directory, no
checkpoints outside it, no traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fedad.cli import app
from tests.hostile.conftest import one_line_error, runner

GOOD = """
seed = 1
rounds = 1
[data]
name = "digits"
normal = [0, 1]
anomaly = [7]
max_test = 60
[partition]
clients = 2
[engine]
progress = false
[[methods]]
name = "fedavg"
"""


def _config(tmp_path: Path, text: str = GOOD) -> Path:
    path = tmp_path / "exp.toml"
    path.write_text(text)
    return path


def _run(tmp_path: Path, config: Path, *sets: str) -> str:
    out = tmp_path / "out"
    args = ["run", str(config), "--out", str(out), "--quiet"]
    for s in sets:
        args += ["--set", s]
    line = one_line_error(runner.invoke(app, args))
    assert not out.exists(), "a refused config must write nothing"
    return line


# --------------------------------------------------------------------------- labels (item 4)


@pytest.mark.parametrize("label", ["../../x", "ABSOLUTE", "a/b", "..", ".", "x" * 300, "a b"])
def test_unsafe_label_is_refused_before_the_run(tmp_path: Path, label: str) -> None:
    escaped = tmp_path / "escaped"
    label = str(escaped) if label == "ABSOLUTE" else label
    toml = GOOD + f'label = "{label}"\n'
    line = _run(tmp_path, _config(tmp_path, toml))
    assert "methods.0.label" in line and "letters, digits" in line
    # before the fix, out/checkpoints/<label> landed here: tmp_path/x and the absolute path
    assert not (tmp_path / "x").exists() and not escaped.exists()


def test_unsafe_label_through_set(tmp_path: Path) -> None:
    line = _run(tmp_path, _config(tmp_path), "methods.0.label=../escape")
    assert "methods.0.label" in line
    assert not (tmp_path / "escape").exists()


# --------------------------------------------------------------------------- files (item 7)


def test_binary_config(tmp_path: Path) -> None:
    path = tmp_path / "exp.toml"
    path.write_bytes(bytes(range(256)) * 4)
    line = _run(tmp_path, path)
    assert "not UTF-8 text" in line and str(path) in line


def test_latin1_config(tmp_path: Path) -> None:
    path = tmp_path / "exp.toml"
    path.write_bytes(GOOD.replace('"fedavg"', '"fed\xe4vg"').encode("latin-1"))
    assert "not UTF-8 text" in _run(tmp_path, path)


def test_directory_as_config(tmp_path: Path) -> None:
    folder = tmp_path / "configs.toml"
    folder.mkdir()
    line = _run(tmp_path, folder)
    assert "is a directory" in line and "does not exist" not in line


def test_missing_config_still_says_so(tmp_path: Path) -> None:
    assert "does not exist" in _run(tmp_path, tmp_path / "nope.toml")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_as_config_is_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "exp.toml"
    os.mkfifo(fifo)  # reading it would block forever
    assert "not a regular file" in _run(tmp_path, fifo)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_unreadable_config(tmp_path: Path) -> None:
    path = _config(tmp_path)
    path.chmod(0)
    try:
        assert "permission denied" in _run(tmp_path, path)
    finally:
        path.chmod(0o600)


def test_unreadable_config_even_as_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _config(tmp_path)

    def deny(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", deny)
    line = _run(tmp_path, path)
    assert "permission denied" in line and str(path) in line


@pytest.mark.parametrize("item", ["=3", ".a=1", "a..b=1", "rounds.=1"])
def test_set_with_empty_key_parts(tmp_path: Path, item: str) -> None:
    line = _run(tmp_path, _config(tmp_path), item)
    assert f"--set '{item}'" in line


def test_set_through_a_value(tmp_path: Path) -> None:
    assert "holds a value" in _run(tmp_path, _config(tmp_path), "data.normal.0.x=1")


# --------------------------------------------------------------------------- values (item 8)


@pytest.mark.parametrize(
    ("sets", "needle"),
    [
        (["partition.scheme=\"dirichlet\"", "partition.alpha=inf"], "partition.alpha"),
        (["partition.alpha=nan"], "partition.alpha"),
        (["privacy.mechanism=\"gaussian\"", "privacy.noise_multiplier=inf"], "noise_multiplier"),
        (["privacy.noise_multiplier=nan"], "privacy.noise_multiplier"),
        (["privacy.clip=inf"], "privacy.clip"),
        (["attack.kind=\"scaled-update\"", "attack.scale=inf"], "attack.scale"),
        (["engine.timeout=inf"], "engine.timeout"),
        (["privacy.secagg_shares=nan"], "privacy.secagg_shares"),
    ],
)
def test_non_finite_values(tmp_path: Path, sets: list[str], needle: str) -> None:
    line = _run(tmp_path, _config(tmp_path), *sets)
    assert needle in line and "finite" in line


@pytest.mark.parametrize(
    ("sets", "needle"),
    [
        (["engine.min_clients=3"], "engine.min_clients=3 exceeds partition.clients=2"),
        (["rounds=1e20"], "1,000,000"),
        (["rounds=1000001"], "1,000,000"),
        (["partition.clients=1000000"], "100,000"),
        (["seed=100000000000000000000"], "seed"),
    ],
)
def test_absurd_values(tmp_path: Path, sets: list[str], needle: str) -> None:
    assert needle in _run(tmp_path, _config(tmp_path), *sets)


def test_absurd_rounds_in_the_file(tmp_path: Path) -> None:
    toml = GOOD.replace("rounds = 1", "rounds = 100000000000000000000")
    line = _run(tmp_path, _config(tmp_path, toml))
    assert "'rounds'" in line and "1,000,000" in line


def test_inf_literal_in_the_file(tmp_path: Path) -> None:
    toml = GOOD.replace("clients = 2", "clients = 2\nscheme = \"dirichlet\"\nalpha = inf")
    assert "partition.alpha" in _run(tmp_path, _config(tmp_path, toml))


def test_a_real_process_prints_one_line(tmp_path: Path) -> None:
    """The console script, not CliRunner: stderr is one line, stdout empty, status 2."""
    path = tmp_path / "exp.toml"
    path.write_bytes(b"\xff\xfe\x00rounds")
    proc = subprocess.run(
        [sys.executable, "-m", "fedad.cli", "run", str(path), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "not UTF-8" in lines[0]
