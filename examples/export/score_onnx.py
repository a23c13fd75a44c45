"""Score a CSV (or a .npy of images) with a `fedad export` folder, with onnxruntime alone.

No fedad, no torch, no pandas: the standard library's csv module, numpy and onnxruntime.
What fedad's preprocessing does (one-hot of text categories, imputation, standardisation)
is inside the ONNX models; this script only reads cells as `fedad score` reads them and
picks each row's model, as `fedad score` picks each row's detector:

    python examples/export/score_onnx.py EXPORT_DIR DATA [--client ID] [--id-column C] [--out F]

EXPORT_DIR holds model.json and the .onnx files; DATA is a .csv/.tsv table with the run's
feature columns (other columns are ignored), or a .npy array of images float32 [N, C, H, W]
in [0, 1] for a run on images. Which client's model scores a row: --client (a number or a
natural client's id value); else, for a table holding the run's client column, each row's
own; else client 0. Output: `id,client,score,anomaly` rows, as `fedad score` writes them.

Cells are read as pandas reads a CSV: a number column's cells as float64 then float32
(empty, NA, NaN, null, ... are missing; True/False are 1/0); a text column's cells stripped
of surrounding spaces, the missing ones left for the model to recognise.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

TRUE = {"True", "TRUE", "true"}
FALSE = {"False", "FALSE", "false"}


class ScoreError(Exception):
    """A problem with the inputs: printed as one line, exit status 2."""


def load_export(folder: Path) -> dict[str, Any]:
    """model.json of an export folder."""
    try:
        meta = json.loads((folder / "model.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ScoreError(f"'{folder}/model.json' cannot be read: {err}") from None
    if meta.get("format") != "fedad-onnx":
        raise ScoreError(f"'{folder}' is not a fedad export (model.json's format)")
    return meta


def read_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    """The header and the rows of a .csv (comma) or .tsv (tab) file."""
    sep = "\t" if path.suffix.lower() == ".tsv" else ","
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh, delimiter=sep))
    if not rows:
        raise ScoreError(f"'{path}' is empty")
    return [h.strip() for h in rows[0]], rows[1:]


def number(cell: str, missing: set[str], where: str) -> float:
    """A number cell as pandas reads it (missing: NaN)."""
    if cell in missing:
        return float("nan")
    if cell in TRUE or cell in FALSE:
        return 1.0 if cell in TRUE else 0.0
    try:
        return float(cell)
    except ValueError:
        raise ScoreError(f"{where} holds {cell!r}, not a number") from None


def text(cell: str, missing: set[str], categories: set[str]) -> str:
    """A text cell as fedad compares it with the categories: stripped. A missing cell is
    left as it is (the model knows the missing cells); one that reads as missing only once
    stripped (" NA") is a category fedad never saw: a trailing space keeps it one."""
    if cell in missing:
        return cell
    stripped = cell.strip()
    return stripped + " " if stripped in missing and stripped not in categories else stripped


def table_feeds(
    meta: dict[str, Any], header: list[str], rows: list[list[str]], path: Path
) -> dict[str, np.ndarray]:
    """The model's inputs from a table: one [N, 1] array per feature column."""
    missing = set(meta["missing_text"])
    index = {name: j for j, name in enumerate(header)}
    feeds: dict[str, np.ndarray] = {}
    for spec in meta["inputs"]:
        name = spec["name"]
        if name not in index:
            raise ScoreError(f"'{path}' lacks the feature column '{name}'")
        j = index[name]
        cells = [row[j] if j < len(row) else "" for row in rows]
        if spec["type"] == "string":
            cats = set(spec["categories"])
            feeds[name] = np.array([text(c, missing, cats) for c in cells], dtype=object)[:, None]
        else:
            values = [
                number(c, missing, f"'{path}': column '{name}' of data row {i + 1}")
                for i, c in enumerate(cells)
            ]
            with np.errstate(over="ignore"):  # beyond float32: infinite, as fedad reads it
                feeds[name] = np.array(values, dtype=np.float64).astype(np.float32)[:, None]
    return feeds


def client_of(meta: dict[str, Any], value: str) -> int:
    """The client id ``--client value`` (or a client column's cell) names."""
    for c in meta["clients"]:
        if c.get("name") == value or str(c["id"]) == value:
            return int(c["id"])
    known = ", ".join(str(c.get("name", c["id"])) for c in meta["clients"])
    raise ScoreError(f"client {value!r} is not one of the exported clients ({known})")


def score(folder: Path, data: Path, client: str | None = None, id_column: str | None = None) -> str:
    """`id,client,score,anomaly` rows of ``data`` scored by the export in ``folder``."""
    meta = load_export(folder)
    if data.suffix.lower() == ".npy":
        x = np.load(data, allow_pickle=False).astype(np.float32)
        name = meta["inputs"][0]["name"]
        feeds, ids = {name: x}, [str(i) for i in range(len(x))]
        per_row = [client_of(meta, client) if client else meta["clients"][0]["id"]] * len(x)
    else:
        header, rows = read_rows(data)
        feeds = table_feeds(meta, header, rows, data)
        ids = [str(i) for i in range(len(rows))]
        if id_column is not None:
            if id_column not in header:
                raise ScoreError(f"'{data}' has no column '{id_column}'")
            ids = [row[header.index(id_column)] for row in rows]
        col = meta.get("client_column", "")
        if client is not None:
            per_row = [client_of(meta, client)] * len(rows)
        elif col and col in header:
            per_row = [client_of(meta, row[header.index(col)].strip()) for row in rows]
        else:
            per_row = [int(meta["clients"][0]["id"])] * len(rows)
    return write_scores(meta, folder, feeds, ids, per_row)


def write_scores(
    meta: dict[str, Any],
    folder: Path,
    feeds: dict[str, np.ndarray],
    ids: Sequence[str],
    per_row: Sequence[int],
) -> str:
    """Run each row through its client's model; the CSV text."""
    n = len(ids)
    scores = np.zeros(n, dtype=np.float32)
    flags = np.zeros(n, dtype=np.int64)
    clients = np.asarray(per_row, dtype=np.int64)
    files = {int(c["id"]): c["file"] for c in meta["clients"]}
    names = {int(c["id"]): c.get("name", str(c["id"])) for c in meta["clients"]}
    for file in sorted(set(files[int(k)] for k in set(per_row))):
        rows = np.flatnonzero([files[int(k)] == file for k in clients])
        sess = ort.InferenceSession(str(folder / file), providers=["CPUExecutionProvider"])
        want = {i.name for i in sess.get_inputs()}
        part = {k: v[rows] for k, v in feeds.items() if k in want}
        if "client" in want:
            part["client"] = clients[rows]
        out = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, part), strict=True))
        scores[rows], flags[rows] = out["score"], out["anomaly"]
    buf = io.StringIO(newline="")
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["id", "client", "score", "anomaly"])
    for i, k, s, f in zip(ids, clients, scores, flags, strict=True):
        w.writerow([i, names[int(k)], repr(float(s)), int(f)])
    return buf.getvalue()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("export", type=Path, help="a folder written by fedad export")
    parser.add_argument("data", type=Path, help="a .csv/.tsv table or a .npy of images")
    parser.add_argument("--client", help="the client whose model scores every row")
    parser.add_argument("--id-column", help="table column giving each row's id")
    parser.add_argument("--out", type=Path, help="write the CSV here (default: stdout)")
    args = parser.parse_args(argv)
    try:
        text_out = score(args.export, args.data, args.client, args.id_column)
    except (ScoreError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.out is None:
        sys.stdout.write(text_out)
    else:
        args.out.write_text(text_out, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
