"""FGAD's losses [FGAD eq. 8-13] against hand computations."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("torch_geometric")

from fedad.methods.fgad.losses import (
    detection_loss,
    distillation_loss,
    kl_divergence,
    reconstruction_loss,
    total_loss,
)
from fedad.methods.fgad.model import Generator, pair_mask


def test_reconstruction_is_the_bce_over_each_graphs_off_diagonal_pairs() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 3)
    adj = torch.tensor([[[0, 1, 0], [1, 0, 1], [0, 1, 0]], [[0, 1, 0], [1, 0, 0], [0, 0, 0]]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    p = torch.sigmoid(logits)

    def bce(b: int, i: int, j: int) -> float:
        a = float(adj[b, i, j])
        return -(a * math.log(p[b, i, j]) + (1 - a) * math.log(1 - p[b, i, j]))

    g0 = sum(bce(0, i, j) for i in range(3) for j in range(3) if i != j) / 6
    g1 = (bce(1, 0, 1) + bce(1, 1, 0)) / 2  # node 2 is padding
    torch.testing.assert_close(reconstruction_loss(logits, adj, mask), torch.tensor((g0 + g1) / 2))
    # padding and the diagonal do not matter
    noisy = logits.clone()
    noisy[1, 2] = 99.0
    noisy[:, 0, 0] = -99.0
    torch.testing.assert_close(reconstruction_loss(noisy, adj, mask), torch.tensor((g0 + g1) / 2))


def test_generated_adjacency_is_symmetric_in_unit_interval_and_per_graph() -> None:
    torch.manual_seed(1)
    z = torch.randn(3, 5, 4)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2, [True] * 4 + [False]])
    a = Generator.adjacency(Generator.decode(z), mask)
    assert a.shape == (3, 5, 5)
    torch.testing.assert_close(a, a.transpose(1, 2))
    assert torch.all((a >= 0) & (a <= 1))
    assert torch.all(a[1, 3:] == 0) and torch.all(a[1, :, 3:] == 0)
    assert torch.all(torch.diagonal(a, dim1=1, dim2=2) == 0)
    assert pair_mask(mask)[2].sum() == 12


def test_kl_of_the_prior_is_zero_and_matches_the_closed_form() -> None:
    assert float(kl_divergence(torch.zeros(4, 3), torch.zeros(4, 3))) == 0.0
    mu, logstd = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, math.log(2.0)]])
    want = 0.5 * (1.0 + 0.0) + 0.5 * (4.0 - 1.0 - 2 * math.log(2.0))
    torch.testing.assert_close(kl_divergence(mu, logstd), torch.tensor(want))


def test_detection_labels_real_as_normal_and_generated_as_class_zero() -> None:
    real = torch.tensor([[-5.0, 5.0]])  # confident "normal" (index 1)
    fake = torch.tensor([[5.0, -5.0]])  # confident "generated" (index 0)
    assert float(detection_loss(real, fake)) < 1e-3
    assert float(detection_loss(fake, real)) > 10.0
    want = F.cross_entropy(real, torch.tensor([1])) + F.cross_entropy(fake, torch.tensor([0]))
    torch.testing.assert_close(detection_loss(real, fake), want)


def test_distillation_is_the_kl_of_the_softened_heads_and_spares_the_teacher() -> None:
    torch.manual_seed(2)
    t = torch.randn(5, 2, requires_grad=True)
    s = torch.randn(5, 2, requires_grad=True)
    tau = 2.0
    p, q = torch.softmax(t / tau, 1), torch.softmax(s / tau, 1)
    want = (p * (p.log() - q.log())).sum(1).mean()
    got = distillation_loss(t, s, tau)
    torch.testing.assert_close(got, want)
    got.backward()
    assert t.grad is None and s.grad is not None
    assert float(distillation_loss(s, s, tau).detach()) == pytest.approx(0.0, abs=1e-7)


def test_total_is_eq13_and_eq10_without_distillation() -> None:
    ad, g, kd, kl = torch.tensor(1.0), torch.tensor(2.0), torch.tensor(3.0), torch.tensor(4.0)
    assert float(total_loss(ad, g, kd, lam=0.5, gamma=10.0)) == 1.0 + 1.0 + 30.0
    assert float(total_loss(ad, g, None, lam=0.5, gamma=10.0)) == 2.0
    assert float(total_loss(ad, g, None, lam=1.0, gamma=1.0, kl=kl, kl_weight=0.5)) == 5.0
