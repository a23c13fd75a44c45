"""``table``: the user's own CSV/TSV/Parquet file, natural partitions, categorical columns."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fedad.config import parse_config
from fedad.core.errors import ConfigError, DataError, FedadError
from fedad.data.registry import load_dataset
from fedad.federation import build_federation


def frame(n: int = 120, seed: int = 0) -> pd.DataFrame:
    """Sites a (many), b, c (few); numbers, a text column, 0/1 and string labels."""
    rng = np.random.default_rng(seed)
    site = np.array(["a"] * (n // 2) + ["b"] * (n // 3) + ["c"] * (n - n // 2 - n // 3))
    bad = rng.random(n) < 0.25
    return pd.DataFrame(
        {
            "row": np.arange(n),
            "age": rng.normal(50, 10, n).round(1),
            "bp": rng.normal(120, 15, n) + 40 * bad,
            "ward": rng.choice(["icu", "er", "gen"], n),
            "site": site,
            "flag": bad.astype(int),
            "diagnosis": np.where(bad, "sick", "well"),
        }
    )


def write(df: pd.DataFrame, path: Path) -> Path:
    if path.suffix == ".parquet":
        df.to_parquet(path, index=False)
    else:
        df.to_csv(path, sep="\t" if path.suffix == ".tsv" else ",", index=False)
    return path


def cfg(path: Path, **data: Any) -> Any:
    part = data.pop("partition", {"scheme": "iid", "clients": 2})
    raw = {
        "data": {"name": "table", "path": str(path), **data},
        "partition": part,
        "methods": [{"name": "local", "detector": "autoencoder"}],
    }
    return parse_config(raw)


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".parquet"])
def test_round_trip(tmp_path: Path, suffix: str) -> None:
    df = frame()
    ds = load_dataset(
        "table",
        str(write(df, tmp_path / f"t{suffix}")),
        options={"label_column": "flag", "drop_columns": ["row", "diagnosis", "site"]},
    )
    assert ds.columns == ("age", "bp", "ward")
    assert ds.classes == ("0", "1") and ds.by_value
    np.testing.assert_array_equal(ds.y, df["flag"].to_numpy())
    np.testing.assert_allclose(ds.x[:, 0], df["age"].to_numpy(), rtol=1e-6)
    # the text column holds each row's index among its sorted values
    cats = dict(ds.categorical)[2]
    assert cats == ("er", "gen", "icu")
    assert [cats[int(i)] for i in ds.x[:, 2]] == df["ward"].tolist()
    assert ds.group is None and ds.x_test is None


def test_zero_one_labels_are_a_fixed_definition(tmp_path: Path) -> None:
    path = write(frame(), tmp_path / "t.csv")
    fed = build_federation(cfg(path, label_column="flag", drop_columns=["diagnosis", "row"]))
    y = np.concatenate([c.y_test for c in fed.clients])
    assert fed.normal_classes == [0] and fed.anomaly_classes == [1]
    assert 0 < y.mean() < 1
    # training rows are the 0s only (no contamination asked for)
    assert all(c.y_train.sum() == 0 for c in fed.clients)


def test_string_labels_select_by_value(tmp_path: Path) -> None:
    path = write(frame(), tmp_path / "t.csv")
    c = cfg(path, label_column="diagnosis", drop_columns=["flag", "row"], normal=["well"],
            anomaly=["sick"])  # fmt: skip
    fed = build_federation(c)
    assert [fed.class_names[i] for i in fed.normal_classes] == ["well"]
    with pytest.raises(DataError, match=r"'healthy'.*values: 'sick', 'well'"):
        build_federation(cfg(path, label_column="diagnosis", normal=["healthy"], anomaly=["sick"]))


def test_split_column_is_the_test_split(tmp_path: Path) -> None:
    df = frame()
    df["split"] = np.where(np.arange(len(df)) % 4 == 0, "test", "train")
    path = write(df, tmp_path / "t.csv")
    c = cfg(path, label_column="flag", split_column="split", features=["row", "age", "bp"],
            standardize=False)  # fmt: skip
    fed = build_federation(c)
    test_rows = np.concatenate([cl.x_test[:, 0] for cl in fed.clients]).astype(int)
    assert set(test_rows) == set(np.flatnonzero(df["split"] == "test"))
    train_rows = np.concatenate([cl.x_train[:, 0] for cl in fed.clients]).astype(int)
    assert not set(train_rows) & set(test_rows)
    assert fed.notes["test_split"] == {"table": "official"}


def test_natural_partition_one_client_per_value(tmp_path: Path) -> None:
    df = frame()
    path = write(df, tmp_path / "t.parquet")
    c = cfg(path, label_column="flag", client_column="site", features=["row", "age", "bp"],
            standardize=False, partition={"scheme": "natural"})  # fmt: skip
    fed = build_federation(c)
    assert [cl.name for cl in fed.clients] == ["a", "b", "c"]
    site = df["site"].to_numpy()
    for cl in fed.clients:
        for block in (cl.x_train, cl.x_test):
            rows = block[:, 0].astype(int)
            assert set(site[rows]) == {cl.name}  # own rows only, training and test
        assert cl.y_test.sum() > 0 and (cl.y_test == 0).sum() > 0
    # every normal training row of a site is its client's
    normal_a = np.flatnonzero((site == "a") & (df["flag"] == 0).to_numpy())
    held = np.concatenate([fed.clients[0].x_train[:, 0], fed.clients[0].x_test[:, 0]])
    assert set(normal_a) <= set(held.astype(int))
    assert fed.notes["client_names"] == ["a", "b", "c"]


def test_natural_partition_checks_the_client_count(tmp_path: Path) -> None:
    path = write(frame(), tmp_path / "t.csv")
    with pytest.raises(ConfigError, match=r"partition.clients = 5.*names 3 clients \(a, b, c\)"):
        build_federation(cfg(path, label_column="flag", client_column="site",
                             partition={"scheme": "natural", "clients": 5}))  # fmt: skip
    fed = build_federation(cfg(path, label_column="flag", client_column="site",
                               partition={"scheme": "natural", "clients": 3}))  # fmt: skip
    assert len(fed.clients) == 3
    with pytest.raises(ConfigError, match="needs a client id per sample"):
        build_federation(cfg(path, label_column="flag", partition={"scheme": "natural"}))


def test_a_client_without_normal_rows_is_an_error(tmp_path: Path) -> None:
    df = frame()
    df.loc[df["site"] == "c", "flag"] = 1  # site c: anomalies only
    path = write(df, tmp_path / "t.csv")
    with pytest.raises(DataError, match=r"client 'c' has 0 normal training samples"):
        build_federation(cfg(path, label_column="flag", client_column="site",
                             partition={"scheme": "natural"}))  # fmt: skip


def test_many_tiny_natural_clients_are_named_not_partition_clients(tmp_path: Path) -> None:
    """Natural works the client count out itself: 'lower partition.clients' cannot help."""
    df = frame(60)
    df["site"] = np.where(np.arange(60) < 40, "big", [f"t{i:02d}" for i in range(60)])
    df["flag"] = np.where(np.arange(60) < 40, np.arange(60) % 4 == 0, False).astype(int)
    path = write(df, tmp_path / "t.csv")
    natural = {"scheme": "natural"}
    with pytest.raises(DataError, match=r"client 't40' has 1 normal .*\(and 19 more of the 21 "
                                        r"clients\).*one client per id") as err:  # fmt: skip
        build_federation(cfg(path, label_column="flag", client_column="site", partition=natural))
    assert "partition.clients" not in str(err.value)
    one = {"scheme": "natural", "min_per_client": 1}
    with pytest.raises(DataError, match=r"leaves .* \(lower data\.server_normal\)$"):
        build_federation(cfg(path, label_column="flag", client_column="site", partition=one,
                             server_normal=25))  # fmt: skip
    df["flag"] = (np.arange(60) < 40).astype(int)  # big: anomalies only; tiny: one normal
    path = write(df, tmp_path / "t.csv")
    with pytest.raises(DataError, match=r"no normal samples .*class by class.*split_column"):
        build_federation(cfg(path, label_column="flag", client_column="site", partition=one))


def test_categories_seen_only_in_test_encode_as_zeros(tmp_path: Path) -> None:
    df = frame(200)
    # 'lab' only on anomalous rows, which never train (no contamination)
    df.loc[df["flag"] == 1, "ward"] = "lab"
    path = write(df, tmp_path / "t.csv")
    c = cfg(path, label_column="flag", features=["age", "ward"])
    fed = build_federation(c)
    enc = fed.notes["encoding"]
    assert enc["categories"] == {"ward": ["er", "gen", "icu"]}
    assert enc["encoded_columns"] == ["age", "ward=er", "ward=gen", "ward=icu"]
    assert fed.feature_shape == (4,)
    for cl in fed.clients:
        onehot = cl.x_test[:, 1:]
        assert set(np.unique(onehot)) <= {0.0, 1.0}  # one-hot columns are not standardized
        np.testing.assert_array_equal(onehot.sum(axis=1), 1 - cl.y_test)
        np.testing.assert_array_equal(cl.x_train[:, 1:].sum(axis=1), 1)


def test_missing_values_follow_data_missing(tmp_path: Path) -> None:
    df = frame()
    df.loc[3, "age"] = np.nan
    df.loc[5, "ward"] = np.nan
    path = write(df, tmp_path / "t.csv")
    with pytest.raises(DataError, match=r"2 missing or infinite values in 2 rows.*age, ward"):
        build_federation(cfg(path, label_column="flag", features=["age", "ward"]))
    fed = build_federation(
        cfg(path, label_column="flag", features=["age", "ward"], missing="impute-mean")
    )
    assert all(np.isfinite(c.x_train).all() and np.isfinite(c.x_test).all() for c in fed.clients)
    dropped = build_federation(
        cfg(path, label_column="flag", features=["row", "age", "ward"], missing="drop",
            standardize=False)
    )  # fmt: skip
    rows = np.concatenate([np.r_[c.x_train[:, 0], c.x_test[:, 0]] for c in dropped.clients])
    assert not {3, 5} & set(rows.astype(int).tolist())
    assert all(np.isfinite(c.x_train).all() for c in dropped.clients)


def test_a_number_beyond_float32_is_infinite_without_a_warning(tmp_path: Path) -> None:
    df = frame()
    df["age"] = df["age"].astype(float)
    df.loc[4, "age"] = 1e300
    path = write(df, tmp_path / "t.csv")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the overflow of the cast reaches no one
        with pytest.raises(DataError, match=r"1 missing or infinite values in 1 rows .*age"):
            build_federation(cfg(path, label_column="flag", features=["age", "bp"]))
        fed = build_federation(
            cfg(path, label_column="flag", features=["row", "age"], missing="drop",
                standardize=False)
        )  # fmt: skip
    rows = np.concatenate([np.r_[c.x_train[:, 0], c.x_test[:, 0]] for c in fed.clients])
    assert 4 not in rows.astype(int).tolist()
    assert all(np.isfinite(c.x_train).all() and np.isfinite(c.x_test).all() for c in fed.clients)


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"label_column": "nope"}, r"data.label_column 'nope' is not a column of .*columns: row"),
        ({"label_column": "flag", "features": ["age", "x"]}, r"data.features entry 'x'"),
        ({"label_column": "flag", "drop_columns": ["zz"]}, r"data.drop_columns entry 'zz'"),
        ({"label_column": "flag", "features": ["flag"]}, r"label, client or split column"),
        ({"label_column": "one"}, r"holds one value \('1'\)"),
        ({}, r"data.label_column is not set"),
        ({"label_column": "flag", "split_column": "site"}, r"holds 'a' in data row 1"),
        (
            {"label_column": "flag", "channels": 3},
            r"data.channels does not apply to data set "
            r"'table' \(it applies to image_folder\)",
        ),
        ({"label_column": "flag", "size": 8}, r"data.size=8 applies to image data sets only"),
        ({"label_column": "row", "normal": [999], "anomaly": [1]}, r"999.*and 108 more"),
    ],
)
def test_bad_tables_are_one_line_errors(tmp_path: Path, data: dict[str, Any], needle: str) -> None:
    df = frame()
    df["one"] = 1
    path = write(df, tmp_path / "t.csv")
    with pytest.raises(FedadError, match=needle) as err:
        build_federation(cfg(path, **data))
    assert "\n" not in str(err.value)


def test_unreadable_files_are_one_line_errors(tmp_path: Path) -> None:
    bad = tmp_path / "t.parquet"
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(DataError, match=r"cannot read '.*t.parquet'") as err:
        load_dataset("table", str(bad), options={"label_column": "flag"})
    assert "\n" not in str(err.value)
    with pytest.raises(DataError, match=r"not a .csv, .tsv or .parquet file"):
        load_dataset("table", str(tmp_path / "t.xlsx"), options={"label_column": "flag"})
    with pytest.raises(DataError, match=r"needs data\.path"):
        load_dataset("table", None, options={"label_column": "flag"})
    ids = frame(600)
    ids["patient"] = [f"p{i}" for i in range(600)]
    path = write(ids, tmp_path / "ids.csv")
    with pytest.raises(DataError, match=r"'patient'.*600 distinct values.*drop_columns"):
        load_dataset("table", str(path), options={"label_column": "flag"})


@pytest.mark.parametrize(("suffix", "sep"), [(".csv", ","), (".tsv", "\t")])
def test_a_repeated_column_name_is_named(tmp_path: Path, suffix: str, sep: str) -> None:
    path = tmp_path / f"t{suffix}"
    path.write_text(sep.join(["f0", "f0", "f0.1", "label"]) + "\n" + sep.join("1230") + "\n")
    with pytest.raises(DataError, match=r"has the column 'f0' twice.*rename one") as err:
        load_dataset("table", str(path), options={"label_column": "label"})
    assert "f0.1" not in str(err.value)
    path.write_text(sep.join(["f0", "f0.1", "label"]) + "\n" + sep.join("120") + "\n"
                    + sep.join("341") + "\n")  # fmt: skip
    assert load_dataset("table", str(path), options={"label_column": "label"}).columns == (
        "f0",
        "f0.1",
    )


def test_fedad_run_on_a_bad_table_exits_2_with_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from fedad.cli.app import app

    path = write(frame(), tmp_path / "t.csv")
    for extra, needle in (('label_column = "nope"', "data.label_column 'nope' is not a column"),
                          ('label_column = "row"\nnormal = [0]\nanomaly = [1]\n'
                           'client_column = "site"', None)):  # fmt: skip
        (tmp_path / "c.toml").write_text(
            f'[data]\nname = "table"\npath = "{path}"\n{extra}\n[partition]\nscheme = '
            '"natural"\n[[methods]]\nname = "local"\ndetector = "autoencoder"\n'
        )
        res = CliRunner().invoke(app, ["run", str(tmp_path / "c.toml"), "-o",
                                       str(tmp_path / "out"), "-q"])  # fmt: skip
        assert res.exit_code == 2, res.output
        assert "Traceback" not in res.output and res.output.count("error:") == 1
        if needle:
            assert needle in res.output
        assert not (tmp_path / "out").exists()  # no half-made run directory left
