"""``fedad score RUN DATA --method LABEL``: score new data with a trained detector."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fedad.cli.options import MethodLabel, RunDir, errors, fail, shown, write_file, write_stdout
from fedad.core.errors import FedadError
from fedad.printable import printable


def score(
    run_dir: RunDir,
    data: Annotated[Path, typer.Argument(help="a .csv/.tsv/.parquet file or an image folder")],
    method: MethodLabel,
    client: Annotated[
        str | None,
        typer.Option(help="the client whose detector scores (number or natural id value)"),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="write the CSV here (default: stdout)")
    ] = None,
    id_column: Annotated[
        str | None, typer.Option("--id-column", help="table column giving each row's id")
    ] = None,
    skip_bad_files: Annotated[
        bool, typer.Option("--skip-bad-files", help="skip unreadable images, and count them")
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="replace the file at --out")] = False,
) -> None:
    """Score new data with a trained detector, preprocessed as in training."""
    from fedad.rundir.files import refuse_inside_run, target_path
    from fedad.rundir.score import score_data, scores_csv

    try:
        if out is not None:
            out = target_path(out)
            refuse_inside_run(out)
            if out.is_dir():
                raise FedadError(f"--out '{out}' is a folder", "give the path of a CSV file")
            if (out.exists() or out.is_symlink()) and not force:
                raise FedadError(f"'{out}' exists", "choose another --out, or add --force")
        scored = score_data(run_dir, data, method, client, id_column, skip_bad_files)
        text = scores_csv(scored)
        if out is not None:
            write_file(out, text)
        else:  # ids and client names are the data's and the run's: no control code to a tty
            write_stdout(printable(text, keep="\n") if _to_terminal() else text)
    except (FedadError, OSError) as err:
        fail(err)
    n, k = len(scored.ids), int(scored.flags.sum())
    where = f" to {out}" if out is not None else ""
    errors.print(
        f"scored {n} inputs with '{shown(method)}'{shown(where)}: {k} flagged as anomalies"
    )


def _to_terminal() -> bool:
    import sys

    return sys.stdout is not None and sys.stdout.isatty()
