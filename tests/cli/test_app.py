"""The command line: runs, outputs of the docs/outputs.md contract, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import fedad
from fedad.cli.app import app
from fedad.runner import TIMING_KEYS
from tests.fresh import run_fresh

SMALL = """
seed = 1
rounds = 2
[data]
name = "digits"
normal = [0, 1, 2]
anomaly = [7, 8]
max_test = 200
[partition]
scheme = "dirichlet"
clients = 3
alpha = 1.0
contamination = 0.02
[engine]
progress = false
[[methods]]
name = "fedavg"
[[methods]]
name = "local"
detector = "deepsvdd"
[[methods]]
name = "fedavg"
label = "again"
[methods.params]
local_epochs = 2
"""

runner = CliRunner()


def _write(tmp_path: Path, text: str, name: str = "c.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _drop_timing(d: Any) -> Any:
    if isinstance(d, dict):
        return {
            k: _drop_timing(v) for k, v in d.items() if k not in (*TIMING_KEYS, "total_seconds")
        }
    if isinstance(d, list):
        return [_drop_timing(v) for v in d]
    return d


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("run")
    cfg = _write(tmp, SMALL)
    res = runner.invoke(app, ["run", str(cfg), "--out", str(tmp / "out")])
    assert res.exit_code == 0, res.output
    assert "AUROC" in res.output
    return tmp / "out"


def test_outputs_follow_the_contract(run_dir: Path) -> None:
    for f in ("config.toml", "metrics.json", "history.csv", "scores.npz", "report.html"):
        assert (run_dir / f).is_file(), f
    m = json.loads((run_dir / "metrics.json").read_text())
    assert list(m["methods"]) == ["fedavg", "local", "again"]
    keys = {"auroc", "aupr", "f1", "precision", "recall", "accuracy", "fe", "me"}
    keys |= {"bytes_up", "bytes_down", "seconds", "rounds", "per_client"}
    for label, entry in m["methods"].items():
        assert keys <= set(entry), label
        assert "normal_f1" not in entry  # ONLAD's family: only for the methods declaring it
        assert len(entry["per_client"]) == 3
        assert entry["rounds"] == 2
    assert m["methods"]["local"]["bytes_up"] < m["methods"]["fedavg"]["bytes_up"]
    rows = (run_dir / "history.csv").read_text().splitlines()
    assert rows[0].startswith("method,round,")
    assert len(rows) == 1 + 3 * 2
    with np.load(run_dir / "scores.npz") as z:
        assert {"fedavg/score", "fedavg/label", "fedavg/client", "fedavg/pred"} <= set(z.files)
        assert len(z["fedavg/score"]) == m["experiment"]["n_test"]
    resolved = (run_dir / "config.toml").read_text()
    assert "local_epochs = 2" in resolved and "lr = 0.001" in resolved


def test_columns_listed_and_the_table_renders_from_them(run_dir: Path) -> None:
    from fedad.cli.summary import results_table

    m = json.loads((run_dir / "metrics.json").read_text())
    assert m["columns"] == {
        "summary": [
            "auroc", "aupr", "eer", "f1", "precision", "recall", "fe", "me",
            "bytes_up", "bytes_down", "bytes_up_per_client_round", "seconds", "rounds",
        ],
        "per_client": ["auroc", "f1"],
    }  # fmt: skip
    assert list(m["families"]) == ["image", "pixel", "training"]
    headers = [str(c.header) for c in results_table(m).columns]
    assert headers == [
        "method", "AUROC", "AUPR", "F1", "precision", "recall", "FE", "ME", "MB up", "MB down", "s"
    ]  # fmt: skip
    # several seeds: FE and ME make room for the spread
    seeds = {**m, "experiment": {**m["experiment"], "seeds": [0, 1]}}
    assert "FE" not in [str(c.header) for c in results_table(seeds).columns]
    # a column no family knows is shown under its own name, numbers with 3 decimals
    m["columns"]["summary"] = ["auroc", "my_metric"]
    m["methods"]["fedavg"]["my_metric"] = 0.123456
    t = results_table(m)
    assert [str(c.header) for c in t.columns] == ["method", "AUROC", "my_metric"]
    assert "0.123" in list(t.columns[2].cells)


def test_load_gives_working_detectors(run_dir: Path) -> None:
    run = fedad.load(str(run_dir))
    with np.load(run_dir / "scores.npz") as z:
        client = z["again/client"]
        score = z["again/score"]
        pred = z["again/pred"]
    from fedad.config import load_config
    from fedad.federation import build_federation

    fed = build_federation(load_config(run_dir / "config.toml"))
    for c in fed.clients:
        det = run.detector("again", c.client_id)
        np.testing.assert_allclose(det.score(c.x_test), score[client == c.client_id], rtol=1e-6)
        np.testing.assert_array_equal(det.predict(c.x_test), pred[client == c.client_id])


def test_same_seed_same_metrics(run_dir: Path, tmp_path: Path) -> None:
    cfg = _write(tmp_path, SMALL)
    res = runner.invoke(app, ["run", str(cfg), "--out", str(tmp_path / "b"), "--quiet"])
    assert res.exit_code == 0, res.output
    a = json.loads((run_dir / "metrics.json").read_text())
    b = json.loads((tmp_path / "b" / "metrics.json").read_text())
    assert _drop_timing(a) == _drop_timing(b)


def test_report_command_rebuilds(run_dir: Path) -> None:
    (run_dir / "report.html").unlink()
    res = runner.invoke(app, ["report", str(run_dir)])
    assert res.exit_code == 0 and (run_dir / "report.html").is_file()


@pytest.mark.parametrize("args", [["report", "RUN"], ["list", "methods"], ["list", "suites"]])
def test_report_and_list_import_no_torch(run_dir: Path, args: list[str]) -> None:
    """The report and the method list render from metrics.json and the catalog alone."""
    argv = [str(run_dir) if a == "RUN" else a for a in args]
    code = (
        "import sys\n"
        "from fedad.cli.app import app\n"
        f"try:\n    app({argv!r})\n"
        "except SystemExit as e:\n    assert not e.code, e.code\n"
        "heavy = [m for m in ('torch', 'torch_geometric', 'kornia', 'zuko') if m in sys.modules]\n"
        "methods = [m for m in sys.modules if m.count('.') > 2 and 'methods' in m]\n"
        "assert not heavy and not methods, (heavy, methods)\n"
    )
    run_fresh(code)


@pytest.mark.parametrize("what", ["methods", "datasets", "partitions", "suites"])
def test_list(what: str) -> None:
    res = runner.invoke(app, ["list", what])
    assert res.exit_code == 0
    expect = {"methods": "fedprox", "datasets": "fashion_mnist", "partitions": "dirichlet",
              "suites": "tables-eval"}  # fmt: skip
    assert expect[what] in res.output


BAD = [
    (SMALL.replace("rounds = 2", "rounds = 2\nfoo = 1"), "unknown key 'foo'"),
    (SMALL.replace("rounds = 2", 'rounds = "two"'), "rounds"),
    (SMALL.replace('name = "digits"', 'name = "nope"'), "nope"),
    (SMALL.replace('name = "local"', 'name = "fedsgd"'), "fedsgd"),
    (SMALL.replace("clients = 3", "clients = 5000"), "clients"),
    (SMALL.replace("anomaly = [7, 8]", "anomaly = [7, 42]"), "42"),
    (SMALL.replace("contamination = 0.02", "contamination = 1.5"), "contamination"),
    (SMALL.replace("[methods.params]", "[methods.params]\nlrr = 1"), "lrr"),
]


@pytest.mark.parametrize(("text", "needle"), BAD)
def test_bad_input_is_one_line_and_status_2(tmp_path: Path, text: str, needle: str) -> None:
    cfg = _write(tmp_path, text)
    res = runner.invoke(app, ["run", str(cfg), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2, res.output
    err = res.stderr.strip() if res.stderr else res.output.strip()
    assert needle in err and len(err.splitlines()) == 1, err
    assert "Traceback" not in res.output


def test_bad_onlad_params_are_one_line_errors(tmp_path: Path) -> None:
    text = SMALL.replace('name = "local"\ndetector = "deepsvdd"', 'name = "onlad-selective"')
    text = text.replace("local_epochs = 2", "lam_factor = 0.5")
    text = text.replace('name = "fedavg"\nlabel = "again"', 'name = "onlad"\nlabel = "again"')
    res = runner.invoke(app, ["run", str(_write(tmp_path, text)), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2, res.output
    assert "lam_factor" in res.output and "Traceback" not in res.output


def test_real_process_exits_2_without_traceback(tmp_path: Path) -> None:
    cfg = _write(tmp_path, SMALL.replace("rounds = 2", "rounds = 0"))
    p = subprocess.run(
        [sys.executable, "-m", "fedad.cli", "run", str(cfg)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2
    assert "rounds" in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
