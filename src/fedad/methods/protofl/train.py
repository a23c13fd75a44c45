"""ProtoFL's training loops: a client's phase-1 epochs [ProtoFL Alg. 1, CLIENT_TRAINING] and
the phase-2 flow fit [ProtoFL Alg. 2]. No federation here."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import torch
from torch import nn

from fedad.methods.protofl.augment import image_augmenter, two_views
from fedad.methods.protofl.features import pick_two
from fedad.methods.protofl.model import (
    flow_nll,
    instance_contrastive_loss,
    phase1_loss,
    phase2_loss,
)

RADAM_BETAS = (0.94, 0.98)
"""[ProtoFL Sec. 5.2]: RAdam with betas 0.94, 0.98 and weight decay 1e-3 in phase 1."""
FOREACH = True
"""The optimisers' multi-tensor update, also on the CPU (torch takes it by default on
accelerators only): the same numbers, bitwise, in a third of the time of the per-tensor
loop over the flow's 48 parameter tensors (measured: 5 ms to under 2 ms a step)."""


@contextmanager
def flushed_denormals() -> Iterator[None]:
    """Subnormal floats flushed to zero on the CPU inside the block (torch's default, off,
    after it). A flow whose training runs away on heavy-tailed representations (on the
    ODDS shuttle table its loss reached 1e22 within ten epochs, which the held-out
    selection then discards) fills its gradients with subnormal numbers, which the CPU
    computes with tens of times slower: a flow step took 52 ms there against 16 ms with
    them flushed. Values below 1.2e-38 do not change what the flow learns."""
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


GRAIN = 32_768
"""torch's own grain size (``at::internal::GRAIN_SIZE``): below this many elements an
operation runs on one thread anyway."""


@contextmanager
def one_thread_below_grain(elements: int) -> Iterator[None]:
    """torch on one thread inside the block when its largest tensors (``elements``) are
    below torch's grain size, as it was outside after it. On such tensors a second thread
    only adds its start-up and wait to every one of a step's many small operations: the
    table flow (9 features, 64 hidden units, batches of 256) took 7 ms a step on one
    thread against 21 ms on two beside another busy process, and ``protofl``'s flow fits
    on the ODDS shuttle table half their time. The numbers are the same up to float
    rounding of the split reductions."""
    threads = torch.get_num_threads()
    if elements >= GRAIN or threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _device(module: nn.Module) -> torch.device:
    return next(module.parameters()).device


def _augmenter(x: torch.Tensor, flip: bool, crop: float) -> nn.Module | None:
    return image_augmenter(x.shape[2], x.shape[3], flip, crop) if x.dim() == 4 else None


def _optimizer(
    encoder: nn.Module, optimizer: str, lr: float, weight_decay: float
) -> torch.optim.Optimizer:
    """Phase 1's optimiser: ``"radam"`` (the paper's) or AdamW (``"adam"``)."""
    if optimizer == "radam":
        return torch.optim.RAdam(
            encoder.parameters(),
            lr=lr,
            betas=RADAM_BETAS,
            weight_decay=weight_decay,
            foreach=FOREACH,
        )
    # Adam with decoupled weight decay; see docs/methods/protofl.md
    return torch.optim.AdamW(
        encoder.parameters(), lr=lr, weight_decay=weight_decay, foreach=FOREACH
    )


