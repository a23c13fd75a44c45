"""Flower, for real (slow): simulation with Ray, deployment with three SuperNode processes.

* The same config and seed give the same metrics.json values (within 1e-6, wall-time keys
  aside) in-process, in Flower simulation and in Flower deployment, for FedAvg with the
  autoencoder and for ONLAD with selective aggregation (it keeps client state between
  rounds, in ``context.state``).
* A SuperNode killed mid-run: the run finishes with the other two, the dead node is listed
  as missing and its evaluation is absent. This runs the multi-machine commands
  (``fedad flower superlink | supernode | run``) on 127.0.0.1.
* (A personalised method's detectors stay on SuperNodes started with ``fedad flower
  supernode --models-dir``: tests/fl/flower/test_auth_runs.py, on authenticated nodes.)
* Nothing is left running afterwards.

Each engine runs in a ``fedad`` process of its own, as a user runs it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fedad.runner import TIMING_KEYS

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        __import__("importlib").util.find_spec("flwr") is None,
        reason="flwr (the flower extra) is not installed: pip install 'fedad[flower]'",
    ),
]

ROOT = Path(__file__).resolve().parents[3]

CONFIG = """
seed = 0
rounds = 2

[data]
name = "digits"
normal = [0, 1, 2, 3, 4]
anomaly = [5, 6, 7, 8, 9]
max_test = 300

[partition]
scheme = "dirichlet"
alpha = 1.0
clients = 3
contamination = 0.02

[engine]
progress = false

[[methods]]
name = "fedavg"
label = "fedavg-ae"
detector = "autoencoder"
"""

ONLAD = """
[[methods]]
name = "onlad-selective"
"""

IGNORED = {*TIMING_KEYS, "total_seconds"}


def fedad(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fedad.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def flower_processes(marker: str) -> list[str]:
    """Live processes whose FLWR_HOME or RAY_TMPDIR contains ``marker``."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            env = Path(f"/proc/{d}/environ").read_bytes().split(b"\0")
            stat = Path(f"/proc/{d}/stat").read_text()
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if stat[stat.rfind(")") + 2 :].startswith("Z"):
            continue
        for e in env:
            k, _, v = e.decode(errors="replace").partition("=")
            if k in ("FLWR_HOME", "RAY_TMPDIR") and marker in v:
                found.append(f"{d}: {cmd[:120]}")
                break
    return found


def _none_left(*markers: str) -> None:
    deadline = time.monotonic() + 15
    left = []
    while time.monotonic() < deadline:
        left = [p for m in markers for p in flower_processes(m)]
        if not left:
            return
        time.sleep(0.5)
    pytest.fail(f"processes left behind: {left}")


@pytest.fixture
def no_leftovers(tmp_path: Path) -> Iterator[None]:
    """After the test, no Flower process of this test and no Ray simulation is alive (the
    tests that run a simulation share the xdist group ``ray``, so none runs beside them)."""
    yield
    _none_left(str(tmp_path), "fedad-sim-")


@pytest.fixture
def no_deployment_leftovers(tmp_path: Path) -> Iterator[None]:
    """After the test, no Flower process of this test (its homes are under tmp_path)."""
    yield
    _none_left(str(tmp_path))


def compare(a: Any, b: Any, path: str = "") -> list[str]:
    """Differences between two metrics.json documents (floats within 1e-6)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{path}: keys {sorted(set(a) ^ set(b))}"]
        return [
            d
            for k in a
            if k not in IGNORED and not (path == ".experiment" and k == "engine")
            for d in compare(a[k], b[k], f"{path}.{k}")
        ]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: lengths {len(a)} != {len(b)}"]
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in compare(x, y, f"{path}[{i}]")
        ]
    if isinstance(a, float) and isinstance(b, float | int):
        return [] if abs(a - b) <= 1e-6 else [f"{path}: {a} != {b}"]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


ENGINES = ("inprocess", "flower-simulation", "flower-deployment")


def _same_metrics_on_every_engine(
    config: str, tmp_path: Path, per_message: bool = False, engines: tuple[str, ...] = ENGINES
) -> dict[str, Any]:
    """Run ``config`` on every engine (and, with ``per_message``, on a deployment whose
    SuperNodes start a ClientApp process per message, ``engine.clientapp``) and check that
    metrics.json agrees with the in-process run's."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(config)
    runs = [(e, [f'engine.name="{e}"']) for e in engines]
    if per_message:
        sets = ['engine.name="flower-deployment"', 'engine.clientapp="per-message"']
        runs.append(("flower-deployment-per-message", sets))
    metrics = {}
    for name, sets in runs:
        out = tmp_path / name
        t0 = time.monotonic()
        overrides = [a for s in sets for a in ("--set", s)]
        p = fedad("run", str(cfg), "--out", str(out), "-q", *overrides)
        assert p.returncode == 0, (name, p.stderr[-3000:])
        print(f"{name}: {time.monotonic() - t0:.1f} s")
        metrics[name] = json.loads((out / "metrics.json").read_text())
        assert not (out / ".flower").exists()  # the hand-over directory is cleaned up
    ref = metrics["inprocess"]
    for label, m in ref["methods"].items():
        assert m["events"] == [] and m["missing_nodes"] == [], label
        assert m["bytes_up"] > 0 and m["bytes_down"] > 0
    for name, _ in runs[1:]:
        assert compare(ref, metrics[name]) == [], name
        assert metrics[name]["experiment"]["engine"] == name.removesuffix("-per-message")
    return metrics


