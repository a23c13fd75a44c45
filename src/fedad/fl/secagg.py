"""SecAgg+ as Flower runs it: the arithmetic of a secure mean (the settings and the reply
checks both engines share: :mod:`fedad.core.secagg`).

Secure aggregation (SecAgg+, Bell et al., CCS 2020) lets the server learn the weighted mean
:math:`\\bar x = \\sum_k w_k x_k / \\sum_k w_k` of the clients' vectors without seeing any
single :math:`x_k`. Flower implements it as a server workflow
(``flwr.server.workflow.SecAggPlusWorkflow``) and a client mod
(``flwr.client.mod.secaggplus_mod``); :mod:`fedad.fl.flower.secagg` drives both. In Flower's
arithmetic, client :math:`k` with weight :math:`w_k` (its ``num_examples``) sends

.. math::

    y_k = \\big[\\, q_k,\\; \\mathcal Q(\\hat r_k x_k) \\,\\big] + \\text{masks} \\pmod{M},
    \\qquad q_k = \\operatorname{round}(R\\, w_k / W), \\quad \\hat r_k = q_k / R,

where :math:`W` is the largest weight (``max_weight``), :math:`M = 2^{32}` and
:math:`\\mathcal Q(v)` clips :math:`v` to :math:`[-C, C]` (``privacy.secagg_clip``), maps it
to :math:`[0, R]` and rounds stochastically (unbiased). The pairwise masks cancel in the sum
and the private masks are removed with Shamir-shared seeds, so the server ends with
:math:`\\sum_k \\mathcal Q(\\hat r_k x_k)` and :math:`\\sum_k q_k` and returns

.. math::

    \\bar x' = \\Big(\\tfrac{2C}{R} \\sum_k \\mathcal Q(\\hat r_k x_k) - nC\\Big)
        \\Big/ \\sum_k \\hat r_k .

**Error bound.** Stochastic rounding moves each entry of each :math:`\\hat r_k x_k` by less
than one step :math:`2C/R`, so, without clipping, :math:`|\\bar x' - \\sum_k \\hat r_k x_k /
\\sum_k \\hat r_k| < n (2C/R) / \\sum_k \\hat r_k`; quantizing the weights moves each
:math:`\\hat r_k` by at most :math:`1/(2R)` (:func:`error_bound` adds both). With
:math:`W = \\max_k w_k` the biggest client has :math:`\\hat r = 1`, so the bound is at most
:math:`n (2C + \\max|x|) / R`.

**Choices made here** (Flower's defaults are :math:`R = 2^{22}` and ``max_weight = 1000``):

* :math:`R` is the largest power of two (at most :math:`2^{30}`) for which the sum of
  :math:`n` entries cannot wrap around modulo :math:`2^{32}` (:func:`quantization_range`):
  :math:`2^{28}` for up to 15 clients, so the step :math:`2C/R` is :math:`6 \\cdot 10^{-8}` at
  :math:`C = 8`. A fixed :math:`2^{22}` overflows silently beyond 1,023 clients.
* :math:`W` is the largest training-set size of the federation (known to the server: FedAvg
  weights are not secret, and Flower's ``FitRes`` carries them in the clear), so no weight is
  scaled above 1 and none is needlessly coarse. A reply whose weight exceeds :math:`W` is
  refused by the client itself.
* Every vector is flattened to 1-D float64 (Flower's dequantization skips 0-d arrays, and
  its quantizer computes in the input's precision, too coarse in float32 for this grid).
* The key-share degree defaults to :math:`\\max(15, 2\\lceil\\log_2 n\\rceil + 1)`
  (:meth:`SecAggSettings.flower_shares`): Flower's Shamir sharing is pure Python, and a
  complete graph costs 160 s per round at 100 clients.
* The stochastic rounding draws from a stream seeded by (seed, round, client, phase), on the
  client, so a run with SecAgg+ is as reproducible as one without; the keys and masks stay
  cryptographically random.

The in-process engine runs the same arithmetic (:func:`client_vector`, :func:`server_mean`,
with Flower's own quantization functions) but no masking: all clients live in one process,
there is nothing to hide, and masks cancel exactly modulo :math:`2^{32}`. Its aggregate is
therefore bit-identical to the one a Flower engine unmasks (tested).

What each client checks before masking, and the settings: :mod:`fedad.core.secagg`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import numpy as np

from fedad.core.secagg import (  # noqa: F401  (the shared part, reachable here as before)
    MAX_QUANTIZATION,
    MIN_DEGREE,
    MODULUS,
    WEIGHT,
    SecAggSettings,
    SecureOutcome,
    check_secure_reply,
    flatten,
    quantization_range,
    reply_nbytes,
    rounding_seed,
    unflatten,
)


@contextlib.contextmanager
def numpy_global_seed(seed: int) -> Iterator[None]:
    """Seed NumPy's global stream (Flower's quantizer draws from it), restore it after."""
    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(saved)


# -------------------------------------------------------------------------- the arithmetic


def client_vector(
    vectors: Sequence[np.ndarray],
    weight: float,
    max_weight: float,
    clip: float,
    target: int,
    seed: int,
) -> list[np.ndarray]:
    """What ``secaggplus_mod`` masks: :math:`[q_k, \\mathcal Q(\\hat r_k x_k)]` (int64).

    The steps and functions of Flower's ``_collect_masked_vectors``, before the masks.
    """
    from fedad.fl.flower.internals import factor_combine, parameters_multiply, quantize

    q_ratio = round(weight / max_weight * target)
    exact = [np.asarray(v, dtype=np.float64) for v in vectors]  # as :func:`flatten` sends them
    scaled = parameters_multiply(exact, q_ratio / target)
    with numpy_global_seed(seed):
        quantized = quantize(scaled, clip, target)
    return [np.asarray(a, dtype=np.int64) for a in factor_combine(q_ratio, quantized)]


def modular_sum(vectors: Sequence[Sequence[np.ndarray]]) -> list[np.ndarray]:
    """Element-wise sum of the clients' vectors modulo :math:`2^{32}` (what unmasking leaves)."""
    total = [np.zeros_like(a, dtype=np.int64) for a in vectors[0]]
    for vec in vectors:
        total = [(t + np.asarray(a, np.int64)) % MODULUS for t, a in zip(total, vec, strict=True)]
    return total


