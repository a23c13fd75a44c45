"""glibc's allocator thresholds: what fedad's default does, side by side.

With glibc's defaults every block over 128 KiB is mapped afresh from the kernel and given
back when freed (the threshold rises only as such blocks are freed), so a convolution
network's activation maps, tens of megabytes a batch, are zeroed page by page on each
batch. How much a run pays then depends on what ran before it in the process: on a
one-vs-rest Fashion-MNIST federation the no-training reference (``local`` + ``pretrained``)
took 100.7 s as the first method of a run and 67.6 s after ``protofl``. This script times
one ``fedad run`` of that federation (10 clients, 300 training and 1,000 test images each,
the development half) with the reference first and ``protofl`` second, alternately with
glibc's defaults (``FEDAD_KEEP_MALLOC=1``) and fedad's thresholds
(:mod:`fedad.cli.tuning`), and prints each method's median seconds, the ratios, and each
process's peak resident memory.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/malloc_policy.py --repeats 1

Run it on a quiet machine: it measures wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CONFIG = """
seed = 100
rounds = 8
[data]
name = "fashion_mnist"
normal = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
part = "dev"
max_train_per_client = 300
max_test = 1000
[partition]
scheme = "one-vs-rest"
clients = 10
[engine]
progress = false
[[methods]]
name = "local"
detector = "pretrained"
label = "local-pretrained"
[[methods]]
name = "protofl"
"""


def run_once(workdir: Path, keep: bool, i: int) -> dict[str, float]:
    """One run; each method's seconds and the process's peak memory (MB)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.pop("FEDAD_KEEP_MALLOC", None)
    if keep:
        env["FEDAD_KEEP_MALLOC"] = "1"
    cfg = workdir / "malloc.toml"
    cfg.write_text(CONFIG)
    out = workdir / f"run-{keep}-{i}"
    cmd = [sys.executable, "-m", "fedad.cli", "run", str(cfg), "--out", str(out), "-q", "--force"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"fedad run exited {proc.returncode}")
    methods = json.loads((out / "metrics.json").read_text())["methods"]
    row = {name: float(m["seconds"]) for name, m in methods.items()}
    return row | {"peak MB": usage.ru_maxrss / 1024}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    rows: dict[str, list[dict[str, float]]] = {"glibc defaults": [], "fedad": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):  # alternate, so that a drift of the machine hits both
            rows["glibc defaults"].append(run_once(Path(tmp), True, i))
            rows["fedad"].append(run_once(Path(tmp), False, i))
    med = {c: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for c, rs in rows.items()}
    for cond, vals in med.items():
        print(f"{cond:15s} " + "  ".join(f"{k} {v:7.1f}" for k, v in vals.items()))
    for key in med["fedad"]:
        ratio = med["fedad"][key] / med["glibc defaults"][key]
        print(f"{key:17s} fedad / glibc defaults: {ratio:.2f}x")
    ref, pf = med["fedad"]["local-pretrained"], med["fedad"]["protofl"]
    print(f"protofl / local-pretrained with fedad's thresholds: {pf / ref:.2f}x")


if __name__ == "__main__":
    main()
