"""BENCHMARKS.md from the evaluation suites' results: the leaderboard, then the cost table.

    .venv/bin/python benchmarks/benchmarks_md.py bench/tables-eval bench/images-eval \\
        bench/graphs-eval bench/defects-eval bench/ovr-eval > BENCHMARKS.md

Each argument is a folder written by ``fedad bench SUITE --out FOLDER``. The page opens
with fedad bench's sentence per family (what ranks first, and whether the seeds separate it
from the second); then per family the average ranks by AUROC with each method's mean AUROC
per federation (mean over seeds), the pixel metrics where the data have masks, and what a
run costs: seconds, bytes sent each way, peak memory. Public API only (:mod:`fedad.bench`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from fedad.bench.ranks import KindRanks, rank_kinds
from fedad.bench.results import read_results

Rows = list[dict[str, Any]]


def _values(rows: Rows, key: str) -> list[float]:
    return [float(r[key]) for r in rows if isinstance(r.get(key), int | float)]


def _mean(rows: Rows, key: str) -> float | None:
    vals = _values(rows, key)
    return statistics.fmean(vals) if vals else None


def _pm(rows: Rows, key: str) -> str:
    vals = _values(rows, key)
    if not vals:
        return "–"
    return f"{statistics.fmean(vals):.3f} ± {statistics.pstdev(vals):.3f}"


def _fmt(v: float | None, spec: str) -> str:
    return "–" if v is None else format(v, spec)


def _paused(folder: Path) -> set[tuple[str, str, int]]:
    f = folder / "paused.json"
    rows = json.loads(f.read_text()) if f.exists() else []
    return {(r["federation"], r["label"], int(r["seed"])) for r in rows}


def quality_table(kr: KindRanks, rows: Rows) -> list[str]:
    """Rank, average rank, mean ± std AUROC over blocks, and the mean AUROC per federation."""
    feds = list(dict.fromkeys(r["federation"] for r in rows))
    out = [
        "| rank | method | average rank | AUROC (mean ± std) | " + " | ".join(feds) + " |",
        "|---:|---|---:|---:|" + "---:|" * len(feds),
    ]
    for i, lab in enumerate(kr.labels, 1):
        mine = [r for r in rows if r["label"] == lab]
        per_fed = [
            _fmt(_mean([r for r in mine if r["federation"] == f], "auroc"), ".3f") for f in feds
        ]
        out.append(
            f"| {i} | {lab} | {kr.mean_rank[lab]:.2f} | {_pm(mine, 'auroc')} | "
            + " | ".join(per_fed)
            + " |"
        )
    return out


def pixel_table(kr: KindRanks, rows: Rows) -> list[str]:
    """Pixel AUROC and PRO (mean ± std over blocks) where the data have defect masks."""
    if not any(isinstance(r.get("pixel_auroc"), float) for r in rows):
        return []
    out = ["", "| method | pixel AUROC | PRO |", "|---|---:|---:|"]
    for lab in kr.labels:
        mine = [r for r in rows if r["label"] == lab]
        out.append(f"| {lab} | {_pm(mine, 'pixel_auroc')} | {_pm(mine, 'pro')} |")
    return out


def cost_table(kr: KindRanks, rows: Rows, paused: set[tuple[str, str, int]]) -> list[str]:
    """Mean seconds, MB sent up and down, and peak MB per run, cheapest first."""
    stats = []
    for lab in kr.labels + kr.excluded:
        mine = [r for r in rows if r["label"] == lab]
        timed = [r for r in mine if (r["federation"], lab, int(r["seed"])) not in paused]
        up, down = _mean(mine, "bytes_up"), _mean(mine, "bytes_down")
        stats.append(
            (
                _mean(timed, "seconds"),
                lab,
                None if up is None else up / 1e6,
                None if down is None else down / 1e6,
                _mean(mine, "peak_mb"),
            )
        )
    stats.sort(key=lambda s: (s[0] is None, s[0] or 0.0))
    out = [
        "",
        "| method | seconds per run | MB up | MB down | peak MB |",
        "|---|---:|---:|---:|---:|",
    ]
    for sec, lab, up, down, peak in stats:
        out.append(
            f"| {lab} | {_fmt(sec, '.1f')} | {_fmt(up, '.2f')} | {_fmt(down, '.2f')} | "
            f"{_fmt(peak, '.0f')} |"
        )
    return out


def family_section(kr: KindRanks, rows: Rows, paused: set[tuple[str, str, int]]) -> str:
    """One family's leaderboard: the sentence, quality, pixel metrics, cost."""
    mine = [r for r in rows if r.get("kind") == kr.kind]
    out = [f"### {kr.kind}\n", kr.note + "\n", *quality_table(kr, mine)]
    out += pixel_table(kr, mine)
    if kr.excluded:
        out.append(f"\nNot ranked (failed on some federation or seed): {', '.join(kr.excluded)}.")
    out += [
        "",
        "What a run costs (mean over federations and seeds):",
        *cost_table(kr, mine, paused),
    ]
    return "\n".join(out) + "\n"


HEAD = """# Benchmarks

Every method of fedad with its default params, and the baselines, on the evaluation suites:
data no default was chosen on (the evaluation half of each data set, generated types and
streams that the development suites never see; docs/data.md), seeds 0-4, every seed kept.
Each suite was run once, as registered in docs/bench.md ("The evaluation run behind
BENCHMARKS.md"), on a 2-core machine without a GPU. Per suite, `results.csv` (one row per
federation x method x seed) and `leaderboard.html` are in `benchmarks/results/bench/SUITE/`.

Generated by `{command}`; a suite runs again with `fedad bench SUITE-eval --out bench/SUITE-eval`.

How to read it: within a family every federation x seed is a block, the methods are ranked by
AUROC in each block (1 = best) and the ranks averaged (docs/bench.md "The statistics"). A
method's AUROC is the pooled test set's, except on one-vs-rest federations where it is the
mean of the clients' own AUROCs. Seconds are wall time per run on a machine that was doing
other work part of the time: compare methods within a table, as orders of magnitude. Peak MB
is fedad's whole process, torch and the data included.
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    args = ap.parse_args()
    command = " ".join(["python benchmarks/benchmarks_md.py", *map(str, args.folders)])
    summary, sections = [], []
    for folder in args.folders:
        meta = json.loads((folder / "results.json").read_text())
        rows = read_results(folder / "results.csv")
        seeds = ", ".join(str(s) for s in meta.get("seeds", []))
        suite = meta.get("suite")
        sections.append(
            f"## {suite}\n\nSeeds {seeds}; {len(rows)} rows; every seed's values in "
            f"[results.csv]({folder}/results.csv), the page in "
            f"[leaderboard.html]({folder}/leaderboard.html).\n"
        )
        for kr in rank_kinds(rows):
            summary.append(f"- **{kr.kind}** ([{suite}](#{suite})): {kr.note}")
            sections.append(family_section(kr, rows, _paused(folder)))
    page = [HEAD.format(command=command), "## What wins\n", *summary, "", *sections]
    sys.stdout.write("\n".join(page))


if __name__ == "__main__":
    main()
