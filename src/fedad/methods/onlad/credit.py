"""Aggregation weights of the ONLAD family: pure functions.

Selective aggregation [ONLAD Sec. III-B, Alg. 1]:

* FedAvg weights [ONLAD eq. 6]: :math:`c_k = n_k / N`.
* Credit scores [ONLAD Alg. 1 l. 8]:
  :math:`c_k = \\frac{(n_k/N)(1/\\ell_k)/M}{\\sum_j (n_j/N)(1/\\ell_j)/M}` with
  :math:`M = \\sum_j 1/\\ell_j`; :math:`M` and :math:`N` cancel, so
  :math:`c_k \\propto n_k / \\ell_k`, where :math:`\\ell_k` is the loss of client
  :math:`k`'s :math:`\\beta_k` on the server's observed set [ONLAD eq. 7].
* Thresholded [ONLAD Alg. 1 l. 5-6]: a client with :math:`\\ell_k > \\lambda` gets
  :math:`c_k = 0`. The paper states :math:`\\sum_k c_k = 1`; we normalise over the clients
  that pass, which is the only reading under which that holds once some are excluded.
* Adaptive threshold [ONLAD Sec. IV-B(5)]: :math:`\\lambda` decreases linearly over the rounds.

Robust variant (``onlad-robust``, ours): the same credit scores over the clients that pass
two checks. The *exceedance check* (:func:`exceedance_mass`, :func:`exceedance_ratios`,
:func:`exceedance_gate`) compares how much of a client's stream the global model scored above
the detection threshold :math:`\tau` with what the server's normal data give at the same
:math:`\tau`, and refuses a client far above the others; the *effect gate* looks at each
update's effect on the observed loss: the relative change
:math:`\\delta_k = (\\ell(\\beta + s_k(\\beta_k - \\beta)) - \\ell(\\beta)) / \\ell(\\beta)`
when client :math:`k`'s update is applied alone, at its FedAvg share :math:`s_k = n_k/N`, to
the global model :math:`\\beta` the clients started from. An update with
:math:`\\delta_k > t` (``tolerance``, default 0) gets weight 0; an aggregate whose observed
loss exceeds :math:`(1+t)\\,\\ell(\\beta)` is not taken (:func:`share_steps`,
:func:`update_effects`, :func:`effect_gate`, :func:`robust_credit_scores`,
:func:`accept_aggregate`).

Every function here accepts any finite or non-finite input without raising: a loss that is
not finite and positive (an overflowed or degenerate model) means weight 0, as does a client
size that is not finite and non-negative. Malformed *shapes* are programming errors and raise.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Floats = Sequence[float] | np.ndarray
"""One number per client: a list or a 1-d array."""


def usable(losses: Floats) -> np.ndarray:
    """Mask of the losses that can carry credit: finite and strictly positive."""
    ell = np.asarray(losses, dtype=np.float64)
    return np.isfinite(ell) & (ell > 0)


def _sizes(n: Floats, size: int) -> np.ndarray:
    nk = np.asarray(n, dtype=np.float64)
    if nk.shape != (size,):
        raise ValueError("need one loss and one size per client")
    return np.where(np.isfinite(nk) & (nk >= 0), nk, 0.0)


def fedavg_weights(n: Floats) -> np.ndarray:
    """[ONLAD eq. 6]: :math:`n_k / N`; all zeros when :math:`N = 0` (nobody has data)."""
    w = np.asarray(n, dtype=np.float64)
    w = np.where(np.isfinite(w) & (w >= 0), w, 0.0)
    top = w.max(initial=0.0)
    if top <= 0:
        return np.zeros_like(w)
    w = w / top  # sizes up to 1.8e308 sum without overflow
    return np.asarray(w / w.sum())


def credit_scores(losses: Floats, n: Floats, lam: float | None = None) -> np.ndarray:
    """[ONLAD Alg. 1 l. 5-8]: :math:`c_k \\propto n_k / \\ell_k`, zero above ``lam``, summing to 1.

    A loss that is not finite and positive gets 0 (it cannot be ranked: an overflowed model,
    or a degenerate zero loss whose :math:`1/\\ell_k` is unbounded), as does a loss above
    ``lam`` (and every loss when ``lam`` is NaN). All zeros when no client is left.
    Computed as :math:`(n_k/\\max n)(\\min\\ell/\\ell_k)`, each factor in :math:`[0, 1]`, so
    losses from 1e-308 to 1e308 and sizes up to 1e308 never overflow.
    """
    ell = np.asarray(losses, dtype=np.float64)
    if ell.ndim != 1 or ell.size == 0:
        raise ValueError("need one loss and one size per client")
    nk = _sizes(n, ell.size)
    keep = usable(ell) & (nk > 0)
    if lam is not None:
        keep &= ell <= lam
    if not keep.any():
        return np.zeros_like(ell)
    ref = ell[keep].min()
    raw = np.zeros_like(ell)
    raw[keep] = (nk[keep] / nk[keep].max()) * (ref / ell[keep])
    return np.asarray(raw / raw.sum())


def adaptive_lambda(lam: float, round_no: int, rounds: int, decay: float) -> float:
    """Linearly decreasing :math:`\\lambda_t = \\lambda (1 - d\\,(t-1)/(T-1))` for rounds 1..T."""
    if rounds <= 1:
        return lam
    return lam * (1.0 - decay * (round_no - 1) / (rounds - 1))


def median_lambda(losses: Floats, factor: float) -> float:
    """Scale-free :math:`\\lambda = f \\cdot \\mathrm{median}_k \\ell_k` over the usable losses.

    NaN when no loss is usable (then :func:`credit_scores` excludes everyone anyway).
    """
    ell = np.asarray(losses, dtype=np.float64)
    ok = usable(ell)
    if not ok.any():
        return float("nan")
    with np.errstate(over="ignore"):
        return float(np.median(ell[ok]) * factor)


# -- onlad-robust ---------------------------------------------------------------------------


def share_steps(prev: np.ndarray, models: Sequence[np.ndarray], n: Floats) -> list[np.ndarray]:
    """Each client's update at its FedAvg share: :math:`\\beta + s_k(\\beta_k - \\beta)`,
    :math:`s_k = n_k / N` (:func:`fedavg_weights`).

    This is the step client :math:`k`'s update contributes to FedAvg's average [ONLAD eq. 6], taken
    alone from the global model :math:`\\beta` the clients started from. Overflow gives
    non-finite arrays (whose losses are then unusable), never an error.
    """
    share = fedavg_weights(n)
    with np.errstate(over="ignore", invalid="ignore"):
        return [prev + s * (b - prev) for s, b in zip(share, models, strict=True)]


def update_effects(losses: Floats, prev_loss: float) -> np.ndarray:
    """:math:`\\delta_k = (\\ell_k - \\ell_{prev}) / \\ell_{prev}`: relative change of the
    observed loss.

    :math:`\\ell_k` is the observed loss of client :math:`k`'s step (:func:`share_steps`),
    :math:`\\ell_{prev}` that of the global model the clients started from. Negative: the
    update moves the global model towards the server's normal data; positive: away from it.
    Unusable losses (and an unusable :math:`\\ell_{prev}`) give :math:`+\\infty`, which no
    gate accepts.
    """
    ell = np.asarray(losses, dtype=np.float64)
    out = np.full(ell.shape, np.inf)
    if not (np.isfinite(prev_loss) and prev_loss > 0):
        return out
    ok = usable(ell)
    with np.errstate(over="ignore"):
        out[ok] = (ell[ok] - prev_loss) / prev_loss
    out[~np.isfinite(out)] = np.inf
    return out


def effect_gate(effects: Floats, tolerance: float = 0.0) -> np.ndarray:
    """Accept the updates whose effect is at most ``tolerance``: :math:`\\delta_k \\le t`.

    *Reject on negative impact* (Nelson et al. 2008; Barreno et al. 2010), on the server's
    held-out normal data: needs no estimate of how many clients are bad (a majority of bad
    clients is still rejected, unlike a median rule) and is scale-free.
    """
    d = np.asarray(effects, dtype=np.float64)
    return np.isfinite(d) & (d <= tolerance)


def robust_credit_scores(
    losses: Floats,
    step_losses: Floats,
    n: Floats,
    prev_loss: float,
    tolerance: float = 0.0,
    keep: Sequence[bool] | np.ndarray | None = None,
) -> np.ndarray:
    """``onlad-robust``: credit scores :math:`c_k \\propto n_k / \\ell_k` (``losses``, as in
    :func:`credit_scores`) over the clients whose update at its share passes
    :func:`effect_gate` (``step_losses``, the observed losses of :func:`share_steps`) and,
    when given, ``keep`` (:func:`exceedance_gate`); zero for the rest; all zeros when nobody
    passes (the server then keeps its model).

    When every client passes it equals :func:`credit_scores`, itself close to FedAvg when the
    clients' observed losses are alike.
    """
    ell = np.asarray(losses, dtype=np.float64)
    gate = effect_gate(update_effects(step_losses, prev_loss), tolerance)
    if gate.shape != ell.shape:
        raise ValueError("need one loss and one step loss per client")
    if keep is not None:
        k = np.asarray(keep, dtype=bool)
        if k.shape != ell.shape:
            raise ValueError("need one keep flag per client")
        gate &= k
    return credit_scores(np.where(gate, ell, np.inf), n)


def exceedance_mass(scores: Floats, tau: float) -> float:
    """:math:`\\sum_i s_i [s_i > \\tau]`: the score mass above the detection threshold.

    A client sums it over the samples of its stream it scored this round (before learning
    them: ONLAD's prequential detection); the server takes its mean over the observed set,
    under the same model and :math:`\\tau`. Scores that are not finite count as above
    :math:`\\tau` with the largest finite float (a sample the model cannot score is flagged).
    """
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    s = np.where(np.isnan(s), np.inf, s)
    with np.errstate(over="ignore"):
        above = np.minimum(s[s > tau], np.finfo(np.float64).max)
        return float(np.minimum(np.sum(above), np.finfo(np.float64).max))


def exceedance_ratios(mass: Floats, expected: Floats) -> np.ndarray:
    """:math:`E_k = M_k / \\hat M_k`: a client's score mass above :math:`\\tau` over what the
    server's normal data give for as many samples.

    ``mass`` is the client's summed :func:`exceedance_mass` over the rounds it took part in;
    ``expected`` the sum over those rounds of (samples it scored) x (the observed set's mean
    mass under that round's model and :math:`\\tau`). Data distributed like the observed set
    give :math:`E \\approx 1`. NaN where ``expected`` is 0 (nothing to compare with: every
    observed score at or below :math:`\\tau`, as with ``contamination = 0``); :math:`+\\infty`
    where ``mass`` is not a finite non-negative number (an unusable report).
    """
    m = np.asarray(mass, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    if m.shape != e.shape:
        raise ValueError("need one mass and one expected mass per client")
    out = np.full(m.shape, np.nan)
    ok = np.isfinite(e) & (e > 0)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        out[ok] = m[ok] / e[ok]
    out[~(np.isfinite(m) & (m >= 0))] = np.inf
    return out


def exceedance_gate(ratios: Floats, reference: Floats, factor: float = 2.0) -> np.ndarray:
    """Accept the clients with :math:`E_k \\le f \\cdot \\max(1, \\mathrm{median}_j E_j)`.

    ``ratios`` are the :func:`exceedance_ratios` of the clients to judge, ``reference`` those
    of every client with a report so far (the median is taken over its finite values, so it
    holds while fewer than half of the clients are contaminated). The floor 1 is normal
    data's own ratio: a client within ``factor`` times the normal score mass above
    :math:`\\tau` always passes, however clean the others look. NaN (no comparison possible)
    passes; :math:`+\\infty` (an unusable report) never does.
    """
    r = np.asarray(ratios, dtype=np.float64)
    ref = np.asarray(reference, dtype=np.float64)
    ref = ref[np.isfinite(ref)]
    med = float(np.median(ref)) if ref.size else 1.0
    bound = factor * max(1.0, med)
    return np.asarray(np.isnan(r) | (r <= bound))


def accept_aggregate(loss: float, prev_loss: float, tolerance: float = 0.0) -> bool:
    """``onlad-robust``'s last check: the aggregate [ONLAD eq. 8] replaces the global model only if
    its observed loss is finite and at most :math:`(1 + t)\\,\\ell_{prev}`, so that with
    ``tolerance = 0`` the global model's observed loss never rises from round to round."""
    return bool(np.isfinite(loss) and loss <= prev_loss * (1.0 + tolerance))
