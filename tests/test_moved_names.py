"""Module names that moved keep working: each old name is the new module itself (the same
object, so an import, an attribute and a monkeypatch through it reach the real module)."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import pytest

from fedad.old_names import MOVED


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_name_is_the_module_itself(old: str, new: str) -> None:
    module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert module.__name__ == new and module.__spec__ is not None and module.__spec__.name == new


def test_no_file_stands_behind_an_old_name() -> None:
    for old in MOVED:
        assert importlib.util.find_spec(old) is not None  # the finder answers it
        parent, _, leaf = old.rpartition(".")
        folder = importlib.import_module(parent).__path__[0]
        assert not (Path(folder) / f"{leaf}.py").exists() and not (Path(folder) / leaf).exists()


def test_an_unknown_name_is_still_an_import_error() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("fedad.no_such_module")


def test_names_reached_through_an_old_name_are_the_real_ones() -> None:
    from fedad.errors import ConfigError as Old
    from fedad.runs import load_run

    from fedad.core.errors import ConfigError
    from fedad.rundir.layout import METRICS_FILE

    assert Old is ConfigError and METRICS_FILE == "metrics.json"
    assert load_run.__module__ == "fedad.rundir.load"
