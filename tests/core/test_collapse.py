"""The collapse guard's pure functions (fedad.core.collapse)."""

from __future__ import annotations

import math

import pytest

from fedad.core.collapse import NOT_LEARNING, add_loss_ratio, collapse_message


def test_loss_ratio_only_from_finite_positive_values() -> None:
    row: dict[str, object] = {"loss": 3.0, "loss_collapsed": 4.0}
    add_loss_ratio(row)
    assert row["loss_ratio"] == pytest.approx(0.75)
    bad: list[dict[str, object]] = [
        {"loss": 3.0},
        {"loss": math.nan, "loss_collapsed": 4.0},
        {"loss": 3.0, "loss_collapsed": 0.0},
        {"loss": True, "loss_collapsed": 4.0},
    ]
    for b in bad:
        r = dict(b)
        add_loss_ratio(r)
        assert "loss_ratio" not in r


def test_a_run_that_learned_once_is_not_named_even_if_its_last_ratio_is_high() -> None:
    """CRAD after the SimCLR warm-up starts above its collapsed value: the best ratio counts."""
    rows = [{"loss_ratio": 0.9, "rep_cos": 0.3}, {"loss_ratio": 1.03, "rep_cos": 0.4}]
    assert collapse_message(rows) is None


def test_a_loss_that_never_left_its_collapsed_value_is_named() -> None:
    rows = [{"loss": 4.08, "loss_collapsed": 4.086, "loss_ratio": 4.08 / 4.086, "rep_cos": 0.3}]
    msg = collapse_message(rows)
    assert msg is not None and msg.startswith(NOT_LEARNING) and "0.999" in msg
    assert "\n" not in msg


def test_crowded_directions_are_named_in_the_final_round_only() -> None:
    assert collapse_message([{"rep_cos": 0.99}, {"rep_cos": 0.5}]) is None
    msg = collapse_message([{"rep_cos": 0.5}, {"rep_cos": 0.99}])
    assert msg is not None and "cosine ended at 0.990" in msg


def test_rows_without_the_columns_say_nothing() -> None:
    assert collapse_message([]) is None
    assert collapse_message([{"loss": 1.0}, {"auroc": 0.5}]) is None
