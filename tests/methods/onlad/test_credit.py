from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedad.methods.onlad.credit import adaptive_lambda, credit_scores, fedavg_weights


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


def test_bad_losses_raise() -> None:
    with pytest.raises(ValueError):
        credit_scores([0.0, 1.0], [1, 1])
    with pytest.raises(ValueError):
        credit_scores([np.nan], [1])


def test_adaptive_lambda_is_linear() -> None:
    lams = [adaptive_lambda(2.0, r, 5, 0.5) for r in range(1, 6)]
    np.testing.assert_allclose(lams, [2.0, 1.75, 1.5, 1.25, 1.0])
    assert adaptive_lambda(2.0, 1, 1, 0.5) == 2.0
