"""FADngs's losses in torch: CRAD's contrastive loss and SED's ensemble distillation.

- CRAD (Contrastive Representation for Anomaly Detection, [FADngs Sec. III-C, eq. 7-9]):
  predicted normals are anchors; every normal-transform view :math:`T_+` of a predicted
  normal is a positive; the :math:`T_+` views of predicted anomalies and every
  shifting-transform view :math:`T_-` (rotations by 90, 180, 270 degrees) are negatives.
- SED (Self-supervised Ensemble Distillation, [FADngs Sec. III-D, eq. 11-13]): the student
  matches each teacher's softmax distribution of similarities to that teacher's FIFO queue of
  representations, teachers weighted by how well their public-set anomaly scores correlate
  with the ensemble's mean score. :func:`cosine_distill_loss` is the queue-free form that
  ``fadngs`` uses by default (``sed_form = "cosine"``, not the paper's).

The contrastive loss itself (eq. 7), the collapse monitors and CSI's pairs are shared with the
``contrastive`` detector: :mod:`fedad.components.losses`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, get_args

import numpy as np
import torch
import torch.nn.functional as F
from numpy.typing import ArrayLike, NDArray

from fedad.components.losses import ConForm, contrastive_loss

SedForm = Literal["seed", "cosine"]
"""SED's per-teacher loss: [FADngs eq. 11-13] (``"seed"``) or :func:`cosine_distill_loss`."""


def check_sed_form(form: str) -> None:
    """``ValueError`` (one line) unless ``form`` is one of :data:`SedForm`'s values."""
    forms = get_args(SedForm)
    if form not in forms:
        raise ValueError(f"unknown SED form {form!r}: one of {', '.join(forms)}")


