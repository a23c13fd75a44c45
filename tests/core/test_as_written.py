"""Config values and method params are taken as written: text is not read as a number or a
switch (pydantic's lax mode would), and a typo in a quoted value is an error."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from pydantic import Field, ValidationError

from fedad.config import parse_config
from fedad.core.as_written import AsWritten
from fedad.core.errors import ConfigError
from tests.test_config import BASE


class M(AsWritten):
    n: int = 1
    x: float = 0.5
    on: bool = True
    name: str = ""
    mode: Literal["a", "b"] | int = "a"
    maybe: int | None = None
    switch: bool | None = None
    ids: list[int] = Field(default_factory=list)
    tags: list[int | str] = Field(default_factory=list)


@pytest.mark.parametrize(
    "bad",
    [
        {"n": "2"},
        {"x": "0.1"},
        {"on": "yes"},
        {"on": 1},
        {"maybe": "3"},
        {"ids": [1, "2"]},
        {"n": True},
        {"x": False},
        {"ids": [True, 0]},
    ],
)
def test_text_for_numbers_and_switches_is_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        M.model_validate(bad)


def test_values_as_written_pass() -> None:
    m = M.model_validate(
        {"n": 2.0, "x": 1, "on": False, "name": "s", "mode": "b", "tags": [1, "z"]}
    )
    assert (m.n, m.x, m.on, m.mode, m.tags) == (2, 1.0, False, "b", [1, "z"])
    assert M.model_validate({"mode": 3}).mode == 3
    assert M.model_validate({"switch": None, "maybe": None}).switch is None  # given as None


@pytest.mark.parametrize(
    ("over", "key"),
    [
        ({"rounds": "2"}, "rounds"),
        ({"partition": {"clients": "3"}}, "partition.clients"),
        ({"data": {**BASE["data"], "standardize": "yes"}}, "data.standardize"),
    ],
)
def test_the_config_refuses_quoted_numbers_and_switches(over: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=f"'{key}'"):
        parse_config({**BASE, **over})


def test_method_params_refuse_quoted_numbers() -> None:
    from fedad.core.algorithm import Setup, build_algorithm

    setup = Setup(
        kind="vector", feature_shape=(4,), rounds=1, seed=0, contamination=0.1, num_clients=2
    )
    with pytest.raises(ConfigError, match="without quotes"):
        build_algorithm("fedavg", {"lr": "0.1"}, setup, "autoencoder")
