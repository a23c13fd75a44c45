"""Fixtures of the ProtoFL tests."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from fedad.core.messages import Message
from fedad.fl.engine import InProcessGrid


@pytest.fixture
def delivered(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, Message]]:
    """Every (node, message) the in-process grid delivers."""
    seen: list[tuple[int, Message]] = []
    original = InProcessGrid.send_and_receive

    def record(
        self: InProcessGrid, messages: Mapping[int, Message], timeout: float | None = None
    ) -> dict[int, Message]:
        seen.extend(messages.items())
        return original(self, messages, timeout)

    monkeypatch.setattr(InProcessGrid, "send_and_receive", record)
    return seen
