"""FADngs's losses: CRAD's pairs [eq. 7-9], SED [eq. 11-13], Pearson weights, FIFO queue."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedad.components.losses import (
    collapsed_loss,
    contrastive_loss,
    shifted_instance_mask,
)
from fedad.methods.fadngs.losses import (
    FifoQueue,
    cosine_distill_loss,
    crad_anchors,
    crad_loss,
    crad_mask,
    crad_views,
    ensemble_sed_loss,
    pearson_weights,
    sed_loss,
    simclr_mask,
    similarity_distribution,
    teacher_agreement,
)


def test_crad_mask_on_a_toy_batch() -> None:
    # 3 samples, sample 1 predicted anomalous; 2 T+ views and 1 T- view each.
    # rows: T+ views 0:(0,0) 1:(0,1) 2:(1,0) 3:(1,1) 4:(2,0) 5:(2,1); T- views 6:0 7:1 8:2
    pos, neg = crad_mask(torch.tensor([False, True, False]), n_plus=2, n_minus=1)
    assert pos.shape == neg.shape == (9, 9)
    anchors = {0, 1, 4, 5}  # the T+ views of the predicted normals 0 and 2
    assert set(crad_anchors(pos).nonzero().flatten().tolist()) == anchors
    normals_plus = {0, 1, 4, 5}
    negatives = {2, 3, 6, 7, 8}  # T+ of the anomaly, T- of every sample
    for a in range(9):
        got_pos = set(pos[a].nonzero().flatten().tolist())
        got_neg = set(neg[a].nonzero().flatten().tolist())
        if a in anchors:
            assert got_pos == normals_plus - {a}
            assert got_neg == negatives
        else:
            assert got_pos == set() and got_neg == set()
    assert not (pos & neg).any()
    assert not pos.diagonal().any() and not neg.diagonal().any()


def test_contrastive_loss_matches_eq7_by_hand() -> None:
    torch.manual_seed(0)
    z = F.normalize(torch.randn(9, 5), dim=1)
    pos, neg = crad_mask(torch.tensor([False, True, False]), 2, 1)
    tau = 0.5
    total = []
    for a in crad_anchors(pos).nonzero().flatten().tolist():
        num = sum(math.exp(float(z[a] @ z[b]) / tau) for b in pos[a].nonzero().flatten())
        den = num + sum(math.exp(float(z[a] @ z[b]) / tau) for b in neg[a].nonzero().flatten())
        total.append(-math.log(num / den) / int(pos[a].sum()))
    got = contrastive_loss(z, pos, neg, tau)
    assert got.item() == pytest.approx(sum(total) / len(total), rel=1e-5)


def test_crad_loss_layout_and_gradients() -> None:
    torch.manual_seed(1)
    z_plus = torch.randn(3, 2, 4, requires_grad=True)
    z_minus = torch.randn(3, 3, 4)
    flags = torch.tensor([False, True, False])
    views = crad_views(z_plus, z_minus)
    assert views.shape == (15, 4)
    torch.testing.assert_close(views[2], z_plus[1, 0])
    torch.testing.assert_close(views[6 + 3 * 1 + 2], z_minus[1, 2])
    loss = crad_loss(z_plus, z_minus, flags)
    pos, neg = crad_mask(flags, 2, 3)
    torch.testing.assert_close(loss, contrastive_loss(views, pos, neg, 0.5))
    loss.backward()
    assert z_plus.grad is not None and torch.isfinite(z_plus.grad).all()
    # no predicted normal: no anchor, a zero that keeps the graph
    none = crad_loss(z_plus, z_minus, torch.ones(3, dtype=torch.bool))
    assert none.item() == 0.0 and none.requires_grad


def test_crad_loss_pulls_normals_together() -> None:
    d = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    flags = torch.tensor([False, False])
    close = torch.stack([d[0], d[0]])[:, None, :].repeat(1, 2, 1)
    apart = torch.stack([d[0], -d[0]])[:, None, :].repeat(1, 2, 1)
    rot = d[1].expand(2, 1, 2)
    assert crad_loss(close, rot, flags) < crad_loss(apart, rot, flags)


def test_sed_loss_is_the_cross_entropy_of_the_two_softmaxes() -> None:
    torch.manual_seed(2)
    s, t, q = torch.randn(4, 6), torch.randn(4, 6), torch.randn(10, 6)
    tau = 0.3

    def dist(z: torch.Tensor) -> torch.Tensor:
        cos = torch.tensor([[F.cosine_similarity(zi, qj, dim=0) for qj in q] for zi in z])
        e = torch.exp(cos / tau)
        return e / e.sum(dim=1, keepdim=True)

    p_t, p_s = dist(t), dist(s)
    torch.testing.assert_close(similarity_distribution(t, q, tau), p_t)
    torch.testing.assert_close(similarity_distribution(s, q, tau).sum(1), torch.ones(4))
    manual = -(p_t * p_s.log()).sum(dim=1).mean()
    torch.testing.assert_close(sed_loss(s, t, q, tau), manual)
    # minimal (the teacher's entropy) when the student equals the teacher
    entropy = -(p_t * p_t.log()).sum(dim=1).mean()
    torch.testing.assert_close(sed_loss(t, t, q, tau), entropy)
    assert sed_loss(s, t, q, tau) > entropy


def test_sed_positive_is_the_distribution_over_the_teachers_own_entry_and_the_queue() -> None:
    torch.manual_seed(4)
    s, t, q = torch.randn(3, 5), torch.randn(3, 5), torch.randn(7, 5)
    tau, t_tau = 0.2, 0.05
    for i in range(3):
        # row i's queue with the teacher's own representation of input i in front
        qi = torch.cat([t[i : i + 1], q])
        want = sed_loss(s[i : i + 1], t[i : i + 1], qi, tau, t_tau)
        got = sed_loss(s[i : i + 1], t[i : i + 1], q, tau, t_tau, positive=True)
        torch.testing.assert_close(got, want)
    # with a near-zero teacher temperature the target is the positive alone: InfoNCE
    s_n, t_n, q_n = F.normalize(s, dim=1), F.normalize(t, dim=1), F.normalize(q, dim=1)
    logits = torch.cat([(s_n * t_n).sum(1, keepdim=True), s_n @ q_n.T], dim=1) / tau
    info_nce = F.cross_entropy(logits, torch.zeros(3, dtype=torch.long))
    torch.testing.assert_close(sed_loss(s, t, q, tau, 1e-4, positive=True), info_nce)
    assert not torch.allclose(sed_loss(s, t, q, tau, 1e-4), info_nce)


def test_ensemble_sed_is_the_weighted_sum_and_only_the_student_learns() -> None:
    torch.manual_seed(3)
    s = torch.randn(4, 6, requires_grad=True)
    t1 = torch.randn(4, 6, requires_grad=True)
    t2, q1, q2 = torch.randn(4, 6), torch.randn(8, 6), torch.randn(5, 6)
    got = ensemble_sed_loss(s, [t1, t2], [q1, q2], [0.25, 0.75], tau=0.5)
    want = 0.25 * sed_loss(s, t1, q1) + 0.75 * sed_loss(s, t2, q2)
    torch.testing.assert_close(got, want)
    got.backward()
    assert s.grad is not None and t1.grad is None


def test_cosine_sed_form_is_the_weighted_cosine_distance_and_ignores_the_queues() -> None:
    torch.manual_seed(4)
    s = torch.randn(5, 6, requires_grad=True)
    t1, t2 = torch.randn(5, 6), torch.randn(5, 6)
    q1, q2 = torch.randn(8, 6), torch.randn(3, 6)
    got = ensemble_sed_loss(s, [t1, t2], [q1, q2], [0.25, 0.75], form="cosine")
    want = (
        0.25 * (1 - F.cosine_similarity(s, t1)).mean()
        + 0.75 * (1 - F.cosine_similarity(s, t2)).mean()
    )
    torch.testing.assert_close(got, want)
    other = ensemble_sed_loss(s, [t1, t2], [q2, q1], [0.25, 0.75], form="cosine", tau=0.1)
    torch.testing.assert_close(got, other)  # no queue, no temperature
    # where the student is every teacher (up to scale) there is nothing to distil
    same = s.detach().clone().requires_grad_(True)
    zero = ensemble_sed_loss(same, [2 * s.detach(), s.detach()], [q1, q2], [0.5, 0.5],
                             form="cosine")  # fmt: skip
    zero.backward()
    assert float(zero.detach()) == pytest.approx(0.0, abs=1e-6)
    assert same.grad is not None and float(same.grad.abs().max()) < 1e-5
    # eq. 11-13 with the teacher's own entry still pushes from the queue there
    pushed = s.detach().clone().requires_grad_(True)
    sed_loss(pushed, pushed.detach(), q1, 0.2, 1e-4, positive=True).backward()
    assert pushed.grad is not None and float(pushed.grad.abs().max()) > 1e-3
    assert float(cosine_distill_loss(s, -s).detach()) == pytest.approx(2.0)


def test_sed_forms_are_checked() -> None:
    s, t = torch.randn(3, 4), torch.randn(3, 4)
    with pytest.raises(ValueError, match="unknown SED form 'Cosine'"):
        ensemble_sed_loss(s, [t], None, [1.0], form="Cosine")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs one queue per teacher"):
        ensemble_sed_loss(s, [t], None, [1.0], form="seed")
    got = ensemble_sed_loss(s, [t], None, [1.0], form="cosine")  # no queue needed
    torch.testing.assert_close(got, cosine_distill_loss(s, t))


def test_teacher_agreement_on_a_hand_example() -> None:
    a = np.array([[1.0, 0.0], [0.0, 2.0]])
    b = np.array([[0.0, 3.0], [0.0, 1.0]])  # orthogonal to a on row 0, parallel on row 1
    assert teacher_agreement([a, b]) == pytest.approx(0.5)
    assert teacher_agreement([a, a, 2 * a]) == pytest.approx(1.0)
    assert math.isnan(teacher_agreement([a]))


def test_pearson_weights_on_a_hand_example() -> None:
    scores = np.array([[1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0, 8.0], [4.0, 3.0, 2.0, 1.0]])
    # z-scores: a, a, -a; mean a/3; correlations 1, 1, -1
    np.testing.assert_allclose(pearson_weights(scores), [0.5, 0.5, 0.0])
    e, em = math.e, math.exp(-1.0)
    np.testing.assert_allclose(
        pearson_weights(scores, temperature=1.0), np.array([e, e, em]) / (2 * e + em)
    )
    np.testing.assert_allclose(pearson_weights(scores, normalise="minmax"), [0.5, 0.5, 0.0])
    # a constant teacher gets r = 0; with no positive correlation at all, uniform
    flat = np.array([[1.0, 1.0, 1.0], [3.0, 2.0, 1.0]])
    np.testing.assert_allclose(pearson_weights(flat), [0.0, 1.0])
    np.testing.assert_allclose(pearson_weights(np.ones((2, 3))), [0.5, 0.5])


def test_pearson_weights_properties() -> None:
    rng = np.random.default_rng(4)
    base = rng.normal(size=50)
    scores = np.stack([base + rng.normal(scale=s, size=50) for s in (0.1, 1.0, 5.0)])
    w = pearson_weights(scores)
    assert w.sum() == pytest.approx(1.0) and np.all(w >= 0)
    assert w[0] > w[1] > w[2]  # the teacher closest to the consensus weighs most
    rescaled = scores * np.array([[3.0], [0.5], [10.0]]) + np.array([[1.0], [-2.0], [7.0]])
    np.testing.assert_allclose(pearson_weights(rescaled), w)  # z-scores: scale-free
    assert pearson_weights(scores, temperature=1e6) == pytest.approx(np.full(3, 1 / 3))


def test_fifo_queue_order_across_pushes() -> None:
    q = FifoQueue(capacity=5, dim=2)
    assert len(q) == 0
    rows = torch.arange(16.0).reshape(8, 2)  # row i is (2i, 2i + 1)
    q.push(rows[:3])
    torch.testing.assert_close(q.values, rows[:3])
    q.push(rows[3:6])  # 6 rows > 5: the oldest (row 0) is dropped
    torch.testing.assert_close(q.values, rows[1:6])
    q.push(rows[6:8])
    torch.testing.assert_close(q.values, rows[3:8])
    assert len(q) == 5
    q.push(torch.arange(14.0).reshape(7, 2) + 100)  # a batch larger than the capacity
    torch.testing.assert_close(q.values, torch.arange(14.0).reshape(7, 2)[2:] + 100)
    with pytest.raises(ValueError):
        q.push(torch.zeros(1, 3))


def test_fifo_queue_random_init_and_detached() -> None:
    q = FifoQueue.random(4, 3, generator=torch.Generator().manual_seed(0))
    assert q.values.shape == (4, 3)
    torch.testing.assert_close(q.values.norm(dim=1), torch.ones(4))
    x = torch.randn(2, 3, requires_grad=True)
    q.push(x)
    assert not q.values.requires_grad
    torch.testing.assert_close(q.values[-2:], x.detach())


def test_simclr_mask_with_two_views_is_nt_xent() -> None:
    z = F.normalize(torch.randn(6, 4, generator=torch.Generator().manual_seed(0)), dim=1)
    pos, neg = simclr_mask(3, 2)
    assert pos.sum(1).tolist() == [1] * 6 and neg.sum(1).tolist() == [4] * 6
    assert bool(pos[0, 1]) and bool(pos[5, 4]) and not bool(pos[0, 0]) and not bool(neg[0, 1])
    tau = 0.5
    sim = z @ z.T / tau
    want = []
    for a in range(6):
        b = a + 1 if a % 2 == 0 else a - 1
        others = [j for j in range(6) if j != a]
        want.append(-(sim[a, b] - torch.logsumexp(sim[a, others], dim=0)))
    got = contrastive_loss(z, pos, neg, tau)
    assert torch.allclose(got, torch.stack(want).mean(), atol=1e-6)


def test_mean_log_form_averages_the_log_probabilities_of_the_positives() -> None:
    torch.manual_seed(0)
    z = torch.randn(5, 3)
    pos = torch.zeros(5, 5, dtype=torch.bool)
    neg = torch.zeros(5, 5, dtype=torch.bool)
    pos[0, 1] = pos[0, 2] = True  # anchor 0: two positives, two negatives
    neg[0, 3] = neg[0, 4] = True
    zn = F.normalize(z, dim=1)
    s = (zn @ zn.T / 0.5)[0]
    denom = torch.logsumexp(s[1:], dim=0)
    want = -((s[1] - denom) + (s[2] - denom)) / 2
    got = contrastive_loss(z, pos, neg, 0.5, form="mean-log")
    torch.testing.assert_close(got, want)
    eq7 = -(torch.logsumexp(s[1:3], dim=0) - denom) / 2
    torch.testing.assert_close(contrastive_loss(z, pos, neg, 0.5, form="eq7"), eq7)
    # with one positive per anchor the two forms agree
    one = pos.clone()
    one[0, 2] = False
    torch.testing.assert_close(
        contrastive_loss(z, one, neg, 0.5, form="mean-log"), contrastive_loss(z, one, neg, 0.5)
    )


def test_sed_teacher_temperature_sharpens_only_the_teacher() -> None:
    torch.manual_seed(1)
    queue = F.normalize(torch.randn(6, 4), dim=1)
    t, s = torch.randn(3, 4), torch.randn(3, 4)
    nearest = (F.normalize(t, dim=1) @ queue.T).argmax(dim=1)
    want = -F.log_softmax(F.normalize(s, dim=1) @ queue.T / 0.2, dim=1)[torch.arange(3), nearest]
    torch.testing.assert_close(sed_loss(s, t, queue, 0.2, teacher_tau=1e-4), want.mean())
    torch.testing.assert_close(
        sed_loss(s, t, queue, 0.2, teacher_tau=0.2), sed_loss(s, t, queue, 0.2)
    )


@pytest.mark.parametrize("form", ["eq7", "mean-log"])
@pytest.mark.parametrize("pairs", ["simclr", "crad", "csi"])
def test_collapsed_loss_is_the_loss_of_identical_representations(form: str, pairs: str) -> None:
    """Every representation the same (any direction, any norm): the loss is the collapsed
    value, whatever the temperature; SimCLR's is log(2B - 1)."""
    b = 6
    if pairs == "simclr":
        pos, neg = simclr_mask(b, 2)
    elif pairs == "csi":
        pos, neg = shifted_instance_mask(b, 2, 4)
    else:
        pos, neg = crad_mask(torch.tensor([False, True, False, False, True, False]), 2, 3)
    z = torch.randn(1, 8).repeat(pos.shape[0], 1) * 3.0
    for tau in (0.07, 0.5, 2.0):
        got = float(contrastive_loss(z, pos, neg, tau, form))  # type: ignore[arg-type]
        assert got == pytest.approx(collapsed_loss(pos, neg, form), rel=1e-5)  # type: ignore[arg-type]
    if pairs == "simclr":
        assert collapsed_loss(pos, neg, "mean-log") == pytest.approx(math.log(2 * b - 1))


def test_collapsed_loss_without_anchors_is_nan() -> None:
    pos, neg = crad_mask(torch.ones(3, dtype=torch.bool), 2, 3)  # every sample anomalous
    assert math.isnan(collapsed_loss(pos, neg))
