"""OpenMP's wait policy under CPU contention: what fedad's default does, side by side.

torch's OpenMP threads spin after each parallel region (``OMP_WAIT_POLICY`` unset: GNU
OpenMP spins for a while, then sleeps). Beside another busy process they burn the cores
that process needs and are descheduled mid-region, so a run slows far more than its fair
share. This script times one FedAvg autoencoder run (Fashion-MNIST, 10 clients, 5 rounds)
as a whole ``fedad run`` process, alternately with the policy unset (GNU's default) and
``PASSIVE``, first on a quiet machine, then beside a torch process that keeps two threads
busy with matrix products; it prints each condition's median wall time and the ratios.

    .venv/bin/python benchmarks/wait_policy.py --repeats 3

``fedad``'s command line sets ``OMP_WAIT_POLICY=PASSIVE`` unless the variable is set;
``FEDAD_KEEP_OMP=1`` in the environment keeps whatever is there (this script sets the
variable either way, so it measures both policies); docs/runs.md gives its numbers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIG = """
seed = 0
rounds = 5
[data]
name = "fashion_mnist"
normal = [0, 1, 2, 3, 4]
anomaly = [5, 6, 7, 8, 9]
max_train_per_client = 300
max_test = 1000
[partition]
scheme = "dirichlet"
clients = 10
alpha = 0.5
[engine]
progress = false
[[methods]]
name = "fedavg"
detector = "autoencoder"
"""

BUSY = """
import torch
torch.set_num_threads(2)
a = torch.randn(700, 700)
while True:
    a = torch.tanh(a @ a) * 0.01 + torch.randn(700, 700) * 0.001
"""


TABLE = """
seed = 0
[data]
name = "odds_shuttle"
[partition]
scheme = "iid"
clients = 5
[engine]
progress = false
[[methods]]
name = "fedavg"
detector = "autoencoder"
"""
WORKLOADS = {"images": CONFIG, "table": TABLE}
POLICIES: dict[str, dict[str, str]] = {
    "unset": {},
    "PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"},
    "spin 10k": {"GOMP_SPINCOUNT": "10000"},
}


def run_once(workdir: Path, policy: str, i: int, workload: str = "images") -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env["FEDAD_KEEP_OMP"] = "1"
    env.update(POLICIES[policy])
    cfg = workdir / "wait.toml"
    cfg.write_text(WORKLOADS[workload])
    out = workdir / f"run-{policy}-{i}"
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "fedad.cli", "run", str(cfg), "--out", str(out), "-q", "--force"],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - t0


def condition(workdir: Path, repeats: int, workload: str) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {p: [] for p in POLICIES}
    for i in range(repeats):  # alternate, so that a drift of the machine hits each
        for policy in POLICIES:
            times[policy].append(run_once(workdir, policy, i, workload))
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="images")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        quiet = condition(work, args.repeats, args.workload)
        busy = subprocess.Popen([sys.executable, "-c", BUSY])
        try:
            time.sleep(3)
            loaded = condition(work, args.repeats, args.workload)
        finally:
            busy.kill()
            busy.wait()
    med = {f"quiet, {k}": statistics.median(v) for k, v in quiet.items()}
    med |= {f"busy, {k}": statistics.median(v) for k, v in loaded.items()}
    for name, secs in med.items():
        print(f"{name:16s} median {secs:6.1f} s")
    for policy in POLICIES:
        ratio = med[f"busy, {policy}"] / med[f"quiet, {policy}"]
        print(f"{policy:8s} busy / quiet: {ratio:.2f}x")
    for policy in list(POLICIES)[1:]:
        for cond in ("quiet", "busy"):
            ratio = med[f"{cond}, {policy}"] / med[f"{cond}, unset"]
            print(f"{policy} / unset, {cond}: {ratio:.2f}x")


if __name__ == "__main__":
    main()
