"""What a client node runs: the algorithm's handlers, poisoned if attacked, then privatised.

Both engines build every node's handlers with :func:`node_handlers`, so attacks and privacy
behave identically in-process and on Flower.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from fedad.attacks import attacked_clients, client_handlers
from fedad.config import AttackConfig, PrivacyConfig
from fedad.privacy import private_handlers

if TYPE_CHECKING:
    from fedad.fl.algorithm import Handler


def node_handlers(
    handlers: Mapping[str, Handler],
    client_id: int,
    num_clients: int,
    seed: int,
    attack: AttackConfig | None = None,
    privacy: PrivacyConfig | None = None,
) -> dict[str, Handler]:
    """Client ``client_id``'s handlers under the run's ``[attack]`` and ``[privacy]``."""
    attack = attack or AttackConfig()
    attacked = attacked_clients(attack, num_clients, seed)
    poisoned = client_handlers(handlers, attack, client_id, attacked)
    return private_handlers(poisoned, privacy or PrivacyConfig(), seed, client_id)
