from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from fedad.config import (
    ExperimentConfig,
    apply_overrides,
    dump_toml,
    load_config,
    parse_config,
)
from fedad.errors import ConfigError

BASE: dict[str, Any] = {
    "data": {"name": "digits", "normal": [0], "anomaly": [1]},
    "methods": [{"name": "fedavg"}],
}


def cfg(**over: Any) -> dict[str, Any]:
    raw = {**BASE, **over}
    return raw


def test_defaults() -> None:
    c = parse_config(cfg())
    assert c.seed == 0 and c.rounds == 10
    assert c.partition.scheme == "iid" and c.engine.name == "inprocess"


@pytest.mark.parametrize(
    "raw,needle",
    [
        (cfg(rounds="ten"), "rounds"),
        (cfg(round=3), "unknown key 'round'"),
        (cfg(partition={"scheme": "random"}), "partition.scheme"),
        (cfg(partition={"contamination": 1.0}), "partition.contamination"),
        (cfg(partition={"contamination": -0.1}), "partition.contamination"),
        (cfg(partition={"clients": 0}), "partition.clients"),
        (cfg(data={"name": "digits", "normal": [0, 1], "anomaly": [1]}), "share classes"),
        (cfg(methods=[]), "methods"),
        ({"methods": [{"name": "fedavg"}]}, "missing key 'data'"),
        (cfg(methods=[{"name": "fedavg", "lr": 1}]), "unknown key 'methods.0.lr'"),
        (cfg(engine={"name": "ray"}), "engine.name"),
        (cfg(privacy={"secagg_shares": 2}), "at least 3"),
        (cfg(privacy={"secagg_shares": 1.5}), "share must be in (0, 1]"),
        (cfg(privacy={"secagg_shares": "all"}), "privacy.secagg_shares"),
        (cfg(privacy={"secagg_shares": 5, "secagg_threshold": 5}), "smaller than secagg_shares"),
        (cfg(privacy={"secagg_clip": 0.0}), "privacy.secagg_clip"),
    ],
)
def test_errors_are_one_line_and_name_the_key(raw: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(raw)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg


def test_labels_default_and_suffix() -> None:
    c = parse_config(
        cfg(
            methods=[
                {"name": "fedavg"},
                {"name": "fedavg"},
                {"name": "local", "detector": "deepsvdd"},
                {"name": "fedprox", "label": "mine"},
            ]
        )
    )
    assert c.labels() == ["fedavg", "fedavg-2", "local", "mine"]
    c = parse_config(cfg(methods=[{"name": "a"}, {"name": "a"}, {"name": "x", "label": "a-2"}]))
    assert c.labels() == ["a", "a-3", "a-2"]
    with pytest.raises(ConfigError, match="used twice"):
        parse_config(cfg(methods=[{"name": "a", "label": "l"}, {"name": "b", "label": "l"}]))


def test_overrides() -> None:
    raw = apply_overrides(
        cfg(), ["rounds=3", "partition.alpha=0.1", "methods.0.params.lr=0.01", "data.name=mnist"]
    )
    c = parse_config(raw)
    assert c.rounds == 3 and c.partition.alpha == 0.1
    assert c.methods[0].params == {"lr": 0.01} and c.data.name == "mnist"
    with pytest.raises(ConfigError, match="key=value"):
        apply_overrides(cfg(), ["rounds"])
    with pytest.raises(ConfigError, match="index"):
        apply_overrides(cfg(), ["methods.5.name=x"])


def test_dump_toml_roundtrip(tmp_path: Path) -> None:
    c = parse_config(
        cfg(methods=[{"name": "fedprox", "params": {"mu": 0.1}}, {"name": "local", "label": "l"}])
    )
    text = dump_toml(c.model_dump(mode="json", exclude_none=True))
    again = ExperimentConfig.model_validate(tomllib.loads(text))
    assert again == c
    p = tmp_path / "c.toml"
    p.write_text(text)
    assert load_config(p) == c


def test_missing_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("rounds = [\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
