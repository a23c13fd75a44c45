"""Several seeds in one run: OUT/seed-N/ runs, the aggregate, failures, resume, --jobs."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import fedad
from fedad.cli.app import app
from fedad.config import parse_config
from fedad.core.errors import ConfigError, FedadError
from fedad.evaluation.seeds import aggregate, aggregate_method, history_with_seeds
from fedad.runner import TIMING_KEYS, run_experiment
from fedad.seeds import run_seeds

BASE: dict[str, Any] = {
    "rounds": 1,
    "data": {"name": "digits", "normal": [0, 1], "anomaly": [7], "max_test": 60},
    "partition": {"scheme": "dirichlet", "alpha": 1.0, "clients": 2},
    "engine": {"progress": False},
    "methods": [
        {"name": "fedavg", "label": "fedavg-ae"},
        {"name": "local", "detector": "deepsvdd", "label": "local-svdd"},
    ],
}
runner = CliRunner()


def _cfg(**over: Any) -> Any:
    return parse_config({**BASE, **over})


def _untimed(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _untimed(v) for k, v in d.items() if k not in (*TIMING_KEYS, "total_seconds")}
    if isinstance(d, list):
        return [_untimed(x) for x in d]
    return d


@pytest.fixture(scope="module")
def two_seeds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("seeds") / "run"
    run_seeds(_cfg(seeds=[4, 5]), out)
    return out


# -- config ----------------------------------------------------------------------------------


def test_seed_and_seeds_exclude_each_other() -> None:
    with pytest.raises(ConfigError, match="'seed' or 'seeds', not both"):
        _cfg(seed=1, seeds=[1, 2])
    with pytest.raises(ConfigError, match="listed twice"):
        _cfg(seeds=[1, 1])
    with pytest.raises(ConfigError, match="at least 1"):
        _cfg(seeds=[])


def test_set_seeds_replaces_seed() -> None:
    from fedad.config import apply_overrides

    raw = apply_overrides({**BASE, "seed": 3}, ["seeds=[0,1]"])
    assert "seed" not in raw and parse_config(raw).seed_list() == [0, 1]
    raw = apply_overrides({**BASE, "seeds": [0, 1]}, ["seed=7"])
    assert "seeds" not in raw and parse_config(raw).seed_list() == [7]


# -- aggregation math ------------------------------------------------------------------------


def test_aggregate_method_mean_std_and_undefined() -> None:
    entries = [
        (0, {"auroc": 0.5, "f1": None, "rounds": 2, "method": "m", "per_client": [1]}),
        (1, {"auroc": 0.7, "f1": 0.3, "rounds": 2, "method": "m", "per_client": [2]}),
        (2, {"auroc": 0.9, "f1": 0.4, "rounds": 2, "method": "m", "per_client": [3]}),
    ]
    agg = aggregate_method(entries)
    assert agg["auroc"] == pytest.approx(np.mean([0.5, 0.7, 0.9]))
    assert agg["std"]["auroc"] == pytest.approx(np.std([0.5, 0.7, 0.9]))
    # a metric undefined in one seed is not averaged over the others
    assert agg["f1"] is None and agg["std"]["f1"] is None
    assert agg["rounds"] == 2.0 and agg["std"]["rounds"] == 0.0
    assert agg["method"] == "m" and "per_client" not in agg
    assert [r["seed"] for r in agg["per_seed"]] == [0, 1, 2]
    assert agg["per_seed"][0]["f1"] is None


def test_aggregate_keeps_shared_facts_only() -> None:
    per_seed = {
        0: {"methods": {"a": {"auroc": 0.5}}, "experiment": {"dataset": "d", "seed": 0, "n": 1}},
        1: {"methods": {"a": {"auroc": 0.6}}, "experiment": {"dataset": "d", "seed": 1, "n": 2}},
    }
    data = aggregate(per_seed, [0, 1, 2], ["a", "b"])
    assert list(data["methods"]) == ["a"]
    assert data["experiment"] == {"dataset": "d", "seeds": [0, 1, 2]}


def test_aggregate_pixel_metrics_and_columns() -> None:
    """Any numeric metric is averaged, a new family's included; the columns are kept."""
    cols = {"summary": ["auroc", "pixel_auroc", "pro", "seconds"], "per_client": ["auroc"]}
    per_seed = {
        s: {
            "methods": {"a": {"auroc": 0.5 + s / 10, "pixel_auroc": px, "pro": pro}},
            "experiment": {},
            "columns": cols,
        }
        for s, px, pro in ((0, 0.81, 0.4), (1, 0.93, 0.6), (2, 0.88, None))
    }
    data = aggregate(per_seed, [0, 1, 2], ["a"])
    a = data["methods"]["a"]
    assert a["pixel_auroc"] == pytest.approx(np.mean([0.81, 0.93, 0.88]), abs=1e-15)
    assert a["std"]["pixel_auroc"] == pytest.approx(np.std([0.81, 0.93, 0.88]), abs=1e-15)
    assert a["pro"] is None and a["std"]["pro"] is None  # undefined in one seed
    assert [r["pixel_auroc"] for r in a["per_seed"]] == [0.81, 0.93, 0.88]
    assert data["columns"] == cols
    # a seed written before columns were listed: its columns come from its entries
    per_seed[3] = {"methods": {"a": {"auroc": 0.7}}, "experiment": {}}
    union = aggregate(per_seed, [0, 1, 2, 3], ["a"])["columns"]
    assert union["summary"][:3] == ["auroc", "pixel_auroc", "pro"] and "aupr" in union["summary"]


