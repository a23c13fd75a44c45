"""Flower's non-public names, all in :mod:`fedad.fl.flower.internals`: another flwr is a
one-line error naming the supported version, never an ``ImportError`` traceback."""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("flwr", reason="flwr (the flower extra) is not installed")

import flwr.supercore.retry

from fedad.core.errors import FedadError

SRC = Path(__file__).resolve().parents[3] / "src" / "fedad"
PUBLIC = (
    "flwr.app",
    "flwr.clientapp",
    "flwr.serverapp",
    "flwr.simulation",
    "flwr.common",
    "flwr.server",
    "flwr.server.strategy",
    "flwr.server.workflow",
    "flwr.client.mod",
)
"""Flower's documented modules: the names in their ``__all__`` are its public API."""


@pytest.fixture
def fresh_internals() -> Iterator[None]:
    """Import :mod:`fedad.fl.flower.internals` anew inside the test, and restore it after."""
    saved = sys.modules.pop("fedad.fl.flower.internals", None)
    try:
        yield
    finally:
        sys.modules.pop("fedad.fl.flower.internals", None)
        if saved is not None:
            sys.modules["fedad.fl.flower.internals"] = saved


def test_the_installed_flwr_has_every_name() -> None:
    internals = importlib.import_module("fedad.fl.flower.internals")
    assert internals.installed_flwr().startswith(internals.SUPPORTED_FLWR + ".")
    for name in internals.__all__:
        assert getattr(internals, name) is not None


def test_a_missing_name_is_a_one_line_error_naming_the_supported_version(
    monkeypatch: pytest.MonkeyPatch, fresh_internals: None
) -> None:
    monkeypatch.delattr(flwr.supercore.retry, "make_simple_http_retry_invoker")
    with pytest.raises(FedadError) as info:
        importlib.import_module("fedad.fl.flower.internals")
    text = str(info.value)
    assert "supports flwr 1.41.x" in text
    assert "flwr.supercore.retry.make_simple_http_retry_invoker" in text
    assert "\n" not in text and "[" not in text  # one line; no markup the CLI would eat


def test_a_missing_module_is_a_one_line_error(
    monkeypatch: pytest.MonkeyPatch, fresh_internals: None
) -> None:
    monkeypatch.setitem(sys.modules, "flwr.supercore.heartbeat", None)
    with pytest.raises(FedadError, match=r"supports flwr 1\.41\.x.*flwr\.supercore\.heartbeat"):
        importlib.import_module("fedad.fl.flower.internals")


def test_only_internals_imports_flowers_non_public_modules() -> None:
    """Every ``flwr`` import elsewhere in ``src/`` takes a name in the ``__all__`` of one of
    Flower's documented modules."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "internals.py" and path.parent.name == "flower":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("flwr"):
                if node.module not in PUBLIC:
                    found.append(f"{path.relative_to(SRC)}: {node.module}")
                    continue
                public = importlib.import_module(node.module).__all__
                found += [
                    f"{path.relative_to(SRC)}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name not in public
                ]
            elif isinstance(node, ast.Import):
                found += [
                    f"{path.relative_to(SRC)}: {a.name}"
                    for a in node.names
                    if a.name.startswith("flwr") and a.name not in PUBLIC
                ]
    assert not found
