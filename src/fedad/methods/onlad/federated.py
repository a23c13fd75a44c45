"""ONLAD with selective model aggregation ([ONLAD]: Qin, Matsutani, Kondo): the FL protocol.

The paper's equations and the functions implementing each: :mod:`fedad.methods.onlad`.

Server [ONLAD Sec. III-B]: draws the fixed :math:`\\alpha, b`, runs the initial phase
[ONLAD eq. 4] on a small normal set it holds, and keeps an *observed set* of other normal
samples (never test data). Each round it sends :math:`(\\beta, P)` (and :math:`\\alpha, b`
to a client that has not got them yet) with a detection threshold :math:`\\tau` — the
``1 - contamination`` quantile of the global model's scores on the observed set.

Client (ONLAD, online): its training data arrive as a stream cut into ``rounds`` chunks (a
seeded shuffle, then equal parts; the "updating times" of [ONLAD Sec. IV-B(3)]). On each
round it takes the chunks that arrived since it last took part, and for each chunk first
*detects* (scores the chunk with its current model) and then *learns* [ONLAD eq. 5] only
the samples scored at most :math:`\\tau`: anomalous inputs are reported, not learned.
Prequential detection counts are kept per client. It replies :math:`(\\beta_k, P_k, n_k)`
and how many samples it learned; a client with nothing new (fewer samples than rounds, or
every new sample flagged) returns the global model unchanged with ``learned = 0``: the
server leaves it out of the aggregation (history column ``clients_idle``), which is not a
failure.

Aggregation (four registered methods on this machinery):

* ``onlad``: FedAvg, :math:`c_k = n_k / N` [ONLAD eq. 6];
* ``onlad-score``: credit scores from each :math:`\\beta_k`'s loss on the observed set
  [ONLAD eq. 7, Alg. 1 l. 8], no threshold;
* ``onlad-selective``: credit scores with the loss threshold :math:`\\lambda`
  [ONLAD Alg. 1]; ``adaptive = true`` lowers :math:`\\lambda` linearly over the rounds
  [ONLAD Sec. IV-B(5)]. When every client is above :math:`\\lambda` the previous global
  model is kept (and logged);
* ``onlad-robust`` (ours, not in [ONLAD]): credit scores over the clients that pass two
  checks (:mod:`fedad.methods.onlad.credit`). The *exceedance check*: each client reports
  the score mass above :math:`\\tau` of the stream it scored this round, before learning it
  (:data:`EXCEEDANCE`); the server divides the client's total by what its observed set gives
  for as many samples under the same models and :math:`\\tau` (:class:`ExceedanceTally`)
  and refuses a client far above the others (``exceedance_factor``). The *effect gate*: the
  client's update, applied alone at its FedAvg share to the global model, must not raise
  the observed loss. An aggregate that would raise it is not taken; and, by default
  (``rescale``), inputs are standardized with the server's normal data, so that no client's
  data influence the model's input scaling.

Then :math:`P = \\sum_k c_k P_k`, :math:`\\beta = \\sum_k c_k \\beta_k` [ONLAD eq. 8].

Every aggregation survives any finite update: an observed loss that is not finite and
positive gives a credit-based method's client weight 0 (an event names it), and an aggregate
that is not finite, or whose observed loss is not, is discarded and the previous global
model kept (an event; FedAvg's only check).

The detector every client ends with is the last global model with the server's threshold
:math:`\\tau` (the ``1 - contamination`` quantile of its scores on the observed set; the
quantile is ours): the detection rule of [ONLAD Sec. III-B], and it keeps a poisoned
client's training data from setting its threshold.

Choices [ONLAD] leaves open, and ours: ``lam`` sets :math:`\\lambda` absolutely, as in the
paper; without it :math:`\\lambda_t` is ``lam_factor`` (2) times the median of the round's
observed losses — scale-free for any data set, and robust while fewer than half of the
clients are unreliable (an absolute default would exclude honest clients on one data set and
no one on another). ``adaptive`` then shrinks the margin above the median linearly, and an
absolute ``lam`` itself, by ``adaptive_decay`` at the last round. The loss of [ONLAD eq. 7]
is the mean squared reconstruction error over the observed set; :math:`n_k` is the client's
number of training samples. ``n_hidden`` defaults to
:func:`~fedad.methods.onlad.model.default_hidden` of the input width (undercomplete,
[ONLAD Sec. III-A(2)]).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from fedad.core.algorithm import (
    Algorithm,
    ClientState,
    Handler,
    Params,
    Requirements,
    ServerResult,
    register,
)
from fedad.core.context import ServerContext
from fedad.core.detector import quantile_threshold, shared_field
from fedad.core.messages import Message
from fedad.core.rng import rng as seeded_rng
from fedad.core.rounds import close_round
from fedad.core.types import ClientData, dense
from fedad.core.validate import spec_of
from fedad.evaluation.families import NORMAL_POSITIVE, MetricFamily
from fedad.methods.onlad.credit import (
    accept_aggregate,
    adaptive_lambda,
    credit_scores,
    exceedance_gate,
    exceedance_mass,
    exceedance_ratios,
    fedavg_weights,
    median_lambda,
    robust_credit_scores,
    share_steps,
    update_effects,
    usable,
)
from fedad.methods.onlad.detector import OSELMAutoEncoder, OSELMParams
from fedad.methods.onlad.model import default_hidden, standardizer

TRAIN = "train"
FIXED = ("alpha", "bias", "shift", "scale")
"""Arrays that never change during a run: sent to each client once, kept in its state."""
PREQUENTIAL = ("tp", "fp", "fn", "tn")


class ONLADParams(Params):
    """Parameters of the ONLAD family."""

    n_hidden: int | None = shared_field(
        OSELMParams,
        "n_hidden",
        description="hidden units of the OS-ELM; default min(64, max(1, n_features // 2))",
    )
    alpha_scale: float = shared_field(OSELMParams, "alpha_scale", description="alpha, b ~ U(-s, s)")
    ridge: float = shared_field(OSELMParams, "ridge", description="ridge term of [ONLAD eq. 4]")
    forgetting: float = shared_field(OSELMParams, "forgetting", description="forgetting factor")
    init_samples: int = Field(default=200, ge=1, description="server's initial normal set")
    observed: int = Field(default=1000, ge=1, description="server's observed set")
    detect: bool = Field(default=True, description="learn only samples scored <= tau")
    rescale: bool = Field(
        default=False, description="standardize inputs with the server's normal data"
    )


class SelectiveParams(ONLADParams):
    """Adds the loss threshold lambda of [ONLAD Alg. 1 l. 5-6]."""

    lam: float | None = Field(default=None, gt=0.0, description="absolute loss threshold")
    lam_factor: float = Field(
        default=2.0, gt=1.0, description="without lam: lambda = factor * median client loss"
    )
    adaptive: bool = Field(default=False, description="lower lambda linearly each round")
    adaptive_decay: float = Field(
        default=0.5, ge=0.0, lt=1.0, description="share of lambda removed by the last round"
    )


class RobustParams(ONLADParams):
    """Adds the tolerance of the effect gate of ``onlad-robust``; rescales by default."""

    rescale: bool = Field(
        default=True, description="standardize inputs with the server's normal data"
    )
    tolerance: float = Field(
        default=0.0,
        ge=0.0,
        allow_inf_nan=False,
        description="accept an update that raises the observed loss by at most this share",
    )
    exceedance_factor: float = Field(
        default=2.0,
        gt=1.0,
        description=(
            "refuse a client whose score mass above tau exceeds this many times "
            "max(1, the clients' median), relative to normal data; inf turns the check off"
        ),
    )


@dataclass(frozen=True)
class RoundInfo:
    """What an aggregation rule may look at besides the clients' losses and sizes."""

    round_no: int
    rounds: int
    prev_loss: float
    """Observed loss of the global model the clients started from this round."""
    ctx: ServerContext
    prev_beta: np.ndarray
    """The global :math:`\\beta` the clients started from."""
    betas: tuple[np.ndarray, ...]
    """The clients' :math:`\\beta_k`, in the order of the losses."""
    loss_of: Callable[[np.ndarray], float]
    """Observed loss [ONLAD eq. 7] of any :math:`\\beta`."""
    ids: tuple[int, ...] = ()
    """The node ids of the clients with an update, in the order of the losses."""
    exceedance: Mapping[int, float] = field(default_factory=dict)
    """Each reporting client's exceedance ratio so far (:class:`ExceedanceTally`); empty
    unless the method asks its clients for reports (:attr:`_ONLAD.reports`)."""


