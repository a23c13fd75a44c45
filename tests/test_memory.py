"""A method that runs out of memory fails in one line naming its largest size param; the
other methods finish, and their results and report are written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import fedad.runner
from fedad.config import parse_config
from fedad.core.errors import MethodsFailed, is_allocation_failure
from fedad.memory import allocation_error, largest_size_param
from fedad.runner import run_experiment
from tests.rundir.test_fingerprint import table_config, write_table

TORCH_OOM = (
    "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
    "memory: you tried to allocate 26400000000 bytes. Error code 12"
)


class P(BaseModel):
    hidden: int = 64
    epochs: int = 10
    lr: float = 1e-3
    flag: bool = True


def test_allocation_failures_are_told_from_other_errors() -> None:
    assert is_allocation_failure(RuntimeError(TORCH_OOM))
    assert is_allocation_failure(MemoryError())
    assert is_allocation_failure("RuntimeError('CUDA out of memory. Tried to allocate')")
    assert not is_allocation_failure(RuntimeError("shapes do not match"))
    assert not is_allocation_failure(ValueError("can't allocate memory"))  # not torch's


def test_the_param_named_is_the_largest_changed_one() -> None:
    assert largest_size_param(P(hidden=100_000_000)) == ("hidden", 100_000_000)
    assert largest_size_param(P(epochs=50)) == ("epochs", 50)  # changed beats larger default
    assert largest_size_param(P()) == ("hidden", 64)
    err = allocation_error("fedavg", 2, P(hidden=10**8), RuntimeError(TORCH_OOM))
    assert "26.4 GB" in str(err) and "methods.2.params.hidden" in str(err)
    assert "\n" not in str(err)


def _big_runs_out_of_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seeds: tuple[int, ...]
) -> dict[str, Any]:
    """A table config of two methods, ``big`` (FedAvg) and ``onlad``; ``big`` raises torch's
    allocation error in the runs of ``seeds``."""
    table = tmp_path / "rows.csv"
    write_table(table)
    raw = table_config(table)
    raw["methods"] = [
        {"name": "fedavg", "label": "big", "params": {"latent_dim": 4096}},
        {"name": "onlad", "params": {"init_samples": 5, "observed": 5}},
    ]
    real = fedad.runner._run_one

    def run_one(cfg: Any, label: str, *rest: Any) -> Any:
        if label == "big" and cfg.seed in seeds:
            raise RuntimeError(TORCH_OOM)
        return real(cfg, label, *rest)

    monkeypatch.setattr(fedad.runner, "_run_one", run_one)
    return raw


def test_the_other_methods_finish_and_are_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = _big_runs_out_of_memory(tmp_path, monkeypatch, seeds=(0,))
    out = tmp_path / "run"
    with pytest.raises(MethodsFailed, match=r"methods\.0\.params\.latent_dim") as err:
        run_experiment(parse_config(raw), out)
    assert err.value.data is not None
    metrics = json.loads((out / "metrics.json").read_text())
    assert list(metrics["methods"]) == ["onlad"]
    assert [f["method"] for f in metrics["experiment"]["failed_methods"]] == ["big"]
    assert (out / "report.html").is_file()
    assert json.loads((out / ".fedad" / "run.json").read_text())["state"] == "failed"


def test_with_several_seeds_the_seeds_count_and_the_failed_method_has_no_mean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fedad.seeds import run_seeds

    raw = _big_runs_out_of_memory(tmp_path, monkeypatch, seeds=(1,))
    raw.pop("seed", None)
    raw["seeds"] = [0, 1]
    out = tmp_path / "run"
    with pytest.raises(MethodsFailed, match=r"1 of 2 seeds \(seed 1: .*latent_dim") as err:
        run_seeds(parse_config(raw), out)
    assert err.value.data is not None
    metrics = json.loads((out / "metrics.json").read_text())
    exp = metrics["experiment"]
    assert exp["status"] == "partial" and "failed_seeds" not in exp
    assert [(f["seed"], f["method"]) for f in exp["failed_methods"]] == [(1, "big")]
    assert metrics["methods"]["onlad"]["auroc"] is not None  # both seeds count for it
    assert [r["seed"] for r in metrics["methods"]["onlad"]["per_seed"]] == [0, 1]
    big = metrics["methods"]["big"]
    assert big["auroc"] is None  # never a mean over the seeds where it happened to work
    assert big["method"] == "fedavg"  # its facts, from the seeds it finished
    assert [r["auroc"] is None for r in big["per_seed"]] == [False, True]
    assert json.loads((out / ".fedad" / "run.json").read_text())["state"] == "failed"


def test_an_allocation_failure_in_a_client_fails_the_method_not_the_client(
    vector_federation: Any,
) -> None:
    """In-process every client shares the machine: its allocation failure is the method's
    (it read 'no client answered in any round' before)."""
    from fedad.core.algorithm import Setup, build_algorithm
    from fedad.fl.engine import run_inprocess

    setup = Setup(
        kind="vector",
        feature_shape=(4,),
        rounds=1,
        seed=0,
        contamination=0.1,
        num_clients=len(vector_federation.clients),
    )
    alg = build_algorithm("local", {}, setup, "autoencoder")
    handlers = alg.handlers()

    def boom(*args: Any) -> Any:
        raise MemoryError("can't allocate memory")

    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(alg, "handlers", lambda: {k: boom for k in handlers})
    try:
        with pytest.raises(MemoryError):
            run_inprocess(alg, vector_federation, rounds=1, seed=0)
    finally:
        monkeypatch.undo()
