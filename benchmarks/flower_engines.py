"""Wall time per round: in-process vs Flower simulation vs Flower deployment, one run each.

FedAvg with the autoencoder on digits (normal 0-4, anomalies 5-9), IID, 3 clients and
3 rounds, on each engine; then 100 clients in-process and in Flower simulation: one
``fedad run`` per engine (``--clients``, ``--engines``: a subset). Seconds per round come
from its ``history.csv``; round 1 carries start-up costs (Ray, process spawns, first torch
optimiser step), so the ratio uses rounds 2-3. ``run s`` is the wall time of the whole
``fedad run`` command (interpreter start-up, data, evaluation and report included). Also
checks that the metrics agree across engines (the AUROC column).

``--secagg`` measures what Flower's SecAgg+ costs instead: the same runs with and without
``privacy.secagg``, seconds per round, bytes up per round (masked vectors) and the
protocol's own bytes (``secagg_bytes`` in ``history.csv``: keys, encrypted shares, stage
configs).

``--deployment`` measures a deployment round against the SuperNode's poll interval (Flower
1.41: a fixed 3 s sleep between a SuperNode's polls of the SuperLink, read here from
Flower's source): FedAvg with the autoencoder, 3 loopback SuperNodes, ``--rounds`` rounds,
with a fresh ``flwr-clientapp`` process per message (``engine.clientapp = "per-message"``,
Flower's own) and with one long-running ClientApp process per SuperNode (``"per-node"``,
fedad's default), the two runs back to back. Each run writes a timeline
(``FEDAD_FLOWER_TIMELINE``, docs/deployment.md: one JSON object per line from the
ServerApp and the node processes); the per-node run's timeline splits each steady round
(from one round's messages to the next's) along the path of the node whose reply came
last, and a method's start-up into its parts.

    .venv/bin/python benchmarks/flower_engines.py [--clients 3 100] [--engines ...]
    .venv/bin/python benchmarks/flower_engines.py --secagg [--clients 3 100] [--engines ...]
    .venv/bin/python benchmarks/flower_engines.py --deployment [--rounds 8]
"""

from __future__ import annotations

import argparse
import inspect
import itertools
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from fedad_child import fedad_run

ENGINES = ("inprocess", "flower-simulation", "flower-deployment")
DEPLOYMENT_CLIENTS = 3
"""flower-deployment starts a SuperNode process per client: it runs at 3 clients only."""

CONFIG = """\
seed = 0
rounds = {rounds}

[data]
name = "digits"
normal = [0, 1, 2, 3, 4]
anomaly = [5, 6, 7, 8, 9]

[partition]
scheme = "iid"
clients = {clients}

[engine]
name = "{engine}"
progress = false
clientapp = "{clientapp}"

[privacy]
secagg = {secagg}

[[methods]]
name = "fedavg"
detector = "autoencoder"
"""


def history(
    engine: str,
    clients: int,
    rounds: int = 3,
    secagg: bool = False,
    clientapp: str = "per-node",
    timeline: Path | None = None,
) -> tuple[list[dict[str, str]], float, float]:
    """(history rows, seconds of the whole ``fedad run``, AUROC) of one run; ``timeline``:
    the file the run's Flower processes write their timeline to."""
    text = CONFIG.format(
        rounds=rounds,
        clients=clients,
        engine=engine,
        clientapp=clientapp,
        secagg="true" if secagg else "false",
    )
    env = dict(os.environ)
    if timeline is not None:
        env["FEDAD_FLOWER_TIMELINE"] = str(timeline)
    run = fedad_run(text, env=env)
    rows = [r for r in run.history if r["method"] == "fedavg"]
    return rows, run.wall, float(run.metrics["methods"]["fedavg"]["auroc"])


def run_engines(clients: int, engines: list[str]) -> list[str]:
    """The engines of ``engines`` that run at ``clients`` clients."""
    return [e for e in engines if e != "flower-deployment" or clients <= DEPLOYMENT_CLIENTS]


def run(engine: str, clients: int, rounds: int = 3) -> tuple[list[float], float, float]:
    rows, total, auroc = history(engine, clients, rounds)
    per_round = [float(r["seconds"]) for r in rows if int(r["round"]) >= 1]
    return per_round, total, auroc


