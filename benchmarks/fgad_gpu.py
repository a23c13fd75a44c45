"""FGAD's 200-round setting in one call of a lent GPU machine, in a budget.

    python3 benchmarks/fgad_gpu.py OUT_DIR [--budget 270] [--rounds 200] [--smoke]

The multi-dataset setting of ``configs/fgad_plus.toml`` (the four synthetic domains, one per
client, seed 0) at ``--rounds`` rounds (the paper's 200 epochs after pretraining), one
``fedad run`` process per method, all at once on the one device: ``fgad-plus`` and ``fgad``
(default params) and the baselines ``local`` and ``fedavg`` with Deep SVDD. Each process is
stopped at the budget; every finished run's ``metrics.json`` and ``history.csv`` are packed
with the logs and configs into ``OUT_DIR/results.tgz`` (a stopped run leaves its log only:
``fedad run`` writes its files at the end), with the machine and every exit status in
``OUT_DIR/machine.txt``. ``--smoke``: 2 rounds on the CPU, to check the script before a
device is lent (the device is ``cuda`` otherwise). Not yet run on a GPU: whether 200 rounds
fit a few minutes there is not known (on this 2-core CPU a multi round of ``fgad-plus`` is
about 1.5-7 s wall, by load), so a first call may need a smaller ``--rounds``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
METHODS = [
    ("fgad-plus", "fgad-plus", None),
    ("fgad", "fgad", None),
    ("self-train", "local", "deepsvdd"),
    ("fedavg-svdd", "fedavg", "deepsvdd"),
]


def config_text(label: str, name: str, detector: str | None, rounds: int, device: str) -> str:
    """``configs/fgad_plus.toml``'s data and partition with one method, ``rounds`` rounds."""
    raw = tomllib.loads((ROOT / "configs" / "fgad_plus.toml").read_text(encoding="utf-8"))
    data, part = raw["data"], raw["partition"]
    lines = [
        "seed = 0",
        f"rounds = {rounds}",
        "[data]",
        f'name = "{data["name"]}"',
        "sources = [" + ", ".join(f'"{s}"' for s in data["sources"]) + "]",
        f"normal = {data['normal']}",
        f"anomaly = {data['anomaly']}",
        f"test_anomaly_fraction = {data['test_anomaly_fraction']}",
        "[partition]",
        f'scheme = "{part["scheme"]}"',
        f"clients = {part['clients']}",
        "[engine]",
        f'device = "{device}"',
        "progress = false",
        "[[methods]]",
        f'name = "{name}"',
        f'label = "{label}"',
    ]
    if detector:
        lines.append(f'detector = "{detector}"')
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--budget", type=float, default=270.0, help="seconds for the runs")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--smoke", action="store_true", help="2 rounds on the CPU")
    args = ap.parse_args()
    rounds, device = (2, "cpu") if args.smoke else (args.rounds, "cuda")
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.out / "work"
    work.mkdir(exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    for label, name, detector in METHODS:
        cfg = work / f"{label}.toml"
        cfg.write_text(config_text(label, name, detector, rounds, device), encoding="utf-8")
        log = open(work / f"{label}.log", "wb")  # noqa: SIM115 - closed with the process
        procs[label] = subprocess.Popen(
            [sys.executable, "-m", "fedad.cli", "run", str(cfg), "--out", str(work / label)],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    start = time.monotonic()
    while any(p.poll() is None for p in procs.values()):
        if time.monotonic() - start > args.budget:
            for p in procs.values():
                if p.poll() is None:
                    p.terminate()
            break
        time.sleep(2.0)
    for p in procs.values():
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
    status = {lab: p.returncode for lab, p in procs.items()}
    machine = subprocess.run(
        ["nvidia-smi", "-L"], capture_output=True, text=True, check=False
    ).stdout if not args.smoke else "cpu (smoke)\n"  # fmt: skip
    (args.out / "machine.txt").write_text(
        f"{machine}rounds {rounds}, budget {args.budget} s, wall {time.monotonic() - start:.0f} s\n"
        + "".join(f"{lab}: exit {rc}\n" for lab, rc in status.items()),
        encoding="utf-8",
    )
    with tarfile.open(args.out / "results.tgz", "w:gz") as tar:
        tar.add(args.out / "machine.txt", arcname="machine.txt")
        for label, *_ in METHODS:
            for path in [work / f"{label}.log", work / f"{label}.toml"] + [
                work / label / f for f in ("metrics.json", "history.csv", "config.toml")
            ]:
                if path.is_file():
                    tar.add(path, arcname=str(path.relative_to(work)))
    print((args.out / "machine.txt").read_text(encoding="utf-8"), end="")


if __name__ == "__main__":
    main()
