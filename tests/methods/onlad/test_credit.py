from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedad.methods.onlad.credit import (
    accept_aggregate,
    adaptive_lambda,
    credit_scores,
    effect_gate,
    exceedance_gate,
    exceedance_mass,
    exceedance_ratios,
    fedavg_weights,
    median_lambda,
    robust_credit_scores,
    share_steps,
    update_effects,
    usable,
)


def test_credit_scores_exact_numbers() -> None:
    # n = (100, 300), losses (0.5, 1.5): raw n/N / loss = (0.25/0.5, 0.75/1.5) = (0.5, 0.5)
    np.testing.assert_allclose(credit_scores([0.5, 1.5], [100, 300]), [0.5, 0.5])
    np.testing.assert_allclose(fedavg_weights([100, 300]), [0.25, 0.75])


@given(
    st.lists(st.floats(1e-4, 1e3), min_size=1, max_size=8),
    st.lists(st.integers(1, 10_000), min_size=8, max_size=8),
)
def test_credit_scores_sum_to_one(losses: list[float], n: list[int]) -> None:
    c = credit_scores(losses, n[: len(losses)])
    assert c.sum() == pytest.approx(1.0)
    assert np.all(c > 0)
    # a lower loss never gets a lower share per sample
    per_sample = c / np.asarray(n[: len(losses)])
    order = np.argsort(losses)
    assert np.all(np.diff(per_sample[order]) <= 1e-12)


def test_clients_above_lambda_get_exactly_zero() -> None:
    c = credit_scores([0.1, 0.2, 5.0], [10, 10, 10], lam=1.0)
    assert c[2] == 0.0
    assert c.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(c[:2], [2 / 3, 1 / 3])


def test_everyone_above_lambda_gives_all_zero() -> None:
    assert np.all(credit_scores([2.0, 3.0], [1, 1], lam=1.0) == 0.0)


def test_unusable_losses_get_zero_weight_and_never_raise() -> None:
    """Non-finite, zero and negative losses mean exclusion, not an error."""
    c = credit_scores([np.inf, 0.5, np.nan, 0.0, -1.0, 1.5], [10, 100, 10, 10, 10, 300])
    np.testing.assert_allclose(c, [0.0, 0.5, 0.0, 0.0, 0.0, 0.5])
    assert np.all(credit_scores([np.inf, np.nan], [1, 1]) == 0.0)
    assert np.all(credit_scores([np.inf], [1], lam=np.nan) == 0.0)
    with pytest.raises(ValueError):  # a shape mismatch is a programming error
        credit_scores([1.0, 2.0], [1])


def test_extreme_losses_and_sizes_do_not_overflow() -> None:
    # 1/5e-324 overflows; the ratio form does not
    np.testing.assert_allclose(credit_scores([5e-324, 1.0], [1, 1]), [1.0, 0.0], atol=1e-300)
    np.testing.assert_allclose(credit_scores([1e-300, 1e300], [1, 1]), [1.0, 0.0])
    np.testing.assert_allclose(credit_scores([1e300, 1e300], [1e308, 1e308]), [0.5, 0.5])
    np.testing.assert_allclose(fedavg_weights([1e308, 1e308]), [0.5, 0.5])
    assert np.all(fedavg_weights([0, 0]) == 0.0)
    assert median_lambda([1.0, 3.0, np.inf, np.nan], 2.0) == 4.0
    assert np.isnan(median_lambda([np.inf], 2.0))


LOSS = st.one_of(
    st.sampled_from([np.inf, -np.inf, np.nan, 0.0, -1.0, 5e-324, 1.7e308]),
    st.floats(1e-300, 1e300),
)


