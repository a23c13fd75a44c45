"""FGAD's training loop: the sampled generated graphs (our variant)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("torch_geometric")

from fedad.methods.fgad.train import sample_adjacency


def test_sampled_adjacency_is_symmetric_binary_and_follows_the_probabilities() -> None:
    p = torch.zeros(2, 5, 5)
    p[0, :4, :4] = 0.5  # graph 0: 4 nodes; node 4 is padding
    p[1] = 1.0
    p *= 1 - torch.eye(5)
    g = torch.Generator().manual_seed(0)
    a = sample_adjacency(p, g)
    assert torch.equal(a, a.transpose(1, 2))
    assert set(a.unique().tolist()) <= {0.0, 1.0}
    assert (a[:, range(5), range(5)] == 0).all()  # no self-loops
    assert (a[0, 4] == 0).all() and (a[0, :, 4] == 0).all()  # padding stays empty
    assert torch.equal(a[1], 1 - torch.eye(5))  # probability 1: every edge
    # the edge frequency matches the probability
    many = torch.stack([sample_adjacency(p[:1], g)[0, 0, 1] for _ in range(2000)])
    assert abs(float(many.mean()) - 0.5) < 0.05
