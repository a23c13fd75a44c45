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
from fedad.core.errors import ConfigError

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
    assert c.engine.clientapp == "per-node"
    assert parse_config(cfg(engine={"clientapp": "per-message"})).engine.clientapp == "per-message"


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
        (cfg(engine={"clientapp": "per-run"}), "engine.clientapp"),
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


# --------------------------------------------------------------------------- limits

INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize(
    ("over", "key"),
    [
        ({"partition": {"alpha": INF}}, "partition.alpha"),
        ({"partition": {"alpha": NAN}}, "partition.alpha"),
        ({"partition": {"dominant_fraction": NAN}}, "partition.dominant_fraction"),
        ({"privacy": {"noise_multiplier": INF}}, "privacy.noise_multiplier"),
        ({"privacy": {"noise_multiplier": NAN}}, "privacy.noise_multiplier"),
        ({"privacy": {"clip": INF}}, "privacy.clip"),
        ({"privacy": {"secagg_clip": INF}}, "privacy.secagg_clip"),
        ({"privacy": {"secagg_shares": NAN}}, "privacy.secagg_shares"),
        ({"privacy": {"secagg_threshold": NAN}}, "privacy.secagg_threshold"),
        ({"attack": {"scale": INF}}, "attack.scale"),
        ({"attack": {"fraction": NAN}}, "attack.fraction"),
        ({"engine": {"timeout": INF}}, "engine.timeout"),
        ({"engine": {"fraction": NAN}}, "engine.fraction"),
        ({"engine": {"dropout": NAN}}, "engine.dropout"),
        ({"data": {**BASE["data"], "test_fraction": NAN}}, "data.test_fraction"),
        ({"data": {**BASE["data"], "test_anomaly_fraction": NAN}}, "data.test_anomaly_fraction"),
    ],
)
def test_non_finite_floats_are_refused(over: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(cfg(**over))
    msg = str(e.value)
    assert f"'{key}'" in msg and "finite" in msg and "\n" not in msg


@pytest.mark.parametrize(
    ("over", "needle"),
    [
        ({"rounds": 10**20}, "'rounds'"),
        ({"rounds": 1e20}, "'rounds'"),
        ({"rounds": 1_000_001}, "1,000,000"),
        ({"partition": {"clients": 100_001}}, "100,000"),
        ({"seed": 2**63}, "'seed'"),
        ({"seed": -(2**63) - 1}, "'seed'"),
        ({"engine": {"min_clients": 11}}, "engine.min_clients=11 exceeds partition.clients=10"),
    ],
)
def test_absurd_sizes_are_refused(over: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(cfg(**over))
    msg = str(e.value)
    assert needle in msg and "\n" not in msg


def test_limits_themselves_are_accepted() -> None:
    c = parse_config(
        cfg(
            rounds=1_000_000,
            seed=-(2**63),
            partition={"clients": 100_000},
            engine={"min_clients": 100_000},
        )
    )
    assert c.rounds == 1_000_000 and c.seed == -(2**63)
    assert parse_config(cfg(seed=-7)).seed == -7
    assert parse_config(cfg(seed=2**63 - 1)).seed == 2**63 - 1


@pytest.mark.parametrize(
    "label",
    ["../../x", "/abs", "a/b", "a\\b", ".", "..", "...", "", "x" * 65, "a b", "ü", "a\nb", "a:b"],
)
def test_unsafe_labels_are_refused(label: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(cfg(methods=[{"name": "fedavg"}, {"name": "local", "label": label}]))
    msg = str(e.value)
    assert "'methods.1.label'" in msg and "letters, digits" in msg and "\n" not in msg


@pytest.mark.parametrize("label", ["fedavg-ae", "a", "x" * 64, "v1.2+dp_b", ".hidden", "a..b"])
def test_plain_labels_are_accepted(label: str) -> None:
    assert parse_config(cfg(methods=[{"name": "fedavg", "label": label}])).labels() == [label]


def test_labels_are_unique_regardless_of_case() -> None:
    with pytest.raises(ConfigError, match="used twice"):
        parse_config(cfg(methods=[{"name": "a", "label": "Mine"}, {"name": "b", "label": "mine"}]))
    c = parse_config(cfg(methods=[{"name": "fedavg"}, {"name": "local", "label": "FedAvg"}]))
    assert c.labels() == ["fedavg-2", "FedAvg"]


@pytest.mark.parametrize("value", ["error", "drop", "impute-mean"])
def test_data_missing_values(value: str) -> None:
    c = parse_config(cfg(data={**BASE["data"], "missing": value}))
    assert c.data.missing == value
    assert parse_config(cfg()).data.missing == "error"


@pytest.mark.parametrize("value", ["zero", "impute", "", 0, None])
def test_data_missing_refuses_others(value: object) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(cfg(data={**BASE["data"], "missing": value}))
    assert "'data.missing'" in str(e.value)


@pytest.mark.parametrize("item", ["=3", " =3", ".a=1", "a.=1", "a..b=1", "data. .name=x"])
def test_overrides_with_empty_key_parts(item: str) -> None:
    with pytest.raises(ConfigError) as e:
        apply_overrides(cfg(), [item])
    msg = str(e.value)
    assert f"--set '{item}'" in msg and "\n" not in msg


def test_overrides_through_a_value_are_refused() -> None:
    with pytest.raises(ConfigError, match="'0' holds a value, not a table"):
        apply_overrides(cfg(), ["data.normal.0.x=1"])
    with pytest.raises(ConfigError, match="'name' holds a value"):
        apply_overrides(cfg(), ["data.name.x=1"])


def test_override_values_are_one_toml_value() -> None:
    raw = apply_overrides(cfg(), ["data.name=a\nrounds = 99", "seed=inf"])
    assert raw["data"]["name"] == "a\nrounds = 99" and "rounds" not in raw
    with pytest.raises(ConfigError, match="'seed'"):
        parse_config(raw)
    with pytest.raises(ConfigError, match="rounds"):
        parse_config(apply_overrides(cfg(), ["rounds=1e20"]))


def test_config_file_problems(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)
    binary = tmp_path / "b.toml"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        load_config(binary)
    nul = tmp_path / "nul.toml"
    nul.write_bytes(b"rounds = 3\x00\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(nul)
    deep = tmp_path / "deep.toml"
    deep.write_text("x = " + "[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match="too deeply"):
        load_config(deep)
    bom = tmp_path / "bom.toml"
    bom.write_bytes(b"\xef\xbb\xbf" + dump_toml(cfg()).encode())
    assert load_config(bom).rounds == 10

    def deny(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied", str(self))

    ok = tmp_path / "ok.toml"
    ok.write_text(dump_toml(cfg()))
    monkeypatch.setattr(Path, "read_bytes", deny)
    with pytest.raises(ConfigError, match="permission denied"):
        load_config(ok)


def test_oversized_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fedad.toml_files as config_module

    big = tmp_path / "big.toml"
    big.write_text("# padding\n" * 20)
    monkeypatch.setattr(config_module, "MAX_CONFIG_BYTES", 100)
    with pytest.raises(ConfigError, match="more than a config's limit"):
        load_config(big)


@pytest.mark.parametrize(
    ("privacy", "mechanism"),
    [
        ({}, "none"),
        ({"secagg": True}, "none"),
        ({"noise_multiplier": 0.8}, "gaussian"),
        ({"clip": 2.0}, "gaussian"),
        ({"target_epsilon": 3.0}, "gaussian"),
        ({"mechanism": "none", "noise_multiplier": 0.8}, "none"),
        ({"mechanism": "gaussian"}, "gaussian"),
    ],
)
def test_privacy_noise_settings_imply_the_gaussian_mechanism(
    privacy: dict[str, Any], mechanism: str
) -> None:
    """docs/outputs.md's "[privacy] Gaussian mechanism (clip, noise_multiplier)": a config that
    names the noise and not the switch gets the noise; an explicit switch wins."""
    c = parse_config(cfg(privacy=privacy))
    assert c.privacy.mechanism == mechanism


def test_privacy_resolved_config_keeps_mechanism_none(tmp_path: Path) -> None:
    """The dump writes every key (clip and noise_multiplier too): read back, still none."""
    c = parse_config(cfg())
    path = tmp_path / "c.toml"
    path.write_text(dump_toml(c.model_dump(mode="json", exclude_none=True)))
    assert load_config(path).privacy.mechanism == "none"


@pytest.mark.parametrize(
    ("over", "needle"),
    [
        ({"engine": {"min_clients": 5}}, "engine.min_clients=5 exceeds the 3 clients"),
        ({"attack": {"kind": "sign-flip", "clients": 4}}, "attack.clients=4 exceeds the 3"),
    ],
)
def test_a_natural_partition_is_checked_on_its_own_count(
    tmp_path: Path, over: dict[str, Any], needle: str
) -> None:
    """Not against partition.clients' default of 10, which a natural partition ignores."""
    from fedad.runner import run_experiment

    table = tmp_path / "t.csv"
    rows = [f"{i % 3},{i / 10},{(i * 7) % 5},{'bad' if i % 9 == 0 else 'ok'}" for i in range(60)]
    table.write_text("site,a,b,label\n" + "\n".join(rows) + "\n")
    data = {"name": "table", "path": str(table), "label_column": "label", "client_column": "site"}
    raw = {
        "rounds": 1,
        "data": {**data, "normal": ["ok"], "anomaly": ["bad"]},
        "partition": {"scheme": "natural"},
        "engine": {"progress": False},
        "methods": [{"name": "onlad"}],
        **over,
    }
    with pytest.raises(ConfigError, match=needle):
        run_experiment(parse_config(raw), tmp_path / "run")
    assert not (tmp_path / "run").exists()
