"""FGAD's detector ``fgad``: the student head's probability that a graph is anomalous.

:math:`s(G) = \\mathrm{softmax}(\\mathrm{Proj}_{w_s}(f_{w_g}(X, A)))_0`, the probability of the
"generated" pseudo class [FGAD eq. 9, 11]; :meth:`FGADDetector.teacher_score` gives the
teacher head's. ``head = "teacher"`` makes the teacher's the score (FGAD_v3 of [FGAD Table
3]: no student, the teacher scores). Stand-alone (:meth:`fit`) it is FGAD without
collaboration: the pre-training of eq. 10, then epochs of eq. 13 on the detector's own graphs
(of eq. 10 when the teacher scores: there is no student to distil).

Arrays: the network's state under its own names (``backbone.*``, ``teacher.*``,
``student.*``), the generator's (``generator.*``, needed to train on, not to score) and
``threshold_``. The node-feature width is read back from the arrays, so one saved
configuration serves clients whose graphs differ in width.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Self

import numpy as np
import torch
from pydantic import ConfigDict, Field

from fedad.core.detector import (
    DEFAULT_CONTAMINATION,
    BaseDetector,
    DetectorParams,
    register_detector,
)
from fedad.core.rng import rng as seeded_rng
from fedad.core.rng import torch_seeded
from fedad.core.types import GraphSet
from fedad.devices import resolve_device
from fedad.methods.fgad.model import NORMAL, FGADNet, Generator
from fedad.methods.fgad.train import degree_cap, train_epoch

if TYPE_CHECKING:
    from fedad.core.types import GraphSet

THRESHOLD = "threshold_"
GENERATOR = "generator"
MAX_WIDTH = 1 << 16
"""Widest node features a detector accepts (a checkpoint is untrusted)."""
SCORE_BATCH = 256


class FGADDetectorParams(DetectorParams):
    """The ``__init__`` arguments of :class:`FGADDetector`, as a checkpoint may give them."""

    model_config = ConfigDict(allow_inf_nan=False)

    in_dim: int = Field(default=1, ge=1, le=MAX_WIDTH)
    hidden: int = Field(default=64, ge=1, le=1024)
    layers: int = Field(default=3, ge=1, le=16)
    gen_hidden: int = Field(default=32, ge=1, le=1024)
    gen_layers: int = Field(default=2, ge=1, le=16)
    epochs: int = Field(default=20, ge=0, le=100_000)
    pretrain_epochs: int = Field(default=10, ge=0, le=100_000)
    lr: float = Field(default=1e-3, gt=0.0, le=10.0)
    weight_decay: float = Field(default=5e-4, ge=0.0, le=10.0)
    batch_size: int = Field(default=16, ge=1, le=1 << 16)
    lam: float = Field(default=1.0, ge=0.0, le=1e6)
    gamma: float = Field(default=10.0, ge=0.0, le=1e6)
    tau: float = Field(default=1.0, gt=0.0, le=1e6)
    kl_weight: float = Field(default=1e-3, ge=0.0, le=1e6)
    distill_on: Literal["normal", "all"] = "normal"
    decoder: Literal["dot", "scaled"] = "dot"
    decoder_bias: bool = False
    gen_output: Literal["gin", "linear"] = "gin"
    reconstruction: Literal["eq8", "balanced"] = "eq8"
    fake_graphs: Literal["soft", "sampled"] = "soft"
    fake_features: Literal["real", "auto"] = "real"
    student_ad: float = Field(default=0.0, ge=0.0, le=1e6)
    head: Literal["student", "teacher"] = "student"
    contamination: float = Field(default=DEFAULT_CONTAMINATION, ge=0.0, lt=1.0)
    seed: int = Field(default=0, ge=0, le=2**63 - 1)


@register_detector("fgad")
class FGADDetector(BaseDetector):
    """GIN backbone, teacher and student heads, VGAE generator [FGAD Sec. 3]."""

    ParamsModel = FGADDetectorParams
    params: FGADDetectorParams

    def __init__(self, *, device: str = "cpu", **params: Any) -> None:
        """``params``: fields of :class:`FGADDetectorParams`; ``device`` is where it trains
        and scores (not saved)."""
        super().__init__(**params)
        self.device = device

    # -- networks ---------------------------------------------------------------------------
    def build(self, in_dim: int | None = None) -> Self:
        """``net_`` and ``gen_`` with seeded initial weights for ``in_dim`` node features
        (default: the configured width; on the CPU, so equal on every device)."""
        if in_dim is not None:
            self.params = self.params.model_copy(update={"in_dim": int(in_dim)})
        if not 1 <= self.params.in_dim <= MAX_WIDTH:
            raise ValueError(f"node-feature width {self.params.in_dim} is not in [1, {MAX_WIDTH}]")
        dev = resolve_device(self.device)
        p = self.params
        with torch_seeded(p.seed):
            net = FGADNet(p.in_dim, p.hidden, p.layers)
            gen = Generator(
                p.in_dim,
                p.gen_hidden,
                p.gen_layers,
                output=p.gen_output,
                logit_bias=p.decoder_bias,
                scaled=p.decoder == "scaled",
            )
        self.net_ = net.to(dev).eval()
        self.gen_ = gen.to(dev).eval()
        return self

    def _ensure_built(self) -> None:
        if not hasattr(self, "net_"):
            self.build()

    def part_arrays(self, part: str) -> dict[str, np.ndarray]:
        """The state of one part (``backbone``, ``teacher``, ``student``, ``generator``) under
        its full names (``student.0.weight``, ...)."""
        self._ensure_built()
        state = (
            {f"{GENERATOR}.{k}": v for k, v in self.gen_.state_dict().items()}
            if part == GENERATOR
            else {k: v for k, v in self.net_.state_dict().items() if k.split(".")[0] == part}
        )
        if not state:
            raise KeyError(f"FGAD has no part '{part}'")
        return {k: v.detach().cpu().numpy().copy() for k, v in state.items()}

    def set_parts(self, arrays: dict[str, np.ndarray]) -> Self:
        """Load the named tensors of any parts (each must exist with its exact shape)."""
        self._ensure_built()
        net = self.net_.state_dict()
        gen = self.gen_.state_dict()
        for key, value in arrays.items():
            head, _, rest = key.partition(".")
            target, name = (gen, rest) if head == GENERATOR else (net, key)
            if name not in target:
                raise KeyError(f"FGAD has no tensor '{key}'")
            t = torch.as_tensor(np.asarray(value, dtype=np.float32))
            if t.shape != target[name].shape:
                raise ValueError(
                    f"tensor '{key}' has shape {tuple(t.shape)}, not {tuple(target[name].shape)}"
                )
            target[name].copy_(t)
        return self

    # -- training ---------------------------------------------------------------------------
    def optimizer(self) -> torch.optim.Optimizer:
        """Adam over every parameter of the client [FGAD Sec. 4.1: lr 0.001]."""
        self._ensure_built()
        params = [*self.net_.parameters(), *self.gen_.parameters()]
        return torch.optim.Adam(params, lr=self.params.lr, weight_decay=self.params.weight_decay)

    def optimizer_arrays(self, opt: torch.optim.Optimizer) -> dict[str, np.ndarray]:
        """Adam's moments and step count per parameter of :meth:`optimizer`'s order, as named
        arrays (``<index>/exp_avg``, ``<index>/exp_avg_sq``, ``<index>/step``)."""
        out: dict[str, np.ndarray] = {}
        for i, st in opt.state_dict()["state"].items():
            for key in ("exp_avg", "exp_avg_sq", "step"):
                out[f"{i}/{key}"] = torch.as_tensor(st[key]).detach().cpu().numpy().copy()
        return out

    def load_optimizer(self, arrays: dict[str, np.ndarray]) -> torch.optim.Optimizer:
        """:meth:`optimizer` with the moments of :meth:`optimizer_arrays` (a client's state:
        every parameter's moments of its exact shape and a finite step count, else a
        ``ValueError``); empty ``arrays``: a fresh optimiser."""
        opt = self.optimizer()
        if not arrays:
            return opt
        params = [p for group in opt.param_groups for p in group["params"]]
        state: dict[int, dict[str, torch.Tensor]] = {}
        for i, p in enumerate(params):
            try:
                m, v = arrays[f"{i}/exp_avg"], arrays[f"{i}/exp_avg_sq"]
                step = np.asarray(arrays[f"{i}/step"], dtype=np.float64)
            except KeyError as exc:
                raise ValueError(f"optimizer state lacks {exc.args[0]}") from None
            if m.shape != tuple(p.shape) or v.shape != tuple(p.shape) or step.shape != ():
                raise ValueError(f"optimizer state of parameter {i} does not fit its shape")
            if not (
                np.isfinite(step)
                and step >= 0
                and np.all(np.isfinite(m))
                and np.all(np.isfinite(v))
                and np.all(v >= 0)
            ):
                raise ValueError(f"optimizer state of parameter {i} is not finite")
            state[i] = {
                "step": torch.tensor(float(step)),
                "exp_avg": torch.as_tensor(np.asarray(m, np.float32)).to(p.device),
                "exp_avg_sq": torch.as_tensor(np.asarray(v, np.float32)).to(p.device),
            }
        opt.load_state_dict({"state": state, "param_groups": opt.state_dict()["param_groups"]})
        return opt

    def train_epochs(
        self,
        graphs: GraphSet,
        epochs: int,
        *,
        distill: bool,
        rng: np.random.Generator,
        opt: torch.optim.Optimizer | None = None,
    ) -> dict[str, float]:
        """``epochs`` of eq. 13 (``distill``) or eq. 10; the last epoch's mean losses."""
        self._check_width(graphs)
        opt = opt or self.optimizer()
        p = self.params
        cap = degree_cap(graphs) if p.fake_features == "auto" else None
        last: dict[str, float] = {}
        for _ in range(epochs):
            last = train_epoch(
                self.net_,
                self.gen_,
                graphs,
                opt,
                batch_size=p.batch_size,
                rng=rng,
                lam=p.lam,
                gamma=p.gamma,
                tau=p.tau,
                kl_weight=p.kl_weight,
                distill=distill,
                distill_on=p.distill_on,
                reconstruction=p.reconstruction,
                fake_graphs=p.fake_graphs,
                fake_degree_cap=cap,
                student_ad=p.student_ad,
                device=next(self.net_.parameters()).device,
            )
        self.net_.eval()
        self.gen_.eval()
        return last

    def fit(self, x: GraphSet) -> Self:  # type: ignore[override]
        """Pre-train (eq. 10) then train (eq. 13) on ``x`` alone; threshold from ``x``."""
        self.build(_width(x))
        rng = seeded_rng(self.params.seed, 0xF6AD)
        opt = self.optimizer()
        self.train_epochs(x, self.params.pretrain_epochs, distill=False, rng=rng, opt=opt)
        self.train_epochs(
            x, self.params.epochs, distill=self.params.head == "student", rng=rng, opt=opt
        )
        return self.set_threshold(x)  # type: ignore[arg-type]

    # -- scoring ----------------------------------------------------------------------------
    def _check_width(self, x: GraphSet) -> None:
        self._ensure_built()
        w = _width(x)
        if w != self.params.in_dim:
            raise ValueError(
                f"graphs with {w} node features; this detector takes {self.params.in_dim}"
            )

    def _probabilities(self, x: GraphSet, head: str) -> np.ndarray:
        self._check_width(x)
        dev = next(self.net_.parameters()).device
        mlp = self.net_.student if head == "student" else self.net_.teacher
        out = []
        with torch.no_grad():
            for start in range(0, len(x), SCORE_BATCH):
                b = x.batch(np.arange(start, min(start + SCORE_BATCH, len(x)))).to(dev)
                z = self.net_.represent(b.x, b.edge_index, b.batch, int(b.num_graphs))
                p = torch.softmax(mlp(z).double(), dim=1)[:, 1 - NORMAL]
                out.append(p.cpu().numpy())
        return np.concatenate(out) if out else np.zeros(0)

    def score(self, x: GraphSet) -> np.ndarray:  # type: ignore[override]
        """The scoring head's (``head``: the student's by default) probability of
        "generated", per graph (higher = anomalous)."""
        if self.params.head not in ("student", "teacher"):
            raise ValueError(f"head must be 'student' or 'teacher', not {self.params.head!r}")
        return self._probabilities(x, self.params.head)

    def teacher_score(self, x: GraphSet) -> np.ndarray:
        """The teacher head's probability of "generated", per graph."""
        return self._probabilities(x, "teacher")

    # -- persistence ------------------------------------------------------------------------
    def get_arrays(self) -> dict[str, np.ndarray]:
        self._ensure_built()
        out = {k: v.detach().cpu().numpy().copy() for k, v in self.net_.state_dict().items()}
        out.update(self.part_arrays(GENERATOR))
        if hasattr(self, "threshold_"):
            out[THRESHOLD] = np.asarray(self.threshold_, dtype=np.float64)
        return out

    def set_arrays(self, arrays: dict[str, np.ndarray]) -> Self:
        first = arrays.get("backbone.convs.0.nn.0.weight")
        if first is None or np.ndim(first) != 2:
            raise KeyError("FGAD detector arrays need 'backbone.convs.0.nn.0.weight' (2-d)")
        self.build(int(np.shape(first)[1]))
        model = {k: v for k, v in arrays.items() if k != THRESHOLD}
        expected = set(self.net_.state_dict()) | {
            f"{GENERATOR}.{k}" for k in self.gen_.state_dict()
        }
        missing = sorted(expected - set(model))
        if missing:
            raise KeyError(f"FGAD detector arrays lack '{missing[0]}'")
        self.set_parts(model)
        if THRESHOLD in arrays:
            t = np.asarray(arrays[THRESHOLD], dtype=np.float64)
            if t.shape != () or not np.isfinite(t):
                raise ValueError("threshold_ must be one finite number")
            self.threshold_ = float(t)
        return self


def _width(x: GraphSet) -> int:
    """The node-feature width of a graph set (one-line error when there is none)."""
    if not isinstance(x, GraphSet):
        raise TypeError(f"FGAD scores graphs (a GraphSet), not {type(x).__name__}")
    w = x.shape[1]
    if w < 1:
        raise ValueError("graphs of several node-feature widths; FGAD takes one width")
    return int(w)
