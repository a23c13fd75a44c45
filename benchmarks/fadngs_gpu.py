"""FADngs's GPU checks in one call of a lent GPU machine, within a budget.

    python3 benchmarks/fadngs_gpu.py OUT_DIR [--budget 480]

Runs at once, each part in its own processes, all sharing the one GPU:

* ``table1``: ``benchmarks/fadngs.py --suite table1 --seeds 5 --jobs 5 --device cuda``
  (Table I analog, all twelve rows, seeds 0-4);
* ``evens``: ``benchmarks/fadngs.py --suite evens --seeds 5 --jobs 5 --device cuda``;
* ``scale``: ``configs/fadngs_fmnist_gpu.toml``, one process per method. Its number of
  rounds is chosen here first: three rounds of ``fadngs`` alone give the seconds per round,
  and the run gets as many rounds (at most the config's) as fit the time left (the
  warm-up a fifth of them); what ran is in each run's ``config.toml``.

Each part is stopped at the budget; every finished method's results are kept
(``.fedad/done`` of each seed, ``metrics.json`` and ``history.csv`` of finished runs) and
packed with the logs into ``OUT_DIR/results.tgz``, with the machine's description in
``OUT_DIR/machine.txt``. Nothing here is specific to the machine but ``--device cuda``.
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

ROOT = Path(__file__).resolve().parent.parent
WORK = Path("/tmp/fadngs-gpu")


def worker_env() -> dict[str, str]:
    """The environment of a benchmark's child process: ``src`` and ``benchmarks`` on the
    path, one torch/BLAS thread, unbuffered output, matplotlib without a display."""
    env = dict(os.environ)
    paths = [str(ROOT / "src"), str(ROOT / "benchmarks"), env.get("PYTHONPATH", "")]
    env.update(
        PYTHONPATH=os.pathsep.join(p for p in paths if p),
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
        MPLBACKEND="Agg",
    )
    return env


def _start(name: str, args: list[str]) -> subprocess.Popen[bytes]:
    log = open(WORK / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        [sys.executable, *args], cwd=ROOT, env=worker_env(), stdout=log, stderr=subprocess.STDOUT
    )


def _method_config(base: dict[str, object], index: int, rounds: int) -> str:
    """``base`` with only its method ``index``, ``rounds`` rounds, warm-up a fifth of them."""
    import tomli_w

    cfg = json.loads(json.dumps(base))
    method = cfg["methods"][index]
    params = method.setdefault("params", {})
    if "warmup_rounds" in params:
        params["warmup_rounds"] = max(1, rounds // 5)
    cfg["methods"] = [method]
    cfg["rounds"] = rounds
    cfg.setdefault("engine", {})["progress"] = False
    return tomli_w.dumps(cfg)


def _per_round(base: dict[str, object], deadline: float) -> float:
    """Seconds per round of the config's first method (fadngs), from a three-round run."""
    path = WORK / "calibrate.toml"
    path.write_text(_method_config(base, 0, 3))
    out = WORK / "calibrate"
    proc = _start("calibrate", ["-m", "fedad.cli", "run", str(path), "--out", str(out), "--force"])
    proc.wait(timeout=max(deadline - time.time(), 1))
    rows = (out / "history.csv").read_text().splitlines()[1:]
    header = (out / "history.csv").read_text().splitlines()[0].split(",")
    col = header.index("seconds")
    secs = [float(r.split(",")[col]) for r in rows if r.split(",")[col]]
    return max(secs[1:] or secs)  # a CRAD round (the first is the warm-up)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--budget", type=float, default=480.0, help="seconds for everything")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: check the pipeline")
    args = ap.parse_args()
    small = ["--seeds", "1", "--rounds", "2", "--per-client", "20"] if args.smoke else []
    t0 = time.time()
    deadline = t0 + args.budget
    WORK.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    (args.out / "machine.txt").write_text(
        f"{gpu}\npython {sys.version.split()[0]}, torch {torch.__version__}, "
        f"{os.cpu_count()} CPU cores\n"
    )
    suites = {
        name: _start(
            name,
            [
                "benchmarks/fadngs.py",
                "--suite",
                name,
                "--seeds",
                "5",
                "--jobs",
                "5",
                "--device",
                args.device,
                "--work",
                str(WORK / name),
                *small,
            ],
        )
        for name in ("table1", "evens")
    }
    base = tomllib.loads((ROOT / "configs/fadngs_fmnist_gpu.toml").read_text())
    if args.smoke:
        base["data"]["max_train_per_client"] = 30  # type: ignore[index]
        base["data"]["max_test"] = 200  # type: ignore[index]
    scale: dict[str, subprocess.Popen[bytes]] = {}
    try:
        per_round = _per_round(base, deadline)
        left = deadline - time.time() - 60  # the final density phase, evaluation, margin
        rounds = int(min(base["rounds"], max(5, left // (1.3 * per_round))))  # type: ignore[call-overload]
        (WORK / "scale.json").write_text(json.dumps({"per_round": per_round, "rounds": rounds}))
        for i, m in enumerate(base["methods"]):  # type: ignore[arg-type]
            label = m.get("label", m["name"])
            path = WORK / f"scale-{label}.toml"
            path.write_text(_method_config(base, i, rounds))
            scale[label] = _start(
                f"scale-{label}",
                [
                    "-m",
                    "fedad.cli",
                    "run",
                    str(path),
                    "--out",
                    str(WORK / f"scale-{label}"),
                    "--force",
                ],
            )
    except Exception as err:  # the suites still run; say why in the log
        (WORK / "scale-error.txt").write_text(repr(err))
    for proc in [*suites.values(), *scale.values()]:
        try:
            proc.wait(timeout=max(deadline - time.time(), 1))
        except subprocess.TimeoutExpired:
            proc.terminate()
    time.sleep(3)
    for proc in [*suites.values(), *scale.values()]:
        if proc.poll() is None:
            proc.kill()
    for name in suites:  # summaries of what finished (a cut run leaves its done files)
        cmd = [
            "benchmarks/fadngs.py",
            "--suite",
            name,
            "--seeds",
            "5",
            "--work",
            str(WORK / name),
            "--summarise-only",
            *small,
        ]
        with open(WORK / f"{name}-summary.log", "wb") as log:
            subprocess.run(
                [sys.executable, *cmd],
                cwd=ROOT,
                env=worker_env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=60,
                check=False,
            )
    keep = (".json", ".csv", ".toml", ".log", ".txt")
    with tarfile.open(args.out / "results.tgz", "w:gz") as tar:
        for p in sorted(WORK.rglob("*")):
            if p.is_file() and p.suffix in keep and p.stat().st_size < 4_000_000:
                tar.add(p, arcname=str(p.relative_to(WORK)))
        for p in sorted((ROOT / "benchmarks/results").glob("fadngs_*")):
            tar.add(p, arcname=f"results/{p.name}")
    print(f"done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
