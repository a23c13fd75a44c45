"""Experiment tracking with MLflow (:mod:`fedad.tracking`) against a local file store.

One tiny run over two seeds (module fixture) is tracked to a folder; the tests read the
store back through MLflow's own client: params (the resolved config, flattened), each
round's history as a metric with step = round, final metrics per method and client, the
run's files as artifacts, one MLflow run per seed. Without the extra, or with a tracking
URI MLflow cannot open, the run stops with one line before anything trains.
"""

from __future__ import annotations

import json
import logging
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from fedad.cli.app import app
from fedad.config import dump_toml, parse_config
from fedad.core.errors import FedadError
from fedad.core.types import Dataset
from fedad.data.registry import register_dataset, unregister_dataset
from fedad.runner import run_experiment
from fedad.seeds import run_seeds
from fedad.tracking import MAX_PARAM, experiment_id, flatten, run_name, start, tracking_uri

mlflow = pytest.importorskip("mlflow", reason="the extra 'tracking' (mlflow-skinny)")
from mlflow.tracking import MlflowClient  # noqa: E402

DATA = "toy_tracking"
ROUNDS = 2


def _vectors() -> Dataset:
    rng = np.random.default_rng(0)
    x = rng.normal(0.0, 1.0, (60, 4)).astype(np.float32)
    x[40:] += 4.0
    y = np.r_[np.zeros(40), np.ones(20)].astype(np.int64)
    return Dataset(DATA, x, y, "vector", ("good", "bad"))


@pytest.fixture(scope="module")
def toy() -> Iterator[None]:
    register_dataset(DATA, lambda path=None, size=None: _vectors(), kind="vector")
    yield
    unregister_dataset(DATA)


def _raw(store: str | None, **extra: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "seed": 0,
        "rounds": ROUNDS,
        "data": {"name": DATA, "normal": [0], "anomaly": [1]},
        "partition": {"scheme": "iid", "clients": 2},
        "engine": {"progress": False},
        "methods": [
            {"name": "fedavg", "label": "ae", "params": {"local_epochs": 1}},
            {"name": "local", "label": "svm", "detector": "ocsvm"},
        ],
        **extra,
    }
    if "seeds" in extra:
        del raw["seed"]
    if store is not None and "tracking" not in extra:
        raw["tracking"] = {"mlflow": store, "experiment": "tests"}
    return raw


@pytest.fixture(scope="module")
def tracked(toy: None, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, list[Any]]:
    """(run folder, MLflow client, the experiment's runs) of a two-seed tracked run."""
    root = tmp_path_factory.mktemp("tracked")
    store = root / "mlruns"
    run_seeds(parse_config(_raw(str(store), seeds=[0, 1])), root / "run")
    client = MlflowClient(tracking_uri=store.as_uri())
    exp = client.get_experiment_by_name("tests")
    assert exp is not None
    return root / "run", client, client.search_runs([exp.experiment_id])


def test_one_finished_mlflow_run_per_seed_and_the_aggregate(
    tracked: tuple[Path, Any, list[Any]],
) -> None:
    _, _, runs = tracked
    assert sorted(r.info.run_name for r in runs) == ["run", "run/seed-0", "run/seed-1"]
    assert {r.info.status for r in runs} == {"FINISHED"}
    seeds = [r for r in runs if r.info.run_name != "run"]
    assert {r.data.params["seed"] for r in seeds} == {"0", "1"}


def test_the_aggregate_logs_means_spreads_and_the_report(
    tracked: tuple[Path, Any, list[Any]],
) -> None:
    import json

    out, client, runs = tracked
    top = next(r for r in runs if r.info.run_name == "run")
    assert top.data.params["seeds"] == "[0, 1]"
    methods = json.loads((out / "metrics.json").read_text())["methods"]
    for label in ("ae", "svm"):
        assert top.data.metrics[f"{label}/auroc"] == pytest.approx(methods[label]["auroc"])
        spread = methods[label]["std"]["auroc"]
        assert top.data.metrics[f"{label}/std/auroc"] == pytest.approx(spread)
    local = client.download_artifacts(top.info.run_id, "report.html", str(out.parent))
    assert Path(local).read_bytes() == (out / "report.html").read_bytes()
    assert "Answer" in Path(local).read_text()


