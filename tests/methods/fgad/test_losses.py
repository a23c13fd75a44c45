"""FGAD's losses [FGAD eq. 8-13] against hand computations."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("torch_geometric")

from fedad.methods.fgad.losses import (
    balanced_reconstruction_loss,
    constant_reconstruction_loss,
    detection_loss,
    distillation_loss,
    edge_auc,
    edge_prior_shift,
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


def _graph_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Two graphs: a 4-path (3 undirected edges of 6 pairs) and a 3-star padded to 4 nodes."""
    adj = torch.zeros(2, 4, 4)
    for b, edges in ((0, [(0, 1), (1, 2), (2, 3)]), (1, [(0, 1), (0, 2)])):
        for i, j in edges:
            adj[b, i, j] = adj[b, j, i] = 1.0
    mask = torch.tensor([[True] * 4, [True, True, True, False]])
    return adj, mask


def test_balanced_reconstruction_is_kipf_and_wellings_weighted_bce() -> None:
    torch.manual_seed(3)
    adj, mask = _graph_batch()
    logits = torch.randn(2, 4, 4)
    want = []
    for b in range(2):
        n = int(mask[b].sum())
        off = ~torch.eye(n, dtype=torch.bool)
        lg, a = logits[b, :n, :n][off], adj[b, :n, :n][off]
        p, e = float(off.sum()), float(a.sum())
        w = torch.tensor((p - e) / e)
        bce = F.binary_cross_entropy_with_logits(lg, a, pos_weight=w)  # mean over the p pairs
        want.append(p / (2 * (p - e)) * bce)  # Kipf & Welling's norm
    got = balanced_reconstruction_loss(logits, adj, mask)
    torch.testing.assert_close(got, torch.stack(want).mean())
    # edges and non-edges weigh the same: on a sparse graph (a 10-path, density 0.2),
    # leaning to "no edge" everywhere beats logit 0 under eq. 8 but not when balanced
    path = torch.zeros(1, 10, 10)
    path[0, range(9), range(1, 10)] = path[0, range(1, 10), range(9)] = 1.0
    full = torch.ones(1, 10, dtype=torch.bool)
    lean, zero = torch.full((1, 10, 10), -2.0), torch.zeros(1, 10, 10)
    assert float(reconstruction_loss(lean, path, full)) < float(
        reconstruction_loss(zero, path, full)
    )
    assert float(balanced_reconstruction_loss(lean, path, full)) > float(
        balanced_reconstruction_loss(zero, path, full)
    )


def test_the_prior_shift_maps_the_balanced_optimum_to_the_graphs_density() -> None:
    adj, mask = _graph_batch()
    grid = torch.linspace(-4.0, 4.0, 801)
    for b in range(2):
        one_a, one_m = adj[b : b + 1], mask[b : b + 1]
        losses = [float(balanced_reconstruction_loss(c * torch.ones(1, 4, 4), one_a, one_m))
                  for c in grid]  # fmt: skip
        best = grid[int(torch.tensor(losses).argmin())]
        assert abs(float(best)) < 0.011  # a balanced constant is 0 ...
        shifted = torch.sigmoid(best - edge_prior_shift(one_a, one_m)).item()
        pairs = float(pair_mask(one_m).sum())
        density = float((one_a * pair_mask(one_m)).sum()) / pairs
        assert shifted == pytest.approx(density, abs=0.005)  # ... and shifted, the density
    assert edge_prior_shift(adj, mask).shape == (2, 1, 1)


def test_the_constant_predictor_is_the_best_constant_for_eq8() -> None:
    adj, mask = _graph_batch()
    const = constant_reconstruction_loss(adj, mask)
    density = torch.tensor([6 / 12, 4 / 6]).mean()
    torch.testing.assert_close(
        const, reconstruction_loss(torch.logit(density) * torch.ones(2, 4, 4), adj, mask)
    )
    for c in (-2.0, -0.5, 0.5, 2.0):
        assert float(reconstruction_loss(torch.full((2, 4, 4), c), adj, mask)) > float(const)


def test_edge_auc_ranks_edges_against_non_edges_of_real_pairs_only() -> None:
    adj, mask = _graph_batch()
    assert edge_auc(adj * 3.0, adj, mask) == 1.0
    assert edge_auc(-adj, adj, mask) == 0.0
    assert edge_auc(torch.zeros(2, 4, 4), adj, mask) == 0.5
    noisy = adj.clone()
    noisy[1, 3] = 9.0  # padding and the diagonal are not pairs
    noisy[:, range(4), range(4)] = 9.0
    assert edge_auc(noisy, adj, mask) == 1.0
    assert edge_auc(adj, torch.zeros(2, 4, 4), mask) is None


def test_generator_options_linear_output_bias_and_scale() -> None:
    torch.manual_seed(4)
    x = torch.eye(5)[[0, 1, 2, 3, 4]]
    ei = torch.tensor([[0, 1, 1, 2, 3, 4], [1, 0, 2, 1, 4, 3]])
    paper = Generator(5, 8, 2)
    with torch.no_grad():
        _, logstd = paper.encode(x, ei)
    assert float(logstd.min()) > -0.5  # after eq. 2's LeakyReLU: sigma of about 1 or more
    lin = Generator(5, 8, 2, output="linear", logit_bias=True, scaled=True)
    assert {"out_mu.weight", "out_sigma.bias", "logit_bias"} <= set(lin.state_dict())
    assert not {"out_mu.weight", "logit_bias"} & set(paper.state_dict())
    with torch.no_grad():
        lin.out_sigma.bias.fill_(-3.0)  # type: ignore[union-attr]
        lin.out_sigma.weight.zero_()  # type: ignore[union-attr]
        lin.logit_bias.fill_(-1.5)  # type: ignore[union-attr]
        _, logstd = lin.encode(x, ei)
    assert torch.all(logstd == -3.0)  # a linear output can make the noise small
    z = torch.randn(1, 5, 16)
    torch.testing.assert_close(lin.logits(z), Generator.decode(z) / 4.0 - 1.5)
    torch.testing.assert_close(paper.logits(z), Generator.decode(z))
    with pytest.raises(ValueError, match="linear"):
        Generator(5, output="mlp")


def test_edge_auc_equals_the_metrics_auroc_over_ordered_pairs_with_and_without_ties() -> None:
    """The fast path (one sort over unordered pairs) and the tie fallback both give
    :func:`fedad.evaluation.metrics.auroc` of every ordered pair of the graphs' real nodes."""
    import numpy as np

    from fedad.evaluation.metrics import auroc
    from fedad.methods.fgad.model import pair_mask

    gen = torch.Generator().manual_seed(0)
    for trial in range(12):
        b, n = 4, 12
        sizes = torch.randint(2, n + 1, (b,), generator=gen)
        mask = torch.arange(n).unsqueeze(0) < sizes.unsqueeze(1)
        z = torch.randn(b, n, 5, generator=gen)
        logits = z @ z.transpose(1, 2)
        if trial % 2:
            logits = logits.round()  # many ties between edges and non-edges
        a = torch.triu((torch.rand(b, n, n, generator=gen) < 0.3).float(), 1)
        a = a + a.transpose(1, 2)
        sel = pair_mask(mask)
        ref = auroc(a[sel].numpy().astype(np.int64), logits[sel].double().numpy())
        assert edge_auc(logits, a, mask) == pytest.approx(ref, abs=1e-12)
