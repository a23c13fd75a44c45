"""``benchmarks/fadngs.py``'s ``hard`` and ``screen`` suites at once on a many-core machine.

    python3 benchmarks/fadngs_screen.py OUT_DIR [--budget 420] [--device cuda] [--smoke]

Splits each suite's rows (:data:`fadngs.SCREEN`) into groups of two and starts one
``benchmarks/fadngs.py --suite S --first-seed 100 --seeds 3 --jobs 3 --only ...`` per group
and suite, all at once (one process per seed, one torch thread each, sharing the machine and
its GPU: the seconds are loose, the AUROCs are what this is for). At the budget whatever
still runs is stopped; every group's finished seeds are summarised (``--summarise-only``)
and merged into ``OUT_DIR/screen.json`` (suite, then row), and the logs are packed into
``OUT_DIR/logs.tgz``. ``--smoke``: 2 rounds, 20 images per client, one seed, on the CPU,
to check the script before a device is lent.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from fadngs import SCREEN  # noqa: E402
from fadngs_gpu import worker_env  # noqa: E402

WORK = Path("/tmp/fadngs-screen")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--budget", type=float, default=420.0, help="seconds for all runs")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    start = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    labels = [r[0] for r in SCREEN]
    groups = [labels[i : i + 2] for i in range(0, len(labels), 2)]
    extra = ["--rounds", "2", "--per-client", "20", "--seeds", "1"] if args.smoke else []
    device = "cpu" if args.smoke else args.device
    jobs: list[tuple[list[str], subprocess.Popen[bytes]]] = []
    for suite in ("hard", "screen"):
        for k, group in enumerate(groups):
            cmd = [
                str(ROOT / "benchmarks" / "fadngs.py"), "--suite", suite, "--first-seed", "100",
                "--seeds", "3", "--jobs", "3", "--device", device, "--tag", f"g{k}",
                "--work", str(WORK / f"{suite}_g{k}"), "--only", *group, *extra,
            ]  # fmt: skip
            log = open(WORK / f"{suite}_g{k}.log", "wb")  # noqa: SIM115 - closed with the process
            proc = subprocess.Popen(
                [sys.executable, *cmd], cwd=ROOT, env=worker_env(), stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
            jobs.append((cmd, proc))
    for _, proc in jobs:
        left = start + args.budget - time.time()
        try:
            proc.wait(timeout=max(left, 1.0))
        except subprocess.TimeoutExpired:
            proc.kill()
    for cmd, proc in jobs:
        proc.kill()
        proc.wait()
        summary = [sys.executable, *cmd, "--summarise-only"]
        subprocess.run(summary, cwd=ROOT, env=worker_env(), capture_output=True, check=False)
    merged: dict[str, dict[str, object]] = {}
    for path in sorted((ROOT / "benchmarks" / "results").glob("fadngs_*_shared_only_g*.json")):
        result = json.loads(path.read_text())
        merged.setdefault(result["suite"], {}).update(result["methods"])
    (args.out / "screen.json").write_text(json.dumps(merged, indent=1) + "\n")
    with tarfile.open(args.out / "logs.tgz", "w:gz") as tar:
        for path in WORK.glob("*.log"):
            tar.add(path, arcname=path.name)
    print(f"wall {time.time() - start:.0f} s; exit codes {[p.returncode for _, p in jobs]}")


if __name__ == "__main__":
    main()