def test_params_are_the_resolved_config(tracked: tuple[Path, Any, list[Any]]) -> None:
    out, _, runs = tracked
    run = next(r for r in runs if r.info.run_name == "run/seed-0")
    written = tomllib.loads((out / "seed-0" / "config.toml").read_text())
    assert run.data.params == dict(flatten(written))
    assert run.data.params["methods.1.detector"] == "ocsvm"
    assert run.data.params["methods.0.params.local_epochs"] == "1"
    assert run.data.params["data.normal"] == "[0]"
    assert run.data.tags["fedad.out"].endswith("seed-0")


def test_history_per_round_and_final_metrics(tracked: tuple[Path, Any, list[Any]]) -> None:
    import json

    out, client, runs = tracked
    run = next(r for r in runs if r.info.run_name == "run/seed-1")
    loss = client.get_metric_history(run.info.run_id, "ae/round/loss")
    assert [m.step for m in loss] == list(range(1, ROUNDS + 1))
    metrics = json.loads((out / "seed-1" / "metrics.json").read_text())["methods"]
    for label in ("ae", "svm"):
        assert run.data.metrics[f"{label}/auroc"] == pytest.approx(metrics[label]["auroc"])
        for c in metrics[label]["per_client"]:
            got = run.data.metrics[f"{label}/client-{c['client']}/auroc"]
            assert got == pytest.approx(c["auroc"])


def test_report_and_metrics_are_artifacts(tracked: tuple[Path, Any, list[Any]]) -> None:
    out, client, runs = tracked
    run = next(r for r in runs if r.info.run_name == "run/seed-0")
    names = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"report.html", "metrics.json", "config.toml", "history.csv"} <= names
    local = client.download_artifacts(run.info.run_id, "metrics.json", str(out.parent))
    assert Path(local).read_bytes() == (out / "seed-0" / "metrics.json").read_bytes()


def test_the_tracking_section_re_runs_as_written() -> None:
    cfg = parse_config(_raw("some/folder"))
    assert cfg.tracking is not None and cfg.tracking.experiment == "tests"
    again = parse_config(tomllib.loads(dump_toml(cfg.model_dump(mode="json", exclude_none=True))))
    assert again.tracking == cfg.tracking
    assert parse_config(_raw(None)).tracking is None  # off by default
    with pytest.raises(FedadError, match="tracking"):
        parse_config({**_raw(None), "tracking": {"mlflow": "x", "uri": "y"}})


def test_flatten_and_names(tmp_path: Path) -> None:
    flat = dict(flatten({"a": {"b": [1, 2], "c": None, "d": True}, "m": [{"x": "y" * 7000}]}))
    assert flat == {"a.b": "[1, 2]", "a.d": "true", "m.0.x": "y" * (MAX_PARAM - 3) + "..."}
    assert tracking_uri("http://host:5000") == "http://host:5000"
    assert tracking_uri(str(tmp_path / "store")) == (tmp_path / "store").as_uri()
    assert (tmp_path / "store").is_dir()
    named = parse_config(_raw("s", tracking={"mlflow": "s", "run_name": "mine"})).tracking
    assert named is not None and run_name(named, tmp_path) == "mine"


