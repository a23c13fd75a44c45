"""The ``Grid``: how a server program reaches clients.

It mirrors Flower's ``Grid`` (``get_node_ids``, ``send_and_receive``): the server program
hands it one message per node and gets back the replies of the nodes that answered, keyed by
node id and sorted, so aggregation never depends on arrival order. Nodes that drop out, time
out or fail are simply absent from the result; the engine records them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from fedad.core.messages import Message

if TYPE_CHECKING:
    from fedad.core.secagg import SecAggSettings, SecureOutcome
    from fedad.core.validate import ArraySpec


class Grid(Protocol):
    """What a server program may do with the federation."""

    def get_node_ids(self) -> list[int]:
        """All client node ids, sorted."""
        ...

    def send_and_receive(
        self, messages: Mapping[int, Message], timeout: float | None = None
    ) -> dict[int, Message]:
        """Deliver ``messages[node]`` to each node; return the replies that came back."""
        ...

    @property
    def bytes_up(self) -> int:
        """Payload bytes received from clients so far."""
        ...

    @property
    def bytes_down(self) -> int:
        """Payload bytes sent to clients so far."""
        ...


class SecureGrid(Grid, Protocol):
    """A grid that can also run SecAgg+ (both engines' grids are)."""

    def secure_mean(
        self,
        messages: Mapping[int, Message],
        arrays: Mapping[str, ArraySpec],
        scalars: Sequence[str],
        settings: SecAggSettings,
    ) -> SecureOutcome:
        """Deliver ``messages``; return the weighted mean of the replies' ``arrays`` and
        their clear ``scalars``, the server never seeing one client's arrays."""
        ...
