"""FedDyMem's local training loop and memory features (Algorithm 5, ClientUpdate).

The frozen backbone's features are computed once per client (they never change); each
local epoch runs the projection and memory generator over shuffled mini-batches of them
and steps Adam on the metric loss of eq. 12 against the client's copy of the global bank
(Algorithm 5 lines 10-16). :func:`memory_features` then gives the memory features of every
training sample (line 17) for memory-reduce (line 18).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from fedad.methods.feddymem.losses import metric_loss, scale_floor

__all__ = ["cosine_factor", "feature_scale", "memory_features", "train_epoch"]


def memory_features(
    net: nn.Module, features: np.ndarray, batch_size: int = 32, device: torch.device | None = None
) -> np.ndarray:
    """``(n, K, C)`` float32 memory features of frozen features ``(n, C_in, H, W)``, rows in
    row-major ``(h, w)`` order (Algorithm 1)."""
    dev = device or next(iter(net.parameters()), torch.zeros(0)).device
    out = []
    net.eval()
    with torch.no_grad():
        for s in range(0, len(features), batch_size):
            m = net(torch.as_tensor(features[s : s + batch_size]).to(dev))
            out.append(m.permute(0, 2, 3, 1).flatten(1, 2).float().cpu().numpy())
    if not out:
        raise ValueError("no samples to compute memory features of")
    return np.concatenate(out)


def feature_scale(memories: np.ndarray) -> float:
    """The memory features' spread: the root mean square distance of their patch features
    from their mean, ``sqrt(mean_{i,k} ||m_{i,k} - mean(m)||^2)`` over ``(n, K, C)`` (the
    collapse monitor; the scale floor's reference)."""
    m = np.asarray(memories, dtype=np.float64)
    if not m.size:
        return 0.0
    p = m.reshape(-1, m.shape[-1])
    return float(np.sqrt(((p - p.mean(axis=0)) ** 2).sum(axis=1).mean()))


def cosine_factor(t: int, rounds: int) -> float:
    """Round ``t``'s (1-based) multiplier of the learning rate under a cosine schedule over
    ``rounds`` rounds, ``(1 + cos(pi (t - 1) / rounds)) / 2``: 1 in round 1, falling to
    ``(1 + cos(pi (rounds - 1) / rounds)) / 2 > 0`` in the last (not in the paper: without
    it the networks keep moving after the detection has peaked)."""
    if rounds < 1 or not 1 <= t <= rounds:
        raise ValueError(f"round {t} is outside 1..{rounds}")
    return 0.5 * (1.0 + float(np.cos(np.pi * (t - 1) / rounds)))


def train_epoch(
    net: nn.Module,
    opt: torch.optim.Optimizer,
    features: np.ndarray,
    bank: np.ndarray,
    *,
    k: int,
    th: float,
    batch_size: int,
    keep_scale: float = 0.0,
    scale_ref: float = 0.0,
    rng: np.random.Generator,
    device: torch.device,
) -> float:
    """One epoch of eq. 12 (plus ``keep_scale`` times the scale floor at ``scale_ref``
    when ``keep_scale > 0``) over shuffled mini-batches; the epoch's mean loss."""
    net.train()
    target = torch.as_tensor(bank, dtype=torch.float32, device=device)
    order = rng.permutation(len(features))
    total, seen = 0.0, 0
    for s in range(0, len(order), batch_size):
        idx = np.sort(order[s : s + batch_size])
        x = torch.as_tensor(features[idx]).to(device)
        m = net(x)
        loss = metric_loss(m, target, k=k, th=th)
        if keep_scale > 0:
            loss = loss + keep_scale * scale_floor(m, scale_ref)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        total += float(loss.detach()) * len(idx)
        seen += len(idx)
    net.eval()
    return total / max(seen, 1)