def secagg(clients_list: list[int], engines: list[str]) -> None:
    """Plain vs SecAgg+ on each engine: seconds and bytes per round (rounds 2-3)."""
    print(
        "| engine | clients | SecAgg+ | rounds 2-3 s (mean) | vs plain | bytes up / round | "
        "protocol bytes / round | AUROC |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for clients in clients_list:
        for engine in run_engines(clients, engines):
            base = None
            for on in (False, True):
                rows, _, auroc = history(engine, clients, secagg=on)
                steady = [r for r in rows if int(r["round"]) >= 2]
                s = sum(float(r["seconds"]) for r in steady) / len(steady)
                up = sum(int(r["bytes_up"]) for r in steady) / len(steady)
                proto = sum(float(r.get("secagg_bytes") or 0) for r in steady) / len(steady)
                base = s if base is None else base
                print(
                    f"| {engine} | {clients} | {'on' if on else 'off'} | {s:.3f} | "
                    f"{s / base:.1f}x | {up:,.0f} | {proto:,.0f} | {auroc:.6f} |",
                    flush=True,
                )


def read_timeline(path: Path) -> list[dict[str, Any]]:
    """The events of a timeline file: one JSON object per line (other lines skipped)."""
    out: list[dict[str, Any]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            out.append(doc)
    return out


def supernode_poll_seconds() -> float:
    """The sleep between a Flower SuperNode's polls of the SuperLink, from Flower's source
    (``time.sleep(3)`` in ``start_client_internal`` of flwr 1.41; not configurable)."""
    from flwr.supernode import start_client_internal as sci

    found = re.findall(r"time\.sleep\((\d+(?:\.\d+)?)\)\n\s*continue", inspect.getsource(sci))
    if len(found) != 1:
        raise SystemExit("cannot find the SuperNode's poll sleep in flwr's source")
    return float(found[0])


PARTS = (
    ("push -> task", "the SuperNode's next poll of the SuperLink picks the message up"),
    ("task -> taken", "the node's ClientApp process takes the task (its own poll)"),
    ("input", "message, context and run pulled from the SuperNode"),
    ("handler", "fedad's handler: the local training"),
    ("reply", "reply and context pushed to the SuperNode"),
    ("reply -> server", "SuperNode's reply poll (0.5 s), push to the SuperLink, ServerApp's poll"),
    ("server", "last reply -> next round's messages with the SuperLink (aggregation, push)"),
)


def round_parts(events: list[dict[str, Any]]) -> list[dict[str, float]]:
    """Per steady round (train messages of round r >= 2 to those of round r + 1): the seconds
    of each part of :data:`PARTS` along the node whose reply came last; they sum to the
    round's period."""
    tasks = {e["message_id"]: e for e in events if e["event"] == "node-task"}
    replies = {e["reply_to"]: e["time"] for e in events if e["event"] == "server-reply"}
    pushes = [
        e
        for e in events
        if e["event"] == "server-push"
        and e["message_ids"]
        and all(tasks.get(m, {}).get("message_type") == "train" for m in e["message_ids"])
    ]
    out = []
    for this, after in itertools.pairwise(pushes[1:]):  # round 1 carries start-up
        t0 = this["time"]
        last = max(this["message_ids"], key=lambda m: replies[m])
        k = tasks[last]
        # the ServerApp records a push when the whole message is with the SuperLink; the
        # SuperNode can take the message itself a moment earlier: counted from the push
        pending = max(k["pending"], t0)
        parts = {
            "push -> task": pending - t0,
            "task -> taken": max(0.0, k["acquired"] - pending),
            "input": k["input"] - max(k["acquired"], pending),
            "handler": k["handled"] - k["input"],
            "reply": k["pushed"] - k["handled"],
            "reply -> server": replies[last] - k["pushed"],
            "server": after["time"] - replies[last],
        }
        parts["round"] = after["time"] - t0
        out.append(parts)
    return out


START = (
    ("submit -> ServerApp", "`flwr run`, the SuperExec starts `flwr-serverapp`, which installs "
     "the app and imports fedad"),
    ("ServerApp -> nodes", "the ServerApp builds the algorithm and sees the SuperNodes"),
    ("handshake", "`fedad_hello` to every node and back (one SuperNode poll)"),
)  # fmt: skip


def start_parts(events: list[dict[str, Any]]) -> dict[str, float]:
    """Once per method, from ``flwr run`` to the first round's messages (:data:`START`)."""
    first = {e["event"]: e["time"] for e in reversed(events) if "time" in e}
    pushes = [e["time"] for e in events if e["event"] == "server-push"]
    return {
        "submit -> ServerApp": first["serverapp-main"] - first["run-submit"],
        "ServerApp -> nodes": first["server-nodes"] - first["serverapp-main"],
        "handshake": pushes[1] - first["server-nodes"],
    }


def deployment(rounds: int) -> None:
    """Seconds per deployment round, per-message vs per-node ClientApp processes, as ratios
    to the SuperNode's poll interval; then where a per-node round's seconds go."""
    poll = supernode_poll_seconds()
    print(f"SuperNode poll interval (flwr, fixed): {poll:g} s\n")
    print(
        "| ClientApp processes | round 1 s | rounds 2-N s (mean, min-max) | / poll interval "
        "| run s | AUROC |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    parts: list[dict[str, float]] = []
    start: dict[str, float] = {}
    ref: float | None = None
    for mode in ("per-message", "per-node"):
        with tempfile.TemporaryDirectory(prefix="fedad-timeline-") as tmp:
            timeline = Path(tmp) / "timeline.jsonl"
            rows, total, auroc = history(
                "flower-deployment", 3, rounds, clientapp=mode, timeline=timeline
            )
            if mode == "per-node":
                events = read_timeline(timeline)
                parts, start = round_parts(events), start_parts(events)
        per_round = [float(r["seconds"]) for r in rows]
        steady = per_round[1:]
        mean = sum(steady) / len(steady)
        ref = auroc if ref is None else ref
        assert abs(auroc - ref) < 1e-9, "the two modes must give the same model"
        print(
            f"| {mode} | {per_round[0]:.2f} | {mean:.2f} ({min(steady):.2f}-{max(steady):.2f}) "
            f"| {mean / poll:.2f} | {total:.1f} | {auroc:.6f} |",
            flush=True,
        )
    if not parts:
        return
    print(f"\nWhere a per-node round goes ({len(parts)} steady rounds, slowest node's path):\n")
    print("| part | what | s (mean) | min-max | share |")
    print("|---|---|---:|---:|---:|")
    period = sum(p["round"] for p in parts) / len(parts)
    for name, what in PARTS:
        xs = [p[name] for p in parts]
        m = sum(xs) / len(xs)
        print(f"| {name} | {what} | {m:.3f} | {min(xs):.2f}-{max(xs):.2f} | {m / period:.0%} |")
    print(f"| round | (period from one round's messages to the next) | {period:.3f} | | |")
    print("\nOnce per method, per-node (from `flwr run` to round 1's messages):\n")
    print("| part | what | s |")
    print("|---|---|---:|")
    for name, what in START:
        print(f"| {name} | {what} | {start[name]:.2f} |")


def main(clients_list: list[int], engines: list[str]) -> None:
    print("| engine | clients | round 1 s | mean of rounds 2-3 s | vs in-process | run s | AUROC |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for clients in clients_list:
        base = None
        for engine in run_engines(clients, engines):
            per_round, total, auroc = run(engine, clients)
            steady = sum(per_round[1:]) / len(per_round[1:])
            base = steady if base is None else base
            print(
                f"| {engine} | {clients} | {per_round[0]:.2f} | {steady:.3f} | "
                f"{steady / base:.1f}x | {total:.1f} | {auroc:.6f} |",
                flush=True,
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--secagg", action="store_true", help="measure SecAgg+'s cost")
    parser.add_argument(
        "--deployment",
        action="store_true",
        help="deployment rounds per ClientApp mode, against the SuperNode's poll interval",
    )
    parser.add_argument("--rounds", type=int, default=8, help="rounds of --deployment")
    parser.add_argument(
        "--clients",
        type=int,
        nargs="+",
        default=[3, 100],
        help="federation sizes (flower-deployment runs at 3 only)",
    )
    parser.add_argument(
        "--engines", nargs="+", choices=ENGINES, default=list(ENGINES), help="engines to run"
    )
    args = parser.parse_args()
    if args.secagg:
        secagg(args.clients, args.engines)
    elif args.deployment:
        deployment(args.rounds)
    else:
        main(args.clients, args.engines)
