"""FGAD ([FGAD]: Cai et al., ACM MM 2024): the FL protocol, method ``fgad``.

Every client holds its whole model — generator :math:`w_a`, GIN backbone :math:`w_g`,
teacher head :math:`w_t`, student head :math:`w_s` — in its own state; only the student head
travels [FGAD eq. 15, Algorithm 1]:

1. The first time a client is asked (phase ``train``), it builds its networks from seeded
   weights (its own seed: the run's and its id) for its graphs' node-feature width and
   pre-trains generator, backbone and teacher with [FGAD eq. 10] for ``pretrain_epochs``
   (Algorithm 1, line 2).
2. Every round it loads the server's student head, trains ``local_epochs`` epochs of [FGAD
   eq. 13] (generator, backbone and teacher on its graphs and generated ones, the student
   distilling the teacher on its graphs), keeps everything in its state and replies with
   the student head only.
3. The server takes the example-weighted mean of the heads [FGAD eq. 15] (through
   :meth:`~fedad.core.context.ServerContext.mean`, so SecAgg+ applies) and sends it back.

At evaluation each client scores with its own backbone and the final global student head
(Algorithm 1, line 15); with ``distill = false``, with the final global teacher head (the
detector's ``head = "teacher"``). A client the sampling never picked trains as in steps 1-2
first.

The ablations of [FGAD Table 3]: ``collaboration = "none"`` (FGAD_v1: nothing travels),
``"all"`` (FGAD_v2: FedAvg of every parameter — generator, backbone and both heads — except
the first layer of each GIN, whose shape is the node-feature width, which differs between
the sources of a multi-dataset federation), and ``distill = false`` (FGAD_v3: no student;
the teacher head travels and scores). The Adam optimiser is rebuilt every round (its
moments are not part of the client's state); the paper trains without rounds of this kind.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

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
from fedad.core.detector import BaseDetector, shared_field
from fedad.core.messages import Message, prefixed, unprefixed
from fedad.core.rng import rng as seeded_rng
from fedad.core.rounds import fedavg_rounds
from fedad.core.types import ClientData, GraphSet
from fedad.evaluation.families import MetricFamily, ranking_scores
from fedad.evaluation.metrics import auroc
from fedad.methods.fgad.detector import GENERATOR, FGADDetector, FGADDetectorParams
from fedad.methods.fgad.train import LOSS_KEYS

TRAIN = "train"
OWN = "own"
ADAM = "adam"
TEACHER_SCORE = "teacher_score"
INPUT_LAYERS = (
    "backbone.convs.0.nn.0.",
    f"{GENERATOR}.gin_mu.convs.0.nn.0.",
    f"{GENERATOR}.gin_sigma.convs.0.nn.0.",
)
"""The tensors whose shape depends on the node-feature width (never averaged)."""


class FGADParams(Params):
    """``[methods.params]`` of ``fgad``; every default works on any data set size."""

    local_epochs: int = Field(default=1, ge=1, le=10_000, description="eq. 13 epochs per round")
    pretrain_epochs: int = shared_field(FGADDetectorParams, "pretrain_epochs", "eq. 10, once")
    batch_size: int = shared_field(FGADDetectorParams, "batch_size")
    lr: float = shared_field(FGADDetectorParams, "lr", description="Adam")
    weight_decay: float = shared_field(FGADDetectorParams, "weight_decay")
    hidden: int = shared_field(FGADDetectorParams, "hidden", description="GIN width")
    layers: int = shared_field(FGADDetectorParams, "layers", description="GIN depth K")
    gen_hidden: int = shared_field(
        FGADDetectorParams, "gen_hidden", description="generator GIN width"
    )
    gen_layers: int = shared_field(
        FGADDetectorParams, "gen_layers", description="generator GIN depth"
    )
    lam: float = shared_field(FGADDetectorParams, "lam", description="lambda of eq. 13")
    gamma: float = shared_field(FGADDetectorParams, "gamma", description="gamma of eq. 13")
    tau: float = shared_field(FGADDetectorParams, "tau", description="temperature of eq. 12")
    kl_weight: float = shared_field(FGADDetectorParams, "kl_weight", description="VGAE KL term")
    collaboration: Literal["head", "none", "all"] = Field(
        default="head", description="Table 3: 'none' = FGAD_v1, 'all' = FGAD_v2"
    )
    distill: bool = Field(default=True, description="false = FGAD_v3 (teacher travels)")
    decoder: Literal["dot", "scaled"] = shared_field(
        FGADDetectorParams, "decoder", description="eq. 7 logits Z Z^T, or Z Z^T / sqrt(d) (ours)"
    )
    decoder_bias: bool = shared_field(
        FGADDetectorParams, "decoder_bias", description="a learnt bias on eq. 7's logits (ours)"
    )
    gen_output: Literal["gin", "linear"] = shared_field(
        FGADDetectorParams,
        "gen_output",
        description="mu, log sigma: the GINs' outputs (eq. 5) or linear on them",
    )
    reconstruction: Literal["eq8", "balanced"] = shared_field(
        FGADDetectorParams,
        "reconstruction",
        description="eq. 8, or its edge/non-edge balanced form (VGAE pos_weight)",
    )
    fake_graphs: Literal["soft", "sampled"] = shared_field(
        FGADDetectorParams,
        "fake_graphs",
        description="the detector sees A~ itself, or a 0/1 sample of it (ours)",
    )
    distill_on: Literal["normal", "all"] = shared_field(
        FGADDetectorParams,
        "distill_on",
        description="eq. 12 on real graphs (paper) or also generated ones",
    )
    student_ad: float = shared_field(
        FGADDetectorParams,
        "student_ad",
        description="weight of eq. 9 on the student head beside eq. 12 (ours)",
    )
    keep_optimizer: bool = Field(
        default=False,
        description="Adam's moments persist in the client's state between rounds (ours); "
        "false: a fresh Adam every round",
    )
    fake_features: Literal["real", "auto"] = shared_field(
        FGADDetectorParams,
        "fake_features",
        description="generated graphs keep the real node features, or ('auto') get the degree "
        "features of their own adjacency where the node features are one-hot degrees (ours)",
    )


def _shared(key: str, collaboration: str, distill: bool) -> bool:
    """Whether tensor ``key`` goes to the server."""
    if collaboration == "none":
        return False
    if collaboration == "all":
        return not key.startswith(INPUT_LAYERS)
    return key.split(".")[0] == ("student" if distill else "teacher")


@register
class FGAD(Algorithm):
    """FGAD: self-boosted graph distillation, only the student head is shared."""

    name = "fgad"
    personalized = True
    ParamsModel = FGADParams
    params: FGADParams
    metric_families: ClassVar[tuple[MetricFamily, ...]] = ()

    @classmethod
    def requirements(cls, params: dict[str, Any]) -> Requirements:
        """Graphs; ``train`` replies are model updates (the shared head) unless nothing is
        shared (``collaboration = "none"``)."""
        shared = FGADParams.model_validate(params).collaboration != "none"
        return Requirements(fields=("x", "graph"), update_phases=("train",) if shared else ())

    def make_detector(self, seed: int | None = None) -> FGADDetector:
        width = self.setup.feature_shape[-1] if self.setup.feature_shape else 1
        return FGADDetector.configured(
            self.params,
            in_dim=max(int(width), 1),
            epochs=self.params.local_epochs,
            head="student" if self.params.distill else "teacher",
            contamination=self.contamination,
            device=self.setup.device,
            seed=self.setup.seed if seed is None else seed,
        )

    def shared_arrays(self, det: FGADDetector) -> dict[str, np.ndarray]:
        """What a client sends and the server averages."""
        p = self.params
        return {k: v for k, v in det.get_arrays().items() if _shared(k, p.collaboration, p.distill)}

    # -- client -----------------------------------------------------------------------------
    def handlers(self) -> dict[str, Handler]:
        return {**super().handlers(), TRAIN: self.client_train}

    def _client_seed(self, client_id: int) -> int:
        return int(seeded_rng(self.setup.seed, client_id, 0xF6).integers(2**62))

    def _local(
        self, state: ClientState, data: ClientData, msg: Message, round_no: int
    ) -> tuple[FGADDetector, dict[str, float]]:
        """The client's model after this round's training (step 1 the first time, step 2)."""
        graphs = data.x_train
        if not isinstance(graphs, GraphSet):
            raise TypeError("fgad trains on graphs")
        det = self.make_detector(self._client_seed(data.client_id))
        own = unprefixed(state, OWN)
        rng = seeded_rng(self.setup.seed, round_no, data.client_id, 0xF7)
        keep = self.params.keep_optimizer
        if own:
            det.set_arrays(own)
            opt = det.load_optimizer(unprefixed(state, ADAM) if keep else {})
        else:
            det.build(graphs.shape[1])
            opt = det.optimizer()
            det.train_epochs(graphs, self.params.pretrain_epochs, distill=False, rng=rng, opt=opt)
            if not keep:
                opt = det.optimizer()
        det.set_parts({k: v for k, v in msg.arrays.items()})
        losses = det.train_epochs(
            graphs, self.params.local_epochs, distill=self.params.distill, rng=rng, opt=opt
        )
        for key in [k for k in state if k.startswith((f"{OWN}/", f"{ADAM}/"))]:
            del state[key]
        state.update(prefixed(det.get_arrays(), OWN))
        if keep:
            state.update(prefixed(det.optimizer_arrays(opt), ADAM))
        return det, losses

    def client_train(self, state: ClientState, data: ClientData, msg: Message) -> Message:
        """Steps 1-2: train locally, reply with the shared part only."""
        det, losses = self._local(state, data, msg, int(msg.get("round", 0)))
        return Message(TRAIN, self.shared_arrays(det), {"num_examples": data.n_train, **losses})

    def client_detector(self, state: ClientState, data: ClientData, msg: Message) -> FGADDetector:
        """The client's own networks with the server's final shared part."""
        own = unprefixed(state, OWN)
        if not own:  # never sampled: train as a first round would
            det, _ = self._local(state, data, Message(TRAIN), self.setup.rounds + 1)
        else:
            det = self.make_detector(self._client_seed(data.client_id)).set_arrays(own)
        return det.set_parts(dict(msg.arrays))

    def evaluation_arrays(self, det: BaseDetector, data: ClientData) -> dict[str, np.ndarray]:
        """The teacher head's scores of the test set (``teacher_score``)."""
        assert isinstance(det, FGADDetector) and isinstance(data.x_test, GraphSet)
        return {TEACHER_SCORE: det.teacher_score(data.x_test)}

    # -- server -----------------------------------------------------------------------------
    def server(self, ctx: ServerContext) -> ServerResult:
        init = self.make_detector().build(1)
        # with nothing shared (collaboration "none") the clients train alone
        weights = fedavg_rounds(
            ctx,
            self.shared_arrays(init),
            TRAIN,
            LOSS_KEYS,
            unchanged="the shared head is unchanged",
            eval_last=False,
        )
        return ServerResult(dict(weights), {})

    def extra_metrics(self, evaluations: dict[int, Message]) -> dict[str, Any]:
        """``teacher_auroc``: the teacher head's AUROC, mean over the clients."""
        aurocs = []
        for m in evaluations.values():
            s, y = m.arrays.get(TEACHER_SCORE), m.arrays.get("label")
            value = None if s is None or y is None else auroc(y, ranking_scores(s))
            if value is not None:
                aurocs.append(value)
        return {"teacher_auroc": float(np.mean(aurocs))} if aurocs else {}


