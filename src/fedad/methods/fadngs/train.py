"""FADngs's training loops (no federation): local contrastive updates and SED distillation.

* :func:`local_update` is LocalUpdate of [FADngs Algorithm 1]: ``epochs`` passes of SGD over
  the client's data. With ``loss = "crad"`` each epoch first scores every local sample with
  the current encoder under the density set it was given [FADngs eq. 6], flags as predicted
  anomalies those above :math:`\\delta`, the ``quantile`` (0.95) of those training scores
  [FADngs eq. 8, Sec. IV: "95% of the training data is classified as normal"], then trains
  on CRAD's pairs [FADngs eq. 7, 9]. ``"simclr"`` (the warm-up, and Table IV's SimCLR row)
  and ``"csi"`` (Table IV's CSI row: CSI's loss with shifted instances, every rotation of
  every sample an anchor, no selection) need no density.
* :func:`sed_distill` is Aggregate of [FADngs Algorithm 1] after the FedAvg start: ``epochs``
  passes over the public set; per batch, with ``form = "seed"``, every teacher's similarity
  distribution over its own FIFO queue is matched by the student [FADngs eq. 11-13], then
  the teacher's batch representations enter its queue; with ``form = "cosine"`` (not the
  paper's; ``fadngs``'s default) the student's representation of each image is pulled
  toward each teacher's by cosine, no queue.
* :func:`embed` gives :math:`z(x)` for the density estimation and the score.

Optimiser: SGD with momentum 0.9 and weight decay, as the paper [FADngs Sec. IV]; the learning
rate of a round is the server's (cosine decay over the rounds, :func:`cosine_lr`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch
from torch import nn

from fedad.components.augment import ROTATIONS, crad_views, normal_transform, shifted_views
from fedad.components.losses import (
    ConForm,
    collapsed_loss,
    contrastive_loss,
    mean_pairwise_cosine,
    shifted_instance_mask,
)
from fedad.components.nn.resnet import Encoder
from fedad.components.train import iterate_batches
from fedad.methods.fadngs.density import min_mahalanobis
from fedad.methods.fadngs.losses import (
    FifoQueue,
    SedForm,
    check_sed_form,
    crad_loss,
    crad_mask,
    ensemble_sed_loss,
    simclr_mask,
)
from fedad.methods.fadngs.privacy import unit_rows

LossName = Literal["crad", "simclr", "csi"]


def cosine_lr(base: float, step: int, total: int) -> float:
    """Cosine decay [FADngs Sec. IV]: :math:`\\eta_t = \\eta \\cdot \\frac12
    (1 + \\cos(\\pi t / T))` for ``step`` :math:`t \\in [0, T)` of ``total`` :math:`T`."""
    if total <= 1:
        return base
    return base * 0.5 * (1.0 + math.cos(math.pi * min(step, total) / total))


@torch.no_grad()
def embed(enc: Encoder, x: np.ndarray, batch_size: int = 256) -> np.ndarray:
    """:math:`z(x) = h(f(x))` [FADngs Sec. III-A], not normalised, as float64.

    Shapes:
        - x: :math:`(N, C, H, W)`
        - output: :math:`(N, D)`
    """
    device = next(enc.parameters()).device
    was = enc.training
    enc.eval()
    outs = [
        enc.project(
            torch.from_numpy(np.ascontiguousarray(x[i : i + batch_size], np.float32)).to(device)
        )
        .double()
        .cpu()
        for i in range(0, len(x), batch_size)
    ]
    enc.train(was)
    if not outs:
        return np.zeros((0, enc.proj_dim))
    return torch.cat(outs).numpy()


def predicted_anomalies(
    z: np.ndarray, means: np.ndarray, covs: np.ndarray, quantile: float
) -> tuple[np.ndarray, float]:
    """[FADngs eq. 8]: :math:`\\mathcal A = \\{x_i : s(x_i) > \\delta\\}` with :math:`s` the score
    of [FADngs eq. 6] and :math:`\\delta` the ``quantile`` of the scores of these (training)
    samples. Returns the flags and :math:`\\delta`.

    Shapes:
        - z: :math:`(N, D)`; means :math:`(M, D)`; covs :math:`(M, D, D)`
        - output: :math:`(N,)` bool
    """
    s = min_mahalanobis(z, means, covs)
    delta = float(np.quantile(s, quantile))
    flags: np.ndarray = s > delta
    return flags, delta


def _views_loss(
    enc: Encoder,
    batch: torch.Tensor,
    loss: LossName,
    n_plus: int,
    temperature: float,
    rng: np.random.Generator,
    anomalous: torch.Tensor | None,
    form: ConForm,
    aug: nn.Module | None = None,
) -> tuple[torch.Tensor, float, torch.Tensor]:
    """The contrastive loss of one batch under ``loss``'s pairs (see :mod:`.losses`), its
    collapsed value (:func:`~.losses.collapsed_loss`) and the projections of every sample's
    first normal view, :math:`(B, D)`, for :func:`~.losses.mean_pairwise_cosine`."""
    b = batch.shape[0]
    if loss == "simclr":
        plus, _ = crad_views(batch, max(2, n_plus), rng, aug)
        v = plus.shape[1]
        z = enc.project(plus.flatten(0, 1))
        pos, neg = simclr_mask(b, v)
        pos, neg = pos.to(z.device), neg.to(z.device)
        first = z.view(b, v, -1)[:, 0]
    elif loss == "csi":
        v = max(2, n_plus)
        z = enc.project(shifted_views(batch, v, rng, aug))
        pos, neg = shifted_instance_mask(b, v, 1 + len(ROTATIONS))
        pos, neg = pos.to(z.device), neg.to(z.device)
        first = z[: b * v].view(b, v, -1)[:, 0]  # rotation 0 comes first
    else:
        plus, minus = crad_views(batch, n_plus, rng, aug)
        z = enc.project(torch.cat([plus.flatten(0, 1), minus.flatten(0, 1)]))
        z_plus = z[: b * n_plus].view(b, n_plus, -1)
        z_minus = z[b * n_plus :].view(b, minus.shape[1], -1)
        assert anomalous is not None
        value = crad_loss(z_plus, z_minus, anomalous, temperature, form)
        pos, neg = crad_mask(anomalous.to(z.device), n_plus, minus.shape[1])
        return value, collapsed_loss(pos, neg, form), z_plus[:, 0]
    value = contrastive_loss(z, pos, neg, temperature, form)
    return value, collapsed_loss(pos, neg, form), first


def local_update(
    enc: Encoder,
    x: np.ndarray,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    rng: np.random.Generator,
    loss: LossName = "crad",
    means: np.ndarray | None = None,
    covs: np.ndarray | None = None,
    quantile: float = 0.95,
    n_plus: int = 2,
    temperature: float = 0.5,
    momentum: float = 0.9,
    weight_decay: float = 1e-4,
    unit: bool = False,
    form: ConForm = "mean-log",
    z0: np.ndarray | None = None,
    crop_min: float = 1.0,
    jitter: float = 0.0,
) -> dict[str, float]:
    """LocalUpdate [FADngs Algorithm 1]: train ``enc`` in place; return the last epoch's mean
    ``loss``, its collapsed value (``loss_collapsed``, :func:`~.losses.collapsed_loss`: the
    loss when every similarity is equal), the mean pairwise cosine of the samples' first
    views in each batch (``rep_cos``, :func:`~.losses.mean_pairwise_cosine`), the last
    :math:`\\delta` (``delta``, CRAD only) and the share of predicted anomalies
    (``flagged``).

    ``means``/``covs`` (the density set, [FADngs eq. 6]) are needed by ``loss = "crad"``;
    ``form``: how eq. 7 combines an anchor's positives (see
    :func:`~fedad.components.losses.contrastive_loss`). With ``unit`` the scores use
    unit-normalised representations (the densities' space when they were released under the
    Gaussian mechanism, :mod:`.privacy`).
    A batch of one sample is contrasted through its own views (its two :math:`T_+` views are
    a positive pair). ``z0``: :math:`z(x)` under ``enc`` as it is on entry (e.g. from the
    round's density phase), used for the first epoch's selection instead of embedding
    ``x`` again. ``crop_min``: the smallest share of an image a normal view's crop keeps;
    ``jitter``: the strength of its brightness and contrast jitter
    (:func:`~fedad.components.augment.normal_transform`).
    """
    if loss == "crad" and (means is None or covs is None):
        raise ValueError("CRAD needs a density set (means and covs)")
    device = next(enc.parameters()).device
    params = [p for p in enc.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    channels, height, width = (int(d) for d in x.shape[1:4])
    aug = normal_transform(channels, height, width, crop_min=crop_min, jitter=jitter)
    out = {"loss": float("nan")}
    for epoch in range(max(1, epochs)):
        flags_t: torch.Tensor | None = None
        if loss == "crad":
            assert means is not None and covs is not None
            z = z0 if epoch == 0 and z0 is not None and len(z0) == len(x) else embed(enc, x)
            flags, delta = predicted_anomalies(unit_rows(z) if unit else z, means, covs, quantile)
            flags_t = torch.from_numpy(flags)
            out.update(delta=delta, flagged=float(flags.mean()) if len(flags) else 0.0)
        enc.train()
        total, collapsed, cosine, count, pairs = 0.0, 0.0, 0.0, 0, 0
        for idx in iterate_batches(len(xt), batch_size, rng):
            batch = xt[torch.from_numpy(idx)].to(device)
            anomalous = None if flags_t is None else flags_t[torch.from_numpy(idx)].to(device)
            value, flat, first = _views_loss(
                enc, batch, loss, n_plus, temperature, rng, anomalous, form, aug
            )
            opt.zero_grad(set_to_none=True)
            value.backward()  # type: ignore[no-untyped-call]
            opt.step()
            total += float(value.detach()) * len(idx)
            collapsed += flat * len(idx)
            count += len(idx)
            if len(idx) > 1:
                cosine += mean_pairwise_cosine(first) * len(idx)
                pairs += len(idx)
        out["loss"] = total / count if count else float("nan")
        out["loss_collapsed"] = collapsed / count if count else float("nan")
        out["rep_cos"] = cosine / pairs if pairs else float("nan")
    enc.eval()
    return out


def train_keeping_statistics(enc: nn.Module) -> None:
    """Training mode, except that batch-norm layers normalise with, and keep, the running
    statistics they have. SED distils on the public set: in training mode the head's batch
    norm would normalise by the public images' statistics and move its running statistics
    toward them, and the global model would then score the clients' images with statistics
    of other images. Its statistics stay the clients' FedAvg."""
    enc.train()
    for m in enc.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.eval()


def teacher_representations(reps: Sequence[np.ndarray]) -> list[torch.Tensor]:
    """The teachers' unit-normalised :math:`z` of the public set, as :func:`sed_distill`
    takes them, from their :math:`z` (raw or unit-normalised: the Pearson weights' pass).
    Computed once per round: a teacher is fixed during the distillation (evaluation mode, no
    gradient), so its representation of an image is the same in every batch and epoch.

    Shapes:
        - reps: :math:`C` arrays :math:`(N, D)`
        - output: :math:`C` tensors :math:`(N, D)`, float32
    """
    return [torch.from_numpy(unit_rows(z)).float() for z in reps]


def sed_distill(
    student: Encoder,
    teacher_z: Sequence[torch.Tensor],
    queues: Sequence[FifoQueue] | None,
    weights: Sequence[float] | np.ndarray,
    public: np.ndarray,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    rng: np.random.Generator,
    tau: float = 0.5,
    teacher_tau: float | None = None,
    positive: bool = False,
    momentum: float = 0.9,
    weight_decay: float = 1e-4,
    form: SedForm = "seed",
) -> float:
    """Aggregate's distillation [FADngs Algorithm 1, eq. 11-13]: ``student`` starts from the
    FedAvg of the teachers (the caller's job, [FADngs eq. 10]) and is trained in place for
    ``epochs`` over ``public``; ``teacher_z`` holds the teachers' unit-normalised
    representations of ``public`` (:func:`teacher_representations`); per batch, for every
    teacher :math:`c` the loss term
    :math:`w_c\\,\\mathrm{CE}(P_c, Q_c)` over its queue :math:`D_c` (as it is *before* this
    batch), then :math:`D_c` takes the teacher's normalised batch representations (FIFO);
    ``positive`` puts each input's own teacher representation in front of the queue (see
    :func:`~fedad.methods.fadngs.losses.sed_loss`). The queues are the caller's and keep
    their state. ``form = "cosine"`` (not the paper's) replaces each term by the teacher's
    :func:`~fedad.methods.fadngs.losses.cosine_distill_loss` and needs no queues (``queues``
    None, or left untouched). Returns the last epoch's mean loss.

    Shapes:
        - public: :math:`(N, C, H, W)`
        - teacher_z: :math:`C` tensors :math:`(N, D)`
        - weights: :math:`(C,)`, one per teacher
    """
    check_sed_form(form)
    pushed = list(queues) if form == "seed" and queues is not None else []
    if not len(teacher_z) == len(weights) > 0 or (form == "seed" and len(pushed) != len(weights)):
        raise ValueError("need as many teachers, queues (eq. 11-13) and weights, at least one")
    if any(tuple(z.shape[:1]) != (len(public),) for z in teacher_z):
        raise ValueError("every teacher needs one representation per public sample")
    device = next(student.parameters()).device
    opt = torch.optim.SGD(student.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    xt = torch.from_numpy(np.ascontiguousarray(public, dtype=np.float32))
    w = torch.as_tensor(np.asarray(weights, dtype=np.float64), dtype=torch.float32)
    last = float("nan")
    for _ in range(max(1, epochs)):
        train_keeping_statistics(student)
        total, count = 0.0, 0
        for idx in iterate_batches(len(xt), batch_size, rng):
            rows = torch.from_numpy(idx)
            batch = xt[rows].to(device)
            t_z = [z[rows].to(device) for z in teacher_z]
            s_z = student.normalized_projections(batch)
            qs = [q.values.to(device) for q in pushed]
            value = ensemble_sed_loss(s_z, t_z, qs, w, tau, teacher_tau, positive, form)
            opt.zero_grad(set_to_none=True)
            value.backward()  # type: ignore[no-untyped-call]
            opt.step()
            if pushed:  # eq. 11-13's queues take the teachers' batch (FIFO)
                for q, z in zip(pushed, t_z, strict=True):
                    q.push(z.cpu())
            total += float(value.detach()) * len(idx)
            count += len(idx)
        last = total / count if count else float("nan")
    student.eval()
    return last