EXCEEDANCE = ("exceedance", "scored")
"""The scalars a reporting client adds to its reply: its score mass above :math:`\\tau`
(:func:`~fedad.methods.onlad.credit.exceedance_mass`) over the samples it scored this
round, and how many it scored."""


@dataclass
class ExceedanceTally:
    """Per client, the score mass above :math:`\\tau` it reported over the rounds, and what
    the server's observed set gives for as many samples under the same models and
    :math:`\\tau` (:func:`~fedad.methods.onlad.credit.exceedance_ratios`)."""

    mass: dict[int, float] = field(default_factory=dict)
    expected: dict[int, float] = field(default_factory=dict)

    def add(self, node: int, reply: Message, observed_mean: float) -> bool:
        """Add one reply's report (``observed_mean``: the observed set's mean mass this round).

        Returns ``False`` when the report is unusable (a negative mass or count): the client's
        ratio is then :math:`+\\infty` from here on."""
        mass, scored = float(reply.scalars["exceedance"]), float(reply.scalars["scored"])
        ok = mass >= 0 and scored >= 0
        self.mass[node] = self.mass.get(node, 0.0) + (mass if ok else float("inf"))
        self.expected[node] = self.expected.get(node, 0.0) + max(scored, 0.0) * observed_mean
        return ok

    def ratios(self) -> dict[int, float]:
        """:math:`E_k` of every client that has reported."""
        ids = sorted(self.mass)
        values = exceedance_ratios([self.mass[i] for i in ids], [self.expected[i] for i in ids])
        return {i: float(v) for i, v in zip(ids, values, strict=True)}


