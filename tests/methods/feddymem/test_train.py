"""FedDyMem's training helpers: the learning-rate schedule over rounds."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedad.methods.feddymem.train import cosine_factor


@given(st.integers(1, 2000))
def test_the_cosine_factor_falls_from_one_and_stays_positive(rounds: int) -> None:
    f = [cosine_factor(t, rounds) for t in range(1, rounds + 1)]
    assert f[0] == 1.0 and all(0.0 < v <= 1.0 for v in f)
    assert all(a >= b for a, b in itertools.pairwise(f))
    # (1 + cos(pi (t - 1) / T)) / 2: a half at the middle of the run
    if rounds % 2 == 0:
        assert cosine_factor(rounds // 2 + 1, rounds) == pytest.approx(0.5)
    assert f[-1] == pytest.approx((1 + math.cos(math.pi * (rounds - 1) / rounds)) / 2)


@pytest.mark.parametrize(("t", "rounds"), [(0, 5), (6, 5), (1, 0)])
def test_a_round_outside_the_run_is_refused(t: int, rounds: int) -> None:
    with pytest.raises(ValueError, match="outside"):
        cosine_factor(t, rounds)
