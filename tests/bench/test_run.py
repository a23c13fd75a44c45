"""``fedad bench`` end to end on a small config: a row per method x seed, a leaderboard,
one-line refusals, and a resume after Ctrl-C that keeps the finished rows without running
them again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import fedad.runner
from fedad.bench.benchmark import BenchRequest, run_bench
from fedad.bench.results import read_results
from fedad.bench.suites import load_target
from fedad.cli.app import app
from fedad.core.errors import Interrupted
from tests.hostile.conftest import one_line_error, runner

CONFIG = """
[data]
name = "breast_cancer"
part = "dev"
max_train_per_client = 80
max_test = 100
[partition]
scheme = "iid"
clients = 2
"""
SUITE = """
[suite]
seeds = [0, 1]
[[federations]]
name = "first"
rounds = 1
[federations.data]
name = "breast_cancer"
max_test = 60
[[federations]]
name = "second"
rounds = 1
[federations.data]
name = "wine"
normal = [0]
anomaly = [1]
"""


def test_a_config_without_methods_two_seeds(tmp_path: Path) -> None:
    cfg = tmp_path / "mine.toml"
    cfg.write_text("rounds = 1\n" + CONFIG)
    out = tmp_path / "b"
    args = ["bench", str(cfg), "--out", str(out), "--seeds", "0,1", "-q"]
    result = runner.invoke(app, [*args, "--methods", "onlad,local:ocsvm"])
    assert result.exit_code == 0, result.output
    rows = read_results(out / "results.csv")
    assert sorted((r["label"], r["seed"]) for r in rows) == [
        ("local-ocsvm", 0), ("local-ocsvm", 1), ("onlad", 0), ("onlad", 1)
    ]  # fmt: skip
    assert all(r["kind"] == "tables" and r["auroc"] is not None for r in rows)
    page = (out / "leaderboard.html").read_text()
    assert "tables data" in page and "onlad" in page and "ranks first" in page
    assert (out / "runs" / "mine" / "seed-1" / "metrics.json").is_file()
    line = one_line_error(runner.invoke(app, args))  # a benchmark is there already
    assert "--resume" in line


def test_resume_after_ctrl_c_keeps_rows_and_runs_only_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "suite.toml"
    path.write_text(SUITE)
    out = tmp_path / "b"

    def stop_at_second(name: str, cfg: Any) -> None:
        if name == "second":
            raise KeyboardInterrupt

    req = BenchRequest(load_target(str(path), []), out, methods=[("onlad", None)])
    with pytest.raises(Interrupted) as err:
        run_bench(req, on_run=stop_at_second)
    assert err.value.kept == ("2 rows",)
    kept = read_results(out / "results.csv")
    assert {(r["federation"], r["seed"]) for r in kept} == {("first", 0), ("first", 1)}

    seen: list[str] = []
    orig = fedad.runner.run_experiment

    def watch(cfg: Any, out_dir: Path, **kw: Any) -> Any:
        seen.append(out_dir.parent.name)
        return orig(cfg, out_dir, **kw)

    monkeypatch.setattr(fedad.runner, "run_experiment", watch)
    resumed = BenchRequest(load_target(str(path), []), out, methods=[("onlad", None)], resume=True)
    rows = run_bench(resumed)
    assert sorted({r["federation"] for r in rows}) == ["first", "second"]
    assert len(rows) == 4
    assert seen == ["second", "second"]  # the first federation's seeds were not run again
    again = read_results(out / "results.csv")
    assert [r for r in again if r["federation"] == "first"] == kept


def test_a_crafted_bench_folder_is_refused_and_nothing_written_through_it(
    tmp_path: Path,
) -> None:
    cfg = tmp_path / "mine.toml"
    cfg.write_text("rounds = 1\n" + CONFIG)
    out, outside = tmp_path / "b", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    (out / "runs").symlink_to(outside)
    args = ["bench", str(cfg), "--out", str(out), "--methods", "onlad", "-q"]
    assert "symbolic link" in one_line_error(runner.invoke(app, [*args, "--force"]))
    assert list(outside.iterdir()) == []


def test_resume_with_another_config_is_refused_and_a_leaderboard_survives_no_auroc(
    tmp_path: Path,
) -> None:
    cfg = tmp_path / "mine.toml"
    cfg.write_text("rounds = 1\n" + CONFIG)
    out = tmp_path / "b"
    args = ["bench", str(cfg), "--out", str(out), "--methods", "onlad", "-q"]
    assert runner.invoke(app, args).exit_code == 0
    line = one_line_error(runner.invoke(app, [*args, "--resume", "--set", "rounds=2"]))
    assert "another config" in line
    # every method fails (min_clients above the clients): one line, the page still written
    line = one_line_error(runner.invoke(app, [*args, "--force", "--set", "engine.min_clients=5"]))
    assert "no method finished" in line or "min_clients" in line