@given(
    st.lists(LOSS, min_size=1, max_size=8),
    st.lists(st.integers(0, 10**12), min_size=8, max_size=8),
    st.one_of(st.none(), st.floats(1e-300, 1e300), st.just(np.nan)),
)
def test_credit_scores_total_on_any_input(
    losses: list[float], n: list[int], lam: float | None
) -> None:
    """Any losses, sizes and lambda: weights in [0, 1] summing to 1 (or all 0), zero exactly
    for the unusable, empty and above-lambda clients."""
    nk = n[: len(losses)]
    c = credit_scores(losses, nk, lam)
    assert np.all(np.isfinite(c)) and np.all((c >= 0) & (c <= 1))
    assert c.sum() == pytest.approx(1.0) or np.all(c == 0)
    ell = np.asarray(losses)
    out = ~usable(ell) | (np.asarray(nk) == 0)
    if lam is not None:
        out |= ~(ell <= lam)
    assert np.all(c[out] == 0)
    assert np.all(fedavg_weights(nk) >= 0)


def test_update_effects_are_relative_and_unusable_is_inf() -> None:
    np.testing.assert_allclose(update_effects([0.9, 1.1, 1.0], 1.0), [-0.1, 0.1, 0.0])
    assert np.all(np.isinf(update_effects([np.nan, np.inf, 0.0], 1.0)))
    assert np.all(np.isinf(update_effects([0.5, 1.0], np.inf)))
    assert np.all(np.isinf(update_effects([0.5, 1.0], 0.0)))
    np.testing.assert_array_equal(effect_gate([-0.1, 0.0, 0.01, np.inf]), [1, 1, 0, 0])
    np.testing.assert_array_equal(effect_gate([-0.1, 0.0, 0.01, 0.03], 0.02), [1, 1, 1, 0])


def test_share_steps_take_each_update_at_its_fedavg_share() -> None:
    prev = np.zeros((2, 2))
    steps = share_steps(prev, [np.ones((2, 2)), 3 * np.ones((2, 2))], [100, 300])
    np.testing.assert_allclose(steps[0], 0.25)
    np.testing.assert_allclose(steps[1], 2.25)
    huge = share_steps(np.full(2, -1e308), [np.full(2, 1e308)], [1])  # overflows, no error
    assert not np.all(np.isfinite(huge[0]))


def test_robust_credit_equals_credit_when_every_update_helps() -> None:
    losses, n = [0.8, 0.9, 0.95], [100, 200, 300]
    steps = [0.97, 0.98, 0.99]
    np.testing.assert_allclose(
        robust_credit_scores(losses, steps, n, 1.0), credit_scores(losses, n)
    )


def test_robust_credit_drops_an_update_that_raises_the_loss() -> None:
    """The contaminated client of item 11: its loss is within 1.03x the median, so lambda =
    2x the median keeps it; its step raises the loss the clients started from, so the effect
    gate drops it."""
    losses, n, prev = [0.02522, 0.02525, 0.02574, 0.02509], [1000, 1000, 1000, 1000], 0.02526
    steps = [0.02524, 0.02525, 0.02529, 0.02520]
    assert np.all(credit_scores(losses, n, median_lambda(losses, 2.0)) > 0)
    c = robust_credit_scores(losses, steps, n, prev)
    assert c[2] == 0.0 and c.sum() == pytest.approx(1.0)
    assert np.all(c[[0, 1, 3]] > 0.3)
    assert np.all(robust_credit_scores(losses, steps, n, 0.02) == 0.0)  # nobody helps: keep
    assert robust_credit_scores(losses, steps, n, prev, tolerance=0.01)[2] > 0


@given(
    st.lists(st.tuples(LOSS, LOSS, st.integers(0, 10**12)), min_size=1, max_size=8),
    LOSS,
)
def test_robust_credit_total_on_any_input(
    rows: list[tuple[float, float, int]], prev: float
) -> None:
    losses, steps, n = (list(c) for c in zip(*rows, strict=True))
    c = robust_credit_scores(losses, steps, n, prev)
    assert np.all(np.isfinite(c)) and np.all(c >= 0)
    assert c.sum() == pytest.approx(1.0) or np.all(c == 0)
    assert np.all(c[~effect_gate(update_effects(steps, prev))] == 0)