class FGADPlusParams(FGADParams):
    """``[methods.params]`` of ``fgad-plus``: those of ``fgad`` with the defaults that make it
    work (docs/methods/fgad.md, "fgad-plus"), each chosen on training data only."""

    forwarded: ClassVar[frozenset[str]] = frozenset(
        {
            "decoder_bias",
            "distill_on",
            "fake_features",
            "fake_graphs",
            "gen_output",
            "reconstruction",
            "student_ad",
        }
    )

    gen_output: Literal["gin", "linear"] = Field(
        default="linear", description="mu, log sigma: linear layers on the GINs (VGAE)"
    )
    decoder_bias: bool = Field(default=True, description="a learnt bias on eq. 7's logits")
    reconstruction: Literal["eq8", "balanced"] = Field(
        default="balanced", description="eq. 8 with edges and non-edges weighted alike"
    )
    fake_graphs: Literal["soft", "sampled"] = Field(
        default="sampled", description="the detector sees 0/1 generated graphs"
    )
    distill_on: Literal["normal", "all"] = Field(
        default="all", description="eq. 12 on real and generated graphs"
    )
    fake_features: Literal["real", "auto"] = Field(
        default="auto",
        description="generated graphs get the degree features of their own adjacency where "
        "node features are one-hot degrees",
    )
    student_ad: float = Field(
        default=1.0,
        ge=0.0,
        le=1e6,
        description="weight of eq. 9 on the student head beside eq. 12",
    )


@register
class FGADPlus(FGAD):
    """FGAD that works (ours): the generator learns the graphs, the detector sees 0/1
    generated graphs whose node features agree with them, and the student distils the
    teacher on the generated graphs too and learns eq. 9 itself; still only the student head
    travels. Options chosen on training data only (:mod:`fedad.methods.fgad.select`);
    docs/methods/fgad.md, "fgad-plus", has the pre-registered results and their limits."""

    name = "fgad-plus"
    ParamsModel = FGADPlusParams
    params: FGADPlusParams
