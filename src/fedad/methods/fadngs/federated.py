"""FADngs ([FADngs]: Dong et al., IEEE TNNLS 2024): the FL protocol, methods ``fadngs`` and
``fadngs-nosed``.

The paper's equations and the functions implementing each: :mod:`fedad.methods.fadngs`.

Round :math:`t` of [FADngs Algorithm 1], for the sampled clients :math:`S_t`
(:meth:`~fedad.core.context.ServerContext.sample`):

1. **Warm-up** (the first ``warmup_rounds`` rounds): federated SimCLR, FedAvg
   [FADngs Sec. IV: "the model is trained using SimCLR at first"].
2. **NGDE** (phase ``density``): each client embeds its training data with the global model
   :math:`\\theta_{t-1}`, clusters the representations with a k-means stopped after
   ``kmeans_iters`` iterations (weak clustering: clusters keep members of other clusters, the
   noise of [FADngs eq. 4, 5]), fits one shrunk Gaussian per cluster [FADngs eq. 1-3] and
   sends only the means and covariances. The server's global density set is their union.
3. **LocalUpdate** (phase ``train``): CRAD [FADngs eq. 7-9] from :math:`\\theta_{t-1}` with the
   global density set; :math:`\\delta` is the 95% quantile of the client's own training scores
   under it, recomputed each epoch.
4. **Aggregate**: ``fadngs-nosed`` takes the example-weighted mean (FedAvg; through
   :meth:`~fedad.core.context.ServerContext.mean`, so SecAgg+ applies); ``fadngs`` starts from
   that mean [FADngs eq. 10] and distils the clients' models into it on the server's public
   set (SED), teachers weighted by the Pearson correlation of their normalised anomaly
   scores on the public set with the mean score. By default (``sed_form = "cosine"``, not
   the paper's) each teacher's term pulls the student toward it by cosine, with no queue
   (:func:`~fedad.methods.fadngs.losses.cosine_distill_loss`); ``sed_form = "seed"`` is
   [FADngs eq. 11-13], for which the rest of this item holds. Each client has one
   FIFO instance queue on the server, filled with random unit vectors and **renewed in every
   Aggregate** (``sed_queues = "round"``, [FADngs Algorithm 1]: "initialize instances queue
   D_c randomly", as the authors' code does); each input's own teacher representation leads
   the queue (``sed_positive``, the paper's text and code, see
   :func:`~fedad.methods.fadngs.losses.sed_loss`). ``sed_queues = "persist"`` keeps the
   queues across rounds instead (the reading "progressively updated"); with a public set
   smaller than the queue that fills it with the same images' representations from earlier
   rounds' teachers, which the student is then pushed away from.

After the last round a final NGDE phase gives the global density set under the final model
:math:`\\theta_T`; every client's detector is :math:`\\theta_T` with that set [FADngs eq. 6],
its threshold from its own training scores.

Ablations ([FADngs Table III, IV], both on ``fadngs-nosed``, which aggregates by FedAvg as
those tables do): ``density = "local"`` shares the model but no density (each client trains
and scores with its own densities); ``density = "none"`` shares nothing: every client trains
its own model with its own densities (the table's "using local models"). ``loss`` picks
CRAD, SimCLR or CSI's pairs (:mod:`.losses`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch

from fedad.core.aggregate import weighted_mean_dicts
from fedad.core.algorithm import (
    Algorithm,
    ClientState,
    Handler,
    Params,
    PublicRequest,
    Requirements,
    ServerResult,
    Setup,
    register,
)
from fedad.core.context import ServerContext
from fedad.core.errors import ConfigError, RunError
from fedad.core.messages import Message, prefixed, unprefixed
from fedad.core.rng import rng as seeded_rng
from fedad.core.rounds import log_weighted_scalars
from fedad.core.types import ClientData, dense
from fedad.core.validate import ArraySpec, spec_of
from fedad.devices import resolve_device
from fedad.evaluation.families import MetricFamily
from fedad.methods.fadngs.density import min_mahalanobis
from fedad.methods.fadngs.detector import (
    COVS,
    MAX_GAUSSIANS,
    MEANS,
    FADngsDetector,
)
from fedad.methods.fadngs.family import PRIVACY
from fedad.methods.fadngs.losses import FifoQueue, pearson_weights, teacher_agreement
from fedad.methods.fadngs.params import FADngsParams
from fedad.methods.fadngs.privacy import (
    density_epsilon,
    distance_correlations,
    noisy_gaussian,
)
from fedad.methods.fadngs.train import cosine_lr, local_update, sed_distill, teacher_representations

DENSITY = "density"
TRAIN = "train"
LOSS_SCALARS = ["loss", "loss_collapsed", "rep_cos"]
"""The scalars every ``train`` reply carries: the loss, its collapsed value and the mean
pairwise cosine of the representations (:func:`~.train.local_update`)."""
CRAD_SCALARS = [*LOSS_SCALARS, "delta", "flagged"]
"""The scalars a CRAD ``train`` reply carries."""
SHARED = "shared/"
"""Client-state prefix of the Gaussians a client last shared (for the privacy measure)."""
EMBEDDED = "embedded"
"""Client-state prefix of the representations its last density phase computed, and their
round (reused by that round's first CRAD selection)."""


def client_rng(seed: int, round_no: int, client_id: int, stream: int) -> np.random.Generator:
    """A client's generator for a round and purpose: a pure function of its keys."""
    return seeded_rng(seed, round_no, client_id, stream)


class _FADngs(Algorithm):
    """The shared protocol; subclasses choose the aggregation (SED or FedAvg)."""

    ParamsModel = FADngsParams
    params: FADngsParams
    metric_families: ClassVar[tuple[MetricFamily, ...]] = (PRIVACY,)
    sed: ClassVar[bool] = False
    queues: dict[int, FifoQueue]
    """SED's instance queues by client id (set by :meth:`server`; renewed every round unless
    ``sed_queues = "persist"``; empty with ``sed_form = "cosine"``, which has none)."""

    def __init__(self, params: Params, setup: Setup, detector: str | None = None) -> None:
        super().__init__(params, setup, detector)
        p = self.params
        _, h, w = setup.feature_shape
        if h != w or h < 8:
            raise ConfigError(
                f"{self.name}: the rotations of CRAD need square images of side >= 8, this "
                f"run's are {h}x{w}",
                "resize the images (data.size)",
            )
        if p.warmup_rounds is not None and p.warmup_rounds >= setup.rounds:
            raise ConfigError(
                f"{self.name}: warmup_rounds = {p.warmup_rounds} leaves no round of the method "
                f"proper (rounds = {setup.rounds})",
                "lower warmup_rounds or raise rounds",
            )
        if p.density_noise > 0 and p.k_c != 1:
            raise ConfigError(
                f"{self.name}: density_noise needs k_c = 1 (with several clusters the "
                "memberships depend on every sample and the noise has no sensitivity bound)",
                "set k_c = 1 or density_noise = 0",
            )
        if p.density == "global" and p.k_c * setup.num_clients > MAX_GAUSSIANS:
            raise ConfigError(
                f"{self.name}: the global density set would hold up to k_c x clients = "
                f"{p.k_c} x {setup.num_clients} Gaussians, more than {MAX_GAUSSIANS}",
                f"lower k_c to at most {max(1, MAX_GAUSSIANS // setup.num_clients)}",
            )
        if p.density_noise > 0 and p.density != "global":
            raise ConfigError(
                f'{self.name}: density_noise acts on shared densities; density = "{p.density}" '
                "shares none",
                'drop density_noise or use density = "global"',
            )

    @property
    def personalized(self) -> bool:  # type: ignore[override]
        """Each client has its own detector unless model and densities are both global."""
        return self.params.density != "global"

    @property
    def warmup(self) -> int:
        """SimCLR rounds: ``warmup_rounds``, by default a fifth of the rounds."""
        w = self.params.warmup_rounds
        return self.setup.rounds // 5 if w is None else w

    @classmethod
    def requirements(cls, params: dict[str, Any]) -> Requirements:
        """SED's public set (federation's image shape); updates in ``train``."""
        p = FADngsParams.model_validate(params)
        public = PublicRequest(p.public_set, n=p.public_n) if cls.sed else None
        return Requirements(public=public, update_phases=(TRAIN,) if p.density != "none" else ())

    # -- models -----------------------------------------------------------------------------
    def make_detector(self) -> FADngsDetector:
        p = self.params
        return FADngsDetector.configured(
            p,
            input_shape=list(self.setup.feature_shape),
            unit=p.density_noise > 0,
            epochs=max(self.setup.rounds - self.warmup, 0) * p.local_epochs,
            warmup_epochs=self.warmup * p.local_epochs,
            contamination=self.contamination,
            seed=self.setup.seed,
            device=resolve_device(self.setup.device),
        )

    def _detector(self, weights: dict[str, np.ndarray]) -> FADngsDetector:
        det = self.make_detector().build()
        return det.set_model(weights) if weights else det

    def _weights(self, state: ClientState, msg: Message) -> dict[str, np.ndarray]:
        """The model a client starts from: the server's, or its own with ``density = "none"``."""
        if self.params.density == "none":
            return unprefixed(state, "own")
        return {k: v for k, v in msg.arrays.items() if k not in (MEANS, COVS)}

    # -- client -----------------------------------------------------------------------------
    def handlers(self) -> dict[str, Handler]:
        return {**super().handlers(), DENSITY: self.client_density, TRAIN: self.client_train}

    def _gaussians(
        self, det: FADngsDetector, x: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """GetDensityFunctions [FADngs Algorithm 1]: the client's Gaussians under ``det``."""
        return self._gaussians_of(det, det.represent(x), rng)

    def _gaussians_of(
        self, det: FADngsDetector, z: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_gaussians` from the representations ``z = det.represent(x)``."""
        p = self.params
        if p.density_noise > 0:
            # "private": the operating system's entropy, which the server cannot recompute
            # from the run's seed (it could subtract seeded noise); "seeded": reproducible
            noise = rng if p.noise_source == "seeded" else np.random.default_rng()
            mean, cov = noisy_gaussian(z, p.density_noise, p.rho, noise)
            return mean[None], cov[None]
        return det.density_of(z, rng)

    def client_density(self, state: ClientState, data: ClientData, msg: Message) -> Message:
        """NGDE: the noisy Gaussians of the client's training data, nothing else.

        A release is keyed by the message's round: asked again for the same round (a
        learning-curve checkpoint asks for the next round's, under the same model), the
        client sends what it released before, so the noise of a round is drawn once."""
        r = int(msg.get("round", 0))
        shared = unprefixed(state, SHARED.rstrip("/"))
        if MEANS in shared and int(shared.get("round", -1)) == r:
            means, covs = shared[MEANS], shared[COVS]
        else:
            det = self._detector(self._weights(state, msg))
            rng = client_rng(self.setup.seed, r, data.client_id, 0xD1)
            z = det.represent(dense(data.x_train, self.name))
            means, covs = self._gaussians_of(det, z, rng)
            release = {MEANS: means, COVS: covs, "round": np.asarray(r)}
            state.update(prefixed(release, SHARED.rstrip("/")))
            if not det.params.unit:  # the same model starts this round's training: its first
                # selection (eq. 8) reuses these representations instead of embedding every
                # sample again (float32 keeps every bit: embed computes in float32)
                embedded = {"z": z.astype(np.float32), "round": np.asarray(r)}
                state.update(prefixed(embedded, EMBEDDED))
        return Message(
            DENSITY,
            {MEANS: means.astype(np.float32), COVS: covs.astype(np.float32)},
            {"num_examples": data.n_train},
        )

    def client_train(self, state: ClientState, data: ClientData, msg: Message) -> Message:
        """LocalUpdate [FADngs Algorithm 1] (or a SimCLR warm-up epoch)."""
        p = self.params
        det = self._detector(self._weights(state, msg))
        x = dense(data.x_train, self.name)
        r = int(msg.get("round", 0))
        rng = client_rng(self.setup.seed, r, data.client_id, 0xD2)
        loss = "simclr" if bool(msg.get("warmup", False)) else p.loss
        means = covs = None
        if loss == "crad":
            if p.density == "global":
                means, covs = msg.arrays[MEANS], msg.arrays[COVS]
            else:  # its own densities under the model it starts from
                means, covs = self._gaussians(
                    det, x, client_rng(self.setup.seed, r, data.client_id, 0xD1)
                )
        kept = unprefixed(state, EMBEDDED)
        z0 = None
        if loss == "crad" and p.density == "global" and int(kept.get("round", -1)) == r:
            z0 = kept["z"].astype(np.float64)  # this round's density phase, same model
        scalars = local_update(
            det.encoder_,
            x,
            epochs=p.local_epochs,
            batch_size=p.batch_size,
            lr=float(msg.get("lr", p.lr)),
            rng=rng,
            loss=loss,
            means=means,
            covs=covs,
            quantile=p.quantile,
            n_plus=p.n_plus,
            temperature=p.temperature,
            weight_decay=p.weight_decay,
            unit=det.params.unit,
            form=p.con_form,
            z0=z0,
            crop_min=p.crop_min,
            jitter=p.jitter,
        )
        reply = {"num_examples": data.n_train, **scalars}
        if p.density == "none":
            state.update(prefixed(det.model_arrays(), "own"))
            return Message(TRAIN, {}, reply)
        return Message(TRAIN, det.model_arrays(), reply)

    def client_detector(self, state: ClientState, data: ClientData, msg: Message) -> FADngsDetector:
        """The final model with the global density set, or (``density`` local or none) the
        client's own Gaussians under its final model."""
        det = self._detector(self._weights(state, msg))
        if self.params.density == "global":
            return det.set_density(msg.arrays[MEANS], msg.arrays[COVS])
        rng = client_rng(self.setup.seed, self.setup.rounds + 1, data.client_id, 0xD3)
        return det.set_density(*self._gaussians(det, dense(data.x_train, self.name), rng))

    def client_evaluate(self, state: ClientState, data: ClientData, msg: Message) -> Message:
        """The platform's evaluation, plus the distance correlations of [FADngs Fig. 9]
        between the client's raw training data and the Gaussians it last shared."""
        reply = super().client_evaluate(state, data, msg)
        shared = unprefixed(state, SHARED.rstrip("/"))
        if not self.params.privacy_measure or MEANS not in shared:
            return reply
        rng = client_rng(self.setup.seed, 0, data.client_id, 0xD4)
        x = dense(data.x_train, self.name)
        measures = distance_correlations(x, shared[MEANS], shared[COVS], rng)
        return Message(reply.kind, reply.arrays, {**reply.scalars, **measures})

    # -- server -----------------------------------------------------------------------------
    def _density_phase(
        self, ctx: ServerContext, ids: list[int], weights: dict[str, np.ndarray], r: int
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Collect the sampled clients' Gaussians; their union, or None if none came."""
        d = self.params.proj_dim
        replies = ctx.send(
            {i: Message(DENSITY, weights, {"round": r}) for i in ids},
            arrays={
                MEANS: ArraySpec((None, d), "float32"),
                COVS: ArraySpec((None, d, d), "float32"),
            },
            scalars=["num_examples"],
        )
        means, covs = [], []
        for nid, m in replies.items():
            mu, sig = m.arrays[MEANS], m.arrays[COVS]
            if len(mu) != len(sig) or len(mu) < 1:
                ctx.event(
                    f"rejected densities of node {nid}: {len(mu)} means, {len(sig)} covariances"
                )
                continue
            means.append(mu.astype(np.float64))
            covs.append(sig.astype(np.float64))
        if not means:
            return None
        ctx.log(gaussians=sum(len(m) for m in means))
        return np.concatenate(means), np.concatenate(covs)

    def _aggregate(
        self,
        ctx: ServerContext,
        msgs: dict[int, Message],
        spec: dict[str, ArraySpec],
        density: tuple[np.ndarray, np.ndarray] | None,
        queues: dict[int, FifoQueue],
        r: int,
        warmup: bool,
    ) -> dict[str, np.ndarray] | None:
        """FedAvg (nosed, warm-up) or FedAvg followed by SED; None without usable replies."""
        losses = CRAD_SCALARS if not warmup and self.params.loss == "crad" else LOSS_SCALARS
        if not self.sed or warmup:
            avg = ctx.mean(msgs, arrays=spec, scalars=losses)
            if avg.arrays is not None:
                log_weighted_scalars(ctx, avg.replies, losses)
            return avg.arrays
        replies = ctx.send(msgs, arrays=spec, scalars=["num_examples", *losses])
        if not replies:
            return None
        log_weighted_scalars(ctx, replies, losses)
        ids = sorted(replies)
        n = [float(replies[i].scalars["num_examples"]) for i in ids]
        parts = [{k: replies[i].arrays[k] for k in spec} for i in ids]
        student = self._detector(weighted_mean_dicts(parts, n))
        teacher_dets = [self._detector(p) for p in parts]
        assert ctx.public is not None and density is not None
        public = np.asarray(ctx.public, dtype=np.float32)
        # each teacher's scores in the densities' space (its represent: unit-normalised
        # under the Gaussian mechanism)
        reps = [d.represent(public) for d in teacher_dets]
        scores = np.stack([min_mahalanobis(z, *density) for z in reps])
        w = pearson_weights(scores)
        p = self.params
        if p.sed_queues == "round":
            queues.clear()  # [FADngs Algorithm 1]: "initialize instances queue D_c randomly"
        for i in ids if p.sed_form == "seed" else ():  # the cosine form has no queue
            if i not in queues:
                seed = int(seeded_rng(self.setup.seed, i, r, 0x9E).integers(2**62))
                gen = torch.Generator().manual_seed(seed)
                queues[i] = FifoQueue.random(p.queue_size, p.proj_dim, gen)
        loss = sed_distill(
            student.encoder_,
            teacher_representations(reps),
            [queues[i] for i in ids] if p.sed_form == "seed" else None,
            w,
            public,
            epochs=p.distill_epochs,
            batch_size=p.distill_batch,
            lr=cosine_lr(p.distill_lr, r - 1, ctx.rounds),
            rng=seeded_rng(self.setup.seed, r, 0x5ED),
            tau=p.sed_temperature,
            teacher_tau=p.sed_teacher_temperature,
            positive=p.sed_positive,
            weight_decay=p.weight_decay,
            form=p.sed_form,
        )
        ctx.log(
            sed_loss=loss,
            sed_weight_min=float(w.min()),
            sed_weight_max=float(w.max()),
            sed_teacher_cos=teacher_agreement(reps),
        )
        return student.model_arrays()

    def server(self, ctx: ServerContext) -> ServerResult:
        if self.sed and ctx.secagg is not None:  # refused before anything trains
            raise RunError(
                "fadngs: SED distils from each client's own model, which SecAgg+ hides",
                "use fadngs-nosed with privacy.secagg",
            )
        if self.sed and ctx.public is None:
            raise RunError(f"{self.name}: no public set reached the server", "see `requirements`")
        weights = self.make_detector().build().model_arrays()
        spec = spec_of(weights)
        queues = self.queues = {}
        result = ServerResult({}, {})
        for r in range(1, ctx.rounds + 1):
            weights = self._round(ctx, r, weights, spec, queues)
            if r == ctx.rounds:
                result = self._final(ctx, weights, r)
            elif ctx.wants_checkpoint(r) and r >= self.warmup:
                # no learning curve in the warm-up (no densities yet); a checkpoint's density
                # phase asks for round r + 1's release, which the client sends again then
                ctx.checkpoint(r, self._final(ctx, weights, r))
            ctx.end_round(r)
        return result

    def _round(
        self,
        ctx: ServerContext,
        r: int,
        weights: dict[str, np.ndarray],
        spec: dict[str, ArraySpec],
        queues: dict[int, FifoQueue],
    ) -> dict[str, np.ndarray]:
        """One round of [FADngs Algorithm 1]; the new global weights."""
        p = self.params
        warmup = r <= self.warmup
        shared = p.density != "none"
        ids = ctx.sample()
        scalars: dict[str, Any] = {"round": r, "lr": cosine_lr(p.lr, r - 1, ctx.rounds)}
        sent: dict[str, np.ndarray] = dict(weights) if shared else {}
        density = None
        if warmup:
            scalars["warmup"] = True
        elif p.density == "global":
            density = self._density_phase(ctx, ids, weights, r)
            if density is None:
                ctx.event("no densities came back; the round trains nothing")
                return weights
            sent.update({MEANS: density[0].astype(np.float32), COVS: density[1].astype(np.float32)})
        msgs = {i: Message(TRAIN, sent, scalars) for i in ids}
        if not shared:
            replies = ctx.send(msgs, scalars=["num_examples", *LOSS_SCALARS])
            if replies:
                log_weighted_scalars(ctx, replies, LOSS_SCALARS)
            return weights
        new = self._aggregate(ctx, msgs, spec, density, queues, r, warmup)
        if new is None:
            ctx.event("no valid replies; the global model is unchanged")
            return weights
        return new

    def _final(self, ctx: ServerContext, weights: dict[str, np.ndarray], r: int) -> ServerResult:
        """The evaluation's global state after round ``r``: the model and, with ``density =
        "global"``, the density set of every client under it (an NGDE phase of its own).
        Also what a learning-curve checkpoint (``engine.eval_every``) evaluates."""
        if self.params.density == "none":
            return ServerResult({}, {})
        if self.params.density == "local":
            return ServerResult(dict(weights), {})
        ids = sorted(ctx.grid.get_node_ids())
        density = self._density_phase(ctx, ids, weights, r + 1)
        if density is None:
            raise RunError(
                f"{self.name}: no client sent its final densities", "see the events above"
            )
        return ServerResult({**weights, MEANS: density[0], COVS: density[1]}, {})

    # -- metrics ----------------------------------------------------------------------------
    def extra_metrics(self, evaluations: dict[int, Message]) -> dict[str, Any]:
        """With ``density_noise``: the (epsilon, delta) of the density statistics
        (``density_dp``, and flat for the report's privacy table). The distance correlations
        are the :data:`~fedad.methods.fadngs.family.PRIVACY` family's."""
        p = self.params
        if p.density_noise <= 0:
            return {}
        releases = 2 * (self.setup.rounds - self.warmup + 1)
        epsilon = density_epsilon(p.density_noise, releases, p.density_delta)
        return {
            "density_epsilon": epsilon,
            "density_delta": p.density_delta,
            "density_dp": {
                "epsilon": epsilon,
                "delta": p.density_delta,
                "noise_multiplier": p.density_noise,
                "releases": releases,
                "covers": "the density statistics only; model updates are not privatised by it",
            },
        }


@register
class FADngs(_FADngs):
    """FADngs: NGDE + CRAD + SED."""

    name = "fadngs"
    sed = True

    def __init__(self, params: Params, setup: Setup, detector: str | None = None) -> None:
        super().__init__(params, setup, detector)
        if self.params.density != "global":
            raise ConfigError(
                f'fadngs: density = "{self.params.density}" is an ablation of fadngs-nosed '
                "(Table III aggregates by FedAvg; SED weighs teachers with the global densities)",
                'use method fadngs-nosed, or density = "global"',
            )


@register
class FADngsNoSED(_FADngs):
    """FADngs without SED: FedAvg aggregation (Table I's "FADngs w/o SED")."""

    name = "fadngs-nosed"
