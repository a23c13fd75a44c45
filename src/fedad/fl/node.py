"""What a client node runs: the algorithm's handlers, poisoned if attacked, then privatised.

Both engines build every node's handlers with :func:`node_handlers`, so attacks and privacy
behave identically in-process (worker processes included) and on Flower; the noise of
``[privacy]`` is drawn on the node, from its own entropy unless ``privacy.noise_source`` is
``"seeded"`` (:mod:`fedad.privacy.mechanism`). Both act on the algorithm's model-update phases
(:func:`update_phases`) and on no other phase; a run whose method has none says so in its
events (:func:`unapplied_note`, recorded by :func:`fedad.fl.engine.drive`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from fedad.attacks import MODEL_ATTACKS, attacked_clients, client_handlers
from fedad.config import AttackConfig, PrivacyConfig
from fedad.core.algorithm import update_phases
from fedad.privacy.mechanism import private_handlers

if TYPE_CHECKING:
    from fedad.core.algorithm import Algorithm, Handler


def unapplied_note(
    algorithm: Algorithm, attack: AttackConfig | None, privacy: PrivacyConfig | None
) -> str | None:
    """A line for the run's events when ``[privacy]`` or a model attack is configured but
    ``algorithm`` has no model-update phase for it to act on; ``None`` otherwise."""
    sections = []
    if privacy is not None and privacy.mechanism != "none":
        sections.append("[privacy]")
    if attack is not None and attack.kind in MODEL_ATTACKS and attack.clients > 0:
        sections.append(f"[attack] {attack.kind}")
    if not sections or update_phases(algorithm):
        return None
    applied = " and ".join(sections)
    return f"method '{algorithm.name}' has no model-update phase: {applied} not applied"


def node_handlers(
    handlers: Mapping[str, Handler],
    client_id: int,
    num_clients: int,
    seed: int,
    attack: AttackConfig | None = None,
    privacy: PrivacyConfig | None = None,
    *,
    phases: Sequence[str],
) -> dict[str, Handler]:
    """Client ``client_id``'s handlers under the run's ``[attack]`` and ``[privacy]``, which
    act on the update ``phases`` only (:func:`update_phases` of the algorithm)."""
    attack = attack or AttackConfig()
    attacked = attacked_clients(attack, num_clients, seed)
    poisoned = client_handlers(handlers, attack, client_id, attacked, phases)
    return private_handlers(poisoned, privacy or PrivacyConfig(), seed, client_id, phases)
