"""Only the sites you name join (slow): a real SuperLink with TLS and SuperNode
authentication, real SuperNodes, on 127.0.0.1, all through ``fedad flower ...``.

One SuperLink serves the module (``fedad flower superlink --enable-supernode-auth`` with a
certificate signed by a test CA); sites A, B and D are registered (what ``fedad flower
register`` does) and hold partitions 0, 1 and 1 again; C's key is not registered, N has none.

* D's claim on B's partition makes the run stop before round 1, in one line naming both
  Flower nodes (exit status 2); nothing is trained.
* C and N stop at start in one line (exit status 2); the SuperLink lists only A, B and D as
  its nodes, so neither could receive a task.
* With D stopped, a run trains on A and B: FedAvg's metrics.json equals the in-process
  run's, and a personalised method's detectors stay on their nodes (``--models-dir``).

The tests share the SuperLink and run in this order (about 90 s together on two busy cores).
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.fl.flower.test_runs import CONFIG, ROOT, compare, flower_processes

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("auth"),  # one federation for the module's tests, in order
    pytest.mark.skipif(
        __import__("importlib").util.find_spec("flwr") is None,
        reason="flwr (the flower extra) is not installed: pip install 'fedad[flower]'",
    ),
]

TWO_SITES = (
    CONFIG.replace("clients = 3", "clients = 2")
    .replace("rounds = 2", "rounds = 1")
    .replace("[engine]", "[engine]\ntimeout = 60.0")
)


def write_certificates(folder: Path) -> dict[str, Path]:
    """A test CA and a server certificate for 127.0.0.1 signed by it (what the docs'
    openssl commands make)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("fedad-test-ca"))
        .issuer_name(name("fedad-test-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    paths = {n: folder / f"{n}.pem" for n in ("ca", "server", "server-key")}
    paths["ca"].write_bytes(ca.public_bytes(pem))
    paths["server"].write_bytes(cert.public_bytes(pem))
    paths["server-key"].write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


@dataclass
class Federation:
    """The module's SuperLink, its registered sites and the processes started."""

    root: Path
    link: str
    ca: Path
    node_ids: dict[str, int] = field(default_factory=dict)
    procs: dict[str, subprocess.Popen[str]] = field(default_factory=dict)

    def start(self, name: str, *args: str) -> subprocess.Popen[str]:
        """``fedad flower ARGS`` in the background, its output in ``NAME.log``."""
        log = (self.root / f"{name}.log").open("w")
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "fedad.cli", "flower", *args],
            cwd=ROOT, stdout=log, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        return self.procs[name]

    def node(self, name: str, partition: int, key: str | None) -> subprocess.Popen[str]:
        from fedad.fl.flower.deploy.launch import free_port

        auth = ["--auth-key", str(self.root / key)] if key else []
        return self.start(
            name, "supernode", "--superlink", self.link, "--root-certificates", str(self.ca),
            "--partition-id", str(partition), "--num-partitions", "2", *auth,
            "--port", str(free_port()), "--home", str(self.root / f"home-{name}"),
            "--cache-dir", str(self.root / "cache"),
            "--models-dir", str(self.root / f"models-{name}"),
        )  # fmt: skip

    def wait_joined(self, name: str, timeout: float = 90) -> None:
        """Until the SuperNode ``name`` says the SuperLink took it."""
        deadline = time.monotonic() + timeout
        while "SuperNode ID:" not in (self.root / f"{name}.log").read_text(errors="replace"):
            proc = self.procs[name]
            assert proc.poll() is None, (name, proc.stderr.read() if proc.stderr else "")
            assert time.monotonic() < deadline, f"{name} did not join within {timeout} s"
            time.sleep(0.2)

    def run(self, out: Path, config: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "fedad.cli", "flower", "run", str(config),
             "--superlink", self.link, "--root-certificates", str(self.ca),
             "--out", str(out), "-q"],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
            env={**os.environ, "FLWR_HOME": str(self.root / "home-cli")},
        )  # fmt: skip


