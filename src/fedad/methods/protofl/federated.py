"""ProtoFL ([ProtoFL]: Kim et al., ICCV 2023): the FL protocol, method ``protofl``.

The paper's equations and the functions implementing each: :mod:`fedad.methods.protofl`.

Server, once (round 0) [ProtoFL eq. 6, Alg. 1, Sec. 4.2 steps 1-2]: embeds the public set
(``public_set``, unrelated to the clients) with the frozen off-the-shelf model
(``backbone``, EfficientNet-Lite0 by default, at ``proto_size`` pixels), picks one distinct
example per joined client (greedy farthest-point selection in cosine distance: the paper
picks one image per category of its off-the-shelf set; an unlabelled public set has no
categories, so we take mutually most dissimilar images, which its Fig. 7 finds best) and
sends each joined client **its own** prototype :math:`v_k` in its own message (phase
``prototype``; the reply is an acknowledgement, not a model update). A client that did not
acknowledge gets its prototype again with its next training message.

Phase 1, rounds ``1 .. rounds`` [ProtoFL Alg. 1]: the engine's client fraction
(:meth:`~fedad.core.context.ServerContext.sample`) among the joined clients; each trains the
global encoder for ``local_epochs`` on [ProtoFL eq. 8] and the server takes the
example-weighted mean (FedAvg, [ProtoFL eq. 1]).

Phase 2 [ProtoFL Alg. 2]: in the evaluation phase, each client — joined or new — takes the
final global encoder, freezes it and trains its own head (the flow by default) on its
training data; the head never leaves the client except inside its saved personalised
detector. It is computed once per global model and kept in the client's state.

``phase1 = "local"`` (a baseline, not the paper's method): the same prototypes, loss and
rounds, but no FedAvg: each client trains its own encoder from the same seeded initial
weights, keeps it in its state and replies with its loss scalars only; phase 2 runs on its
own encoder.

New clients [ProtoFL Fig. 5]: with ``new_clients = N`` the last N client ids take no part in
phase 1 (no prototype, no training message); they get the global model at evaluation and
train only their head. ``metrics.json`` has ``roles`` (each client's role) and the mean
AUROC of each group (``auroc_joined``, ``auroc_new``).
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import Field

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
from fedad.core.detector import shared_field
from fedad.core.errors import ConfigError, RunError
from fedad.core.messages import Message, prefixed, unprefixed
from fedad.core.rng import rng as seeded_rng
from fedad.core.rounds import Arrays, fedavg_rounds
from fedad.core.types import ClientData, dense
from fedad.devices import resolve_device
from fedad.evaluation.families import MetricFamily, ranking_scores
from fedad.methods.protofl.augment import Auto
from fedad.methods.protofl.detector import ProtoFLDetector
from fedad.methods.protofl.detector_params import (
    Head,
    HeadData,
    Normalize,
    ProtoFLDetectorParams,
    VectorNorm,
)
from fedad.methods.protofl.model import Encoder
from fedad.methods.protofl.train import one_thread_below_grain, train_encoder
from fedad.resources import get_resource, resource_info

PROTOTYPE = "prototype"
LOSSES = ("loss", "l_pd", "l_p")
"""The scalars of a phase-1 reply logged each round (their example-weighted means)."""
TRAIN = "train"
HEAD = "head"
"""``phase1 = "none"``: the round in which each client fits its head, and sends no model."""


class ProtoFLParams(Params):
    """``[methods.params]`` of ``protofl``; every default works on any data set size."""

    forwarded: ClassVar[frozenset[str]] = frozenset({"backbone", "batch_size"})

    local_epochs: int = Field(default=1, ge=1, le=10_000, description="epochs per round")
    batch_size: int = Field(default=64, ge=2, le=1 << 16)
    lr: float = shared_field(ProtoFLDetectorParams, "lr", description="phase-1 learning rate")
    weight_decay: float = Field(default=1e-3, ge=0.0, le=1.0)
    optimizer: Literal["adam", "radam"] = Field(
        default="adam", description="phase 1: AdamW, or the paper's RAdam (0.94, 0.98)"
    )
    alpha: float = Field(default=0.1, ge=0.0, le=1.0, description="[ProtoFL eq. 8]")
    temperature: float = Field(default=1.0, gt=0.0, le=1e3, description="softmax of eq. 7")
    lam: float = shared_field(ProtoFLDetectorParams, "lam", description="[ProtoFL eq. 11]")
    rep_dim: int = shared_field(ProtoFLDetectorParams, "rep_dim", description="dimension of h")
    width: int = shared_field(
        ProtoFLDetectorParams, "width", description="channels of the first conv"
    )
    head: Head = shared_field(ProtoFLDetectorParams, "head")
    head_data: HeadData = shared_field(
        ProtoFLDetectorParams,
        "head_data",
        description="what the head is fit on: clean training representations, or 'views'",
    )
    normalize: Normalize = shared_field(
        ProtoFLDetectorParams,
        "normalize",
        description="h as the heads see it: 'l2' (unit length), 'none'; auto: l2 for the "
        "efficientnet trunk",
    )
    vector_norm: VectorNorm = shared_field(
        ProtoFLDetectorParams,
        "vector_norm",
        description="tables: the MLP trunk without normalisation ('none'), or with the "
        "paper's group norm ('group'; it hides rows anomalous by their size)",
    )
    flow_layers: int = shared_field(
        ProtoFLDetectorParams, "flow_layers", description="affine coupling layers"
    )
    flow_hidden: int = shared_field(ProtoFLDetectorParams, "flow_hidden")
    flow_epochs: int = shared_field(
        ProtoFLDetectorParams, "flow_epochs", description="most flow epochs (see flow_val)"
    )
    flow_val: float = shared_field(
        ProtoFLDetectorParams,
        "flow_val",
        description="share of training samples held out to pick the flow's epochs (0: off)",
    )
    flow_patience: int = shared_field(
        ProtoFLDetectorParams, "flow_patience", description="early stopping"
    )
    flow_lr: float = shared_field(ProtoFLDetectorParams, "flow_lr")
    flow_views: int = shared_field(
        ProtoFLDetectorParams, "flow_views", description="view pairs per sample"
    )
    flow_batch: int = shared_field(
        ProtoFLDetectorParams, "flow_batch", description="flow minibatch"
    )
    nu: float = shared_field(ProtoFLDetectorParams, "nu", description="OC-SVM nu (head = ocsvm)")
    flip: bool | Auto = shared_field(
        ProtoFLDetectorParams,
        "flip",
        description="horizontal flips; auto: RGB images of 32+ px only",
    )
    crop: Annotated[float, Field(ge=0.05, le=1.0)] | Auto = shared_field(
        ProtoFLDetectorParams, "crop", description="least area a crop keeps; auto: by image side"
    )
    noise: float = shared_field(ProtoFLDetectorParams, "noise", description="vector augmentation")
    new_clients: int = Field(default=0, ge=0, description="last N clients skip phase 1")
    distill: Literal["prototype", "sample"] = Field(
        default="prototype",
        description="eq. 7's target: the client's prototype, or 'sample': the off-the-shelf "
        "model's features of each training image (a variant)",
    )
    contrast: float = Field(
        default=0.0,
        ge=0.0,
        le=100.0,
        description="weight of an instance-contrastive term over the client's own views "
        "(the other samples of a batch as negatives) added to eq. 8 (a variant; 0: off)",
    )
    phase1: Literal["auto", "federated", "local", "none"] = Field(
        default="auto",
        description="'federated': the paper's; 'local': each client trains its own encoder, "
        "no FedAvg (the baseline); 'none': each client fits only its head on the initial "
        "trunk; auto: none on the efficientnet trunk, federated on the others",
    )
    trunk: Literal["auto", "cnn", "pretrained", "efficientnet"] = Field(
        default="auto",
        description="'cnn': the paper's small CNN (an MLP on vectors); 'pretrained': an MLP "
        "on frozen backbone features; 'efficientnet': EfficientNet-Lite0's last stages, "
        "initialised from its shipped weights; auto: efficientnet on images, cnn on vectors",
    )
    tune_stages: int = shared_field(
        ProtoFLDetectorParams,
        "tune_stages",
        description="efficientnet: last stages trained (0: head conv)",
    )
    trunk_size: int = Field(default=96, ge=32, le=1024, description="backbone input side")
    max_samples: int = shared_field(
        ProtoFLDetectorParams,
        "max_samples",
        description="most training samples a client takes per phase-1 epoch and for its "
        "flow (a seeded random subset of a larger client's)",
    )
    trunk_views: int = Field(default=4, ge=2, le=64, description="cached augmented views")
    public_set: str = Field(default="procedural", description="off-the-shelf set")
    public_n: int = Field(default=64, ge=1, le=100_000, description="candidate images")
    backbone: str = Field(default="efficientnet-lite0", description="off-the-shelf model")
    proto_size: int = Field(default=64, ge=32, le=1024, description="side of its input")


def client_rng(seed: int, round_no: int, client_id: int, stream: int) -> np.random.Generator:
    """A client's generator for a round and purpose: a pure function of its keys."""
    return seeded_rng(seed, round_no, client_id, stream)


