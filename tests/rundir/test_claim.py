"""``--force`` sets the old run aside until the new one has a result: a replacement that
fails its checks, errs or is interrupted before any method finished leaves the old run as
it was; one that produces a result drops it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from fedad.config import parse_config
from fedad.core.errors import FedadError, Interrupted
from fedad.rundir.claim import RunDir
from fedad.rundir.layout import ASIDE_DIR, STATE_DIR
from fedad.runner import run_experiment
from fedad.seeds import run_seeds
from tests.rundir.test_fingerprint import snapshot, table_config, write_table


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("claim")
    table = base / "rows.csv"
    write_table(table)
    out = base / "run"
    run_experiment(parse_config(table_config(table)), out)
    return table, out


@pytest.fixture
def old_run(finished: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    table, out = finished
    dst = tmp_path / "run"
    shutil.copytree(out, dst)
    return table, dst


def replacing(table: Path, **top: Any) -> Any:
    raw = table_config(table, **top)
    if "seeds" in raw:
        raw.pop("seed")
    return parse_config(raw)


@pytest.mark.parametrize(
    "change",
    [
        {"data": {"name": "table", "path": "/no/such/file.csv", "label_column": "label"}},
        {"methods": [{"name": "fedavg", "params": {"lr": -1}}]},
        {"tracking": {"mlflow": "http://127.0.0.1:9"}},
    ],
    ids=["missing-data", "bad-param", "unreachable-tracking"],
)
def test_a_replacement_that_fails_its_checks_keeps_the_old_run(
    old_run: tuple[Path, Path], change: dict[str, Any]
) -> None:
    table, run = old_run
    before = snapshot(run)
    with pytest.raises(FedadError):
        run_experiment(replacing(table, **change), run, force=True)
    assert snapshot(run) == before
    assert not (run / STATE_DIR / ASIDE_DIR).exists()


def test_a_replacement_interrupted_before_a_result_keeps_the_old_run(
    old_run: tuple[Path, Path],
) -> None:
    table, run = old_run
    before = snapshot(run)

    def stop(label: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(Interrupted) as err:
        run_experiment(replacing(table, seed=1), run, on_method=stop, force=True)
    assert err.value.restored and err.value.kept == ()
    assert snapshot(run) == before


def test_a_replacement_with_a_result_drops_the_old_run(old_run: tuple[Path, Path]) -> None:
    table, run = old_run
    data = run_experiment(replacing(table, seed=1), run, force=True)
    assert data["experiment"]["seed"] == 1
    assert not (run / STATE_DIR / ASIDE_DIR).exists()
    assert "seed = 1" in (run / "config.toml").read_text()


def test_a_killed_replacement_is_undone_by_the_next_claim(old_run: tuple[Path, Path]) -> None:
    """A replacement killed (SIGKILL) after setting the old run aside and before any result:
    the next command to claim the folder finds the old run in its place."""
    _, run = old_run
    before = snapshot(run)
    rd = RunDir.claim(run, force=True)
    rd.set_state("running", "seed = 9\n")  # what the new run wrote before it died
    rd.close()  # no settle: as if killed
    assert (run / STATE_DIR / ASIDE_DIR).is_dir()
    with pytest.raises(FedadError, match="holds a fedad run already"):
        RunDir.claim(run)
    assert snapshot(run) == before


def test_seeds_that_all_fail_keep_the_old_run(old_run: tuple[Path, Path]) -> None:
    table, run = old_run
    before = snapshot(run)
    cfg = replacing(table, seeds=[0, 1], methods=[{"name": "fedavg", "params": {"lr": -1}}])
    with pytest.raises(FedadError, match="kept as it was"):
        run_seeds(cfg, run, force=True)
    assert snapshot(run) == before


def test_an_interrupt_while_the_report_is_written_keeps_every_method(
    finished: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every method finished, then SIGTERM: the line names them all (was 'no method had
    finished')."""
    import fedad.runner

    table, _ = finished
    calls = {"n": 0}
    real = fedad.runner._report

    def report(out: Path) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise Interrupted(15)
        real(out)

    monkeypatch.setattr(fedad.runner, "_report", report)
    with pytest.raises(Interrupted) as err:
        run_experiment(replacing(table), tmp_path / "run")
    assert err.value.kept == ("fedavg",) and not err.value.restored
    assert (tmp_path / "run" / "metrics.json").is_file()


KILL_AT = """
import os, sys
from pathlib import Path
import fedad.rundir.claim as claim

limit, count = int(sys.argv[2]), [0]
real = claim.move
def move(a, b):
    count[0] += 1
    if count[0] == limit:
        os._exit(9)  # a kill: no cleanup runs
    real(a, b)
claim.move = move
rd = claim.RunDir.claim(Path(sys.argv[1]), force=True)
if limit == 0:
    os._exit(9)  # killed while the new run loads its data: nothing of it written yet
(rd.root / "config.toml").write_text("seed = 9\\n")  # what the new run wrote
rd.set_state("running")
rd.settle(produced=False)  # no result: the old run goes back ...
os._exit(0)
"""


@pytest.mark.parametrize("kill_at", [0, 1, 4, 8, 12, 16, 30])
def test_a_replacement_killed_at_any_rename_loses_nothing(
    old_run: tuple[Path, Path], kill_at: int
) -> None:
    """Killed while setting the old run aside or while putting it back (a user's file in
    the folder too): the next claim finds the old run as it was."""
    import subprocess
    import sys

    _, run = old_run
    (run / "notes.txt").write_text("mine")
    before = snapshot(run)
    subprocess.run([sys.executable, "-c", KILL_AT, str(run), str(kill_at)], check=False)
    with pytest.raises(FedadError, match="holds a fedad run already"):
        RunDir.claim(run)
    assert snapshot(run) == before
