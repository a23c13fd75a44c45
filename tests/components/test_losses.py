"""The contrastive losses FADngs and the contrastive detector share (fedad.components.losses);
the tests that combine them with FADngs's pairs are in tests/methods/fadngs/test_losses.py."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from fedad.components.losses import mean_pairwise_cosine, shifted_instance_mask


def test_shifted_instance_mask_pairs_on_a_toy_batch() -> None:
    """B = 2 samples, V = 2 views, S = 4 rotations: view (s B + i) V + v. Every view is an
    anchor (the rotated ones too); its one positive is the other view of the same sample
    under the same rotation; every other view, its own sample's other rotations included,
    is a negative."""
    pos, neg = shifted_instance_mask(2, 2, 4)
    n = 16
    assert pos.shape == neg.shape == (n, n)
    want_pos = torch.zeros(n, n, dtype=torch.bool)
    for k in range(0, n, 2):  # views 2k and 2k+1 are one instance
        want_pos[k, k + 1] = want_pos[k + 1, k] = True
    assert torch.equal(pos, want_pos)
    assert torch.equal(neg, ~want_pos & ~torch.eye(n, dtype=torch.bool))
    # rotated views are anchors: each has its positive (the pre-fix layout had none)
    assert bool(pos[4:].any(dim=1).all())
    # view 0 (sample 0, upright) and view 4 (sample 0 turned by 90 degrees): negatives
    assert bool(neg[0, 4]) and bool(neg[4, 0])
    with pytest.raises(ValueError):
        shifted_instance_mask(2, 1, 4)


def test_mean_pairwise_cosine_equals_the_pairwise_mean() -> None:
    z = torch.randn(7, 5)
    zn = F.normalize(z, dim=1)
    s = zn @ zn.T
    brute = float((s.sum() - s.diag().sum()) / (7 * 6))
    assert mean_pairwise_cosine(z) == pytest.approx(brute, abs=1e-6)
    assert mean_pairwise_cosine(torch.ones(4, 3)) == pytest.approx(1.0)
    assert math.isnan(mean_pairwise_cosine(torch.ones(1, 3)))