def _stop(procs: dict[str, subprocess.Popen[str]]) -> None:
    for p in procs.values():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs.values():
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    from fedad.fl.flower.deploy.auth import generate_key_pair, register
    from fedad.fl.flower.deploy.launch import free_port, port_open

    root = tmp_path_factory.mktemp("auth")
    certs = write_certificates(root)
    for site in ("a", "b", "c", "d"):
        generate_key_pair(root / site)
    port = free_port()
    f = Federation(root, f"127.0.0.1:{port}", certs["ca"])
    t0 = time.monotonic()
    try:
        f.start(
            "superlink", "superlink", "--enable-supernode-auth", "--certfile",
            str(certs["server"]), "--keyfile", str(certs["server-key"]), "--ca-certfile",
            str(certs["ca"]), "--host", "127.0.0.1", "--port", str(port),
            "--home", str(root / "home-superlink"),
        )  # fmt: skip
        while not port_open("127.0.0.1", port):
            assert f.procs["superlink"].poll() is None, f.procs["superlink"].stderr
            assert time.monotonic() - t0 < 60
            time.sleep(0.2)
        f.node("C", 1, "c")  # a key the SuperLink does not know
        f.node("N", 1, None)  # no key at all
        with ThreadPoolExecutor(3) as pool:  # what 'fedad flower register SITE.pub' does
            ids = pool.map(lambda s: register(root / f"{s}.pub", f.link, str(f.ca)), "abd")
            f.node_ids = dict(zip("abd", ids, strict=True))
        for name, partition in (("A", 0), ("B", 1), ("D", 1)):
            f.node(name, partition, name.lower())
        print(f"SuperLink up and three sites registered in {time.monotonic() - t0:.1f} s")
        yield f
    finally:
        _stop(f.procs)
        deadline = time.monotonic() + 15
        while flower_processes(str(root)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert flower_processes(str(root)) == []


def _online(fed: Federation) -> set[int]:
    from fedad.fl.flower.deploy.auth import list_nodes

    nodes = list_nodes(fed.link, str(fed.ca))
    return {int(n["node-id"]) for n in nodes if n.get("status") == "online"}


def test_a_partition_claimed_twice_stops_the_run_before_round_1(
    fed: Federation, tmp_path: Path
) -> None:
    for name in ("A", "B", "D"):
        fed.wait_joined(name)
    cfg = tmp_path / "c.toml"
    cfg.write_text(TWO_SITES)
    t0 = time.monotonic()
    p = fed.run(tmp_path / "out", cfg)
    print(f"stopped in {time.monotonic() - t0:.1f} s")
    assert p.returncode == 2, p.stderr[-3000:]
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, p.stderr
    first, second = sorted([fed.node_ids["b"], fed.node_ids["d"]])
    assert f"two nodes claim client 1: Flower nodes {first} and {second}" in lines[0]
    assert not (tmp_path / "out" / "metrics.json").exists()
    rounds = list((tmp_path / "out").glob(".flower/*/results/rounds.jsonl"))
    assert all(f.read_text() == "" for f in rounds)  # no round was trained


def test_unregistered_nodes_are_refused_in_one_line(fed: Federation) -> None:
    for name in ("C", "N"):
        proc = fed.procs[name]
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, err
        lines = [x for x in err.splitlines() if x.strip()]
        assert len(lines) == 1, err
        assert "Uvicorn" not in (fed.root / f"{name}.log").read_text()  # Flower's log held back
        if name == "C":
            assert f"its key '{fed.root / 'c'}' is not registered there" in lines[0]
        else:
            assert "accepts only registered SuperNodes" in lines[0]
    assert _online(fed) == set(fed.node_ids.values())  # A, B and D: neither C nor N


LOCAL = '[[methods]]\nname = "local"\nlabel = "local-ae"\ndetector = "autoencoder"\n'


def test_registered_sites_train_as_in_process_and_keep_their_detectors(
    fed: Federation, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With D gone, A and B train FedAvg with the in-process run's metrics; and a
    personalised method (``local``) leaves each node's detector on its node, in its
    ``--models-dir``: the evaluate replies that reach the server hold scores and no model
    arrays, ``fedad.load`` reads each node's detector there and it scores as on the node,
    and metrics.json's events say where each one is. The run is what ``fedad flower run``
    does, in this process, to see the replies it gets."""
    from fedad import load
    from fedad.config import load_config
    from fedad.federation import build_federation
    from fedad.fl.flower import run as flower_run
    from fedad.fl.flower.codec import NODE_MODEL
    from fedad.fl.flower.deploy.run import RemoteSuperLink, remote_superlink
    from fedad.runner import run_experiment

    fed.procs["D"].send_signal(signal.SIGTERM)  # the second claimant leaves
    assert fed.procs["D"].wait(timeout=30) == 143
    deadline = time.monotonic() + 30
    while fed.node_ids["d"] in _online(fed):  # a SuperNode that stops signs off
        assert time.monotonic() < deadline
        time.sleep(0.5)
    (tmp_path / "c.toml").write_text(TWO_SITES + LOCAL)
    ref = subprocess.Popen(  # the in-process run, meanwhile
        [sys.executable, "-m", "fedad.cli", "run", str(tmp_path / "c.toml"), "-q",
         "--out", str(tmp_path / "inprocess"), "--set", 'engine.name="inprocess"'],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    cfg = load_config(tmp_path / "c.toml", ['engine.name="flower-deployment"'])
    outcomes: list[Any] = []
    real = flower_run.run_flower

    def spy(*args: Any, **kwargs: Any) -> Any:
        outcomes.append(real(*args, **kwargs))
        return outcomes[-1]

    monkeypatch.setattr(flower_run, "run_flower", spy)
    t0 = time.monotonic()
    with remote_superlink(RemoteSuperLink(fed.link, str(fed.ca))):
        run_experiment(cfg, tmp_path / "flower")
    print(f"two methods on A and B: {time.monotonic() - t0:.1f} s")
    assert ref.wait(timeout=120) == 0, ref.stderr
    ref_m, got = (
        json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("inprocess", "flower")
    )
    assert compare(ref_m["methods"].pop("fedavg-ae"), got["methods"].pop("fedavg-ae")) == []
    assert compare(ref_m["experiment"], got["experiment"], ".experiment") == []
    local = got["methods"]["local-ae"]
    assert local["missing_nodes"] == [] and local["auroc"] == pytest.approx(
        ref_m["methods"]["local-ae"]["auroc"], abs=1e-6
    )

    fedavg_outcome, local_outcome = outcomes
    assert fedavg_outcome.events == []
    flower_fed = build_federation(cfg)
    for cid, reply in local_outcome.evaluations.items():
        assert set(reply.arrays) == {"score", "label", "pred"}, cid  # no model arrays
        folder = Path(reply.scalars[NODE_MODEL])
        assert folder.parent.parent == (fed.root / f"models-{'AB'[cid]}").resolve()
        assert folder.name == f"client-{cid}"
        line = f"client {cid}: its personalised detector stays on its node, in {folder}"
        assert line in local["events"]
        det = load(str(folder)).detector("local-ae", cid)
        np.testing.assert_allclose(
            det.score(flower_fed.clients[cid].x_test), reply.arrays["score"], rtol=1e-5, atol=1e-7
        )
    assert sorted(local_outcome.evaluations) == [0, 1]
    for f in (tmp_path / "flower" / "checkpoints" / "local-ae").glob("client_*.npz"):
        with np.load(f) as z:  # the run directory holds no model arrays of them
            assert z.files == [], f