def test_history_gets_a_seed_column() -> None:
    text = history_with_seeds([(3, "method,round\nm,1\n"), (4, "method,round,x\nm,1,2\n")])
    rows = list(csv.DictReader(text.splitlines()))
    assert [r["seed"] for r in rows] == ["3", "4"] and rows[1]["x"] == "2" and rows[0]["x"] == ""


# -- end to end ------------------------------------------------------------------------------


def test_aggregate_equals_numpy_over_the_seed_files(two_seeds: Path) -> None:
    top = json.loads((two_seeds / "metrics.json").read_text())
    seeds = [json.loads((two_seeds / f"seed-{s}" / "metrics.json").read_text()) for s in (4, 5)]
    assert top["experiment"]["seeds"] == [4, 5] and top["experiment"]["status"] == "complete"
    for label in ("fedavg-ae", "local-svdd"):
        m = top["methods"][label]
        for key in ("auroc", "aupr", "f1", "bytes_up"):
            values = [s["methods"][label][key] for s in seeds]
            assert m[key] == pytest.approx(np.mean(values), abs=1e-12)
            assert m["std"][key] == pytest.approx(np.std(values), abs=1e-12)
            assert [r[key] for r in m["per_seed"]] == values
    rows = list(csv.DictReader((two_seeds / "history.csv").read_text().splitlines()))
    assert {r["seed"] for r in rows} == {"4", "5"}
    assert (two_seeds / "report.html").is_file()
    assert "AUROC per seed" in (two_seeds / "report.html").read_text()
    assert top["columns"] == seeds[0]["columns"]


def test_each_seed_is_the_single_run_with_that_seed(two_seeds: Path, tmp_path: Path) -> None:
    single = run_experiment(_cfg(seed=5), tmp_path / "one")
    seeded = json.loads((two_seeds / "seed-5" / "metrics.json").read_text())
    assert _untimed(seeded) == _untimed(json.loads(json.dumps(single)))
    run = fedad.load(two_seeds / "seed-5")
    assert set(run.detectors) == {"fedavg-ae", "local-svdd"}


def test_load_of_the_top_names_a_seed(two_seeds: Path) -> None:
    with pytest.raises(FedadError, match=r"2 seeds.*seed-4"):
        fedad.load(two_seeds)


def test_existing_several_seed_run_needs_force(two_seeds: Path, tmp_path: Path) -> None:
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(two_seeds, out)
    with pytest.raises(FedadError, match="holds a fedad run already"):
        run_seeds(_cfg(seeds=[4, 5]), out)


def test_a_failing_seed_is_reported_and_the_others_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fedad.runner

    real = fedad.runner.run_experiment

    def flaky(cfg: Any, out: Path, **kw: Any) -> dict[str, Any]:
        if cfg.seed == 1:
            raise FedadError("no client answered any round")
        return real(cfg, out, **kw)

    monkeypatch.setattr(fedad.runner, "run_experiment", flaky)
    out = tmp_path / "run"
    cfg = tmp_path / "c.toml"
    from fedad.config import dump_toml

    cfg.write_text(dump_toml({**BASE, "seeds": [0, 1]}))
    res = runner.invoke(app, ["run", str(cfg), "--out", str(out), "-q"])
    assert res.exit_code == 2
    assert "1 of 2 seeds failed (seed 1: no client answered any round)" in res.output
    top = json.loads((out / "metrics.json").read_text())
    assert top["experiment"]["status"] == "partial"
    assert top["experiment"]["failed_seeds"] == [
        {"seed": 1, "error": "no client answered any round"}
    ]
    assert [r["seed"] for r in top["methods"]["fedavg-ae"]["per_seed"]] == [0]


