"""FADngs's loops: LocalUpdate's selection [eq. 8], SED's distillation [eq. 11-13]."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from fedad.components.nn.resnet import Encoder
from fedad.methods.fadngs.density import fit_gaussians
from fedad.methods.fadngs.losses import FifoQueue
from fedad.methods.fadngs.train import (
    cosine_lr,
    embed,
    local_update,
    predicted_anomalies,
    sed_distill,
    teacher_representations,
)


def _images(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, 1, 8, 8)).astype(np.float32)


def _oriented(n: int, seed: int = 0) -> np.ndarray:
    """Faint noise with a bright horizontal bar in the top half: rotations are told apart."""
    rng = np.random.default_rng(seed)
    x = 0.2 * rng.random((n, 1, 8, 8)).astype(np.float32)
    for i, row in enumerate(rng.integers(0, 3, size=n)):
        x[i, 0, row, 1:7] = 1.0
    return x


def _encoder(seed: int = 0) -> Encoder:
    torch.manual_seed(seed)
    return Encoder(1, width=4, proj_dim=8)


def test_cosine_lr_endpoints() -> None:
    assert cosine_lr(0.1, 0, 10) == pytest.approx(0.1)
    assert cosine_lr(0.1, 5, 10) == pytest.approx(0.05)
    assert cosine_lr(0.1, 10, 10) == pytest.approx(0.0, abs=1e-12)
    assert cosine_lr(0.1, 0, 1) == 0.1


def test_predicted_anomalies_are_the_top_share_under_the_density() -> None:
    rng = np.random.default_rng(0)
    z = rng.normal(size=(100, 3))
    z[:5] += 10.0  # five far-away samples
    means, covs = fit_gaussians(z[5:], np.zeros(95, dtype=np.int64))
    flags, delta = predicted_anomalies(z, means, covs, 0.95)
    assert flags.sum() == 5 and flags[:5].all()
    s = np.sort(((z - means[0]) @ np.linalg.inv(covs[0]) * (z - means[0])).sum(axis=1))
    assert s[94] <= delta < s[95]  # between the 95th and the 96th smallest score


@pytest.mark.parametrize("loss", ["crad", "simclr", "csi"])
@pytest.mark.parametrize("form", ["eq7", "mean-log"])
def test_local_update_trains_and_lowers_its_loss(loss: str, form: str) -> None:
    x = _oriented(32)
    enc = _encoder()
    z0 = embed(enc, x)
    means, covs = fit_gaussians(z0, np.zeros(len(x), dtype=np.int64))
    slow = (form, loss) == ("eq7", "crad")  # eq7 divides CRAD's step by |x+|
    lr, epochs = (0.5, 16) if slow else (0.05, 8)
    kw = dict(batch_size=16, lr=lr, loss=loss, means=means, covs=covs, form=form)
    first = local_update(enc, x, epochs=1, rng=np.random.default_rng(0), **kw)  # type: ignore[arg-type]
    later = local_update(enc, x, epochs=epochs, rng=np.random.default_rng(1), **kw)  # type: ignore[arg-type]
    assert math.isfinite(first["loss"]) and later["loss"] < first["loss"]
    assert not np.allclose(embed(enc, x), z0)
    if loss == "crad":
        assert later["flagged"] == pytest.approx(2 / 32)  # 32 - ceil(0.95 * 32) above delta
    else:
        assert "delta" not in later


def test_csi_row_is_csi_loss_with_shifted_instances() -> None:
    """Table IV's ``loss = "csi"``: CSI's own loss (every rotation of every sample an anchor
    with its own positive), the ``contrastive`` detector's pairs, not rotations as
    negatives only."""
    from fedad.components.augment import shifted_views
    from fedad.components.losses import contrastive_loss, shifted_instance_mask
    from fedad.methods.fadngs.train import _views_loss

    x = torch.from_numpy(_oriented(6))
    enc = _encoder()
    got, _, _ = _views_loss(enc, x, "csi", 2, 0.5, np.random.default_rng(4), None, "mean-log")
    views = shifted_views(x, 2, np.random.default_rng(4))
    assert views.shape == (4 * 6 * 2, 1, 8, 8)
    pos, neg = shifted_instance_mask(6, 2, 4)
    want = contrastive_loss(enc.project(views), pos, neg, 0.5, "mean-log")
    torch.testing.assert_close(got, want)


def test_crad_needs_a_density() -> None:
    with pytest.raises(ValueError, match="density"):
        local_update(_encoder(), _images(4), epochs=1, batch_size=4, lr=0.1,
                     rng=np.random.default_rng(0), loss="crad")  # fmt: skip


def test_sed_distill_moves_the_student_toward_the_teachers_and_fills_queues() -> None:
    public = _images(16, seed=5)
    teachers = [_encoder(1), _encoder(2)]
    student = _encoder(3)
    queues = [FifoQueue.random(32, 8, torch.Generator().manual_seed(i)) for i in range(2)]
    before = [q.values.clone() for q in queues]
    losses = [
        sed_distill(
            student,
            teacher_representations([embed(t, public) for t in teachers]),
            queues,
            [0.5, 0.5],
            public,
            epochs=1,
            batch_size=8,
            lr=0.1,
            rng=np.random.default_rng(e),
        )
        for e in range(15)
    ]
    assert losses[-1] < losses[0]
    # the last pushes are the teachers' normalised public representations
    with torch.no_grad():
        t0 = teachers[0].normalized_projections(torch.from_numpy(public))
    got = queues[0].values[-16:]
    assert {tuple(np.round(r, 5)) for r in got.numpy()} == {
        tuple(np.round(r, 5)) for r in t0.numpy()
    }
    assert not torch.equal(queues[1].values, before[1])
    # teachers are untouched
    assert all(not p.requires_grad or p.grad is None for t in teachers for p in t.parameters())


def test_cosine_sed_distill_needs_no_queue_and_pulls_the_student_to_the_teachers() -> None:
    public = _images(16, seed=5)
    teachers = [_encoder(1), _encoder(2)]
    reps = teacher_representations([embed(t, public) for t in teachers])
    student = _encoder(3)
    kw: dict[str, Any] = {"epochs": 1, "batch_size": 8, "lr": 0.1, "form": "cosine"}
    losses = [
        sed_distill(student, reps, None, [0.5, 0.5], public, rng=np.random.default_rng(e), **kw)
        for e in range(10)
    ]
    assert losses[-1] < losses[0]
    queue = FifoQueue.random(8, 8, torch.Generator().manual_seed(0))
    before = queue.values.clone()
    sed_distill(student, reps, [queue, queue], [0.5, 0.5], public, rng=np.random.default_rng(0),
                **kw)  # fmt: skip
    assert torch.equal(queue.values, before)  # queues given are left untouched
    with pytest.raises(ValueError, match="queues"):
        sed_distill(student, reps, None, [0.5, 0.5], public, rng=np.random.default_rng(0),
                    **{**kw, "form": "seed"})  # fmt: skip


def test_teacher_representations_are_the_per_batch_ones() -> None:
    """Computed once for the public set, they equal what a batch of it gives."""
    public = _images(20, seed=6)
    teachers = [_encoder(1), _encoder(2)]
    reps = teacher_representations([embed(t, public) for t in teachers])
    for t, z in zip(teachers, reps, strict=True):
        t.eval()
        with torch.no_grad():
            batch = t.normalized_projections(torch.from_numpy(public[5:13]))
        torch.testing.assert_close(z[5:13], batch, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="one representation per public sample"):
        sed_distill(_encoder(3), [reps[0][:10]], [FifoQueue.random(8, 8, torch.Generator())],
                    [1.0], public, epochs=1, batch_size=8, lr=0.1,
                    rng=np.random.default_rng(0))  # fmt: skip


def test_a_client_of_one_sample_still_trains() -> None:
    x = _oriented(1)
    enc = _encoder()
    z0 = embed(enc, x)
    means, covs = fit_gaussians(np.r_[z0, z0 + 0.1], np.zeros(2, dtype=np.int64))
    out = local_update(enc, x, epochs=1, batch_size=32, lr=0.1, rng=np.random.default_rng(0),
                       means=means, covs=covs)  # fmt: skip
    assert math.isfinite(out["loss"])
