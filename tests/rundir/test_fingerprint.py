"""``--resume`` checks the config and the data before it writes a byte: a run resumed over
any changed config key or data byte is refused in one line and left byte-identical."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedad import fingerprint
from fedad.config import parse_config
from fedad.core.errors import FedadError
from fedad.rundir.fingerprint import Fingerprint, federation_digest, files_digest
from fedad.rundir.layout import STATE_DIR
from fedad.runner import run_experiment

N_ROWS = 48


def write_table(path: Path, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    lines = ["a,b,c,label"]
    for i in range(N_ROWS):
        a, b, c = rng.normal(size=3) + (4.0 if i % 8 == 0 else 0.0)
        lines.append(f"{a:.4f},{b:.4f},{c:.4f},{'bad' if i % 8 == 0 else 'ok'}")
    path.write_text("\n".join(lines) + "\n")


def table_config(path: Path, **top: Any) -> dict[str, Any]:
    return {
        "seed": 0,
        "rounds": 1,
        "data": {
            "name": "table",
            "path": str(path),
            "label_column": "label",
            "normal": ["ok"],
            "anomaly": ["bad"],
        },
        "partition": {"scheme": "iid", "clients": 2},
        "engine": {"progress": False},
        "methods": [{"name": "fedavg", "detector": "autoencoder"}],
        **top,
    }


def snapshot(root: Path) -> dict[str, str]:
    """Every file below ``root`` with its SHA-256 (the run's bytes, the lock file's too)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("fp")
    table = base / "rows.csv"
    write_table(table)
    out = base / "run"
    run_experiment(parse_config(table_config(table)), out)
    return table, out


def copy_run(finished: tuple[Path, Path], tmp: Path) -> tuple[Path, Path]:
    table, out = finished
    t2 = tmp / "rows.csv"
    shutil.copyfile(table, t2)
    r2 = tmp / "run"
    shutil.copytree(out, r2)
    # the copy's config names its own table (equal bytes), as a moved run would
    cfg_text = (r2 / "config.toml").read_text().replace(str(table), str(t2))
    (r2 / "config.toml").write_text(cfg_text)
    return t2, r2


CHANGES: list[tuple[tuple[str, ...], Any]] = [
    (("seed",), 1),
    (("rounds",), 2),
    (("data", "standardize"), False),
    (("data", "test_fraction"), 0.4),
    (("partition", "clients"), 3),
    (("partition", "scheme"), "dirichlet"),
    (("partition", "contamination"), 0.05),
    (("methods", 0, "params"), {"lr": 0.01}),
    (("methods", 0, "detector"), "deepsvdd"),
    (("engine", "fraction"), 0.5),
]


def changed(raw: dict[str, Any], keys: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(raw))
    d = out
    for k in keys[:-1]:
        d = d[k]
    d[keys[-1]] = value
    return out


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    what=st.one_of(
        st.tuples(st.just("config"), st.sampled_from(range(len(CHANGES)))),
        st.tuples(st.just("byte"), st.integers(0, 10_000)),
    ),
    byte=st.integers(0, 255),
)
def test_a_resume_over_any_change_is_refused_without_writing(
    finished: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory, what: Any, byte: int
) -> None:
    table, run = copy_run(finished, tmp_path_factory.mktemp("case"))
    raw = table_config(table)
    kind, n = what
    if kind == "config":
        keys, value = CHANGES[n]
        raw = changed(raw, keys, value)
    else:
        data = bytearray(table.read_bytes())
        at = n % len(data)
        new = byte if byte != data[at] else (byte + 1) % 256
        data[at] = new
        table.write_bytes(bytes(data))
    before = snapshot(run)
    with pytest.raises(FedadError) as err:
        run_experiment(parse_config(raw), run, resume=True)
    assert "\n" not in str(err.value)
    assert snapshot(run) == before


