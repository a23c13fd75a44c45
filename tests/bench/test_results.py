"""results.csv round-trips; the rank statistics on hand examples."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from fedad.bench.ranks import MIN_BLOCKS, rank_kind
from fedad.bench.results import COLUMNS, read_results, rows_of_run, write_results
from fedad.core.errors import FedadError


def row(
    fed: str, seed: int, label: str, auroc: float | None, kind: str = "tables"
) -> dict[str, Any]:
    base: dict[str, Any] = {k: None for k in COLUMNS}
    method, _, det = label.partition("-")
    base.update(federation=fed, method=method, detector=det or None, label=label, seed=seed,
                auroc=auroc, seconds=1.5, bytes_up=1200, kind=kind)  # fmt: skip
    return base


def test_results_round_trip(tmp_path: Path) -> None:
    rows = [row("a", 0, "fedavg-autoencoder", 0.75), row("a", 1, "onlad", None)]
    rows[1]["error"] = "method 'onlad' failed: no client answered"
    write_results(tmp_path, rows, {"suite": "s"})
    assert read_results(tmp_path / "results.csv") == rows
    (tmp_path / "results.csv").write_text("x,y\n1,2\n")
    with pytest.raises(FedadError, match="not a fedad bench results file"):
        read_results(tmp_path / "results.csv")


def test_rows_of_a_run_keep_failures_and_skip_what_did_not_run() -> None:
    metrics = {
        "methods": {"a": {"method": "fedavg", "detector": "autoencoder", "auroc": 0.9,
                          "seconds": 2.0, "pixel_auroc": float("nan")}},
        "experiment": {"failed_methods": [{"method": "b", "error": "out of memory"}]},
    }  # fmt: skip
    got = rows_of_run("f", "tables", ["a", "b", "c"], metrics, 7)
    assert [r["label"] for r in got] == ["a", "b"]
    assert got[0]["auroc"] == 0.9 and got[0]["pixel_auroc"] is None and got[0]["seed"] == 7
    assert got[1]["error"] == "out of memory" and got[1]["auroc"] is None


def test_ranks_by_hand() -> None:
    """Three blocks, three labels: x beats y beats z twice, y and z tie once."""
    rows = [
        row("f", 0, "x", 0.9), row("f", 0, "y", 0.8), row("f", 0, "z", 0.7),
        row("f", 1, "x", 0.9), row("f", 1, "y", 0.8), row("f", 1, "z", 0.7),
        row("g", 0, "x", 0.9), row("g", 0, "y", 0.6), row("g", 0, "z", 0.6),
        row("g", 0, "w", None),  # w failed once: not ranked
    ]  # fmt: skip
    kr = rank_kind(rows, "tables")
    assert kr.labels == ["x", "y", "z"] and kr.excluded == ["w"]
    assert kr.mean_rank == {"x": 1.0, "y": pytest.approx((2 + 2 + 2.5) / 3),
                            "z": pytest.approx((3 + 3 + 2.5) / 3)}  # fmt: skip
    assert kr.blocks == 3 < MIN_BLOCKS and kr.test is None
    assert "fewer than the 5" in kr.note and kr.note.startswith("On tables data x ranks first")


def test_the_test_separates_a_clear_winner_and_not_a_tie() -> None:
    pytest.importorskip("autorank")
    clear = [row("f", s, lab, v + 0.001 * s) for s in range(8)
             for lab, v in (("a", 0.95), ("b", 0.7), ("c", 0.6), ("d", 0.5))]  # fmt: skip
    kr = rank_kind(clear, "tables")
    assert kr.test is not None and kr.labels[0] == "a" and kr.cd is not None
    assert kr.pvalue is not None and kr.pvalue < 0.05
    # a beats b in every block, but four labels' Nemenyi CD over 8 blocks is 1.66 > 1 rank
    assert kr.cd == pytest.approx(1.658, abs=1e-3) and kr.separated is False
    assert "do not separate it from the second, b" in kr.note
    noisy = [row("f", s, lab, 0.8 + (0.01 if (s + i) % 2 else -0.01)) for s in range(6)
             for i, lab in enumerate(("a", "b", "c"))]  # fmt: skip
    kn = rank_kind(noisy, "tables")
    assert kn.separated is False and "do not separate" in kn.note
    assert math.isfinite(kn.pvalue or math.nan)


def test_the_leaderboard_renders_rows_without_auroc_and_escapes_labels() -> None:
    from fedad.bench.leaderboard import render_leaderboard

    rows = [row("f", 0, "<b>x</b>", None), row("f", 0, "y", None)]
    rows[0]["error"] = "failed: \x1b[2J"
    page = render_leaderboard(rows, {"suite": "s", "seeds": [0]})
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page
    assert "\x1b" not in page and "No method has auroc" in page