def _phase1_terms(
    target: torch.Tensor | None,
    r: torch.Tensor,
    r_hat: torch.Tensor,
    alpha: float,
    temperature: float,
    contrast: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """[ProtoFL eq. 8] plus ``contrast`` times :math:`L_{nce}`: the total and its terms."""
    total, lpd, lp = phase1_loss(target, r, r_hat, alpha, temperature)
    terms = {"l_pd": lpd, "l_p": lp}
    if contrast > 0:
        terms["l_nce"] = instance_contrastive_loss(r, r_hat)
        total = total + contrast * terms["l_nce"]
    return total, terms


def train_encoder(
    encoder: nn.Module,
    x: np.ndarray,
    prototype: np.ndarray | None,
    epochs: int,
    batch_size: int,
    lr: float,
    rng: np.random.Generator,
    alpha: float = 0.1,
    temperature: float = 1.0,
    weight_decay: float = 1e-3,
    flip: bool = True,
    noise: float = 0.1,
    optimizer: str = "adam",
    views: np.ndarray | None = None,
    crop: float = 0.6,
    contrast: float = 0.0,
    max_samples: int | None = None,
) -> dict[str, float]:
    """``epochs`` of [ProtoFL eq. 8] over ``x`` (two views per sample, eq. 4); in place.

    ``optimizer``: ``"radam"`` (the paper's, betas 0.94, 0.98) or ``"adam"`` (AdamW).
    ``flip``/``crop``: the image augmentations (:func:`.augment.augmentation`).
    ``views`` ``(V, N, D)``: precomputed views (the ``pretrained`` trunk's cached features,
    :mod:`.features`); each pair is two of them, and ``x`` is not used.
    Returns the last epoch's mean total, :math:`L_{pd}` and :math:`L_p` (keys ``loss``,
    ``l_pd``, ``l_p``). ``prototype = None`` trains :math:`L_p` alone; an ``(N, D)``
    ``prototype`` holds one target per sample (``distill = "sample"``: the off-the-shelf
    model's features of each training image instead of one prototype per client).
    ``contrast`` :math:`\beta > 0` adds :math:`\beta L_{nce}`
    (:func:`.model.instance_contrastive_loss`: the other samples of the batch as
    negatives) to the total and returns its last-epoch mean as ``l_nce``.
    ``max_samples``: an epoch takes the first ``max_samples`` of its random order, a
    different subset each epoch (a client with more samples costs what one with
    ``max_samples`` does; one with fewer is not affected).
    """
    device = _device(encoder)
    vt = None if views is None else torch.from_numpy(np.ascontiguousarray(views, np.float32))
    xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)) if vt is None else vt[0]
    v = None if prototype is None else torch.as_tensor(prototype, dtype=torch.float32).to(device)
    per_sample = v is not None and v.dim() == 2
    aug = _augmenter(xt, flip, crop) if vt is None else None
    opt = _optimizer(encoder, optimizer, lr, weight_decay)
    encoder.train()
    names = ("loss", "l_pd", "l_p", "l_nce") if contrast > 0 else ("loss", "l_pd", "l_p")
    sums = dict.fromkeys(names, 0.0)
    for _ in range(max(1, epochs)):
        sums = dict.fromkeys(names, 0.0)
        count = 0
        order = rng.permutation(len(xt))
        if max_samples is not None:
            order = order[:max_samples]
        for i in range(0, len(order), batch_size):
            idx = order[i : i + batch_size]
            if len(idx) < 2 and len(xt) >= 2:  # a batch of one: merge with the previous draw
                idx = order[max(0, i - 1) : i + 1]
            if vt is None:
                a, b = two_views(xt[torch.from_numpy(idx)], rng, flip, noise, aug, crop)
            else:
                a, b = pick_two(vt, torch.from_numpy(idx), rng)
            r, r_hat = encoder(a.to(device)), encoder(b.to(device))
            target = v[torch.from_numpy(idx).to(device)] if per_sample and v is not None else v
            total, terms = _phase1_terms(target, r, r_hat, alpha, temperature, contrast)
            opt.zero_grad(set_to_none=True)
            total.backward()  # type: ignore[no-untyped-call]
            opt.step()
            for k, t in {"loss": total, **terms}.items():
                sums[k] += float(t.detach()) * len(idx)
            count += len(idx)
        sums = {k: s / max(count, 1) for k, s in sums.items()}
    encoder.eval()
    return sums


@torch.no_grad()
def represent(trunk: nn.Module, x: torch.Tensor, batch_size: int = 512) -> torch.Tensor:
    """:math:`h = f(x)` in batches, without gradients, on the trunk's device (CPU out)."""
    device = _device(trunk)
    trunk.eval()
    outs = [trunk(x[i : i + batch_size].to(device)).cpu() for i in range(0, len(x), batch_size)]
    if not outs:
        return torch.zeros((0, int(getattr(trunk, "rep_dim", 1))))
    return torch.cat(outs)