def stream_chunks(n: int, rounds: int, seed: int, client_id: int) -> list[np.ndarray]:
    """The client's stream: a seeded shuffle of its ``n`` samples cut into ``rounds`` chunks."""
    order = seeded_rng(seed, client_id, 0x57E).permutation(n)
    return [c for c in np.array_split(order, rounds)]


def observed_loss(h: np.ndarray, x: np.ndarray, beta: np.ndarray) -> float:
    """[ONLAD eq. 7]: mean reconstruction error :math:`L(X, G(X\\alpha + b)\\beta)` on ``X``.

    ``h`` is :math:`G(X\\alpha + b)`, fixed for the whole run (``alpha``, ``b`` never change),
    so the server computes it once.
    """
    xf = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    with np.errstate(over="ignore", invalid="ignore"):  # a poisoned beta may overflow: inf
        return float(np.mean((xf - h @ beta) ** 2))


class _ONLAD(Algorithm):
    """Shared protocol; subclasses choose the aggregation weights."""

    ParamsModel: ClassVar[type[Params]] = ONLADParams
    params: ONLADParams
    metric_families: ClassVar[tuple[MetricFamily, ...]] = (NORMAL_POSITIVE,)
    """[ONLAD Table I] reports precision, recall and F-score with normal as the positive
    class: ``normal_precision``, ``normal_recall``, ``normal_f1`` and the learning curve
    ``eval_normal_f1`` (:data:`fedad.evaluation.families.NORMAL_POSITIVE`)."""
    nobody_passes: ClassVar[str] = "no client's update can be used"
    """The event's words when every update gets weight 0 (empty: no event, only ``kept``)."""
    reports: ClassVar[bool] = False
    """Whether clients report their score mass above :math:`\\tau` (:data:`EXCEEDANCE`)."""

    @classmethod
    def requirements(cls, params: dict[str, Any]) -> Requirements:
        """The server's initial set and observed set [ONLAD Sec. III-B]; updates in ``train``."""
        p = cls.ParamsModel.model_validate(params)
        assert isinstance(p, ONLADParams)
        return Requirements(server_normal=p.init_samples + p.observed)

    @property
    def n_hidden(self) -> int:
        """The hidden width: ``n_hidden``, or :func:`default_hidden` of the input width."""
        if self.params.n_hidden is not None:
            return self.params.n_hidden
        return default_hidden(math.prod(self.setup.feature_shape))

    def make_detector(self) -> OSELMAutoEncoder:
        return OSELMAutoEncoder.configured(
            self.params,
            n_hidden=self.n_hidden,
            contamination=self.contamination,
            seed=self.setup.seed,
        )

    def handlers(self) -> dict[str, Handler]:
        return {**super().handlers(), TRAIN: self.client_train}

    # -- client ------------------------------------------------------------------------------
    def client_train(self, state: ClientState, data: ClientData, msg: Message) -> Message:
        for name in FIXED:
            if name in msg.arrays:
                state[name] = np.array(msg.arrays[name])
        fixed = {k: state[k] for k in FIXED if k in state}
        det = self.make_detector().set_arrays({**fixed, **dict(msg.arrays)})
        round_no, rounds = int(msg.get("round")), int(msg.get("rounds"))
        tau = float(msg.get("tau"))
        chunks = stream_chunks(data.n_train, rounds, self.setup.seed, data.client_id)
        last = int(state.get("last_round", np.asarray(0)))
        counts = state.get("prequential", np.zeros(4, dtype=np.int64)).copy()
        learned, mass, scored = 0, 0.0, 0
        for idx in chunks[last:round_no]:
            if len(idx) == 0:  # fewer samples than rounds: nothing arrived in this chunk
                continue
            x = dense(data.x_train, self.name)[idx]
            scores = det.score_and_learn(x, tau if self.params.detect else None)
            flagged = scores > tau if self.params.detect else np.zeros(len(idx), dtype=bool)
            mass += exceedance_mass(scores, tau)
            scored += len(idx)
            truth = data.y_train[idx] == 1  # evaluation only: never used to decide
            counts += [
                np.sum(flagged & truth),
                np.sum(flagged & ~truth),
                np.sum(~flagged & truth),
                np.sum(~flagged & ~truth),
            ]
            learned += int(np.sum(~flagged))
        state["last_round"] = np.asarray(round_no)
        state["prequential"] = counts
        scalars: dict[str, float | int] = {"num_examples": data.n_train, "learned": learned}
        if self.reports:
            scalars.update(exceedance=min(mass, np.finfo(np.float64).max), scored=scored)
        return Message(TRAIN, {"beta": det.beta_, "p": det.p_}, scalars)

    def client_detector(
        self, state: ClientState, data: ClientData, msg: Message
    ) -> OSELMAutoEncoder:
        return self.make_detector().set_arrays(dict(msg.arrays))

    def extra_metrics(self, evaluations: dict[int, Message]) -> dict[str, Any]:
        """Prequential (detect-then-learn) results on the training streams, per client."""
        rows = []
        for cid in sorted(evaluations):
            tp, fp, fn, tn = (int(v) for v in evaluations[cid].arrays["prequential"])
            rows.append(
                {
                    "client": cid,
                    "tp": tp,
                    "fp": fp,
                    "fn": fn,
                    "tn": tn,
                    "rejected": tp + fp,
                    "recall": tp / (tp + fn) if tp + fn else None,
                    "false_alarm_rate": fp / (fp + tn) if fp + tn else None,
                }
            )
        return {"prequential": rows}

    def client_evaluate(self, state: ClientState, data: ClientData, msg: Message) -> Message:
        reply = super().client_evaluate(state, data, msg)
        counts = state.get("prequential", np.zeros(4, dtype=np.int64))
        return Message(reply.kind, {**reply.arrays, "prequential": counts}, reply.scalars)

    # -- server ------------------------------------------------------------------------------
    def weights(self, losses: list[float], n: list[float], rnd: RoundInfo) -> np.ndarray:
        """Aggregation weights :math:`c_k` of the clients with an update (FedAvg here)."""
        return fedavg_weights(n)

    def excludes_unusable(self) -> bool:
        """Whether the weights depend on the losses (then an unusable loss means exclusion)."""
        return True

    def accepts(self, new_loss: float, prev_loss: float) -> bool:
        """Whether a finite aggregate with observed loss ``new_loss`` replaces the model."""
        return True

    def server(self, ctx: ServerContext) -> ServerResult:
        s = None if ctx.server_data is None else dense(ctx.server_data, self.name)
        if s is None or len(s) < 2:
            raise RuntimeError(
                f"{self.name} needs server-side normal data (data.server_normal); got none"
            )
        n_init = min(self.params.init_samples, max(1, len(s) // 6))
        init, observed = s[:n_init], s[n_init : n_init + self.params.observed]
        det = self.make_detector()
        if self.params.rescale:
            det.set_scaling(*standardizer(s[: n_init + self.params.observed]))
        det.fit(init)
        beta, p = det.beta_, det.p_
        z_obs = det.transform(observed)
        h_obs = det.hidden(observed)
        loss = observed_loss(h_obs, z_obs, beta)
        ctx.log(initial_loss=loss)
        have_weights: set[int] = set()
        spec = spec_of({"beta": beta, "p": p})
        tally = ExceedanceTally()
        for r in range(1, ctx.rounds + 1):
            det.beta_, det.p_ = beta, p
            observed_scores = det.score(observed)
            tau = quantile_threshold(observed_scores, self.contamination)
            msgs = _train_messages(ctx, det, beta, p, have_weights, r, tau)
            scalars = ["num_examples", "learned", *(EXCEEDANCE if self.reports else ())]
            replies = ctx.send(msgs, arrays=spec, scalars=scalars)
            have_weights.update(replies)
            if self.reports:
                self._tally(ctx, tally, replies, exceedance_mass(observed_scores, tau) / len(z_obs))
            # a reply that learned nothing carries the global model back unchanged: no update,
            # left out of the aggregation (and not a failure)
            ids = [i for i in sorted(replies) if float(replies[i].scalars["learned"]) > 0]
            losses = [observed_loss(h_obs, z_obs, replies[i].arrays["beta"]) for i in ids]
            n = [float(replies[i].scalars["num_examples"]) for i in ids]
            rnd = RoundInfo(
                r,
                ctx.rounds,
                loss,
                ctx,
                beta,
                tuple(replies[i].arrays["beta"] for i in ids),
                lambda b: observed_loss(h_obs, z_obs, b),
                tuple(ids),
                tally.ratios(),
            )
            c = self.weights(losses, n, rnd) if ids else np.zeros(0)
            if self.excludes_unusable():
                _note_unusable(ctx, ids, losses, c)
            kept = bool(ids)
            if c.sum() > 0:
                new = _combine(c, [replies[i].arrays for i in ids])
                new_loss = observed_loss(h_obs, z_obs, new[0]) if new else float("nan")
                if new is not None and np.isfinite(new_loss):
                    if self.accepts(new_loss, loss):
                        (beta, p), loss, kept = new, new_loss, False
                else:
                    ctx.event(
                        "the aggregated model is not finite on the observed set; global model kept"
                    )
            elif ids and self.nobody_passes:
                ctx.event(f"{self.nobody_passes}; global model kept")
            ctx.log(
                loss=loss,
                kept=int(kept),
                tau=tau,
                clients_idle=len(replies) - len(ids),
                excluded=int(np.sum(c == 0)),
                client_losses=" ".join(f"{i}:{v:.6g}" for i, v in zip(ids, losses, strict=True)),
                client_weights=" ".join(f"{i}:{v:.4f}" for i, v in zip(ids, c, strict=True)),
            )
            close_round(ctx, r, partial(self._result, det, beta, p, observed))
        return self._result(det, beta, p, observed)

    @staticmethod
    def _tally(
        ctx: ServerContext, tally: ExceedanceTally, replies: Mapping[int, Message], mean: float
    ) -> None:
        """Add the round's exceedance reports (``mean``: the observed set's mean mass)."""
        for i in sorted(replies):
            if not tally.add(i, replies[i], mean):
                ctx.event(
                    f"node {i}: its exceedance report is negative; its updates are excluded "
                    "from now on"
                )

    def _result(
        self, det: OSELMAutoEncoder, beta: np.ndarray, p: np.ndarray, observed: np.ndarray
    ) -> ServerResult:
        """The global model with the threshold it is used at (also in its saved arrays)."""
        det.beta_, det.p_ = beta, p
        det.threshold_ = quantile_threshold(det.score(observed), self.contamination)
        return ServerResult(arrays=det.get_arrays(), scalars={"threshold": det.threshold_})


def _train_messages(
    ctx: ServerContext,
    det: OSELMAutoEncoder,
    beta: np.ndarray,
    p: np.ndarray,
    have_weights: set[int],
    r: int,
    tau: float,
) -> dict[int, Message]:
    """Round ``r``'s train messages to the sampled clients: the global :math:`\beta`, P and
    the rejection threshold ``tau``, plus the fixed input weights for a client that has not
    had them yet."""
    msgs = {}
    for i in ctx.sample():
        arrays = {"beta": beta, "p": p}
        if i not in have_weights:
            arrays.update({k: v for k, v in det.get_arrays().items() if k in FIXED})
        msgs[i] = Message(TRAIN, arrays, {"round": r, "rounds": ctx.rounds, "tau": tau})
    return msgs


def _note_unusable(ctx: ServerContext, ids: list[int], losses: list[float], c: np.ndarray) -> None:
    """An event for each client whose observed loss is unusable and whose update is excluded."""
    for i, v, ck in zip(ids, losses, c, strict=True):
        if not usable([v])[0] and ck == 0:
            ctx.event(
                f"node {i}: observed loss {v:.6g} is not finite and positive; "
                "its update is excluded"
            )


def _combine(
    c: np.ndarray, models: list[Mapping[str, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray] | None:
    """[ONLAD eq. 8], :math:`\\beta = \\sum_k c_k \\beta_k`, :math:`P = \\sum_k c_k P_k`, over
    :math:`c_k > 0`; ``None`` when a sum is not finite (finite updates of 1e300 can overflow).
    """
    used = [(ck, m) for ck, m in zip(c, models, strict=True) if ck > 0]
    with np.errstate(over="ignore", invalid="ignore"):
        beta = np.sum([ck * m["beta"] for ck, m in used], axis=0)
        p = np.sum([ck * m["p"] for ck, m in used], axis=0)
    if not (np.all(np.isfinite(beta)) and np.all(np.isfinite(p))):
        return None
    return beta, p


@register
class ONLAD(_ONLAD):
    """ONLAD clients, FedAvg aggregation [ONLAD eq. 6]."""

    name = "onlad"

    def excludes_unusable(self) -> bool:
        return False


@register
class ONLADScore(_ONLAD):
    """ONLAD clients, credit-score aggregation without a threshold."""

    name = "onlad-score"

    def weights(self, losses: list[float], n: list[float], rnd: RoundInfo) -> np.ndarray:
        return credit_scores(losses, n)


@register
class ONLADSelective(_ONLAD):
    """ONLAD clients, selective aggregation: credit scores, zero above lambda [ONLAD Alg. 1]."""

    name = "onlad-selective"
    ParamsModel = SelectiveParams
    params: SelectiveParams
    nobody_passes = "every client's observed loss exceeds lambda"

    def weights(self, losses: list[float], n: list[float], rnd: RoundInfo) -> np.ndarray:
        p = self.params
        decay = p.adaptive_decay if p.adaptive else 0.0
        if p.lam is not None:
            lam = adaptive_lambda(p.lam, rnd.round_no, rnd.rounds, decay)
        else:
            margin = adaptive_lambda(p.lam_factor - 1.0, rnd.round_no, rnd.rounds, decay)
            lam = median_lambda(losses, 1.0 + margin)
        rnd.ctx.log(lam=lam)
        return credit_scores(losses, n, lam)


@register
class ONLADRobust(_ONLAD):
    """ONLAD clients, credit scores over the clients whose stream is not far more anomalous
    than normal data and whose update does not worsen the global model."""

    name = "onlad-robust"
    ParamsModel = RobustParams
    params: RobustParams
    nobody_passes = ""  # expected once the model has converged: history `kept`, no event
    reports = True

    def weights(self, losses: list[float], n: list[float], rnd: RoundInfo) -> np.ndarray:
        steps = share_steps(rnd.prev_beta, rnd.betas, n)
        step_losses = [rnd.loss_of(b) for b in steps]
        effects = update_effects(step_losses, rnd.prev_loss)
        ratios = [rnd.exceedance.get(i, float("nan")) for i in rnd.ids]
        keep = exceedance_gate(ratios, list(rnd.exceedance.values()), self.params.exceedance_factor)
        rnd.ctx.log(
            client_effects=" ".join(f"{v:.4g}" for v in effects),
            client_exceedance=" ".join(
                f"{i}:{v:.4g}" for i, v in zip(rnd.ids, ratios, strict=True)
            ),
        )
        return robust_credit_scores(
            losses, step_losses, n, rnd.prev_loss, self.params.tolerance, keep=keep
        )

    def accepts(self, new_loss: float, prev_loss: float) -> bool:
        return accept_aggregate(new_loss, prev_loss, self.params.tolerance)