@pytest.mark.xdist_group("ray")
def test_same_metrics_inprocess_simulation_deployment(tmp_path: Path, no_leftovers: None) -> None:
    """Deployment with one ClientApp process per SuperNode (the default)."""
    _same_metrics_on_every_engine(CONFIG + ONLAD, tmp_path)


def test_same_metrics_on_a_deployment_with_a_process_per_message(
    tmp_path: Path, no_deployment_leftovers: None
) -> None:
    """Flower's ClientApp process per message: client state (ONLAD's) between messages."""
    _same_metrics_on_every_engine(CONFIG + ONLAD, tmp_path, True, engines=("inprocess",))


@pytest.mark.xdist_group("ray")
def test_secagg_same_metrics_on_every_engine(tmp_path: Path, no_leftovers: None) -> None:
    """Under SecAgg+ (real keys, shares and masks on both Flower engines, the same arithmetic
    without masks in-process) the metrics agree too; history.csv records the protocol's
    own bytes on Flower."""
    config = CONFIG.replace("[engine]", "[privacy]\nsecagg = true\n\n[engine]")
    metrics = _same_metrics_on_every_engine(config, tmp_path)
    assert metrics["inprocess"]["experiment"]["secagg"] is True
    for engine in ENGINES[1:]:
        header, *rows = (tmp_path / engine / "history.csv").read_text().splitlines()
        col = header.split(",").index("secagg_bytes")
        assert all(float(r.split(",")[col]) > 0 for r in rows)


def _wait_rounds(run_dir: Path, n: int, proc: subprocess.Popen[str], timeout: float) -> None:
    """Wait until the ServerApp has written ``n`` history rows under ``run_dir/.flower``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = list(run_dir.glob(".flower/*/results/rounds.jsonl"))
        if rows and len(rows[0].read_text().splitlines()) >= n:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    pytest.fail(f"no round {n} within {timeout} s")


def test_killed_supernode_is_missing_and_the_run_goes_on(
    tmp_path: Path, no_deployment_leftovers: None
) -> None:
    from fedad.fl.flower.deploy.launch import free_port, port_open
    from fedad.fl.flower.deploy.processes import process_tree

    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG.replace("[engine]", "[engine]\ntimeout = 30.0\nmin_clients = 2"))
    port = free_port()
    procs: dict[str, subprocess.Popen[str]] = {}

    def start(name: str, *args: str) -> None:
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "fedad.cli", "flower", *args, "--home", str(tmp_path / name)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )

    try:
        start("superlink", "superlink", "--insecure", "--host", "127.0.0.1", "--port", str(port))
        deadline = time.monotonic() + 60
        while not port_open("127.0.0.1", port):
            assert time.monotonic() < deadline and procs["superlink"].poll() is None
            time.sleep(0.2)
        link = f"127.0.0.1:{port}"
        for i in range(3):
            start(f"node{i}", "supernode", "--superlink", link, "--insecure",
                  "--partition-id", str(i), "--num-partitions", "3", "--port", str(free_port()),
                  "--cache-dir", str(tmp_path / f"cache{i}"),
                  "--models-dir", str(tmp_path / f"models{i}"))  # fmt: skip
        out = tmp_path / "out"
        run = subprocess.Popen(
            [sys.executable, "-m", "fedad.cli", "flower", "run", str(cfg),
             "--superlink", link, "--insecure", "--out", str(out), "-q"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "FLWR_HOME": str(tmp_path / "cli")},
        )  # fmt: skip
        procs["run"] = run
        _wait_rounds(out, 1, run, timeout=180)
        for pid in process_tree([procs["node2"].pid]):  # the node and all its processes die
            os.kill(pid, signal.SIGKILL)
        _, stderr = run.communicate(timeout=300)
        assert run.returncode == 0, stderr[-3000:]
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()

    m = json.loads((out / "metrics.json").read_text())["methods"]["fedavg-ae"]
    assert m["missing_nodes"] == [2]
    assert any("no reply from node(s) [2]" in e for e in m["events"])
    assert any("node 2: no reply to 'train' within 30 s" in e for e in m["events"])
    assert sorted(r["client"] for r in m["per_client"]) == [0, 1]  # no evaluation of node 2
    assert m["rounds"] == 2
    rows = (out / "history.csv").read_text().splitlines()
    header = rows[0].split(",")
    replied = [int(r.split(",")[header.index("clients_replied")]) for r in rows[1:]]
    assert replied == [3, 2]
