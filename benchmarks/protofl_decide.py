"""The rule registered for ProtoFL's image default, applied to the screen's results.

    fedad bench benchmarks/suites/protofl-default-screen.toml --out bench/protofl-default-screen
    python benchmarks/protofl_decide.py bench/protofl-default-screen

Reads the benchmark's ``results.csv`` (:func:`fedad.bench.results.read_results`) and prints
the decision as JSON: the phase 1 (``"contrast"`` or ``"none"``), the head-and-side row, whether
it met the bar, each row's time ratio to the reference and its mean AUROC over the two
federations. The rule, as registered, is the header of
``benchmarks/suites/protofl-default-screen.toml``: A(r, F) is the mean over seeds of row r's
``auroc`` on federation F (``fashion``, ``digits``), T(r) its mean ``seconds`` over the
Fashion-MNIST seeds, as a ratio to the reference row ``ref``'s.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from fedad.bench.results import read_results

CANDIDATE, BASE = "contrast-gauss-96", "none-gauss-96"
HEADS = ("none-gauss-64", "none-gauss-96", "none-flow-96")
ROWS = ("ref", "fedavg-deepsvdd", *HEADS, "paper-gauss-96", CANDIDATE)
FEDERATIONS = ("fashion", "digits")

Summary = dict[str, dict[str, float]]
"""Row label -> ``{"auroc": mean over seeds, "seconds": mean over seeds}``."""


def summaries(results: Path) -> dict[str, Summary]:
    """Per federation of the screen, each row's mean AUROC and seconds over its seeds."""
    seen: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in read_results(results):
        if r["error"] or r["auroc"] is None or r["seconds"] is None:
            raise SystemExit(f"{r['federation']} {r['label']} seed {r['seed']}: no result")
        seen.setdefault((r["federation"], r["label"]), []).append((r["auroc"], r["seconds"]))
    out: dict[str, Summary] = {}
    for fed in FEDERATIONS:
        out[fed] = {}
        for row in ROWS:
            values = seen.get((fed, row))
            if not values:
                raise SystemExit(f"{results}: no row {row!r} on federation {fed!r}")
            out[fed][row] = {
                "auroc": sum(a for a, _ in values) / len(values),
                "seconds": sum(s for _, s in values) / len(values),
            }
    return out


def decide(fashion: Summary, digits: Summary) -> dict[str, Any]:
    """The registered rule on the two federations' summaries."""

    def a(row: str, fed: Summary) -> float:
        return float(fed[row]["auroc"])

    t_ref = float(fashion["ref"]["seconds"])
    t = {row: float(fashion[row]["seconds"]) / t_ref for row in fashion}
    adds = all(a(CANDIDATE, f) >= a(BASE, f) + 0.005 for f in (fashion, digits))
    phase1 = "contrast" if adds and t[CANDIDATE] <= 1.5 else "none"
    mean = {row: (a(row, fashion) + a(row, digits)) / 2 for row in HEADS}
    eligible = [r for r in HEADS if t[r] <= 1.2 and a(r, fashion) >= a("ref", fashion) + 0.01]
    pool = eligible or [r for r in HEADS if t[r] <= 1.5] or list(HEADS)
    best = max(mean[r] for r in pool)
    choice = min((r for r in pool if mean[r] >= best - 0.002), key=lambda r: t[r])
    return {
        "phase1": phase1,
        "head_and_side": choice,
        "bar_met": bool(eligible),
        "time_ratio": t,
        "mean_auroc": mean,
        "eligible": eligible,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench", type=Path, help="the screen's fedad bench folder (or results.csv)")
    args = ap.parse_args()
    path = args.bench / "results.csv" if args.bench.is_dir() else args.bench
    s = summaries(path)
    print(json.dumps(decide(s["fashion"], s["digits"]), indent=1))


if __name__ == "__main__":
    main()