def view_representations(
    trunk: nn.Module,
    x: np.ndarray,
    pairs: int,
    rng: np.random.Generator,
    flip: bool = True,
    noise: float = 0.1,
    views: np.ndarray | None = None,
    crop: float = 0.6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``pairs`` pairs of augmented views of every sample through the frozen trunk:
    :math:`(h_i, \\hat h_i)`, each ``(pairs * N, d)`` ([ProtoFL Alg. 2]). With ``views``
    ``(V, N, D)`` (cached features) each pair is two of those."""
    hs, hs_hat = [], []
    if views is not None:
        vt = torch.from_numpy(np.ascontiguousarray(views, dtype=np.float32))
        every = torch.arange(vt.shape[1])
        for _ in range(pairs):
            a, b = pick_two(vt, every, rng)
            hs.append(represent(trunk, a))
            hs_hat.append(represent(trunk, b))
        return torch.cat(hs), torch.cat(hs_hat)
    xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    aug = _augmenter(xt, flip, crop)
    for _ in range(pairs):
        for i in range(0, len(xt), 512):
            a, b = two_views(xt[i : i + 512], rng, flip, noise, aug, crop)
            hs.append(represent(trunk, a))
            hs_hat.append(represent(trunk, b))
    return torch.cat(hs), torch.cat(hs_hat)


def train_flow(
    flow: nn.Module,
    h: torch.Tensor,
    h_hat: torch.Tensor | None,
    epochs: int,
    batch_size: int,
    lr: float,
    lam: float,
    rng: np.random.Generator,
    after_epoch: Callable[[int], bool] | None = None,
) -> float:
    """``epochs`` passes of Adam over the view pairs, [ProtoFL eq. 11]; in place.

    ``h_hat = None``: ``h`` holds clean representations, which have no second view, so the
    loss is :math:`L_{mle}` [ProtoFL eq. 9] alone (:math:`L_{reg}` of eq. 10 needs a pair).

    ``after_epoch(e)`` runs after epoch ``e`` (1-based, flow in eval mode) and stops the
    training when it returns true. Returns the mean loss of the last epoch (NaN for zero
    epochs)."""
    with flushed_denormals():
        return _train_flow(flow, h, h_hat, epochs, batch_size, lr, lam, rng, after_epoch)


def _train_flow(
    flow: nn.Module,
    h: torch.Tensor,
    h_hat: torch.Tensor | None,
    epochs: int,
    batch_size: int,
    lr: float,
    lam: float,
    rng: np.random.Generator,
    after_epoch: Callable[[int], bool] | None,
) -> float:
    device = _device(flow)
    opt = torch.optim.Adam(flow.parameters(), lr=lr, foreach=FOREACH)
    last = float("nan")
    n = len(h)
    for epoch in range(1, epochs + 1):
        flow.train()
        order = torch.from_numpy(rng.permutation(n))
        total_sum, count = 0.0, 0
        for i in range(0, n, batch_size):
            idx = order[i : i + batch_size]
            pair = None if h_hat is None else h_hat[idx].to(device)
            total, _, _ = phase2_loss(flow, h[idx].to(device), pair, lam)
            opt.zero_grad(set_to_none=True)
            total.backward()  # type: ignore[no-untyped-call]
            torch.nn.utils.clip_grad_norm_(flow.parameters(), 10.0)
            opt.step()
            total_sum += float(total.detach()) * len(idx)
            count += len(idx)
        last = total_sum / max(count, 1)
        flow.eval()
        if after_epoch is not None and after_epoch(epoch):
            break
    flow.eval()
    return last


@torch.no_grad()
def _mean_nll(flow: nn.Module, h: torch.Tensor, batch_size: int = 1024) -> float:
    """Mean negative log-likelihood [ProtoFL eq. 9] of the rows of ``h`` under ``flow``."""
    device = _device(flow)
    flow.eval()
    total = sum(
        float(flow_nll(flow, h[i : i + batch_size].to(device)).sum())
        for i in range(0, len(h), batch_size)
    )
    return total / max(len(h), 1)


def choose_flow_epochs(
    make: Callable[[], nn.Module],
    h: torch.Tensor,
    h_hat: torch.Tensor | None,
    n_samples: int,
    val_share: float,
    max_epochs: int,
    patience: int,
    batch_size: int,
    lr: float,
    lam: float,
    rng: np.random.Generator,
) -> int:
    """The flow's training budget picked on held-out training data, never on test labels:
    the epoch count of :func:`select_flow` (its flow is dropped)."""
    budget = (batch_size, lr, lam, rng)
    return select_flow(make, h, h_hat, n_samples, val_share, max_epochs, patience, *budget)[0]


def select_flow(
    make: Callable[[], nn.Module],
    h: torch.Tensor,
    h_hat: torch.Tensor | None,
    n_samples: int,
    val_share: float,
    max_epochs: int,
    patience: int,
    batch_size: int,
    lr: float,
    lam: float,
    rng: np.random.Generator,
) -> tuple[int, nn.Module | None]:
    """The flow's training budget picked on held-out training data, and the flow at it.

    ``h``/``h_hat`` hold ``pairs`` view pairs of ``n_samples`` samples, sample ``i``'s pairs
    at rows ``i, i + n, i + 2n, ...`` (``h_hat = None``: clean representations, one row per
    sample). A ``val_share`` of the *samples* (all their views) is
    held out; a fresh flow (``make()``) trains on the rest, one epoch at a time, and after
    each epoch the mean NLL [ProtoFL eq. 9] of the held-out views is measured. Returns the
    epoch count with the lowest held-out NLL (stopping ``patience`` epochs after the last
    improvement), between 1 and ``max_epochs``, and that flow with its weights of that
    epoch. Fewer than 4 held-out samples (or ``val_share = 0``): ``max_epochs`` unchanged
    and no flow.
    """
    n_val = round(val_share * n_samples)
    if n_val < 4 or n_samples - n_val < 4 or max_epochs <= 1:
        return max_epochs, None
    pairs = len(h) // max(n_samples, 1)
    val = rng.permutation(n_samples)[:n_val]
    is_val = np.zeros(n_samples, dtype=bool)
    is_val[val] = True
    rows = np.tile(is_val, pairs)
    fit_rows, val_rows = torch.from_numpy(~rows), torch.from_numpy(rows)
    flow = make()
    h_fit = h[fit_rows]
    h_hat_fit = None if h_hat is None else h_hat[fit_rows]
    h_val = h[val_rows] if h_hat is None else torch.cat([h[val_rows], h_hat[val_rows]])
    best_nll, best_epoch = float("inf"), 1
    best_state = copy.deepcopy(flow.state_dict())

    def check(epoch: int) -> bool:
        nonlocal best_nll, best_epoch, best_state
        nll = _mean_nll(flow, h_val)
        if np.isfinite(nll) and nll < best_nll:
            best_nll, best_epoch = nll, epoch
            best_state = copy.deepcopy(flow.state_dict())
        return epoch - best_epoch >= patience

    train_flow(flow, h_fit, h_hat_fit, max_epochs, batch_size, lr, lam, rng, check)
    flow.load_state_dict(best_state)
    return best_epoch, flow.eval()


@torch.no_grad()
def mean_flow_loss(
    flow: nn.Module, h: torch.Tensor, h_hat: torch.Tensor | None, lam: float, batch: int = 1024
) -> float:
    """[ProtoFL eq. 11] (eq. 9 alone without pairs) over all rows, in batches."""
    device = _device(flow)
    flow.eval()
    total = 0.0
    for i in range(0, len(h), batch):
        pair = None if h_hat is None else h_hat[i : i + batch].to(device)
        loss, _, _ = phase2_loss(flow, h[i : i + batch].to(device), pair, lam)
        total += float(loss) * len(h[i : i + batch])
    return total / max(len(h), 1)