def test_interrupted_seeds_resume_to_the_same_metrics(
    two_seeds: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fedad.core.errors import Interrupted

    out = tmp_path / "run"
    calls: list[tuple[int, str]] = []

    def stop_after_first(seed: int, what: str) -> None:
        calls.append((seed, what))
        if what == "done":
            raise KeyboardInterrupt

    with pytest.raises(Interrupted) as stop:
        run_seeds(_cfg(seeds=[4, 5]), out, on_seed=stop_after_first)
    assert stop.value.kept == ("seed-4",)
    assert json.loads((out / "metrics.json").read_text())["experiment"]["pending"] == ["seed-5"]
    with pytest.raises(FedadError, match="differs"):
        run_seeds(_cfg(seeds=[4, 6]), out, resume=True)
    done = run_seeds(_cfg(seeds=[4, 5]), out, resume=True)
    want = json.loads((two_seeds / "metrics.json").read_text())
    assert _untimed(json.loads(json.dumps(done))) == _untimed(want)


def test_jobs_needs_seeds(tmp_path: Path) -> None:
    from fedad.config import dump_toml

    cfg = tmp_path / "c.toml"
    cfg.write_text(dump_toml(BASE))
    res = runner.invoke(app, ["run", str(cfg), "--out", str(tmp_path / "o"), "--jobs", "2"])
    assert res.exit_code == 2 and "--jobs runs seeds in parallel" in res.output


@pytest.mark.slow
def test_jobs_2_equals_jobs_1(two_seeds: Path, tmp_path: Path) -> None:
    done = run_seeds(_cfg(seeds=[4, 5]), tmp_path / "run", jobs=2)
    want = json.loads((two_seeds / "metrics.json").read_text())
    assert _untimed(json.loads(json.dumps(done))) == _untimed(want)
    for s in (4, 5):
        a = np.load(two_seeds / f"seed-{s}" / "scores.npz")
        b = np.load(tmp_path / "run" / f"seed-{s}" / "scores.npz")
        for k in a.files:
            np.testing.assert_array_equal(a[k], b[k])


def test_resume_refuses_linked_or_damaged_seed_dirs(two_seeds: Path, tmp_path: Path) -> None:
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(two_seeds, out)
    (out / "seed-5" / "metrics.json").write_bytes(b"\xff{not json")
    with pytest.raises(FedadError, match=r"metrics.json is not valid JSON"):
        run_seeds(_cfg(seeds=[4, 5]), out, resume=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.rmtree(out / "seed-5")
    (out / "seed-5").symlink_to(outside)
    with pytest.raises(FedadError, match="is a symbolic link"):
        run_seeds(_cfg(seeds=[4, 5]), out, resume=True)
    assert list(outside.iterdir()) == []


def test_workers_and_top_config_get_the_config_as_given(tmp_path: Path) -> None:
    """``--jobs`` workers rebuild the config from :func:`fedad.seeds.as_given`: a dump with
    every default filled in named ``partition.clients = 10`` and failed every seed of a
    natural federation of 3 sites ("data.client_column 'site' names 3 clients")."""
    import tomllib

    from fedad.federation import build_federation
    from fedad.seeds import as_given, top_config_text

    rng = np.random.default_rng(0)
    path = tmp_path / "t.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["site", "a", "b", "y"])
        for i in range(90):
            w.writerow([f"s{i % 3}", *rng.normal(size=2).round(3), "bad" if i % 9 == 0 else "ok"])
    cfg = parse_config({
        "seeds": [0, 1],
        "data": {"name": "table", "path": str(path), "label_column": "y", "normal": ["ok"],
                 "anomaly": ["bad"], "client_column": "site"},
        "partition": {"scheme": "natural"},
        "methods": [{"name": "local", "detector": "ocsvm"}],
    })  # fmt: skip
    for raw in (as_given(cfg), tomllib.loads(top_config_text(cfg))):
        again = parse_config(raw)
        assert again.model_dump() == cfg.model_dump()
        assert len(build_federation(again.for_seed(1)).clients) == 3
    assert "clients" not in as_given(cfg)["partition"]
