"""Average ranks per data kind, and whether the seeds separate the first from the second.

Within a data kind every (federation, seed) is a *block* and every method label a
*treatment*; in each block the labels are ranked by AUROC (1 = best, ties share the mean
rank) and :math:`\\bar r_j = \\frac{1}{N}\\sum_{i=1}^{N} r_{ij}` is label ``j``'s average
rank over the ``N`` blocks [Demšar 2006]. With five blocks or more the critical-difference
test is autorank's (Friedman's omnibus test, then Nemenyi's: two labels differ when their
average ranks differ by more than :math:`CD = q_\\alpha \\sqrt{k(k+1)/(6N)}`; with two
labels Wilcoxon's signed-rank test), never written by hand; with fewer blocks, or without
the ``bench`` extra, the ranks stand alone and :attr:`KindRanks.note` says why. A label
missing from some block (it failed there) is left out of that kind's ranking and named.
"""

from __future__ import annotations

import contextlib
import io
import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.stats import rankdata

__all__ = ["ALPHA", "MIN_BLOCKS", "KindRanks", "rank_kinds"]

ALPHA = 0.05
MIN_BLOCKS = 5
"""autorank's least number of paired samples (blocks)."""


@dataclass
class KindRanks:
    """The ranking of one data kind (module docstring)."""

    kind: str
    metric: str
    labels: list[str]
    """Ranked labels, best first."""
    mean_rank: dict[str, float]
    blocks: int
    test: str | None = None
    pvalue: float | None = None
    cd: float | None = None
    separated: bool | None = None
    """Whether the test separates the first label from the second (``None``: no test)."""
    excluded: list[str] = field(default_factory=list)

    @property
    def note(self) -> str:
        """One sentence: what wins, and whether the seeds separate it from the second."""
        if not self.labels:
            return f"No method has {self.metric} on every {self.kind} federation and seed."
        first = self.labels[0]
        text = f"On {self.kind} data {first} ranks first (average rank {self.mean_rank[first]:.2f})"
        if len(self.labels) == 1:
            return text + "."
        second = self.labels[1]
        if self.test is None:
            blocks = (
                "1 federation x seed block"
                if self.blocks == 1
                else (f"{self.blocks} federation x seed blocks")
            )
            why = (
                f"{blocks}, fewer than the {MIN_BLOCKS} a critical-difference test needs"
                if self.blocks < MIN_BLOCKS
                else "the critical-difference test needs the bench extra (pip install "
                "'fedad[bench]')"
            )
            return f"{text}, ahead of {second}; no test ({why})."
        verdict = "separate it from" if self.separated else "do not separate it from"
        how = f"{self.test}, p = {self.pvalue:.3g}" + (
            f", CD = {self.cd:.2f}" if self.cd is not None else ""
        )
        return f"{text}; the seeds {verdict} the second, {second} ({how})."


def _table(rows: list[dict[str, Any]], metric: str) -> tuple[list[str], list[str], np.ndarray]:
    """Blocks x labels of ``metric`` (NaN where a label has no value in a block)."""
    blocks = sorted({(str(r["federation"]), int(r["seed"])) for r in rows})
    labels = list(dict.fromkeys(str(r["label"]) for r in rows))
    values = np.full((len(blocks), len(labels)), np.nan)
    at = {b: i for i, b in enumerate(blocks)}
    col = {lab: j for j, lab in enumerate(labels)}
    for r in rows:
        v = r.get(metric)
        if isinstance(v, int | float) and math.isfinite(v):
            values[at[(str(r["federation"]), int(r["seed"]))], col[str(r["label"])]] = v
    return [f"{f}/{s}" for f, s in blocks], labels, values


def _test(values: np.ndarray, labels: list[str]) -> tuple[str, float, float | None, Any] | None:
    """autorank's nonparametric test on ``values`` (blocks x labels, higher = better):
    (name, p-value, CD, its rank table), or ``None`` without the extra."""
    try:
        import pandas as pd
        from autorank import autorank
    except ImportError:
        return None
    frame = pd.DataFrame(values, columns=labels)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        res = autorank(
            frame, alpha=ALPHA, verbose=False, order="descending", force_mode="nonparametric"
        )
    name = f"{res.omnibus.capitalize()}" + (f" + {res.posthoc.capitalize()}" if res.posthoc else "")
    cd = None if res.cd is None else float(res.cd)
    return name, float(res.pvalue), cd, res.rankdf


def rank_kind(rows: list[dict[str, Any]], kind: str, metric: str = "auroc") -> KindRanks:
    """The ranking of the rows of one data ``kind`` by ``metric`` (higher = better)."""
    blocks, labels, values = _table(rows, metric)
    complete = [j for j in range(len(labels)) if not np.isnan(values[:, j]).any()]
    excluded = [labels[j] for j in range(len(labels)) if j not in complete]
    kept = [labels[j] for j in complete]
    values = values[:, complete]
    if not kept or not blocks:
        return KindRanks(kind, metric, [], {}, len(blocks), excluded=excluded)
    ranks = np.vstack([rankdata(-row, method="average") for row in values])
    mean = {lab: float(ranks[:, j].mean()) for j, lab in enumerate(kept)}
    order = sorted(kept, key=lambda lab: (mean[lab], lab))
    out = KindRanks(kind, metric, order, mean, len(blocks), excluded=excluded)
    if len(kept) < 2 or len(blocks) < MIN_BLOCKS:
        return out
    tested = _test(values, kept)
    if tested is None:
        return out
    out.test, out.pvalue, out.cd, _ = tested
    first, second = order[0], order[1]
    if out.pvalue >= ALPHA:
        out.separated = False
    elif out.cd is not None:
        out.separated = bool(mean[second] - mean[first] > out.cd)
    else:  # two labels: Wilcoxon's test is the whole answer
        out.separated = True
    return out


def rank_kinds(rows: list[dict[str, Any]], metric: str = "auroc") -> list[KindRanks]:
    """:func:`rank_kind` for every data kind among ``rows``, in order of appearance."""
    kinds = list(dict.fromkeys(str(r.get("kind")) for r in rows))
    return [rank_kind([r for r in rows if str(r.get("kind")) == k], k, metric) for k in kinds]