def test_without_the_extra_one_line_before_training(
    toy: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("mlflow", "mlflow.tracking", "mlflow.entities"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
    cfg = tmp_path / "c.toml"
    cfg.write_text(dump_toml(_raw(str(tmp_path / "store"))))
    res = CliRunner().invoke(app, ["run", str(cfg), "--out", str(tmp_path / "out"), "-q"])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "mlflow-skinny" in lines[0] and "fedad[tracking]" in lines[0]
    assert not (tmp_path / "out" / "metrics.json").exists()
    assert not (tmp_path / "store").exists()


def test_a_uri_mlflow_cannot_open_is_one_line(toy: None, tmp_path: Path) -> None:
    with pytest.raises(FedadError, match=r"cannot start a run") as err:
        run_experiment(parse_config(_raw("nosuchscheme://x")), tmp_path / "out")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out" / "metrics.json").exists()


def test_a_failure_after_the_start_only_warns(
    toy: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(self: Any, *args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(MlflowClient, "log_artifact", broken)
    raw = _raw(str(tmp_path / "store"), rounds=1)
    raw["methods"] = raw["methods"][1:]  # the OC-SVM alone: no training rounds
    with caplog.at_level(logging.WARNING, logger="fedad"):
        run_experiment(parse_config(raw), tmp_path / "out")
    assert (tmp_path / "out" / "report.html").is_file()
    assert any("could not log report.html" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("target", ["a\x00b", "FILE/store", "http://127.0.0.1:9"])
def test_a_store_that_cannot_be_opened_is_one_line_and_quick(tmp_path: Path, target: str) -> None:
    """A NUL byte, a folder below a file, a server that refuses (port 9: MLflow's own
    retries would take about 4 minutes; fedad's defaults about 3 s)."""
    (tmp_path / "FILE").write_text("a file, not a folder")
    target = target.replace("FILE", str(tmp_path / "FILE"))
    cfg = parse_config(_raw(target)).tracking
    started = time.perf_counter()
    with pytest.raises(FedadError, match=r"^\[tracking\] mlflow") as err:
        start(cfg, tmp_path / "out", {"seed": 0})
    assert "\n" not in str(err.value) and len(str(err.value)) < 600
    assert time.perf_counter() - started < 60


def test_an_experiment_another_seed_created_meanwhile_is_used() -> None:
    """Seeds in parallel (--jobs): both find the experiment missing, one creation fails."""

    class Exp:
        experiment_id = "7"

    class Client:
        looked = 0

        def get_experiment_by_name(self, name: str) -> Exp | None:
            self.looked += 1
            return None if self.looked == 1 else Exp()

        def create_experiment(self, name: str) -> str:
            raise RuntimeError("RESOURCE_ALREADY_EXISTS")

    assert experiment_id(Client(), "tests") == "7"

    class Broken(Client):
        def get_experiment_by_name(self, name: str) -> Exp | None:
            return None

    with pytest.raises(RuntimeError, match="ALREADY"):
        experiment_id(Broken(), "tests")


def test_a_file_uri_opens_the_file_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow 3 refuses its file store unless MLFLOW_ALLOW_FILE_STORE is set: fedad sets it
    for a file: URI as for a folder."""
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    cfg = parse_config(_raw((tmp_path / "store").as_uri())).tracking
    tracker = start(cfg, tmp_path / "out", {"seed": 0})
    assert tracker is not None
    tracker.abort(interrupted=True)
    run = MlflowClient(tracking_uri=(tmp_path / "store").as_uri()).get_run(tracker.run_id)
    assert run.info.status == "KILLED" and run.data.params == {"seed": "0"}


# ------------------------------------------------------------------ failures and --resume


def _runs(store: Path) -> list[Any]:
    client = MlflowClient(tracking_uri=store.as_uri())
    exp = client.get_experiment_by_name("tests")
    return [] if exp is None else client.search_runs([exp.experiment_id])


def test_a_failure_after_the_last_method_ends_the_mlflow_run_as_failed(
    toy: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every method finished, then the report fails: the MLflow run ends FAILED, not left
    RUNNING."""
    import fedad.runner

    def broken(out: Path) -> None:
        raise RuntimeError("the report broke")

    monkeypatch.setattr(fedad.runner, "_report", broken)
    store = tmp_path / "store"
    with pytest.raises(RuntimeError, match="report broke"):
        run_experiment(parse_config(_raw(str(store))), tmp_path / "out")
    (run,) = _runs(store)
    assert run.info.status == "FAILED"
    assert {"ae/auroc", "svm/auroc"} <= set(run.data.metrics)  # both methods were logged


def _interrupted(store: Path, out: Path) -> str:
    """A run stopped (Ctrl-C) after its first method; the MLflow run id it recorded."""
    from fedad.core.errors import Interrupted

    def stop(label: str) -> None:
        if label == "svm":
            raise KeyboardInterrupt

    with pytest.raises(Interrupted):
        run_experiment(parse_config(_raw(str(store))), out, on_method=stop)
    (run,) = _runs(store)
    assert run.info.status == "KILLED" and "ae/auroc" in run.data.metrics
    state = json.loads((out / ".fedad" / "mlflow.json").read_text())
    assert state["run_id"] == run.info.run_id and state["logged"] == ["ae"]
    return str(run.info.run_id)


def test_resume_continues_the_same_mlflow_run(toy: None, tmp_path: Path) -> None:
    store, out = tmp_path / "store", tmp_path / "out"
    run_id = _interrupted(store, out)
    run_experiment(parse_config(_raw(str(store))), out, resume=True)
    (run,) = _runs(store)  # one fedad run, one MLflow run
    assert run.info.run_id == run_id and run.info.status == "FINISHED"
    assert {"ae/auroc", "svm/auroc"} <= set(run.data.metrics)
    client = MlflowClient(tracking_uri=store.as_uri())
    # the method logged before the interruption is not logged twice
    assert [m.step for m in client.get_metric_history(run_id, "ae/round/loss")] == [1, 2]
    metrics = json.loads((out / "metrics.json").read_text())["methods"]
    assert run.data.metrics["svm/auroc"] == pytest.approx(metrics["svm"]["auroc"])
    names = {a.path for a in client.list_artifacts(run_id)}
    assert {"report.html", "metrics.json"} <= names


@pytest.mark.parametrize("lost", ["deleted", "damaged"])
def test_resume_without_the_mlflow_run_starts_a_new_one_and_says_so(
    toy: None, tmp_path: Path, lost: str, caplog: pytest.LogCaptureFixture
) -> None:
    store, out = tmp_path / "store", tmp_path / "out"
    old = _interrupted(store, out)
    if lost == "deleted":
        MlflowClient(tracking_uri=store.as_uri()).delete_run(old)
    else:
        (out / ".fedad" / "mlflow.json").write_text('{"run_id": "../../etc", "uri": 3}')
    with caplog.at_level(logging.WARNING, logger="fedad"):
        run_experiment(parse_config(_raw(str(store))), out, resume=True)
    said = " ".join(r.getMessage() for r in caplog.records)
    assert ("no longer in" if lost == "deleted" else "is damaged") in said
    assert "a new MLflow run is started" in said
    new = [r for r in _runs(store) if r.info.run_id != old]
    assert len(new) == 1 and new[0].info.status == "FINISHED"
    # the new MLflow run has every method, the one finished before the interruption too
    assert {"ae/auroc", "svm/auroc"} <= set(new[0].data.metrics)
    state = json.loads((out / ".fedad" / "mlflow.json").read_text())
    assert state["run_id"] == new[0].info.run_id and state["logged"] == ["ae", "svm"]


@pytest.mark.parametrize("store", ["{out}/mlruns", "file://{out}/mlruns", "{out}"])
def test_a_store_inside_the_run_folder_is_refused_before_anything(
    tmp_path: Path, store: str
) -> None:
    """MLflow's files (its store, ``.trash/``) would mix with the run's and block ``--force``."""
    from fedad.config import TrackingConfig

    out = tmp_path / "run"
    with pytest.raises(FedadError, match="inside the run's folder"):
        start(TrackingConfig(mlflow=store.format(out=out)), out, {})
    assert not out.exists()
    assert start(None, out, {}) is None
