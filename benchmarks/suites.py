"""What the per-method benchmark suites share: the ``[[methods]]`` TOML of a table of rows,
one seeded fedad run (resumable) and its summary written to ``benchmarks/results/``.

Imported by ``fadngs.py``, ``feddymem.py``, ``fgad.py`` and ``protofl.py`` (run as scripts
from this folder).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedad.config import parse_config, read_toml
from fedad.seeds import run_seeds

OUT = Path(__file__).resolve().parent / "results"

Method = tuple[str, str, dict[str, Any], str | None]
"""(label, method name, params, detector)."""


def toml_value(v: Any) -> str:
    """A TOML literal of a bool, string or number."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    return repr(v)


def method_lines(rows: Sequence[Method], only: Sequence[str] | None, suite: str) -> list[str]:
    """``[[methods]]`` tables of ``rows`` (``only``: just the rows with these labels)."""
    if only:
        unknown = sorted(set(only) - {r[0] for r in rows})
        if unknown:
            raise SystemExit(f"--only: no row {', '.join(unknown)} in suite {suite}")
        rows = [r for r in rows if r[0] in only]
    lines: list[str] = []
    for label, name, params, detector in rows:
        lines += ["[[methods]]", f'name = "{name}"', f'label = "{label}"']
        if detector:
            lines.append(f'detector = "{detector}"')
        if params:
            body = ", ".join(f"{k} = {toml_value(v)}" for k, v in params.items())
            lines.append("params = {" + body + "}")
    return lines


def pm(r: dict[str, Any], key: str) -> str:
    """``mean ± std`` of ``r[key]`` and ``r[key + "_std"]`` (``–`` when missing)."""
    if r.get(key) is None:
        return "–"
    return f"{r[key]:.3f} ± {r[f'{key}_std']:.3f}"


def mean_std(vals: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and population standard deviation (``None`` for no values)."""
    return (float(np.mean(vals)), float(np.std(vals))) if len(vals) else (None, None)


def seed_methods(run: Path) -> list[dict[str, Any]]:
    """The ``methods`` of every finished seed's ``metrics.json`` in ``run``, in seed order."""
    return [
        json.loads(f.read_text(encoding="utf-8"))["methods"]
        for f in sorted(run.glob("seed-*/metrics.json"))
    ]


def traffic(ms: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """A method's cost over seeds (its ``metrics.json`` entries ``ms``): mean bytes up per
    client and round, mean MB (up + down) per round, mean seconds."""
    rounds = [max(int(m["rounds"]), 1) for m in ms]
    clients = [max(len(m.get("per_client", [])), 1) for m in ms]
    ups = [m["bytes_up"] / r / c for m, r, c in zip(ms, rounds, clients, strict=True)]
    per_round = [
        (m["bytes_up"] + m["bytes_down"]) / r / 1e6 for m, r in zip(ms, rounds, strict=True)
    ]
    return {
        "bytes_up_per_client_round": float(np.mean(ups)) if ups else None,
        "mb_per_round": float(np.mean(per_round)) if per_round else None,
        "seconds": float(np.mean([m["seconds"] for m in ms])) if ms else None,
    }


def run_suite(
    text: str,
    name: str,
    summarise: Callable[[Path], dict[str, Any]],
    *,
    work: Path | None,
    jobs: int,
    summarise_only: bool,
    suite: str,
) -> dict[str, Any]:
    """Run the experiment ``text`` over its seeds in ``work`` (resumed when it exists; a
    temporary folder when None), summarise it and write ``results/<name>.json``."""
    with tempfile.TemporaryDirectory(prefix="fedad-bench-") as tmp:
        run = work or Path(tmp) / "run"
        cfg_path = Path(tmp) / "config.toml"
        cfg_path.write_text(text, encoding="utf-8")
        cfg = parse_config(read_toml(cfg_path))
        if not summarise_only:
            run_seeds(cfg, run, jobs=jobs, resume=run.exists())
        rows = summarise(run)
    OUT.mkdir(parents=True, exist_ok=True)
    result = {"suite": suite, "config": text, "methods": rows}
    (OUT / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    return rows


def fashion_fedavg(
    clients: int, rounds: int, per_client: int, max_test: int, engine: dict[str, Any]
) -> Any:
    """The engine benchmarks' experiment: FedAvg with the autoencoder on Fashion-MNIST
    (normal 0-4, anomalies 5-9, IID), ``per_client`` training images per client."""
    return parse_config(
        {
            "seed": 0,
            "rounds": rounds,
            "data": {
                "name": "fashion_mnist",
                "normal": [0, 1, 2, 3, 4],
                "anomaly": [5, 6, 7, 8, 9],
                "max_train_per_client": per_client,
                "max_test": max_test,
            },
            "partition": {"scheme": "iid", "clients": clients},
            "engine": {"progress": False, **engine},
            "methods": [{"name": "fedavg", "detector": "autoencoder"}],
        }
    )
