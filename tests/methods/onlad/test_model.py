"""Property tests for the OS-ELM math (eq. 1-5)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fedad.methods.onlad.detector import OSELMAutoEncoder
from fedad.methods.onlad.model import (
    batch_ridge,
    hidden,
    init_input_weights,
    init_phase,
    sequential_phase,
)


def _data(n: int, d: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((n, d))


@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=6),
    first=st.integers(1, 60),
    seed=st.integers(0, 10_000),
)
def test_sequential_equals_batch_ridge(sizes: list[int], first: int, seed: int) -> None:
    """After every chunk, OS-ELM (eq. 4 then eq. 5) equals batch ridge ELM on all data seen."""
    d, n_hidden, ridge = 12, 16, 1e-3
    x = _data(first + sum(sizes), d, seed)
    alpha, bias = init_input_weights(d, n_hidden, seed)
    h = hidden(x, alpha, bias)
    beta, p = init_phase(h[:first], x[:first], ridge)
    start = first
    for k in sizes:
        beta, p = sequential_phase(beta, p, h[start : start + k], x[start : start + k])
        start += k
    expect = batch_ridge(h, x, ridge)
    np.testing.assert_allclose(beta, expect, atol=1e-6, rtol=1e-6)
    np.testing.assert_allclose(
        p, np.linalg.inv(h.T @ h + ridge * np.eye(n_hidden)), atol=1e-6, rtol=1e-6
    )


def test_chunk_of_one_uses_the_scalar_path_and_agrees() -> None:
    x = _data(30, 5, 1)
    alpha, bias = init_input_weights(5, 8, 1)
    h = hidden(x, alpha, bias)
    b0, p0 = init_phase(h[:20], x[:20])
    b_scalar, p_scalar = sequential_phase(b0, p0, h[20:21], x[20:21])
    # the same update through the general (matrix) formula
    ph = p0 @ h[20:21].T
    p_matrix = p0 - ph @ np.linalg.inv(np.eye(1) + h[20:21] @ ph) @ ph.T
    b_matrix = b0 + p_matrix @ h[20:21].T @ (x[20:21] - h[20:21] @ b0)
    np.testing.assert_allclose(p_scalar, p_matrix, atol=1e-10)
    np.testing.assert_allclose(b_scalar, b_matrix, atol=1e-10)


def test_forgetting_factor_discounts_old_chunks() -> None:
    """With forgetting f, P^{-1} = f^k P_0^{-1} + sum_j f^(k-j) H_j^T H_j (exponential memory)."""
    f = 0.9
    x = _data(40, 6, 2)
    alpha, bias = init_input_weights(6, 10, 2)
    h = hidden(x, alpha, bias)
    beta, p = init_phase(h[:20], x[:20])
    info = np.linalg.inv(p)
    for j in range(20, 40, 5):
        beta, p = sequential_phase(beta, p, h[j : j + 5], x[j : j + 5], forgetting=f)
        info = f * info + h[j : j + 5].T @ h[j : j + 5]
    np.testing.assert_allclose(np.linalg.inv(p), info, rtol=1e-6, atol=1e-6)


def test_detector_contract_and_partial_fit() -> None:
    rng = np.random.default_rng(0)
    basis = rng.random((3, 20))
    normal = rng.random((400, 3)) @ basis / 3
    anomal = rng.random((50, 20))
    det = OSELMAutoEncoder(n_hidden=16, seed=0).fit(normal[:200])
    assert det.score(anomal).mean() > 3 * det.score(normal[200:]).mean()
    before = det.beta_.copy()
    det.partial_fit(normal[200:])
    assert not np.allclose(before, det.beta_)
    again = OSELMAutoEncoder(n_hidden=16, seed=0).fit(normal[:200])
    np.testing.assert_array_equal(again.alpha_, det.alpha_)  # seeded alpha, b
    arrays = det.get_arrays()
    clone = OSELMAutoEncoder(n_hidden=16).set_arrays(arrays)
    np.testing.assert_array_equal(clone.score(anomal), det.score(anomal))
    assert set(np.unique(det.predict(anomal))) <= {0, 1}


def test_detect_and_learn_equals_score_then_partial_fit() -> None:
    rng = np.random.default_rng(3)
    x = rng.random((120, 10))
    a = OSELMAutoEncoder(n_hidden=8, seed=1).fit(x[:60])
    b = OSELMAutoEncoder(n_hidden=8, seed=1).fit(x[:60])
    tau = float(np.quantile(a.score(x[60:]), 0.7))
    for start in range(60, 120, 15):
        chunk = x[start : start + 15]
        flagged = a.detect_and_learn(chunk, tau)
        expect = (b.score(chunk) > tau).astype(np.int64)
        b.partial_fit(chunk[expect == 0])
        np.testing.assert_array_equal(flagged, expect)
        np.testing.assert_allclose(a.beta_, b.beta_, atol=1e-10)
        np.testing.assert_allclose(a.p_, b.p_, atol=1e-10)


def test_score_and_learn_returns_the_prequential_scores() -> None:
    """The scores are the model's before the chunk; what is learned is what
    :meth:`detect_and_learn` learns (scores above tau are not)."""
    rng = np.random.default_rng(4)
    x = rng.random((90, 10))
    a = OSELMAutoEncoder(n_hidden=8, seed=2).fit(x[:40])
    b = OSELMAutoEncoder(n_hidden=8, seed=2).fit(x[:40])
    tau = float(np.quantile(a.score(x[40:]), 0.6))
    for start in range(40, 90, 25):
        chunk = x[start : start + 25]
        before = a.score(chunk)
        scores = a.score_and_learn(chunk, tau)
        np.testing.assert_allclose(scores, before)
        np.testing.assert_array_equal(b.detect_and_learn(chunk, tau), scores > tau)
        np.testing.assert_allclose(a.beta_, b.beta_, atol=1e-12)
    everything = OSELMAutoEncoder(n_hidden=8, seed=2).fit(x[:40])
    learn_all = OSELMAutoEncoder(n_hidden=8, seed=2).fit(x[:40]).partial_fit(x[40:])
    everything.score_and_learn(x[40:], None)
    np.testing.assert_allclose(everything.beta_, learn_all.beta_, atol=1e-10)
