"""``fedad run`` on hostile configs: one error line, exit 2.

Every case must stop in the config, before anything is written: no run directory, no
checkpoints outside it, no traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest

from fedad.cli.app import app
from fedad.core.errors import FedadError
from fedad.rundir.inputs import read_inputs
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
        (['partition.scheme="dirichlet"', "partition.alpha=inf"], "partition.alpha"),
        (["partition.alpha=nan"], "partition.alpha"),
        (['privacy.mechanism="gaussian"', "privacy.noise_multiplier=inf"], "noise_multiplier"),
        (["privacy.noise_multiplier=nan"], "privacy.noise_multiplier"),
        (["privacy.clip=inf"], "privacy.clip"),
        (['attack.kind="scaled-update"', "attack.scale=inf"], "attack.scale"),
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


@pytest.mark.parametrize(
    ("value", "needle"),
    [("0", "greater than or equal to 1 (or 'auto')"), ('"many"', "valid integer"),
     ("5000", "less than or equal to 1024 (or 'auto')")],
)  # fmt: skip
def test_workers_is_named_as_the_key(tmp_path: Path, value: str, needle: str) -> None:
    """Not ``engine.workers.constrained-int``: the union's arm is pydantic's, not a key."""
    line = _run(tmp_path, _config(tmp_path), f"engine.workers={value}")
    assert "'engine.workers' (got " in line and needle in line
    assert "constrained" not in line


def test_absurd_rounds_in_the_file(tmp_path: Path) -> None:
    toml = GOOD.replace("rounds = 1", "rounds = 100000000000000000000")
    line = _run(tmp_path, _config(tmp_path, toml))
    assert "'rounds'" in line and "1,000,000" in line


def test_inf_literal_in_the_file(tmp_path: Path) -> None:
    toml = GOOD.replace("clients = 2", 'clients = 2\nscheme = "dirichlet"\nalpha = inf')
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


# ------------------------------------------------- inputs.json statistics

INPUTS = {"kind": "vector", "feature_shape": [2], "dataset": "table", "columns": ["a", "b"],
          "mean": [0.5, -1.0], "std": [2.0, 1.0]}  # fmt: skip


def _inputs(tmp_path: Path, **edit: object) -> Path:
    (tmp_path / "inputs.json").write_text(json.dumps({**INPUTS, **edit}))
    return tmp_path


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        ({"mean": [1e300, 0.0]}, "'mean' is not 2 finite numbers within float32's range"),
        ({"impute_means": [0.0, -1e39]}, "'impute_means' is not 2 finite numbers"),
        ({"std": [1e300, 1.0]}, "'std' is not 2 finite numbers within float32's range"),
        ({"std": [1e-300, 1.0]}, "'std' has a value below 1e-12"),
    ],
)
def test_extreme_statistics_are_refused(
    tmp_path: Path, edit: dict[str, object], needle: str
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning beside the error
        with pytest.raises(FedadError, match=needle) as err:
            read_inputs(_inputs(tmp_path, **edit))
    assert "\n" not in str(err.value)


def test_new_rows_that_overflow_float32_are_one_line_errors(tmp_path: Path) -> None:
    inputs = read_inputs(_inputs(tmp_path, mean=[-3e38, 0.0], std=[1e-12, 1.0]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(FedadError, match=r"data row 2's 'a' standardizes beyond the float32"):
            inputs.table(pd.DataFrame({"a": [-3e38, 1.0], "b": [0.0, 0.0]}), "new.csv")
        with pytest.raises(FedadError, match=r"missing or infinite values in 1 rows .*row 1\)"):
            inputs.table(pd.DataFrame({"a": [1e300], "b": [0.0]}), "new.csv")
    plain = read_inputs(_inputs(tmp_path))
    got = plain.table(pd.DataFrame({"a": [2.5], "b": [3.0]}))
    assert got.dtype.name == "float32" and got.tolist() == [[1.0, 4.0]]
