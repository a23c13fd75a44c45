"""Poisoning and faulty-client simulators, configured by the ``[attack]`` section.

Data poisoning (a step of its own after the federation is planned, so the test data never
change with the attack: :func:`poison_plan` on the plan, :func:`poison_data` on the built
federation; :func:`fedad.federation.build_federation` runs both):

* ``gaussian-data``: a ``fraction`` of an attacked client's training samples is replaced by
  :math:`\\mathcal N(0, 1)` samples in the model's input space (Qin et al., scenario 3);
* ``contamination``: a ``fraction`` of an attacked client's training samples is replaced by
  anomalies from the training part (Qin et al., scenario 2).

Model poisoning (applied to an attacked client's replies to the phases the method declares
as model updates, :attr:`Requirements.update_phases
<fedad.core.algorithm.Requirements.update_phases>`, and to no other phase): with the
update :math:`u = w_k - w` between the returned and the received array of the same name,

* ``scaled-update`` returns :math:`w + s\\,u` (a boosted update, ``scale`` = s);
* ``sign-flip`` returns :math:`w - u`.

Attacked clients are the first ``clients`` of a seeded permutation of the client ids. The
poisoned samples are marked 1 in ``ClientData.y_train`` (analysis only; methods never read it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from fedad.config import AttackConfig
from fedad.core.errors import ConfigError, DataError
from fedad.core.messages import Message
from fedad.core.rng import rng as seeded_rng
from fedad.core.types import Federation
from fedad.data.federation import FederationPlan, mix, streams
from fedad.data.federation.materialize import dense

if TYPE_CHECKING:  # fedad.core.algorithm imports this module (through fedad.fl.node)
    from fedad.core.algorithm import ClientState, Handler
    from fedad.core.types import ClientData

DATA_ATTACKS = ("gaussian-data", "contamination")
MODEL_ATTACKS = ("scaled-update", "sign-flip")
TRAIN_PHASE = "train"
DEFAULT_UPDATE_PHASES = (TRAIN_PHASE,)


def attacked_clients(attack: AttackConfig, num_clients: int, seed: int) -> list[int]:
    """The ids of the attacked clients (a seeded choice), sorted."""
    if attack.kind == "none" or attack.clients == 0:
        return []
    order = seeded_rng(seed, 0xA77).permutation(num_clients)
    return sorted(int(i) for i in order[: attack.clients])


def n_affected(n: int, fraction: float) -> int:
    """How many of ``n`` samples a ``fraction`` affects (rounded half up)."""
    return int(np.floor(fraction * n + 0.5))


def gaussian_data(
    x: np.ndarray, fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Replace a ``fraction`` of the rows of ``x`` by N(0, 1) samples; return (x', mask)."""
    out = np.array(x, copy=True)
    k = n_affected(len(x), fraction)
    idx = rng.choice(len(x), size=k, replace=False)
    out[idx] = rng.standard_normal((k, *x.shape[1:])).astype(x.dtype)
    mask = np.zeros(len(x), dtype=bool)
    mask[idx] = True
    return out, mask


def check_attack(attack: AttackConfig, scheme: str) -> None:
    """Refuse a data attack the partition scheme cannot take (before anything is loaded)."""
    if scheme == "one-vs-rest" and attack.kind == "contamination":
        raise ConfigError(
            "attack.kind = 'contamination' is not supported with partition.scheme = 'one-vs-rest'",
            "use partition.contamination, or a model attack",
        )


def poison_plan(plan: FederationPlan, attack: AttackConfig, seed: int) -> list[int]:
    """The data attacks' step on a plan (after the test sets are fixed, so they never
    change): ``contamination`` replaces a ``fraction`` of each attacked client's training
    normals by training anomalies that partition.contamination left unused (the plan's
    ``attack`` stream); ``gaussian-data`` is refused for graphs (it is applied by
    :func:`poison_data`). Records ``attack`` and ``attacked_clients`` in the plan's notes;
    returns the attacked clients."""
    k_clients = len(plan.train_ids)
    attacked = attacked_clients(attack, k_clients, seed)
    if attack.kind == "contamination" and attacked:
        _contaminate(plan, attacked, attack.fraction, streams(seed)["attack"])
    elif attack.kind == "gaussian-data" and attacked and plan.kind == "graph":
        raise ConfigError(
            "attack.kind='gaussian-data' replaces feature rows by noise and does not "
            "apply to graph data",
            "use attack.kind = 'contamination' or a model attack",
        )
    notes: dict[str, object] = {}
    for key, value in plan.notes.items():
        notes[key] = value
        if key == "unused_classes":  # the place they had when the planner wrote them
            notes["attack"] = attack.kind
            notes["attacked_clients"] = attacked
    plan.notes = notes
    return attacked


