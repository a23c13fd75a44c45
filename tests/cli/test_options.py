"""What an interrupted command says is what happened: the finished run, the kept methods
(with a ``--resume`` command a shell can take as it is), the earlier run brought back, or
nothing kept."""

from __future__ import annotations

import shlex
import signal
import sys
from pathlib import Path

import pytest
import typer

from fedad.cli.options import interrupted
from fedad.core.errors import Interrupted


def said(stop: Interrupted, config: Path, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(typer.Exit) as done:
        interrupted(stop, config)
    assert done.value.exit_code == 128 + stop.signum
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_each_outcome_has_its_own_line(capsys: pytest.CaptureFixture[str]) -> None:
    cfg = Path("c.toml")
    done = said(Interrupted(signal.SIGTERM, out="R", finished=True), cfg, capsys)
    assert "after the run had finished" in done and "R/" in done
    kept = said(Interrupted(signal.SIGINT, ("fedavg",), "R"), cfg, capsys)
    assert "kept fedavg" in kept and "--resume" in kept
    back = said(Interrupted(signal.SIGINT, (), "R", restored=True), cfg, capsys)
    assert "earlier run in R/ is kept as it was" in back and "finished:" not in back
    none = said(Interrupted(signal.SIGTERM, (), "R"), cfg, capsys)
    assert "no method had finished, no results kept" in none
    assert "after the run had finished" not in none  # nothing was kept: not "finished"


def test_the_resume_command_is_shell_quoted(capsys: pytest.CaptureFixture[str]) -> None:
    cfg, out = Path("my config.toml"), "runs/it's here"
    line = said(Interrupted(signal.SIGINT, ("a",), out), cfg, capsys)
    command = line.split("`")[1]
    assert shlex.split(command) == ["fedad", "run", str(cfg), "--resume", "--out", out]


def test_output_that_is_no_terminal_gets_plain_lines_and_whole_tables(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """In a CI log (``| tee``) the results table is not cut and progress comes as lines."""
    from rich.console import Console
    from rich.table import Table

    from fedad.cli import options, running

    wide = Console(file=sys.stdout, width=options.NOT_A_TERMINAL_WIDTH)
    monkeypatch.setattr(options, "console", wide)
    monkeypatch.setattr(running, "console", wide)
    table = Table("method", *[f"metric number {i}" for i in range(12)])
    table.add_row("fedavg", *[f"{i}.123456" for i in range(12)])
    options.show(table)
    out = capsys.readouterr().out
    assert "11.123456" in out and "…" not in out
    bar = running._progress(True)
    assert isinstance(bar, running.PlainProgress)
    with bar:
        task = bar.add_task("preparing data", total=2)
        bar.update(task, description="[cyan]fedavg")
        bar.advance(task)
        bar.advance(task)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("preparing data: 0/2 rounds")
    assert lines[1].startswith("fedavg: 0/2 rounds") and lines[-1].startswith("fedavg: 2/2")


def test_the_resume_command_repeats_the_commands_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    stop = Interrupted(signal.SIGINT, ("a",), "out")
    with pytest.raises(typer.Exit):
        interrupted(stop, Path("c.toml"), options=["--set=rounds=3", "--jobs=2"])
    command = capsys.readouterr().err.split("`")[1]
    assert shlex.split(command) == [
        "fedad", "run", "c.toml", "--set=rounds=3", "--jobs=2", "--resume", "--out", "out"
    ]  # fmt: skip
