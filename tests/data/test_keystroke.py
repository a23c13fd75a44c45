"""The ``keystroke`` loader (CMU DSL-StrongPasswordData.csv) on small files the tests write."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedad.cli.app import app
from fedad.core.errors import DataError
from fedad.data import keystroke
from fedad.data.keystroke import FILENAME, TIMING_COLUMNS, load_keystroke, parse_keystroke_csv
from fedad.data.registry import list_datasets, load_dataset

HEADER = ["subject", "sessionIndex", "rep", *TIMING_COLUMNS]
REAL_HEADER = (
    "subject,sessionIndex,rep,H.period,DD.period.t,UD.period.t,H.t,DD.t.i,UD.t.i,H.i,DD.i.e,"
    "UD.i.e,H.e,DD.e.five,UD.e.five,H.five,DD.five.Shift.r,UD.five.Shift.r,H.Shift.r,"
    "DD.Shift.r.o,UD.Shift.r.o,H.o,DD.o.a,UD.o.a,H.a,DD.a.n,UD.a.n,H.n,DD.n.l,UD.n.l,H.l,"
    "DD.l.Return,UD.l.Return,H.Return"
)
# Deliberately not in sorted order: classes must come out sorted.
SUBJECTS = ("s010", "s002", "s057", "s003", "s005")


def _rows(subjects: tuple[str, ...] = SUBJECTS, reps: int = 12) -> list[list[str]]:
    rng = np.random.default_rng(0)
    rows = []
    for k, s in enumerate(subjects):
        for r in range(reps):
            # each subject types at its own speed: separable, like the real data
            t = 0.05 + 0.02 * k + 0.005 * rng.standard_normal(len(TIMING_COLUMNS))
            rows.append([s, str(1 + r // 6), str(1 + r % 6), *(f"{v:.4f}" for v in t)])
    return rows


def _text(rows: list[list[str]], header: list[str] | None = None, sep: str = ",") -> str:
    lines = [sep.join(header or HEADER)] + [sep.join(r) for r in rows]
    return "\n".join(lines) + "\n"


def _write(folder: Path, text: str | bytes, name: str = FILENAME) -> Path:
    path = folder / name
    if isinstance(text, str):
        path.write_text(text, encoding="utf-8")
    else:
        path.write_bytes(text)
    return path


def _error(folder: Path, text: str | bytes) -> str:
    path = _write(folder, text)
    with pytest.raises(DataError) as err:
        load_keystroke(str(path))
    msg = str(err.value)
    assert msg and "\n" not in msg
    return msg


def test_real_header_is_the_expected_one() -> None:
    assert ",".join(HEADER) == REAL_HEADER
    assert len(TIMING_COLUMNS) == 31


def test_loads_from_file_and_folder(tmp_path: Path) -> None:
    rows = _rows()
    path = _write(tmp_path, _text(rows))
    ds = load_keystroke(str(path))
    assert ds.name == "keystroke" and ds.kind == "vector" and not ds.fixed_split
    assert ds.classes == tuple(sorted(SUBJECTS))
    assert ds.x.shape == (len(rows), 31) and ds.x.dtype == np.float32
    assert ds.y.dtype == np.int64 and ds.x_test is None
    assert ds.columns == TIMING_COLUMNS
    # row order kept, labels index the sorted subject ids, values as written
    for i, row in enumerate(rows):
        assert ds.classes[int(ds.y[i])] == row[0]
        np.testing.assert_allclose(ds.x[i], np.array(row[3:], dtype=np.float32))
    from_folder = load_dataset("keystroke", str(tmp_path))
    np.testing.assert_array_equal(from_folder.x, ds.x)
    np.testing.assert_array_equal(from_folder.y, ds.y)


def test_column_order_in_the_file_does_not_matter(tmp_path: Path) -> None:
    rows = _rows(reps=3)
    ds = load_keystroke(str(_write(tmp_path, _text(rows), "a.csv")))
    perm = [2, 0, 1, *reversed(range(3, len(HEADER)))]
    shuffled = [[r[j] for j in perm] for r in rows]
    other = load_keystroke(str(_write(tmp_path, _text(shuffled, [HEADER[j] for j in perm]))))
    np.testing.assert_array_equal(other.x, ds.x)
    np.testing.assert_array_equal(other.y, ds.y)


def test_quoted_cells_crlf_bom_and_missing_values(tmp_path: Path) -> None:
    rows = _rows(reps=2)
    rows[0][5] = ""
    rows[1][6] = "NA"
    rows[2][7] = "inf"
    lines = [",".join(f'"{c}"' for c in HEADER)] + [",".join(r) for r in rows]
    raw = ("\ufeff" + "\r\n".join(lines) + "\r\n\r\n").encode()
    ds = load_keystroke(str(_write(tmp_path, raw)))
    assert len(ds.x) == len(rows)
    assert np.isnan(ds.x[0, 2]) and np.isnan(ds.x[1, 3]) and np.isinf(ds.x[2, 4])


def test_registered_with_a_one_line_description() -> None:
    desc = dict(list_datasets())["keystroke"]
    assert "keystroke" in desc.lower() and "\n" not in desc


def test_needs_a_path_and_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"needs data\.path"):
        load_keystroke(None)
    with pytest.raises(DataError, match=rf"no file .*{re.escape(FILENAME)}.*data\.path"):
        load_keystroke(str(tmp_path))
    with pytest.raises(DataError, match="no file"):
        load_keystroke(str(tmp_path / "nothing.csv"))
    with pytest.raises(DataError, match=r"data\.size"):
        load_dataset("keystroke", str(tmp_path), size=28)


def _bad(rows_edit: object = None) -> str:
    rows = _rows(reps=2)
    if callable(rows_edit):
        rows_edit(rows)
    return _text(rows)


def _set(i: int, j: int, v: str) -> object:
    def edit(rows: list[list[str]]) -> None:
        rows[i][j] = v

    return edit


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "is empty"),
        ("\n\n  \n", "is empty"),
        (",".join(HEADER) + "\n", "no data rows"),
        (_text(_rows(reps=2), sep=";"), "comma-separated"),
        (_text(_rows(reps=2), sep="\t"), "comma-separated"),
        (_text(_rows(reps=2), header=HEADER[1:]), "lacks subject"),
        (_text([r[:-1] for r in _rows(reps=2)], header=HEADER[:-1]), "lacks H.Return"),
        (_text([[*r, "1"] for r in _rows(reps=2)], header=[*HEADER, "x"]), "unknown columns 'x'"),
        (_text([[*r, "1"] for r in _rows(reps=2)], header=[*HEADER, "rep"]), "appears twice"),
        (_bad(_set(1, 4, "abc")), "line 3, column 'DD.period.t' is 'abc', not a number"),
        (_bad(_set(0, 33, "0,1")), "line 2 has 35 cells, the header has 34"),
        (_bad(_set(2, 1, "one")), "line 4, column 'sessionIndex' is 'one'"),
        (_bad(_set(2, 2, "-3")), "column 'rep' is '-3'"),
        (_bad(_set(3, 0, "")), "line 5, column 'subject' is ''"),
        (_bad(_set(3, 0, "s" * 100)), "column 'subject'"),
        (_bad(_set(3, 0, "a\x07b")), "column 'subject'"),
        (_bad(_set(1, 10, "1e5x")), "column 'DD.i.e' is '1e5x'"),
        (_bad(_set(1, 10, '"unterminated')), "line"),
        (_bad(_set(1, 10, "x" * 200_000)), "field larger than field limit"),
        (_text(_rows(reps=2)).replace("s002", "s0\x0002", 1), "line"),
    ],
)
def test_malformed_files_are_one_line_errors(tmp_path: Path, text: str, needle: str) -> None:
    msg = _error(tmp_path, text)
    assert needle in msg, msg
    assert FILENAME in msg or "data.path" in msg


def test_not_utf8_and_binary(tmp_path: Path) -> None:
    assert "not UTF-8" in _error(tmp_path, b"\xff\xfe" + _text(_rows(reps=1)).encode("utf-16-le"))
    assert "not UTF-8" in _error(tmp_path, bytes(range(256)) * 10)


def test_size_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keystroke, "MAX_CSV_BYTES", 1000)
    keystroke._read_cached.cache_clear()
    assert "larger than the 1,000 bytes" in _error(tmp_path, _text(_rows()))


def test_cache_follows_file_changes(tmp_path: Path) -> None:
    path = _write(tmp_path, _text(_rows(reps=2)))
    a = load_keystroke(str(path))
    _write(tmp_path, _text(_rows(SUBJECTS[:2], reps=3)) + "\n")
    b = load_keystroke(str(path))
    assert len(a.x) == 10 and len(b.x) == 6 and len(b.classes) == 2


def test_parse_names_where(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"^upload\.csv: line 2"):
        parse_keystroke_csv(_bad(_set(0, 3, "?")).encode(), "upload.csv")


CONFIG = """
seed = 0
rounds = 2
[data]
name = "keystroke"
path = "{path}"
normal = [0, 1, 2]
anomaly = [3]
max_test = 60
[partition]
scheme = "one-class"
clients = 3
[engine]
progress = false
[[methods]]
name = "local"
detector = "autoencoder"
"""


def test_fedad_run_end_to_end(tmp_path: Path) -> None:
    _write(tmp_path, _text(_rows(reps=20)))
    cfg = tmp_path / "run.toml"
    cfg.write_text(CONFIG.format(path=tmp_path))
    res = CliRunner().invoke(app, ["run", str(cfg), "--out", str(tmp_path / "out"), "--quiet"])
    assert res.exit_code == 0, res.output
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    text = json.dumps(metrics)
    assert "auroc" in text
    listed = CliRunner().invoke(app, ["list", "datasets"])
    assert listed.exit_code == 0 and "keystroke" in listed.output


def test_fedad_run_with_a_broken_file_is_one_line(tmp_path: Path) -> None:
    _write(tmp_path, _bad(_set(1, 4, "oops")))
    cfg = tmp_path / "run.toml"
    cfg.write_text(CONFIG.format(path=tmp_path))
    res = CliRunner().invoke(app, ["run", str(cfg), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    assert "'oops', not a number" in res.output