def _contaminate(
    plan: FederationPlan, attacked: list[int], fraction: float, rng: np.random.Generator
) -> None:
    """The ``contamination`` attack on ``plan`` (see :func:`poison_plan`)."""
    train_ids, train_anomaly = plan.train_ids, plan.train_anomaly
    used = np.concatenate(
        [ids[flag == 1] for ids, flag in zip(train_ids, train_anomaly, strict=True)]
    )
    spare = rng.permutation(np.setdiff1d(plan.anomaly_pool, used))
    start = 0
    for k in attacked:
        normal_ids = train_ids[k][train_anomaly[k] == 0]
        n_a = min(n_affected(len(train_ids[k]), fraction), len(normal_ids))
        if start + n_a > len(spare):
            raise DataError(
                f"attack.kind='contamination' needs {start + n_a} training anomalies but "
                f"only {len(spare)} are left after partition.contamination",
                "lower attack.fraction or attack.clients",
            )
        kept = rng.permutation(normal_ids)[: len(normal_ids) - n_a]
        old_bad = train_ids[k][train_anomaly[k] == 1]
        train_ids[k], train_anomaly[k] = mix(
            kept, np.concatenate([old_bad, spare[start : start + n_a]]), rng
        )
        start += n_a


def poison_data(fed: Federation, attack: AttackConfig, seed: int) -> Federation:
    """The ``gaussian-data`` attack on a built federation (after standardization): a
    ``fraction`` of each attacked client's training rows become N(0, 1) noise, marked 1
    in ``y_train``. Any other attack leaves ``fed`` as it is. Returns ``fed``."""
    if attack.kind != "gaussian-data":
        return fed
    rng = seeded_rng(seed, 0x6A5)
    for k in attacked_clients(attack, len(fed.clients), seed):
        c = fed.clients[k]
        c.x_train, hit = gaussian_data(dense(c.x_train), attack.fraction, rng)
        c.y_train = np.where(hit, 1, c.y_train).astype(np.int64)
    return fed


def poison_update(
    kind: str, sent: Mapping[str, np.ndarray], reply: Message, scale: float
) -> Message:
    """Apply a model-poisoning attack to an update reply (arrays also present in ``sent``)."""
    arrays = dict(reply.arrays)
    for name, w_k in reply.arrays.items():
        w = sent.get(name)
        if w is None or w.shape != w_k.shape or not np.issubdtype(w_k.dtype, np.floating):
            continue
        u = w_k.astype(np.float64) - w.astype(np.float64)
        new = w + scale * u if kind == "scaled-update" else w - u
        arrays[name] = new.astype(w_k.dtype)
    return Message(reply.kind, arrays, reply.scalars)


def poisoned_handler(handler: Handler, attack: AttackConfig) -> Handler:
    """Wrap an update phase's handler so that its replies carry the attack."""

    def attacked(state: ClientState, data: ClientData, msg: Message) -> Message:
        return poison_update(attack.kind, msg.arrays, handler(state, data, msg), attack.scale)

    return attacked


def client_handlers(
    handlers: Mapping[str, Handler],
    attack: AttackConfig,
    client_id: int,
    attacked: list[int],
    phases: Sequence[str] = DEFAULT_UPDATE_PHASES,
) -> dict[str, Handler]:
    """The handlers client ``client_id`` runs: every update phase of ``phases`` poisoned if
    it is model-attacked (a phase of ``phases`` without a handler is skipped)."""
    out = dict(handlers)
    if attack.kind not in MODEL_ATTACKS or client_id not in attacked:
        return out
    for phase in dict.fromkeys(phases):  # each phase once: never poisoned twice
        if phase in out:
            out[phase] = poisoned_handler(out[phase], attack)
    return out
