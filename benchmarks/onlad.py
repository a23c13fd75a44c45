"""The ONLAD paper's Table I analog (Qin, Matsutani, Kondo), from a `fedad bench` folder.

    fedad bench benchmarks/suites/onlad-paper.toml --out bench/onlad-paper -q
    python benchmarks/onlad.py bench/onlad-paper

Per federation (scenario) and method, mean ± std over the seeds, from each federation's
several-seed ``runs/FEDERATION/metrics.json``: precision, recall, accuracy and F-score with
normal as the positive class (the paper's convention), F1 and AUROC with anomaly as the
positive class; the last round's global model at the server's threshold. Fig. 7 is
scenario 2's ``onlad-selective`` (fixed lambda) against ``onlad-selective-adaptive``; the
Fig. 5 curves are the ``eval_normal_f1`` column of each seed's ``history.csv``.

Public API only: ``fedad.bench.results.read_results`` and the run files.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fedad.bench.results import read_results

KEYS = ("normal_precision", "normal_recall", "accuracy", "normal_f1", "f1", "auroc")
HEAD = ("precision", "recall", "accuracy", "F-score", "F1 (anomaly)", "AUROC")


def report(folder: Path) -> None:
    rows = read_results(folder / "results.csv")
    print("| scenario | aggregation | " + " | ".join(HEAD) + " |")
    print("|---|---|" + "---:|" * len(HEAD))
    for fed in dict.fromkeys(r["federation"] for r in rows):
        path = folder / "runs" / fed / "metrics.json"
        methods = json.loads(path.read_text(encoding="utf-8"))["methods"]
        for label, m in methods.items():
            if m.get("auroc") is None:
                print(f"| {fed} | {label} | failed |" + " |" * (len(HEAD) - 1))
                continue
            std = m.get("std") or dict.fromkeys(KEYS, 0.0)  # one seed: no std
            cells = " | ".join(f"{m[k]:.3f} ± {std[k]:.3f}" for k in KEYS)
            print(f"| {fed} | {label} | {cells} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="the fedad bench output folder")
    report(ap.parse_args().folder)


if __name__ == "__main__":
    main()
