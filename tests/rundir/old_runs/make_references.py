"""Write the inputs and reference scores of tests/rundir/test_old_runs.py.

Run once, by the fedad that wrote the run directories (see the test module's docstring),
from the folder holding ``tables/`` and ``images/``:

    python make_references.py

Writes ``inputs/`` (the rows and images scored) and ``references/`` (what that fedad gave).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image
from sklearn.datasets import load_digits

import fedad

HERE = Path(".")
INPUTS = HERE / "inputs"
REFS = HERE / "references"
VENDORS = ["ge", "philips", "siemens"]


def table_rows() -> pd.DataFrame:
    """The 40 held-out rows of examples/own-data plus 10 rows made from their first ten:
    every feature times 1.5, and a scanner the run never saw (encoded as all zeros)."""
    new = pd.read_csv(HERE / "data" / "new_rows.csv")
    odd = new.iloc[:10].copy()
    numeric = odd.columns.difference(["site", "scanner"])
    odd[numeric] = odd[numeric] * 1.5
    odd["scanner"] = "canon"
    rows = pd.concat([new, odd], ignore_index=True)
    rows.insert(0, "id", [f"row-{i:02d}" for i in range(len(rows))])
    return rows


def digit_images() -> tuple[np.ndarray, list[str]]:
    """Twelve of scikit-learn's digits (the last two of each of 0, 1, 2, 7, 8, 9) as 8-bit
    grey images (``round(v * 255 / 16)``), and their file names."""
    d = load_digits()
    picked = [int(i) for c in (0, 1, 2, 7, 8, 9) for i in np.flatnonzero(d.target == c)[-2:]]
    pixels = np.rint(d.images[picked] * 255 / 16).astype(np.uint8)
    names = [f"digit{d.target[i]}_{i:04d}.png" for i in picked]
    return pixels, names


def cli_score(run: str, data: Path, label: str, *extra: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "fedad.cli", "score", run, str(data), "--method", label, *extra],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout


def main() -> None:
    (INPUTS / "digits").mkdir(parents=True, exist_ok=True)
    REFS.mkdir(exist_ok=True)
    rows = table_rows()
    rows.to_csv(INPUTS / "rows.csv", index=False)
    pixels, names = digit_images()
    for img, name in zip(pixels, names, strict=True):
        Image.fromarray(img).save(INPUTS / "digits" / name)
    x_images = (pixels.astype(np.float32) / 255.0)[:, None, :, :]
    np.save(INPUTS / "digits.npy", x_images)

    api: dict[str, np.ndarray] = {}
    auroc: dict[str, dict[str, float]] = {}
    for run, data, x in (
        ("tables", INPUTS / "rows.csv", pd.read_csv(INPUTS / "rows.csv")),
        ("images", INPUTS / "digits", x_images),
    ):
        loaded = fedad.load(run)
        auroc[run] = {k: v["auroc"] for k, v in loaded.metrics["methods"].items()}
        for label, clients in loaded.detectors.items():
            extra = ("--id-column", "id") if run == "tables" else ()
            (REFS / f"{run}.{label}.csv").write_text(cli_score(run, data, label, *extra))
            for k in clients:
                det = loaded.detector(label, k)
                api[f"{run}/{label}/{k}/score"] = np.asarray(loaded.score(label, x, k))
                api[f"{run}/{label}/{k}/threshold"] = np.asarray(det.threshold_)
    np.savez(REFS / "api_scores.npz", **api)
    (REFS / "auroc.json").write_text(json.dumps(auroc, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
