"""The GPU checks of FedDyMem and ProtoFL (and FGAD's 200 rounds) in one call of a lent GPU
machine, within a budget.

    python3 benchmarks/device_checks.py OUT_DIR [--budget 420] [--only RUN ...] [--smoke]

Every part is one ``fedad run`` process per method (one torch thread each), all started
at once on the one GPU, so the seconds of one method include its neighbours' load:

* ``textures``: ``benchmarks/feddymem.py``'s ``eval4`` rows
  (``fedavg`` with the autoencoder and the PatchCore-style detector, ``feddymem``) on its
  federation, seed 0, 20 rounds, pooled AUROC every 5 rounds: what the textures benchmark
  costs on a GPU (the same seed on the 2-core CPU: ``results/feddymem_eval4.json``).
* ``stride4``: the ``stride4`` suite's four rows, dev seed 100, 10 rounds
  (the PatchCore-style detector at stride 4 never finished on the CPU).
* ``protofl``: ``configs/protofl_fashion_ovr.toml``'s federation, seed 0,
  with the paper's optimiser (RAdam at ``lr = 1e-6``) on the ``efficientnet`` trunk for
  as many rounds as fit (at most the paper's 900): a three-round calibration of that row
  gives the seconds per round first. Beside it, each calibrated the same way: ``protofl``
  with its defaults, ``fedavg`` + ``deepsvdd``; and, one round each (they do not train),
  the same trunk untrained (``lr = 1e-9``) and ``local`` + ``pretrained``.
* ``fgad``: ``benchmarks/fgad_gpu.py`` with the same budget, in ``OUT_DIR/fgad``.

``fedad run`` writes a run's files when it ends, so a process stopped at the budget leaves
its log only. Finished runs' ``metrics.json``, ``history.csv`` and ``config.toml``, the
logs and the configs are packed into ``OUT_DIR/results.tgz``; the machine, the rounds
chosen and every exit status are in ``OUT_DIR/machine.txt``. ``--smoke``: 2 rounds, small
data, on the CPU, to check the script before a device is lent. ``--only``: just the runs
of these names (e.g. ``protofl-protofl``, ``stride4-fedavg-patchcore-s4``; no FGAD).
``OUT_DIR --summarise``:
the finished runs of an unpacked ``results.tgz`` (``OUT_DIR``) as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import feddymem  # noqa: E402
from fadngs_gpu import worker_env  # noqa: E402
from suites import Method, method_lines  # noqa: E402

PROTOFL_PAPER = {"trunk": "efficientnet", "optimizer": "radam", "lr": 1e-6}
UNTRAINED = {"trunk": "efficientnet", "lr": 1e-9}
PROTOFL_ROWS: list[tuple[Method, bool]] = [
    (("protofl-efficientnet-radam", "protofl", PROTOFL_PAPER, None), True),
    (("protofl", "protofl", {}, None), True),
    (("fedavg-deepsvdd", "fedavg", {}, "deepsvdd"), True),
    (("protofl-efficientnet-untrained", "protofl", UNTRAINED, None), False),
    (("local-pretrained", "local", {}, "pretrained"), False),
]  # fmt: skip
"""(row, runs the chosen rounds: False = one round, it does not train)."""


def _textures(row: Method, seed: int, rounds: int, device: str, smoke: bool) -> str:
    head = [
        f"seed = {seed}", f"rounds = {rounds}", "[data]", 'name = "textures"',
        *(["size = 64"] if smoke else []),
        "[partition]", 'scheme = "dirichlet"', "clients = 5", "alpha = 0.1",
        'local_test = "own"', "[engine]", f'device = "{device}"', "progress = false",
        f"eval_every = {0 if smoke else 5}",
    ]  # fmt: skip
    return "\n".join(head + method_lines([row], None, "device")) + "\n"


def _protofl(row: Method, rounds: int, device: str, smoke: bool) -> str:
    raw = tomllib.loads((ROOT / "configs/protofl_fashion_ovr.toml").read_text(encoding="utf-8"))
    data = raw["data"]
    head = [
        "seed = 0", f"rounds = {rounds}", "[data]", f'name = "{data["name"]}"',
        f"normal = {data['normal']}",
        f"max_train_per_client = {30 if smoke else data['max_train_per_client']}",
        f"max_test = {200 if smoke else data['max_test']}",
        "[partition]", 'scheme = "one-vs-rest"', "clients = 10",
        "[engine]", f'device = "{device}"', "progress = false",
    ]  # fmt: skip
    return "\n".join(head + method_lines([row], None, "device")) + "\n"


class Runs:
    """``fedad run`` processes in ``work``, one per config, stopped at ``deadline``;
    ``only``: start just the runs of these names."""

    def __init__(self, work: Path, deadline: float, only: list[str] | None = None) -> None:
        self.work, self.deadline, self.only = work, deadline, only
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def wanted(self, name: str) -> bool:
        return self.only is None or name in self.only

    def start(self, name: str, text: str, force: bool = False) -> subprocess.Popen[bytes] | None:
        if not (force or self.wanted(name)):
            return None
        cfg = self.work / f"{name}.toml"
        cfg.write_text(text, encoding="utf-8")
        log = open(self.work / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        cmd = [sys.executable, "-m", "fedad.cli", "run", str(cfg), "--out", str(self.work / name)]
        proc = subprocess.Popen(
            [*cmd, "--force"], cwd=ROOT, env=worker_env(), stdout=log, stderr=subprocess.STDOUT
        )
        self.procs[name] = proc
        return proc

    def wait(self, proc: subprocess.Popen[bytes] | None) -> int | None:
        if proc is None:
            return None
        try:
            return proc.wait(timeout=max(self.deadline - time.time(), 1))
        except subprocess.TimeoutExpired:
            return None

    def stop_all(self) -> dict[str, int | None]:
        for p in self.procs.values():
            self.wait(p)
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        time.sleep(3)
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
        return {name: p.poll() for name, p in self.procs.items()}


def _per_round(run: Path) -> tuple[float, float]:
    """The seconds of rounds 0 (the prototypes) and 1 (the trunk's first pass over the
    augmented views) together, and the most of any later round, from a finished run's
    ``history.csv``."""
    lines = (run / "history.csv").read_text(encoding="utf-8").splitlines()
    col = lines[0].split(",").index("seconds")
    secs = [float(r.split(",")[col]) for r in lines[1:] if r.split(",")[col]]
    return sum(secs[:2]), max(secs[2:] or secs)


def summarise(work: Path) -> dict[str, dict[str, Any]]:
    """Per finished run in ``work`` (an unpacked ``results.tgz``): its rounds, pooled and
    client-mean image AUROC, pixel AUROC, PRO, bytes up per client and round, seconds and
    pooled AUROC at the logged rounds (``eval_auroc``)."""
    rows: dict[str, dict[str, Any]] = {}
    for f in sorted(work.glob("*/metrics.json")):
        m = next(iter(json.loads(f.read_text(encoding="utf-8"))["methods"].values()))
        keys = ("rounds", "auroc", "pixel_auroc", "pro", "bytes_up_per_client_round", "seconds")
        row = {k: m.get(k) for k in keys}
        per = [c["auroc"] for c in m.get("per_client") or [] if c.get("auroc") is not None]
        row["client_auroc"] = sum(per) / len(per) if per else None
        hist = (f.parent / "history.csv").read_text(encoding="utf-8").splitlines()
        head = hist[0].split(",")
        if "eval_auroc" in head:
            i, r = head.index("eval_auroc"), head.index("round")
            cells = [line.split(",") for line in hist[1:]]
            row["eval_auroc"] = {c[r]: float(c[i]) for c in cells if c[i]}
        rows[f.parent.name] = row
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--summarise", action="store_true", help="print OUT's finished runs")
    ap.add_argument("--budget", type=float, default=420.0, help="seconds for everything")
    ap.add_argument("--smoke", action="store_true", help="2 rounds, small data, CPU")
    ap.add_argument("--only", nargs="+", default=None, help="just these runs (no fgad)")
    args = ap.parse_args()
    if args.summarise:
        print(json.dumps(summarise(args.out), indent=1))
        return
    device = "cpu" if args.smoke else "cuda"
    t0 = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.out / "work"
    work.mkdir(exist_ok=True)
    runs = Runs(work, t0 + args.budget, args.only)
    smoke = ["--smoke"] if args.smoke else []
    fgad_cmd = [sys.executable, "benchmarks/fgad_gpu.py", str(args.out / "fgad"),
                "--budget", str(args.budget - 40), *smoke]  # fmt: skip
    fgad = None
    if args.only is None:
        fgad = subprocess.Popen(fgad_cmd, cwd=ROOT, env=worker_env(), stdout=subprocess.DEVNULL)
    tex_rounds, s4_rounds = (2, 2) if args.smoke else (20, 10)
    for row in feddymem.EVAL4:
        runs.start(f"textures-{row[0]}", _textures(row, 0, tex_rounds, device, args.smoke))
    for row in feddymem.STRIDE4:
        runs.start(f"stride4-{row[0]}", _textures(row, 100, s4_rounds, device, args.smoke))
    trained = [row for row, trains in PROTOFL_ROWS if trains and runs.wanted(f"protofl-{row[0]}")]
    calib = {row[0]: runs.start(f"calibrate-{row[0]}", _protofl(row, 3, device, args.smoke),
                                force=True)
             for row in trained}  # fmt: skip
    info: dict[str, Any] = {"budget": args.budget, "only": args.only}
    for row, trains in PROTOFL_ROWS:
        if not runs.wanted(f"protofl-{row[0]}"):
            continue
        try:
            rounds = 1
            if trains:
                runs.wait(calib[row[0]])
                first, per_round = _per_round(work / f"calibrate-{row[0]}")
                left = t0 + args.budget - time.time() - first - 45  # heads, evaluation
                rounds = 2 if args.smoke else int(min(900, max(3, left // (1.2 * per_round))))
                info[row[0]] = {"first": first, "per_round": per_round, "rounds": rounds}
            runs.start(f"protofl-{row[0]}", _protofl(row, rounds, device, args.smoke))
        except (OSError, ValueError, IndexError) as err:  # the other rows still run
            info[row[0]] = repr(err)
    status = runs.stop_all()
    if fgad is not None:
        try:
            fgad.wait(timeout=60)
        except subprocess.TimeoutExpired:
            fgad.kill()
    gpu = "cpu (smoke)\n"
    if not args.smoke:
        gpu = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
    info.update(wall=round(time.time() - t0, 1), status=status, cpus=os.cpu_count())
    (args.out / "machine.txt").write_text(gpu + json.dumps(info, indent=1) + "\n", "utf-8")
    with tarfile.open(args.out / "results.tgz", "w:gz") as tar:
        tar.add(args.out / "machine.txt", arcname="machine.txt")
        for p in sorted(work.rglob("*")):
            keep = p.suffix in (".log", ".toml") or p.name in ("metrics.json", "history.csv")
            if p.is_file() and keep and p.stat().st_size < 4_000_000:
                tar.add(p, arcname=str(p.relative_to(work)))
    print((args.out / "machine.txt").read_text(encoding="utf-8"), end="")


if __name__ == "__main__":
    main()
