"""Poisoning and faulty-client simulators, configured by the ``[attack]`` section.

Data poisoning (applied when the federation is built, after the test sets are fixed, so the
test data never change with the attack):

* ``gaussian-data``: a ``fraction`` of an attacked client's training samples is replaced by
  :math:`\\mathcal N(0, 1)` samples in the model's input space (Qin et al., scenario 3);
* ``contamination``: a ``fraction`` of an attacked client's training samples is replaced by
  anomalies from the training part (Qin et al., scenario 2).

Model poisoning (applied to an attacked client's replies to the phases the method declares
as model updates, :attr:`Requirements.update_phases
<fedad.fl.algorithm.Requirements.update_phases>`, and to no other phase): with the
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
from fedad.fl.messages import Message
from fedad.seeding import rng as seeded_rng

if TYPE_CHECKING:  # fedad.fl.algorithm imports fedad.data, whose federation imports this module
    from fedad.data.types import ClientData
    from fedad.fl.algorithm import ClientState, Handler

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
