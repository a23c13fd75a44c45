"""ONLAD with selective model aggregation (Qin, Matsutani, Kondo): the federated protocol.

Server (Sec. III-B): draws the fixed :math:`\\alpha, b`, runs the initial phase (eq. 4) on a
small normal set it holds, and keeps an *observed set* of other normal samples (never test
data). Each round it sends :math:`(\\beta, P)` (and :math:`\\alpha, b` to a client that has
not got them yet) with a detection threshold :math:`\\tau` — the ``1 - contamination``
quantile of the global model's scores on the observed set.

Client (ONLAD, online): its training data arrive as a stream cut into ``rounds`` chunks (a
seeded shuffle, then equal parts; the paper's "updating times"). On each round it takes the
chunks that arrived since it last took part, and for each chunk first *detects* (scores the
chunk with its current model) and then *learns* (eq. 5) only the samples scored at most
:math:`\\tau`: anomalous inputs are reported, not learned. Prequential detection counts are
kept per client. It replies :math:`(\\beta_k, P_k, n_k)`.

Aggregation (three registered methods on this machinery):

* ``onlad``: FedAvg, :math:`c_k = n_k / N` (eq. 6);
* ``onlad-score``: credit scores from each :math:`\\beta_k`'s loss on the observed set
  (eq. 7, Algorithm 1 line 8), no threshold;
* ``onlad-selective``: credit scores with the loss threshold :math:`\\lambda` (Algorithm 1);
  ``adaptive = true`` lowers :math:`\\lambda` linearly over the rounds (Sec. IV-B(5)). When
  every client is above :math:`\\lambda` the previous global model is kept (and logged).

Then :math:`P = \\sum_k c_k P_k`, :math:`\\beta = \\sum_k c_k \\beta_k` (eq. 8).

The detector every client ends with is the last global model with the server's threshold
:math:`\\tau` (the ``1 - contamination`` quantile of its scores on the observed set): ONLAD's
own detection rule, and it keeps a poisoned client's training data from setting its threshold.

Choices the paper leaves open, and ours: ``lam`` sets :math:`\\lambda` absolutely, as in the
paper; without it :math:`\\lambda_t` is ``lam_factor`` (2) times the median of the round's
observed losses — scale-free for any data set, and robust while fewer than half of the
clients are unreliable (an absolute default would exclude honest clients on one data set and
no one on another). ``adaptive`` then shrinks the margin above the median linearly, and an
absolute ``lam`` itself, by ``adaptive_decay`` at the last round. The loss of eq. 7 is the
mean squared reconstruction error over the observed set; :math:`n_k` is the client's number
of training samples.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from fedad.data.types import ClientData
from fedad.detector import quantile_threshold
from fedad.fl.algorithm import Algorithm, ClientState, Handler, Params, ServerResult, register
from fedad.fl.context import ServerContext
from fedad.fl.messages import Message
from fedad.fl.validate import spec_of
from fedad.methods.onlad.credit import adaptive_lambda, credit_scores, fedavg_weights
from fedad.methods.onlad.detector import OSELMAutoEncoder
from fedad.seeding import rng as seeded_rng

TRAIN = "train"
PREQUENTIAL = ("tp", "fp", "fn", "tn")


class ONLADParams(Params):
    """Parameters of the ONLAD family."""

    n_hidden: int = Field(default=64, ge=1, description="hidden units of the OS-ELM")
    alpha_scale: float = Field(default=1.0, gt=0.0, description="alpha, b ~ U(-s, s)")
    ridge: float = Field(default=1e-3, gt=0.0, description="ridge term of eq. 4")
    forgetting: float = Field(default=1.0, gt=0.0, le=1.0, description="forgetting factor")
    init_samples: int = Field(default=200, ge=1, description="server's initial normal set")
    observed: int = Field(default=1000, ge=1, description="server's observed set")
    detect: bool = Field(default=True, description="learn only samples scored <= tau")


class SelectiveParams(ONLADParams):
    """Adds the loss threshold lambda of Algorithm 1."""

    lam: float | None = Field(default=None, gt=0.0, description="absolute loss threshold")
    lam_factor: float = Field(
        default=2.0, gt=1.0, description="without lam: lambda = factor * median client loss"
    )
    adaptive: bool = Field(default=False, description="lower lambda linearly each round")
    adaptive_decay: float = Field(
        default=0.5, ge=0.0, lt=1.0, description="share of lambda removed by the last round"
    )


def stream_chunks(n: int, rounds: int, seed: int, client_id: int) -> list[np.ndarray]:
    """The client's stream: a seeded shuffle of its ``n`` samples cut into ``rounds`` chunks."""
    order = seeded_rng(seed, client_id, 0x57E).permutation(n)
    return [c for c in np.array_split(order, rounds)]