def test_accept_aggregate_never_lets_the_loss_rise() -> None:
    assert accept_aggregate(0.9, 1.0) and accept_aggregate(1.0, 1.0)
    assert not accept_aggregate(1.01, 1.0)
    assert accept_aggregate(1.01, 1.0, tolerance=0.02)
    assert not accept_aggregate(np.inf, 1.0) and not accept_aggregate(np.nan, 1.0)


def test_adaptive_lambda_is_linear() -> None:
    lams = [adaptive_lambda(2.0, r, 5, 0.5) for r in range(1, 6)]
    np.testing.assert_allclose(lams, [2.0, 1.75, 1.5, 1.25, 1.0])
    assert adaptive_lambda(2.0, 1, 1, 0.5) == 2.0


# -- onlad-robust's exceedance check ----------------------------------------------------------


def test_exceedance_mass_sums_the_scores_above_tau() -> None:
    assert exceedance_mass([0.1, 0.5, 1.0, 2.0, 3.0], 1.0) == 5.0  # 1.0 is not above
    assert exceedance_mass([], 1.0) == 0.0
    assert exceedance_mass([0.2, 0.3], 1.0) == 0.0
    top = np.finfo(np.float64).max
    assert exceedance_mass([np.nan, 0.5], 1.0) == top  # unscorable: flagged, never NaN
    assert exceedance_mass([np.inf, 1e308, 1e308], 1.0) == top  # no overflow to inf


def test_exceedance_ratios_compare_with_normal_data() -> None:
    r = exceedance_ratios([10.0, 20.0, 0.0, 5.0, -1.0, np.nan], [10.0, 5.0, 4.0, 0.0, 3.0, 3.0])
    np.testing.assert_allclose(r[:3], [1.0, 4.0, 0.0])
    assert np.isnan(r[3])  # nothing to compare with (no observed score above tau)
    assert np.isinf(r[4]) and np.isinf(r[5])  # an unusable report
    with pytest.raises(ValueError):
        exceedance_ratios([1.0], [1.0, 2.0])


def test_exceedance_gate_refuses_the_clients_far_above_the_median() -> None:
    """Two contaminated clients of six (as measured on Fashion-MNIST: 3.2-4.8 against at
    most 2.1 for honest clients) are refused; the honest ones pass."""
    ratios = [1.26, 1.59, 1.21, 4.78, 1.59, 4.67]
    np.testing.assert_array_equal(exceedance_gate(ratios, ratios), [1, 1, 1, 0, 1, 0])
    # the floor: with very clean peers (median 0.5) a client at 1.9x normal data still passes
    clean = [0.3, 0.5, 0.5, 0.6, 1.9]
    assert np.all(exceedance_gate(clean, clean))
    assert not exceedance_gate([2.1], clean)[0]
    # NaN (no comparison) passes, inf (unusable report) never; the median ignores inf
    np.testing.assert_array_equal(
        exceedance_gate([np.nan, np.inf, 3.0], [1.0, 1.0, np.inf, np.nan]), [1, 0, 0]
    )
    assert exceedance_gate([3.0], [np.inf], factor=4.0)[0]  # no finite reference: floor 1
    assert np.all(exceedance_gate([1e6], [1.0], factor=np.inf))  # inf turns it off


def test_robust_credit_scores_honour_the_keep_mask() -> None:
    losses, n = [0.8, 0.9, 0.95], [100, 200, 300]
    steps = [0.97, 0.98, 0.99]
    c = robust_credit_scores(losses, steps, n, 1.0, keep=[True, False, True])
    assert c[1] == 0.0
    np.testing.assert_allclose(c[[0, 2]], credit_scores([0.8, 0.95], [100, 300]))
    assert np.all(robust_credit_scores(losses, steps, n, 1.0, keep=[False] * 3) == 0)
    with pytest.raises(ValueError):
        robust_credit_scores(losses, steps, n, 1.0, keep=[True])
