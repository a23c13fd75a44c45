"""FedUV's math on hand cases: codes, correlation, the positive hinge loss, the score."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedad.methods.feduv.model import (
    FedUVNet,
    correlation,
    feduv_loss,
    feduv_score,
    secret_code,
)

OUT = torch.tensor([[1.0, 1.0], [1.0, -1.0], [0.0, 2.0], [-3.0, -3.0]])
CODE = torch.tensor([1.0, 1.0])


def test_correlation_hand_case() -> None:
    rho = correlation(OUT, CODE)
    expected = [1.0, 0.0, 1 / math.sqrt(2), -1.0]
    np.testing.assert_allclose(rho.numpy(), expected, atol=1e-6)
    # scale-free in the output, and 0 (not NaN) for an all-zero output
    np.testing.assert_allclose(correlation(5 * OUT, CODE).numpy(), expected, atol=1e-6)
    assert float(correlation(torch.zeros(1, 2), CODE)[0]) == 0.0


@pytest.mark.parametrize(
    ("margin", "expected"),
    [
        # 1 - rho per row: 0, 1, 1 - 1/sqrt(2), 2
        (1.0, (0.0 + 1.0 + (1 - 1 / math.sqrt(2)) + 2.0) / 4),
        # hinge at 0.5: rows already past the margin cost nothing
        (0.5, (0.0 + 0.5 + 0.0 + 1.5) / 4),
    ],
)
def test_loss_hand_case(margin: float, expected: float) -> None:
    assert float(feduv_loss(OUT, CODE, margin)) == pytest.approx(expected, abs=1e-6)


def test_loss_gradient_pulls_towards_the_code() -> None:
    out = torch.tensor([[1.0, -1.0]], requires_grad=True)
    feduv_loss(out, CODE, 1.0).backward()  # type: ignore[no-untyped-call]
    assert out.grad is not None
    step = out.detach() - 0.1 * out.grad
    assert float(correlation(step, CODE)[0]) > 0.0


def test_score_is_negative_correlation() -> None:
    np.testing.assert_allclose(feduv_score(OUT, CODE).numpy(), -correlation(OUT, CODE).numpy())


def test_codes_are_pm1_seeded_and_nearly_orthogonal() -> None:
    a = secret_code(np.random.default_rng(1), 256)
    b = secret_code(np.random.default_rng(2), 256)
    assert a.dtype == np.float32 and set(np.unique(a)) == {-1.0, 1.0}
    np.testing.assert_array_equal(a, secret_code(np.random.default_rng(1), 256))
    assert abs(float(a @ b) / 256) < 4 / math.sqrt(256)
    with pytest.raises(ValueError, match="positive"):
        secret_code(np.random.default_rng(0), 0)


@pytest.mark.parametrize(("kind", "shape"), [("vector", (6,)), ("image", (1, 8, 8))])
def test_network_output_shape(kind: str, shape: tuple[int, ...]) -> None:
    net = FedUVNet(kind, shape, hidden=16, length=32)
    assert net(torch.zeros(5, *shape)).shape == (5, 32)
