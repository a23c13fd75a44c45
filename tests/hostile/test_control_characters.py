"""Control characters in what a run directory (or a data folder) holds never reach the
terminal: ``\\x1b[2J`` in a detector.json name, a method label, a client name or a file
name is printed as the text ``\\x1b[2J``, and Rich markup in it as written."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from rich.console import Console

from fedad.cli.app import app
from fedad.cli.summary import results_table
from fedad.printable import printable
from tests.hostile.conftest import one_line_error, runner

CLEAR = "\x1b[2J"
EVIL = f"ev{CLEAR}il\x07[bold red]X\x9b2J\u202e"
"""A screen clear, a bell, Rich markup, a C1 CSI and a right-to-left override."""
SHOWN = "ev\\x1b[2Jil\\x07[bold red]X\\x9b2J\\u202e"


def _raw_controls(text: str) -> list[str]:
    return [c for c in text if printable(c) != c and c not in "\n"]


def test_printable_escapes_c0_c1_and_bidi_only() -> None:
    assert printable(EVIL) == SHOWN
    assert printable("tab\there\r\n\x7f\x00") == "tab\\x09here\\x0d\\x0a\\x7f\\x00"
    assert printable("a\nb\tc", keep="\n") == "a\nb\\x09c"
    plain = "naïve ünïcode 名前 C:\\data\\x1b [x] 3.5"
    assert printable(plain) == plain
    assert printable(42) == "42"


def _rename_method(run: Path, old: str, new: str) -> None:
    """The run with method ``old`` renamed ``new`` everywhere the run names it."""
    m = json.loads((run / "metrics.json").read_text())
    m["methods"] = {(new if k == old else k): v for k, v in m["methods"].items()}
    (run / "metrics.json").write_text(json.dumps(m))
    (run / "checkpoints" / old).rename(run / "checkpoints" / new)
    with np.load(run / "scores.npz") as z:
        arrays = {k.replace(f"{old}/", f"{new}/", 1): z[k] for k in z.files}
    np.savez(run / "scores.npz", **arrays)


def test_a_crafted_node_folder_in_detector_json(run_copy: Path, tmp_path: Path) -> None:
    """detector.json's ``node_models`` names the folder a client's detector stayed in; an
    error quotes it."""
    path = run_copy / "checkpoints" / "local-svdd" / "detector.json"
    meta = json.loads(path.read_text())
    meta["node_models"] = {"0": EVIL}
    path.write_text(json.dumps(meta))
    data = tmp_path / "imgs"
    _digits(data, ["a.png"])
    for argv in (
        ["export", str(run_copy), "-m", "local-svdd", "--client", "0", "-o", str(tmp_path / "e")],
        ["score", str(run_copy), str(data), "-m", "local-svdd", "--client", "0"],
    ):
        res = runner.invoke(app, argv)
        line = one_line_error(res)
        assert SHOWN in line and not _raw_controls(res.output), res.output


def test_crafted_method_labels_in_an_error_and_the_report(run_copy: Path) -> None:
    label = f"lo{CLEAR}cal\x07[red]$\\notacmd{{$"
    _rename_method(run_copy, "local-svdd", label)
    res = runner.invoke(app, ["score", str(run_copy), str(run_copy), "-m", "nosuch"])
    line = one_line_error(res)
    assert "lo\\x1b[2Jcal\\x07[red]" in line and not _raw_controls(res.output)
    res = runner.invoke(app, ["report", str(run_copy)])
    assert res.exit_code == 0, res.output
    assert not _raw_controls(res.output), res.output
    html = (run_copy / "report.html").read_text(encoding="utf-8")
    assert not _raw_controls(html)
    assert "lo\\x1b[2Jcal\\x07[red]$" in html
    assert "could not be drawn" not in html.lower()  # the label's '$' is no mathtext


def test_the_results_table_escapes_labels_headers_and_cells(finished_run: Path) -> None:
    metrics = json.loads((finished_run / "metrics.json").read_text())
    entry = next(iter(metrics["methods"].values()))
    metrics["methods"] = {EVIL: {**entry, "auroc": EVIL}}
    metrics["columns"]["summary"] = [*metrics["columns"]["summary"], EVIL]
    out = io.StringIO()
    Console(file=out, width=400, color_system=None).print(results_table(metrics))
    text = out.getvalue()
    assert not _raw_controls(text), text
    assert text.count(SHOWN) == 3  # the label, the cell and the column's header
    assert "[bold red]X" in text  # markup shown as written


def _digits(folder: Path, names: list[str]) -> None:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in names:
        Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).save(folder / name)


def test_fedad_score_on_a_terminal_escapes_ids(
    finished_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An id (a file's name) reaches a terminal escaped; a file or a pipe gets it as is."""
    data = tmp_path / "new"
    odd = f"a{CLEAR}.png"
    _digits(data, ["b.png", odd])
    assert os.path.exists(data / odd)
    res = runner.invoke(app, ["score", str(finished_run), str(data), "-m", "fedavg-ae"])
    assert res.exit_code == 0 and odd in res.stdout  # a pipe: the data as they are
    monkeypatch.setattr("fedad.cli.score._to_terminal", lambda: True)
    res = runner.invoke(app, ["score", str(finished_run), str(data), "-m", "fedavg-ae"])
    assert res.exit_code == 0, res.output
    assert not _raw_controls(res.output) and "a\\x1b[2J.png" in res.stdout
    assert len(res.stdout.splitlines()) == 3  # the header and two rows, newlines kept


def test_a_skipped_file_s_name_is_logged_escaped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from fedad.data.image_folder import load_image_folder

    _digits(tmp_path / "good", ["a.png", "b.png"])
    (tmp_path / "good" / f"x{CLEAR}.png").write_bytes(b"not an image")
    with caplog.at_level("WARNING", logger="fedad"):
        load_image_folder(str(tmp_path), skip_bad_files=True)
    assert "x\\x1b[2J.png" in caplog.text and CLEAR not in caplog.text
