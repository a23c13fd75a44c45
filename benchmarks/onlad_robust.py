"""The tables of ONLAD under poisoning, from `fedad bench` output folders.

    fedad bench benchmarks/suites/onlad-robust.toml --out bench/onlad-robust -q
    fedad bench benchmarks/suites/onlad-robust-nodetect.toml --out bench/onlad-robust-nodetect -q
    python benchmarks/onlad_robust.py bench/onlad-robust bench/onlad-robust-nodetect

Per folder, two markdown tables:

* AUROC, mean ± std over the seeds (``results.csv``), per data set (the federation name's
  first part: ``tops``, ``fashion``, ``satellite``, ``shuttle``), method and scenario (the
  rest: ``clean`` and the attacks), and the worst drop: the clean AUROC minus the worst
  attacked one. A ``server-only`` federation (every client's data replaced by N(0, 1)
  samples, which detection flags entirely) runs ``onlad-robust`` with no client learning
  anything, so its model is the server's initial one; its row says so only when every
  round of every seed had every client idle (``history.csv`` ``clients_idle``).
* The updates ``onlad-robust`` gave weight 0 per run, mean over the seeds: the attacked
  clients' / the honest clients' (``history.csv`` ``client_weights``, each seed's
  ``metrics.json`` ``experiment.attacked_clients``).

Public API only: ``fedad.bench.results.read_results`` and the run files.
"""

from __future__ import annotations

import argparse
import csv
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from fedad.bench.results import read_results

SCENARIOS = ("clean", "contamination", "contamination-1", "gaussian-data")
SCENARIOS += ("scaled-update", "sign-flip")
SERVER_ONLY = "server-only"
ROBUST = "onlad-robust"


def history(folder: Path, federation: str, seed: int) -> list[dict[str, str]]:
    """``onlad-robust``'s rows of one seed's ``history.csv``."""
    path = folder / "runs" / federation / f"seed-{seed}" / "history.csv"
    with path.open(newline="", encoding="utf-8") as f:
        return [r for r in csv.DictReader(f) if r["method"] == ROBUST]


def refused(folder: Path, federation: str, seed: int) -> tuple[int, int]:
    """Updates given weight 0 over one seed's rounds: the attacked clients', the others'."""
    run = folder / "runs" / federation / f"seed-{seed}"
    metrics = json.loads((run / "metrics.json").read_text(encoding="utf-8"))
    bad = set(metrics["experiment"].get("attacked_clients", []))
    counts = [0, 0]
    for row in history(folder, federation, seed):
        for pair in (row["client_weights"] or "").split():
            cid, weight = pair.split(":")
            if float(weight) == 0.0:
                counts[0 if int(cid) in bad else 1] += 1
    return counts[0], counts[1]


def all_idle(folder: Path, federation: str, seeds: list[int]) -> bool:
    """Whether no client learned anything in any round of any seed."""
    rows = [r for s in seeds for r in history(folder, federation, s)]
    return bool(rows) and all(r["clients_idle"] == r["clients_replied"] for r in rows)


def report(folder: Path) -> None:
    rows = [r for r in read_results(folder / "results.csv") if r["auroc"] is not None]
    auroc: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    seeds: dict[str, list[int]] = defaultdict(list)
    for r in rows:
        data, scen = r["federation"].split("-", 1)
        auroc[data, r["label"], scen].append(r["auroc"])
        if r["label"] == ROBUST:
            seeds[r["federation"]].append(r["seed"])
    datas = list(dict.fromkeys(d for d, _, _ in auroc))
    print(f"## {folder}\n")
    print("| data | method | " + " | ".join(SCENARIOS) + " | worst drop |")
    print("|---|---|" + "---:|" * (len(SCENARIOS) + 1))
    for data in datas:
        labels = dict.fromkeys(m for d, m, s in auroc if d == data and s in SCENARIOS)
        for label in labels:
            got = {s: auroc[data, label, s] for s in SCENARIOS if (data, label, s) in auroc}
            cells = [
                f"{np.mean(got[s]):.3f} ± {np.std(got[s]):.3f}" if s in got else "–"
                for s in SCENARIOS
            ]
            attacked = [np.mean(v) for s, v in got.items() if s != "clean"]
            drop = np.mean(got["clean"]) - min(attacked) if "clean" in got and attacked else None
            worst = "–" if drop is None else f"{drop:.3f}"
            print(f"| {data} | {label} | " + " | ".join(cells) + f" | {worst} |")
        if (data, ROBUST, SERVER_ONLY) in auroc:
            fed = f"{data}-{SERVER_ONLY}"
            values = auroc[data, ROBUST, SERVER_ONLY]
            what = SERVER_ONLY if all_idle(folder, fed, seeds[fed]) else "(clients learned)"
            cell = f"{np.mean(values):.3f} ± {np.std(values):.3f}"
            print(f"| {data} | {what} | {cell} |" + " |" * len(SCENARIOS))
    print(f"\n`{ROBUST}`: updates given weight 0 per run, attacked / honest clients\n")
    print("| data | " + " | ".join(SCENARIOS) + " |")
    print("|---|" + "---:|" * len(SCENARIOS))
    for data in datas:
        cells = []
        for scen in SCENARIOS:
            counts = np.array(
                [refused(folder, f"{data}-{scen}", s) for s in seeds[f"{data}-{scen}"]]
            )
            cells.append(
                f"{counts[:, 0].mean():.1f} / {counts[:, 1].mean():.1f}" if len(counts) else "–"
            )
        print(f"| {data} | " + " | ".join(cells) + " |")
    print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path, help="fedad bench output folders")
    for folder in ap.parse_args().folders:
        report(folder)


if __name__ == "__main__":
    main()