def server_mean(total: Sequence[np.ndarray], n: int, clip: float, target: int) -> list[np.ndarray]:
    """:math:`\\bar x'` from the unmasked sum of ``n`` clients (float64 vectors).

    The steps and functions of Flower's ``unmask_stage`` after the masks are removed.
    """
    from fedad.fl.flower.internals import dequantize, factor_extract

    q_total, rest = factor_extract(list(total))
    scale = target / q_total
    out = dequantize(rest, clip, target)
    offset = -(n - 1) * clip
    for vec in out:
        vec += offset
        vec *= scale
    return out


def error_bound(
    vectors: Sequence[Sequence[np.ndarray]],
    weights: Sequence[float],
    max_weight: float,
    clip: float,
    target: int,
) -> float:
    """An upper bound of :math:`|\\bar x' - \\bar x|` (max over entries), no clipping assumed.

    Rounding: each client's entry moves by less than one step :math:`2C/R`, plus the float64
    error of computing its grid position, :math:`\\epsilon (\\max|x| + 4C)`; summed over
    :math:`n` clients and divided by :math:`\\sum_k \\hat r_k`. Weight quantization: the
    exact and the quantized weights differ by at most :math:`1/(2R)` each, which moves the
    mean by at most :math:`\\sum_k |\\hat r_k - r_k| \\cdot 2\\max|x| / \\sum_k \\hat r_k`.
    """
    n = len(vectors)
    r_hat = np.array([round(w / max_weight * target) / target for w in weights])
    biggest = max(float(np.max(np.abs(a))) if a.size else 0.0 for v in vectors for a in v)
    eps = float(np.finfo(np.float64).eps)
    rounding = n * (2 * clip / target + eps * (biggest + 4 * clip)) / r_hat.sum()
    weighting = n / (2 * target) * 2 * biggest / r_hat.sum()
    return float(rounding + weighting)


def secure_mean(
    vectors: Sequence[Sequence[np.ndarray]],
    weights: Sequence[float],
    seeds: Sequence[int],
    max_weight: float,
    clip: float,
    n_sampled: int,
) -> list[np.ndarray]:
    """The mean SecAgg+ yields for these clients, without the masks (in-process engine).

    ``n_sampled`` (the clients the protocol was set up for) fixes :math:`R`; ``vectors`` are
    the replies that arrived.
    """
    target = quantization_range(n_sampled)
    sent = [
        client_vector(v, w, max_weight, clip, target, s)
        for v, w, s in zip(vectors, weights, seeds, strict=True)
    ]
    return server_mean(modular_sum(sent), len(sent), clip, target)