def crad_mask(
    predicted_anomaly: torch.Tensor, n_plus: int, n_minus: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Positive and negative pairs of CRAD [FADngs eq. 8, 9] for a batch of :math:`B`
    samples, each seen through ``n_plus`` normal-transform views :math:`T_+` (crop, colour
    jitter, grayscale) and ``n_minus`` shifting-transform views :math:`T_-` (rotations).

    Rows and columns index the :math:`N = B(P + R)` views in the order of :func:`crad_views`:
    first the :math:`T_+` views, sample-major (row ``i * P + p`` is view ``p`` of sample
    ``i``), then the :math:`T_-` views (row ``B * P + i * R + r``).

    With :math:`\\mathcal{A}` the predicted anomalies [FADngs eq. 8]:

    .. math::
        \\{x_+\\} = \\{T_+(x_i) \\mid x_i \\notin \\mathcal{A}\\}, \\quad
        \\{x_-\\} = \\{T_+(x_i) \\mid x_i \\in \\mathcal{A}\\} \\cup \\{T_-(x_i)\\}
        \\quad \\forall x_i \\in \\mathcal{B}  \\qquad \\text{[FADngs eq. 9]}

    Only predicted normals are anchors [FADngs Sec. III-C], through their :math:`T_+` views
    (a :math:`T_-` view of a normal is itself a negative of every anchor, so it has no
    positive). ``pos[a, b]``: view ``b`` is a positive of anchor view ``a``;
    ``neg[a, b]``: a negative. A view is never paired with itself; the rows of non-anchors
    are all ``False`` (the anchors are ``pos.any(1)``, see :func:`crad_anchors`).

    Shapes:
        - predicted_anomaly: :math:`(B,)` bool
        - output: ``pos``, ``neg``: :math:`(N, N)` bool, :math:`N = B(P + R)`
    """
    if predicted_anomaly.dim() != 1:
        raise ValueError(f"predicted_anomaly must be (B,), got {tuple(predicted_anomaly.shape)}")
    if n_plus < 1 or n_minus < 0:
        raise ValueError(f"need n_plus >= 1 and n_minus >= 0, got {n_plus}, {n_minus}")
    anomaly = predicted_anomaly.to(torch.bool)
    b = anomaly.shape[0]
    device = anomaly.device
    plus_normal = (~anomaly).repeat_interleave(n_plus)  # (B P,)
    is_plus_normal = torch.cat(
        [plus_normal, torch.zeros(b * n_minus, dtype=torch.bool, device=device)]
    )
    is_negative = ~is_plus_normal  # T+ of anomalies and every T-
    anchors = is_plus_normal
    not_self = ~torch.eye(anchors.shape[0], dtype=torch.bool, device=device)
    pos = anchors[:, None] & is_plus_normal[None, :] & not_self
    neg = anchors[:, None] & is_negative[None, :] & not_self
    return pos, neg


def crad_anchors(pos: torch.Tensor) -> torch.Tensor:
    """The anchor views of a :func:`crad_mask`: the rows with at least one positive.

    Shapes:
        - pos: :math:`(N, N)` bool
        - output: :math:`(N,)` bool
    """
    return pos.any(dim=1)


def crad_views(z_plus: torch.Tensor, z_minus: torch.Tensor) -> torch.Tensor:
    """Stack the views in :func:`crad_mask`'s order: all :math:`T_+` views sample-major, then
    all :math:`T_-` views sample-major.

    Shapes:
        - z_plus: :math:`(B, P, D)`
        - z_minus: :math:`(B, R, D)`
        - output: :math:`(B(P + R), D)`
    """
    if z_plus.dim() != 3 or z_minus.dim() != 3:
        raise ValueError("z_plus and z_minus must be (B, V, D)")
    if z_plus.shape[0] != z_minus.shape[0] or z_plus.shape[2] != z_minus.shape[2]:
        raise ValueError(f"shapes disagree: {tuple(z_plus.shape)}, {tuple(z_minus.shape)}")
    return torch.cat([z_plus.flatten(0, 1), z_minus.flatten(0, 1)], dim=0)


def crad_loss(
    z_plus: torch.Tensor,
    z_minus: torch.Tensor,
    predicted_anomaly: torch.Tensor,
    temperature: float = 0.5,
    form: ConForm = "eq7",
) -> torch.Tensor:
    """CRAD [FADngs eq. 7-9]: :func:`contrastive_loss` on the views of :func:`crad_views`
    with the pairs of :func:`crad_mask`. Temperature 0.5 as in the paper [FADngs Sec. IV].

    Shapes:
        - z_plus: :math:`(B, P, D)` projections of the :math:`T_+` views
        - z_minus: :math:`(B, R, D)` projections of the :math:`T_-` views
        - predicted_anomaly: :math:`(B,)` bool, :math:`s(x_i) > \\delta` [FADngs eq. 8]
        - output: scalar
    """
    z = crad_views(z_plus, z_minus)
    pos, neg = crad_mask(predicted_anomaly.to(z.device), z_plus.shape[1], z_minus.shape[1])
    return contrastive_loss(z, pos, neg, temperature, form)


def simclr_mask(batch: int, n_views: int) -> tuple[torch.Tensor, torch.Tensor]:
    """SimCLR's pairs (Chen et al. 2020) in :func:`contrastive_loss`'s form: every view is an
    anchor, its positives the other views of the same sample, its negatives every view of
    every other sample. Views are sample-major (row ``i * n_views + v``). With two views
    :func:`contrastive_loss` on these masks is NT-Xent. Used by the warm-up rounds and the
    ``loss = "simclr"`` ablation [FADngs Table IV].

    Shapes:
        - output: ``pos``, ``neg``: :math:`(B V, B V)` bool
    """
    if batch < 1 or n_views < 2:
        raise ValueError(f"need batch >= 1 and n_views >= 2, got {batch}, {n_views}")
    sample = torch.arange(batch).repeat_interleave(n_views)
    same = sample[:, None] == sample[None, :]
    not_self = ~torch.eye(batch * n_views, dtype=torch.bool)
    return same & not_self, ~same


def similarity_distribution(z: torch.Tensor, queue: torch.Tensor, tau: float = 0.5) -> torch.Tensor:
    """:math:`p^j = \\mathrm{softmax}_j(\\mathrm{sim}(z, d^j)/\\tau)` over the queue
    :math:`D = [d^1, \\dots, d^B]` [FADngs eq. 11, 12], ``sim`` the cosine similarity.

    Shapes:
        - z: :math:`(N, D)`
        - queue: :math:`(Q, D)`
        - output: :math:`(N, Q)`, rows sum to 1
    """
    return F.softmax(_queue_logits(z, queue, tau), dim=1)


def _queue_logits(z: torch.Tensor, queue: torch.Tensor, tau: float) -> torch.Tensor:
    return F.normalize(z, dim=1) @ F.normalize(queue, dim=1).T / tau


def sed_loss(
    student_z: torch.Tensor,
    teacher_z: torch.Tensor,
    queue: torch.Tensor,
    tau: float = 0.5,
    teacher_tau: float | None = None,
    positive: bool = False,
) -> torch.Tensor:
    """One teacher's term of [FADngs eq. 13]: the cross-entropy
    :math:`-\\sum_j p_c^j \\log q_c^j` between the teacher's distribution :math:`P_c`
    [FADngs eq. 11] and the student's :math:`Q_c` [FADngs eq. 12] over the teacher's queue
    :math:`D_c`, averaged over the batch (the paper sums; the mean only rescales the
    step). The teacher is fixed: ``teacher_z`` is detached. The paper gives no value of
    :math:`\\tau` for SED; the default 0.5 is the one it uses for [FADngs eq. 7].
    ``teacher_tau`` (default: ``tau``) is the temperature of :math:`P_c` alone: SEED (Fang et
    al. 2021), whose similarity-distribution distillation eq. 11-13 follow, sharpens the
    teacher's distribution with a much lower temperature than the student's.

    ``positive`` puts the teacher's own representation of the same input, :math:`z_c^T(x)`,
    in front of the queue: :math:`D_c' = [z_c^T(x), d_c^1, \\dots, d_c^B]` per row, so that
    :math:`p_c^0 \\propto \\exp(1/\\tau_T)` and :math:`q_c^0 \\propto
    \\exp(\\mathrm{sim}(z^S(x), z_c^T(x))/\\tau)`. The paper's text adds the current batch
    to the queue before computing the similarities, and the authors' code (after SEED's)
    concatenates exactly this entry; without it a sharp teacher puts all its mass on
    whichever queue entry happens to be nearest.

    Shapes:
        - student_z, teacher_z: :math:`(N, D)`
        - queue: :math:`(Q, D)` (teacher representations)
        - output: scalar
    """
    t_tau = tau if teacher_tau is None else teacher_tau
    t = F.normalize(teacher_z.detach(), dim=1)
    t_logits = _queue_logits(t, queue, t_tau)
    s_logits = _queue_logits(student_z, queue, tau)
    if positive:
        s = F.normalize(student_z, dim=1)
        t_logits = torch.cat([(t * t).sum(1, keepdim=True) / t_tau, t_logits], dim=1)
        s_logits = torch.cat([(s * t).sum(1, keepdim=True) / tau, s_logits], dim=1)
    p = F.softmax(t_logits, dim=1)
    return -(p * F.log_softmax(s_logits, dim=1)).sum(dim=1).mean()


def cosine_distill_loss(student_z: torch.Tensor, teacher_z: torch.Tensor) -> torch.Tensor:
    """One teacher's term of SED's ``sed_form = "cosine"`` (not the paper's):
    :math:`1 - \\cos(z^S(x), z_c^T(x))`, averaged over the batch. It pulls the student's
    representation of each public image toward the teacher's and, unlike eq. 11-13, pushes
    it from nothing: no queue, so no contrast that spreads the public images apart. The
    teacher is fixed (detached). Zero, with zero gradient, where student and teacher agree.

    Shapes:
        - student_z, teacher_z: :math:`(N, D)`
        - output: scalar
    """
    cos = F.cosine_similarity(student_z, teacher_z.detach(), dim=1)
    return (1.0 - cos).mean()


def ensemble_sed_loss(
    student_z: torch.Tensor,
    teacher_zs: Sequence[torch.Tensor],
    queues: Sequence[torch.Tensor] | None,
    weights: Sequence[float] | torch.Tensor,
    tau: float = 0.5,
    teacher_tau: float | None = None,
    positive: bool = False,
    form: SedForm = "seed",
) -> torch.Tensor:
    """[FADngs eq. 13]: :math:`\\sum_{c \\in S_t} w_c \\, \\mathrm{CE}(P_c, Q_c)` with one
    :func:`sed_loss` per teacher :math:`c`, on its own queue :math:`D_c` (``positive``: see
    :func:`sed_loss`). ``form = "cosine"`` puts :func:`cosine_distill_loss` in place of each
    cross-entropy (the same Pearson weights; no queues: ``queues`` may be None, and the
    temperatures are unused).

    Shapes:
        - student_z: :math:`(N, D)`
        - teacher_zs: :math:`C` tensors :math:`(N, D)`
        - queues: :math:`C` tensors :math:`(Q_c, D)`
        - weights: :math:`(C,)`
        - output: scalar
    """
    check_sed_form(form)
    if not len(teacher_zs) == len(weights) > 0:
        raise ValueError("need as many teachers and weights, at least one")
    if form == "cosine":
        pairs = zip(weights, teacher_zs, strict=True)
        terms = [float(w) * cosine_distill_loss(student_z, t) for w, t in pairs]
        return torch.stack(terms).sum()
    if queues is None or len(queues) != len(teacher_zs):
        raise ValueError('sed_form "seed" needs one queue per teacher')
    terms = [
        float(w) * sed_loss(student_z, t, q, tau, teacher_tau, positive)
        for w, t, q in zip(weights, teacher_zs, queues, strict=True)
    ]
    return torch.stack(terms).sum()


def _normalise_scores(s: NDArray[np.float64], how: str) -> NDArray[np.float64]:
    if how == "zscore":
        centred = s - s.mean(axis=1, keepdims=True)
        std = s.std(axis=1, keepdims=True)
        out: NDArray[np.float64] = np.divide(centred, std, out=np.zeros_like(s), where=std > 0)
        return out
    if how == "minmax":
        lo = s.min(axis=1, keepdims=True)
        span = s.max(axis=1, keepdims=True) - lo
        out = np.divide(s - lo, span, out=np.zeros_like(s), where=span > 0)
        return out
    raise ValueError(f"unknown normalisation {how!r}")


def teacher_agreement(reps: list[np.ndarray]) -> float:
    """How alike SED's teachers are: the mean over pairs of teachers and public samples of the
    cosine between two teachers' representations of the same sample (1: identical teachers,
    nothing to distil; ``nan`` with one teacher).

    Shapes:
        - reps: :math:`C` arrays :math:`(N, D)`
    """
    if len(reps) < 2:
        return float("nan")
    units = [z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12) for z in reps]
    total = np.sum(units, axis=0)  # sum over pairs a != b of <u_a, u_b> per sample
    pairs = (total * total).sum(axis=1) - sum((u * u).sum(axis=1) for u in units)
    c = len(reps)
    return float(pairs.mean() / (c * (c - 1)))


def pearson_weights(
    teacher_scores: ArrayLike,
    temperature: float | None = None,
    normalise: Literal["zscore", "minmax"] = "zscore",
) -> NDArray[np.float64]:
    """The teacher weights :math:`w_c` of [FADngs eq. 13] ([FADngs Sec. III-D]): each teacher
    scores every public sample; each teacher's scores are normalised, their mean over the
    teachers is the ensemble's score, and :math:`r_c` is the Pearson correlation between
    teacher :math:`c`'s normalised scores and that mean.

    The paper leaves open (our choices):

    - the normalisation: ``"zscore"`` (default; zero mean, unit standard deviation per
      teacher, so that no teacher dominates the mean by its scale) or ``"minmax"`` (to
      :math:`[0, 1]`). A teacher with constant scores normalises to zeros and gets
      :math:`r_c = 0`. (Pearson is invariant to an affine map of the teacher's own scores;
      the normalisation matters through the mean.)
    - how :math:`r_c` becomes :math:`w_c`: by default
      :math:`w_c = \\max(r_c, 0) / \\sum_{c'} \\max(r_{c'}, 0)` (uniform if no
      :math:`r_c > 0`); with a ``temperature`` :math:`T`,
      :math:`w = \\mathrm{softmax}(r / T)`. Either way :math:`w_c \\geq 0`,
      :math:`\\sum_c w_c = 1`.

    Shapes:
        - teacher_scores: :math:`(C, N)`, :math:`N \\geq 2`
        - output: :math:`(C,)`
    """
    s = np.asarray(teacher_scores, dtype=np.float64)
    if s.ndim != 2 or s.shape[0] < 1 or s.shape[1] < 2:
        raise ValueError(f"teacher_scores must be (C, N) with N >= 2, got {s.shape}")
    normed = _normalise_scores(s, normalise)
    mean = normed.mean(axis=0)
    a = normed - normed.mean(axis=1, keepdims=True)
    b = mean - mean.mean()
    denom = np.sqrt((a**2).sum(axis=1) * (b**2).sum())
    r = np.divide(a @ b, denom, out=np.zeros(s.shape[0]), where=denom > 0)
    if temperature is not None:
        if temperature <= 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        e = np.exp((r - r.max()) / temperature)
        out: NDArray[np.float64] = e / e.sum()
        return out
    clipped = np.clip(r, 0.0, None)
    total = clipped.sum()
    if total <= 0:
        return np.full(s.shape[0], 1.0 / s.shape[0])
    out = clipped / total
    return out


class FifoQueue:
    """The instance queue :math:`D_c` of SED [FADngs Sec. III-D]: at most ``capacity``
    vectors of size ``dim``, first in, first out. :meth:`push` appends a batch at the new
    end and drops the oldest rows beyond ``capacity``; :attr:`values` lists the rows
    oldest first. Pushed tensors are detached (a queue holds no graph).

    Algorithm 1 initialises the queue randomly (:meth:`random`) and, per distillation step,
    computes :math:`P_c, Q_c` on the current queue *before* pushing the teacher's batch.

    Shapes:
        - push: :math:`(n, \\mathrm{dim})`
        - values: :math:`(\\min(\\text{pushed}, \\mathrm{capacity}), \\mathrm{dim})`
    """

    def __init__(self, capacity: int, dim: int, init: torch.Tensor | None = None) -> None:
        if capacity < 1 or dim < 1:
            raise ValueError(f"capacity and dim must be positive, got {capacity}, {dim}")
        self.capacity = capacity
        self.dim = dim
        self._data = torch.empty(0, dim)
        if init is not None:
            self._data = self._data.to(init)
            self.push(init)

    @classmethod
    def random(cls, capacity: int, dim: int, generator: torch.Generator | None = None) -> FifoQueue:
        """A full queue of random unit vectors (Algorithm 1: "initialize instances queue
        :math:`D_c` randomly")."""
        init = F.normalize(torch.randn(capacity, dim, generator=generator), dim=1)
        return cls(capacity, dim, init)

    def push(self, batch: torch.Tensor) -> None:
        """Append ``batch`` at the new end, drop the oldest rows beyond capacity."""
        if batch.dim() != 2 or batch.shape[1] != self.dim:
            raise ValueError(f"expected (n, {self.dim}), got {tuple(batch.shape)}")
        data = torch.cat([self._data.to(batch), batch.detach()], dim=0)
        self._data = data[-self.capacity :].clone()

    @property
    def values(self) -> torch.Tensor:
        """The rows, oldest first."""
        return self._data

    def __len__(self) -> int:
        return int(self._data.shape[0])
