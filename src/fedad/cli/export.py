"""``fedad export RUN --method LABEL``: a method's detectors as ONNX models."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fedad.cli.options import MethodLabel, RunDir, fail, show, shown
from fedad.core.errors import FedadError


def export(
    run_dir: RunDir,
    method: MethodLabel,
    client: Annotated[
        str | None,
        typer.Option(help="only this client's detector (number or natural id value)"),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="a new or empty folder (default: exports/LABEL)"),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="replace a previous export in --out")
    ] = False,
) -> None:
    """Export a method's detectors as ONNX models (client-<i>.onnx or global.onnx, and
    model.json) that score raw inputs with onnxruntime alone, as fedad scores them."""
    from fedad.export import export_run

    target = Path("exports") / method if out is None else out
    try:
        done = export_run(run_dir, method, target, client, force)
    except FedadError as err:
        fail(err)
    models = [f for f in done.files if f.endswith(".onnx")]
    wrote = f"wrote {shown(done.out)}/ ({', '.join(models)}, model.json)"
    show(f"{wrote}: scores checked against fedad's")