def farthest_point(feats: np.ndarray, k: int, rng: np.random.Generator) -> list[int]:
    """``k`` distinct rows chosen greedily to be mutually most dissimilar (cosine).

    The first is drawn from ``rng``; each next one maximises its smallest cosine distance
    to those already chosen (ties: lowest index)."""
    if k > len(feats):
        raise ValueError(f"need {k} distinct examples, have {len(feats)}")
    f = feats / np.maximum(np.linalg.norm(feats, axis=1, keepdims=True), 1e-12)
    chosen = [int(rng.integers(len(f)))]
    dist = 1.0 - f @ f[chosen[0]]
    for _ in range(k - 1):
        d = dist.copy()
        d[chosen] = -np.inf
        nxt = int(np.argmax(d))
        chosen.append(nxt)
        dist = np.minimum(dist, 1.0 - f @ f[nxt])
    return chosen


def _digest(arrays: dict[str, np.ndarray]) -> np.ndarray:
    h = hashlib.sha256()
    for k in sorted(arrays):
        h.update(k.encode())
        h.update(np.ascontiguousarray(arrays[k]).tobytes())
    return np.frombuffer(h.digest(), dtype=np.uint8).copy()


@register
class ProtoFL(Algorithm):
    """ProtoFL: prototype distillation (phase 1, FedAvg) and local flows (phase 2)."""

    name = "protofl"
    personalized = True
    ParamsModel = ProtoFLParams
    params: ProtoFLParams
    metric_families: ClassVar[tuple[MetricFamily, ...]] = ()

    def __init__(self, params: Params, setup: Setup, detector: str | None = None) -> None:
        super().__init__(params, setup, detector)
        if self.phase1 != "federated" and self.params.new_clients:
            raise ConfigError(
                f'protofl: new_clients needs phase1 = "federated" (with phase1 = '
                f'"{self.phase1}" no client receives a model it did not train)',
                'set phase1 = "federated" (and a trunk for it), or drop new_clients',
            )
        if self.params.trunk not in ("cnn", "auto") and setup.kind != "image":
            raise ConfigError(
                f"protofl: trunk = {self.params.trunk!r} needs image data, this run's is "
                f"{setup.kind}",
                'drop trunk or use trunk = "cnn"',
            )
        if self.params.distill == "sample" and setup.kind != "image":
            raise ConfigError(
                f'protofl: distill = "sample" needs image data, this run\'s is {setup.kind}',
                'drop distill or use distill = "prototype"',
            )
        if self.params.new_clients >= setup.num_clients:
            raise ConfigError(
                f"protofl: new_clients = {self.params.new_clients} leaves no client for "
                f"phase 1 ({setup.num_clients} clients)",
                "set new_clients below the number of clients",
            )

    @classmethod
    def requirements(cls, params: dict[str, Any]) -> Requirements:
        """The public set and the off-the-shelf model [ProtoFL eq. 6]; updates in ``train``."""
        p = ProtoFLParams.model_validate(params)
        if p.phase1 == "none":  # no prototypes: the backbone only for a pretrained trunk
            return Requirements(resources=(p.backbone,), update_phases=())
        return Requirements(
            public=PublicRequest(p.public_set, n=p.public_n, shape=(3, p.proto_size, p.proto_size)),
            resources=(p.backbone,),
            # "auto": federated on vectors, none (no train message at all) on images
            update_phases=(TRAIN,) if p.phase1 in ("federated", "auto") else (),
        )

    @property
    def trunk(self) -> Literal["cnn", "pretrained", "efficientnet"]:
        """``trunk`` with ``"auto"`` resolved: the efficientnet trunk on images (chosen on
        development federations, ``benchmarks/suites/protofl-default-screen.toml``), the MLP
        on vectors."""
        if self.params.trunk != "auto":
            return self.params.trunk
        return "efficientnet" if self.setup.kind == "image" else "cnn"

    @property
    def phase1(self) -> Literal["federated", "local", "none"]:
        """``phase1`` with ``"auto"`` resolved: none on the efficientnet trunk (it starts as
        the off-the-shelf model, and no phase 1 measured added to it on one-class-per-client
        federations), the paper's federated phase on the trunks trained from scratch."""
        if self.params.phase1 != "auto":
            return self.params.phase1
        return "none" if self.trunk == "efficientnet" else "federated"

    # -- roles ------------------------------------------------------------------------------
    def new_ids(self, ids: list[int]) -> list[int]:
        """The new clients among ``ids`` (all client ids): the last ``new_clients``."""
        n = self.params.new_clients
        return sorted(ids)[len(ids) - n :] if n else []

    def role(self, client_id: int) -> Literal["joined", "new"]:
        first_new = self.setup.num_clients - self.params.new_clients
        return "new" if client_id >= first_new else "joined"

    # -- models -----------------------------------------------------------------------------
    @property
    def proto_dim(self) -> int:
        return resource_info(self.params.backbone).feature_dim

    def make_encoder(self) -> Encoder:
        """The initial global encoder :math:`\\phi(\\cdot; \\theta_g^0)` (seeded, on the CPU)."""
        return self.make_detector().make_encoder(self.proto_dim)

    def make_detector(self) -> ProtoFLDetector:
        p = self.params
        return ProtoFLDetector.configured(
            p,
            kind=self.setup.kind,
            input_shape=list(self.setup.feature_shape),
            epochs=p.local_epochs,
            contamination=self.contamination,
            seed=self.setup.seed,
            trunk_input="raw" if self.trunk == "cnn" else self.trunk,
            feature_size=p.trunk_size,
            feature_views=p.trunk_views,
            device=resolve_device(self.setup.device),
        )

    def _encoder_from(self, arrays: dict[str, np.ndarray]) -> Encoder:
        import torch

        enc = self.make_encoder()
        state = {k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in arrays.items()}
        enc.load_state_dict(state, strict=True)
        return enc.to(resolve_device(self.setup.device))

    @staticmethod
    def _arrays(enc: Encoder) -> dict[str, np.ndarray]:
        return {k: v.detach().cpu().numpy().copy() for k, v in enc.state_dict().items()}

    def prototypes(self, public: np.ndarray, k: int) -> np.ndarray:
        """[ProtoFL eq. 6]: :math:`v_j = \\mathcal{F}(s_j)` for ``k`` distinct public images."""
        if len(public) < k:
            raise RunError(
                f"protofl: the public set has {len(public)} images for {k} joined clients",
                "raise public_n to at least the number of clients",
            )
        net = get_resource(self.params.backbone, resolve_device(self.setup.device))
        feats = net.embed(public, size=self.params.proto_size)
        idx = farthest_point(feats.astype(np.float64), k, seeded_rng(self.setup.seed, 0x9207))
        return np.asarray(feats[idx], dtype=np.float32)

    # -- client -----------------------------------------------------------------------------
    def handlers(self) -> dict[str, Handler]:
        own: dict[str, Handler] = {HEAD: self.client_head}
        if self.phase1 != "none":  # no prototype, no training message, no model update
            own |= {PROTOTYPE: self.client_prototype, TRAIN: self.client_train}
        return {**super().handlers(), **own}

    @property
    def losses(self) -> tuple[str, ...]:
        """The scalars of a phase-1 reply logged each round (with ``contrast``: ``l_nce``)."""
        return (*LOSSES, "l_nce") if self.params.contrast > 0 else LOSSES

    def client_prototype(self, state: ClientState, data: ClientData, msg: Message) -> Message:
        """Keep :math:`v_k` privately (Sec. 4.2 step 2); reply with an acknowledgement."""
        state["prototype"] = np.array(msg.arrays["prototype"], dtype=np.float32)
        return Message(PROTOTYPE, {}, {"num_examples": data.n_train})

    def _views(self, state: ClientState, data: ClientData) -> np.ndarray | None:
        """A frozen backbone's outputs for augmented views (``pretrained``: features,
        ``efficientnet``: prefix maps), computed once and kept at home."""
        if self.trunk == "cnn":
            return None
        if "feature_views" not in state:
            rng = client_rng(self.setup.seed, 0, data.client_id, 0xF3)
            views = self.make_detector().view_features(dense(data.x_train, self.name), rng)
            assert views is not None
            state["feature_views"] = views
        return state["feature_views"]

    def _targets(self, state: ClientState, data: ClientData) -> np.ndarray | None:
        """Eq. 7's target: the client's prototype, or (``distill = "sample"``) the frozen
        off-the-shelf features F(x_i) of each of its training images, computed once and kept
        at home."""
        if self.params.distill == "prototype":
            return state.get("prototype")
        if "targets" not in state:
            from fedad.resources import get_resource

            net = get_resource(self.params.backbone, resolve_device(self.setup.device))
            x = np.ascontiguousarray(dense(data.x_train, self.name), dtype=np.float32)
            state["targets"] = net.embed(x, size=self.params.proto_size)
        return state["targets"]

    def client_train(self, state: ClientState, data: ClientData, msg: Message) -> Message:
        """CLIENT_TRAINING of [ProtoFL Alg. 1]: ``local_epochs`` of eq. 8 from the global model."""
        if "prototype" in msg.arrays:
            state["prototype"] = np.array(msg.arrays["prototype"], dtype=np.float32)
        local = self.phase1 == "local"
        weights = {k: v for k, v in msg.arrays.items() if k != "prototype"}
        if local:  # the client's own encoder, from the seeded initial one
            weights = unprefixed(state, "own") or self._arrays(self.make_encoder())
        enc = self._encoder_from(weights)
        p = self.params
        rng = client_rng(self.setup.seed, int(msg.get("round", 0)), data.client_id, 0xF1)
        det = self.make_detector()
        flip, crop = det.augmentation()
        with one_thread_below_grain(det.step_elements(p.batch_size)):
            losses = train_encoder(
                enc,
                dense(data.x_train, self.name),
                self._targets(state, data),
                p.local_epochs,
                p.batch_size,
                p.lr,
                rng,
                p.alpha,
                p.temperature,
                p.weight_decay,
                flip,
                p.noise,
                p.optimizer,
                self._views(state, data),
                crop,
                p.contrast,
                p.max_samples,
            )
        if local:  # kept at home; only the losses are reported
            state.update(prefixed(self._arrays(enc), "own"))
            return Message(TRAIN, {}, {"num_examples": data.n_train, **losses})
        return Message(TRAIN, self._arrays(enc), {"num_examples": data.n_train, **losses})

    def client_detector(
        self, state: ClientState, data: ClientData, msg: Message
    ) -> ProtoFLDetector:
        """[ProtoFL Alg. 2]: frozen global trunk + the client's own head (kept per model,
        with the scores it gave the client's training samples: the threshold's).

        With ``phase1 = "local"`` the trunk is the client's own (the seeded initial one if it
        never trained); with ``phase1 = "none"`` the initial one."""
        if self.phase1 == "local":
            own = unprefixed(state, "own") or self._arrays(self.make_encoder())
            arrays = dict(self._result(own).arrays)
        elif self.phase1 == "none":
            arrays = dict(self._result(self._arrays(self.make_encoder())).arrays)
        else:
            arrays = dict(msg.arrays)
        trunk = {k[6:]: v for k, v in arrays.items() if k.startswith("trunk.")}
        det = self.make_detector().set_trunk(trunk)
        key = _digest(trunk)
        x = dense(data.x_train, self.name)
        cached = state.get("head_key")
        if cached is not None and np.array_equal(cached, key):
            head = {k[5:]: v for k, v in state.items() if k.startswith("head/")}
            det.set_arrays({**{f"trunk.{k}": v for k, v in trunk.items()}, **head})
            return det.keep_training_scores(x, state["head_scores"])
        rng = client_rng(self.setup.seed, 0, data.client_id, 0xF2)
        views = self._views(state, data) if self.params.head_data == "views" else None
        loss = det.fit_head(x, rng, views)  # the clean head: no augmented views computed
        for k in [k for k in state if k.startswith("head/")]:
            del state[k]
        state.update({f"head/{k}": v for k, v in det.head_arrays().items()})
        state["head_key"] = key
        state["head_loss"] = np.asarray(loss, dtype=np.float64)
        state["head_scores"] = det.training_scores(x)  # h of x is still held: no new pass
        return det.keep_training_scores(x, state["head_scores"])

    def client_head(self, state: ClientState, data: ClientData, msg: Message) -> Message:
        """``phase1 = "none"``: phase 2 alone, in the first round [ProtoFL Alg. 2]: the
        client fits its head on the initial trunk (kept for its evaluation; later rounds
        find it kept) and replies with the head's loss, no model."""
        if "head_key" not in state:
            self.client_detector(state, data, msg)
        scalars = {"num_examples": data.n_train, "loss": float(state["head_loss"])}
        return Message(HEAD, {}, scalars)

    # -- server -----------------------------------------------------------------------------
    def server(self, ctx: ServerContext) -> ServerResult:
        if self.phase1 == "none":  # phase 2 only: each client's head, no model
            fedavg_rounds(ctx, {}, HEAD, ("loss",))
            return ServerResult(arrays={}, scalars={})
        ids = ctx.grid.get_node_ids()
        new = set(self.new_ids(ids))
        joined = [i for i in ids if i not in new]
        if ctx.public is None:
            raise RunError("protofl: no public set reached the server", "see `requirements`")
        protos = self.prototypes(ctx.public, len(joined))
        mine = {i: protos[j] for j, i in enumerate(joined)}
        acks = ctx.send(
            {i: Message(PROTOTYPE, {"prototype": mine[i]}) for i in joined},
            scalars=["num_examples"],
        )
        have = set(acks)
        ctx.log(clients_new=len(new))
        ctx.end_round(0)

        def messages(r: int, sent: Arrays) -> dict[int, Message]:
            """The model (none with ``phase1 = "local"``) and, until a client has it, its
            prototype."""
            msgs = {}
            for i in ctx.sample(joined):
                extra = {} if i in have else {"prototype": mine[i]}
                msgs[i] = Message(TRAIN, {**sent, **extra}, {"round": r})
            return msgs

        if self.phase1 == "local":  # nothing to average: each client trains alone
            fedavg_rounds(ctx, {}, TRAIN, self.losses, messages=messages, replied=have.update)
            return ServerResult(arrays={}, scalars={})
        weights = fedavg_rounds(
            ctx,
            self._arrays(self.make_encoder()),
            TRAIN,
            self.losses,
            messages=messages,
            replied=have.update,
            result=self._result,
        )
        return self._result(weights)

    @staticmethod
    def _result(weights: dict[str, np.ndarray]) -> ServerResult:
        """The global model as evaluation needs it: the trunk only (``trunk.*``)."""
        return ServerResult(
            arrays={k: v for k, v in weights.items() if k.startswith("trunk.")}, scalars={}
        )

    # -- metrics ----------------------------------------------------------------------------
    def extra_metrics(self, evaluations: dict[int, Message]) -> dict[str, Any]:
        """Each client's role and the mean AUROC of the joined and the new clients."""
        from sklearn.metrics import roc_auc_score

        roles = []
        groups: dict[str, list[float]] = {"joined": [], "new": []}
        for cid in sorted(evaluations):
            a = evaluations[cid].arrays
            role = self.role(cid)
            auroc = None
            if len(np.unique(a["label"])) == 2:
                # a score the detector could not compute (NaN) flags its sample (fail-closed)
                auroc = float(roc_auc_score(a["label"], ranking_scores(a["score"])))
                groups[role].append(auroc)
            roles.append({"client": cid, "role": role, "auroc": auroc})
        out: dict[str, Any] = {"roles": roles}
        for g, vals in groups.items():
            out[f"auroc_{g}"] = float(np.mean(vals)) if vals else None
        return out
