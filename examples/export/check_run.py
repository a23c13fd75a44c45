"""Export every method of a finished run and check the exports on the run's own test data.

    python examples/export/check_run.py RUN OUT [--method LABEL ...]

For each method: ``fedad export RUN --method LABEL --out OUT/LABEL``; then the run's data
are scored by ``score_onnx.py`` in a separate process that has neither fedad nor torch
(it checks), and compared with fedad's scores:

* a run on images: each client's test images, rebuilt from the run's resolved config.toml
  (the federation is deterministic), saved as ``OUT/test-<i>.npy``; fedad's scores are the
  ones the run itself wrote (``scores.npz``) and the detector's now;
* a run on a table: every row of the run's table file (its test rows and the rest), each
  scored by its own site's model, against ``fedad score`` on the same file.

Prints one line per method: rows, the largest relative difference (relative to the larger
of the score's and the threshold's magnitude, or the score's scale where model.json gives
one) and how many decisions differ. Exit status 1 when one is over 1e-5 or differs.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

import fedad
from fedad.config import load_config
from fedad.export import export_run
from fedad.federation import build_federation
from fedad.rundir.score import score_data

HERE = Path(__file__).resolve().parent
ALONE = """
import runpy, sys
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as done:
    code = done.code
else:
    code = 0
bad = sorted(m for m in ("fedad", "torch") if m in sys.modules)
assert not bad, f"imported {bad}"
sys.exit(code)
"""
TOLERANCE = 1e-5


def onnx_scores(folder: Path, data: Path, client: str | None = None) -> list[dict[str, str]]:
    """``score_onnx.py``'s rows, run where fedad and torch are not imported."""
    args = [sys.executable, "-c", ALONE, str(HERE / "score_onnx.py"), str(folder), str(data)]
    if client is not None:
        args += ["--client", client]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"score_onnx.py failed: {done.stderr.strip()}")
    return list(csv.DictReader(done.stdout.splitlines()))


def compare(got: np.ndarray, want: np.ndarray, thr: np.ndarray, scale: float) -> float:
    den = np.maximum(np.maximum(np.abs(want), np.abs(thr)), max(scale, 1e-30))
    return float(np.max(np.abs(got - want) / den)) if len(want) else 0.0


def check_images(run_dir: Path, folder: Path, label: str, out: Path) -> tuple[int, float, int]:
    run = fedad.load(str(run_dir))
    fed = build_federation(load_config(run_dir / "config.toml"))
    meta = json.loads((folder / "model.json").read_text())
    scale = max(m["check"].get("scale", 0.0) for m in meta["models"])
    stored = np.load(run_dir / "scores.npz")
    s_all, c_all = stored[f"{label}/score"], stored[f"{label}/client"]
    rows, worst, differ = 0, 0.0, 0
    for c in fed.clients:
        x = np.ascontiguousarray(c.x_test, dtype=np.float32)
        path = out / f"test-{c.client_id}.npy"
        np.save(path, x)
        got_rows = onnx_scores(folder, path, str(c.client_id))
        got = np.array([float(r["score"]) for r in got_rows])
        flags = np.array([int(r["anomaly"]) for r in got_rows])
        det = run.detector(label, c.client_id)
        now = np.asarray(det.score(x), dtype=np.float64)
        ran = s_all[c_all == c.client_id]
        thr = np.full(len(x), det.threshold_)
        if not np.allclose(ran, now, rtol=1e-6, atol=0):
            print(f"  note: client {c.client_id}: the run's stored scores differ from the "
                  f"detector's now by {compare(now, ran, thr, scale):.2g}")  # fmt: skip
        worst = max(worst, compare(got, now, thr, scale), compare(got, ran, thr, scale))
        differ += int(np.sum(flags != (~(now <= det.threshold_)).astype(int)))
        rows += len(x)
    return rows, worst, differ


def check_table(run_dir: Path, folder: Path, label: str) -> tuple[int, float, int]:
    cfg = load_config(run_dir / "config.toml")
    table = Path(str(cfg.data.path))
    meta = json.loads((folder / "model.json").read_text())
    scale = max(m["check"].get("scale", 0.0) for m in meta["models"])
    thresholds = {c.get("name", str(c["id"])): c["threshold"] for c in meta["clients"]}
    theirs = score_data(run_dir, table, label)
    ours = onnx_scores(folder, table)
    got = np.array([float(r["score"]) for r in ours])
    flags = np.array([int(r["anomaly"]) for r in ours])
    names = [r["client"] for r in ours]
    thr = np.array([thresholds[n] for n in names])
    return len(got), compare(got, theirs.scores, thr, scale), int(np.sum(flags != theirs.flags))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--method", "-m", action="append", help="only these labels")
    args = parser.parse_args()
    run = fedad.load(str(args.run))
    labels = args.method or list(run.detectors)
    args.out.mkdir(parents=True, exist_ok=True)
    failed = False
    for label in labels:
        folder = args.out / label
        export_run(args.run, label, folder, force=True)
        if run.inputs is not None and run.inputs.kind == "image":
            n, worst, differ = check_images(args.run, folder, label, args.out)
        else:
            n, worst, differ = check_table(args.run, folder, label)
        ok = worst <= TOLERANCE and differ == 0
        failed |= not ok
        print(f"{label}: {n} rows, largest relative difference {worst:.2g}, "
              f"{differ} decisions differ{'' if ok else '  <-- FAILS'}")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