def test_an_unchanged_resume_passes_and_keeps_inputs(
    finished: tuple[Path, Path], tmp_path: Path
) -> None:
    table, run = copy_run(finished, tmp_path)
    before = snapshot(run)
    data = run_experiment(parse_config(table_config(table)), run, resume=True)
    assert data["experiment"]["status"] == "complete"
    after = snapshot(run)
    assert after["inputs.json"] == before["inputs.json"]
    assert after["scores.npz"] == before["scores.npz"]


def test_a_scaled_column_is_refused(finished: tuple[Path, Path], tmp_path: Path) -> None:
    table, run = copy_run(finished, tmp_path)
    lines = table.read_text().splitlines()
    scaled = [lines[0]] + [
        ",".join([f"{float(r.split(',')[0]) * 10:.4f}", *r.split(",")[1:]]) for r in lines[1:]
    ]
    table.write_text("\n".join(scaled) + "\n")
    before = snapshot(run)
    with pytest.raises(FedadError, match="data files differ"):
        run_experiment(parse_config(table_config(table)), run, resume=True)
    assert snapshot(run) == before


def test_the_federation_digest_alone_catches_changed_data(
    finished: tuple[Path, Path], tmp_path: Path
) -> None:
    """A run whose fingerprint lacks the files' digest (a built-in data set) is still
    checked on what the methods train and test on."""
    table, run = copy_run(finished, tmp_path)
    kept = fingerprint.read(run)
    assert kept is not None and kept.files is not None and kept.federation is not None
    fingerprint.write(run, Fingerprint(files=None, federation=kept.federation))
    write_table(table, seed=5)
    with pytest.raises(FedadError, match="train and test on"):
        run_experiment(parse_config(table_config(table)), run, resume=True)


def test_a_run_without_a_fingerprint_resumes_on_its_config_and_says_so(
    finished: tuple[Path, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    table, run = copy_run(finished, tmp_path)
    (run / STATE_DIR / fingerprint.FINGERPRINT_FILE).unlink()
    run_experiment(parse_config(table_config(table)), run, resume=True)
    assert "only its config was checked" in caplog.text
    assert fingerprint.read(run) is not None  # kept from now on


def test_results_without_config_toml_are_not_resumed(
    finished: tuple[Path, Path], tmp_path: Path
) -> None:
    table, run = copy_run(finished, tmp_path)
    (run / "config.toml").unlink()
    before = snapshot(run)
    with pytest.raises(FedadError, match=r"no config\.toml"):
        run_experiment(parse_config(table_config(table, seed=7)), run, resume=True)
    assert snapshot(run) == before


@pytest.mark.parametrize("text", ["{", '{"format": 1, "files": 3}', "[]"])
def test_a_damaged_fingerprint_is_one_line(tmp_path: Path, text: str) -> None:
    (tmp_path / STATE_DIR).mkdir()
    (tmp_path / STATE_DIR / fingerprint.FINGERPRINT_FILE).write_text(text)
    with pytest.raises(FedadError, match="damaged"):
        fingerprint.read(tmp_path)


def test_digests_see_one_byte_and_one_value(tmp_path: Path) -> None:
    a = tmp_path / "a.csv"
    a.write_bytes(b"x,y\n1,2\n")
    cfg = parse_config(table_config(a)).data
    first = files_digest(cfg)
    a.write_bytes(b"x,y\n1,3\n")
    assert files_digest(cfg) != first
    folder = tmp_path / "imgs"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "p.png").write_bytes(b"\x89PNG")
    cfg_dir = cfg.model_copy(update={"path": str(folder)})
    d1 = files_digest(cfg_dir)
    (folder / "sub" / "p.png").write_bytes(b"\x89PNH")
    assert files_digest(cfg_dir) != d1
    assert files_digest(cfg.model_copy(update={"path": None})) is None


def test_the_federation_digest_sees_one_value(vector_federation: Any) -> None:
    d = federation_digest(vector_federation, "{}")
    vector_federation.clients[0].x_train[0, 0] += 1e-6
    assert federation_digest(vector_federation, "{}") != d
    assert federation_digest(vector_federation, '{"x": 1}') != federation_digest(
        vector_federation, "{}"
    )