def observed_loss(h: np.ndarray, x: np.ndarray, beta: np.ndarray) -> float:
    """Eq. 7: mean reconstruction error :math:`L(X, G(X\\alpha + b)\\beta)` on the observed set.

    ``h`` is :math:`G(X\\alpha + b)`, fixed for the whole run (``alpha``, ``b`` never change),
    so the server computes it once.
    """
    xf = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    return float(np.mean((xf - h @ beta) ** 2))


class _ONLAD(Algorithm):
    """Shared protocol; subclasses choose the aggregation weights."""

    ParamsModel: ClassVar[type[Params]] = ONLADParams
    params: ONLADParams

    @classmethod
    def server_samples(cls, params: dict[str, Any]) -> int:
        p = cls.ParamsModel.model_validate(params)
        assert isinstance(p, ONLADParams)
        return p.init_samples + p.observed

    def make_detector(self) -> OSELMAutoEncoder:
        p = self.params
        return OSELMAutoEncoder(
            n_hidden=p.n_hidden,
            alpha_scale=p.alpha_scale,
            ridge=p.ridge,
            forgetting=p.forgetting,
            contamination=self.contamination,
            seed=self.setup.seed,
        )

    def handlers(self) -> dict[str, Handler]:
        return {**super().handlers(), TRAIN: self.client_train}

    # -- client ------------------------------------------------------------------------------
    def client_train(self, state: ClientState, data: ClientData, msg: Message) -> Message:
        for name in ("alpha", "bias"):
            if name in msg.arrays:
                state[name] = np.array(msg.arrays[name])
        det = self.make_detector().set_arrays(
            {"alpha": state["alpha"], "bias": state["bias"], **dict(msg.arrays)}
        )
        round_no, rounds = int(msg.get("round")), int(msg.get("rounds"))
        tau = float(msg.get("tau"))
        chunks = stream_chunks(data.n_train, rounds, self.setup.seed, data.client_id)
        last = int(state.get("last_round", np.asarray(0)))
        counts = state.get("prequential", np.zeros(4, dtype=np.int64)).copy()
        learned = 0
        for idx in chunks[last:round_no]:
            x = data.x_train[idx]
            flagged = det.detect_and_learn(x, tau if self.params.detect else None) == 1
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
        return Message(
            TRAIN,
            {"beta": det.beta_, "p": det.p_},
            {"num_examples": data.n_train, "learned": learned},
        )

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
    def weights(
        self, losses: list[float], n: list[float], round_no: int, ctx: ServerContext
    ) -> np.ndarray:
        """Aggregation weights :math:`c_k` of the replying clients."""
        return fedavg_weights(n)

    def server(self, ctx: ServerContext) -> ServerResult:
        s = ctx.server_data
        if s is None or len(s) < 2:
            raise RuntimeError(
                f"{self.name} needs server-side normal data (data.server_normal); got none"
            )
        n_init = min(self.params.init_samples, max(1, len(s) // 6))
        init, observed = s[:n_init], s[n_init : n_init + self.params.observed]
        det = self.make_detector().fit(init)
        beta, p = det.beta_, det.p_
        h_obs = det.hidden(observed)
        ctx.log(initial_loss=observed_loss(h_obs, observed, beta))
        have_weights: set[int] = set()
        spec = spec_of({"beta": beta, "p": p})
        for r in range(1, ctx.rounds + 1):
            det.beta_, det.p_ = beta, p
            tau = quantile_threshold(det.score(observed), self.contamination)
            msgs = {}
            for i in ctx.sample():
                arrays = {"beta": beta, "p": p}
                if i not in have_weights:
                    arrays.update(alpha=det.alpha_, bias=det.bias_)
                msgs[i] = Message(TRAIN, arrays, {"round": r, "rounds": ctx.rounds, "tau": tau})
            replies = ctx.send(msgs, arrays=spec, scalars=["num_examples", "learned"])
            have_weights.update(replies)
            ids = sorted(replies)
            losses = [observed_loss(h_obs, observed, replies[i].arrays["beta"]) for i in ids]
            n = [float(replies[i].scalars["num_examples"]) for i in ids]
            c = self.weights(losses, n, r, ctx) if ids else np.zeros(0)
            if c.sum() > 0:
                beta = sum(ck * replies[i].arrays["beta"] for ck, i in zip(c, ids, strict=True))
                p = sum(ck * replies[i].arrays["p"] for ck, i in zip(c, ids, strict=True))
            elif ids:
                ctx.event("every client's observed loss exceeds lambda; global model kept")
            ctx.log(
                loss=observed_loss(h_obs, observed, beta),
                tau=tau,
                excluded=int(np.sum(c == 0)) if ids else 0,
                client_losses=" ".join(f"{i}:{v:.6g}" for i, v in zip(ids, losses, strict=True)),
                client_weights=" ".join(f"{i}:{v:.4f}" for i, v in zip(ids, c, strict=True)),
            )
            if ctx.wants_checkpoint(r):
                det.beta_, det.p_ = beta, p
                tau_r = quantile_threshold(det.score(observed), self.contamination)
                ctx.checkpoint(r, ServerResult(det.get_arrays(), {"threshold": tau_r}))
            ctx.end_round(r)
        det.beta_, det.p_ = beta, p
        tau = quantile_threshold(det.score(observed), self.contamination)
        return ServerResult(arrays=det.get_arrays(), scalars={"threshold": tau})


@register
class ONLAD(_ONLAD):
    """ONLAD clients, FedAvg aggregation (eq. 6)."""

    name = "onlad"
    summary = "ONLAD: online OS-ELM autoencoders, FedAvg of beta and P (eq. 6)"


@register
class ONLADScore(_ONLAD):
    """ONLAD clients, credit-score aggregation without a threshold."""

    name = "onlad-score"
    summary = "ONLAD + credit scores from observed-set losses (eq. 7, Alg. 1 l. 8)"

    def weights(
        self, losses: list[float], n: list[float], round_no: int, ctx: ServerContext
    ) -> np.ndarray:
        return credit_scores(losses, n)


@register
class ONLADSelective(_ONLAD):
    """ONLAD clients, selective aggregation: credit scores, zero above lambda (Algorithm 1)."""

    name = "onlad-selective"
    summary = "ONLAD + selective aggregation: credit scores, clients over lambda excluded"
    ParamsModel = SelectiveParams
    params: SelectiveParams

    def weights(
        self, losses: list[float], n: list[float], round_no: int, ctx: ServerContext
    ) -> np.ndarray:
        p = self.params
        decay = p.adaptive_decay if p.adaptive else 0.0
        if p.lam is not None:
            lam = adaptive_lambda(p.lam, round_no, ctx.rounds, decay)
        else:
            margin = adaptive_lambda(p.lam_factor - 1.0, round_no, ctx.rounds, decay)
            lam = float(np.median(losses)) * (1.0 + margin)
        ctx.log(lam=lam)
        return credit_scores(losses, n, lam)
