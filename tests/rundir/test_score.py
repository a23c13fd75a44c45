"""``fedad score`` and ``detector.score(DataFrame)``: new data scored as the run scored its own."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import fedad
from fedad.cli.app import app
from fedad.core.errors import FedadError
from fedad.rundir.inputs import read_inputs
from tests.data.test_table import frame

runner = CliRunner()

CONFIG = """
seed = 3
rounds = 2
[data]
name = "table"
path = "{path}"
label_column = "flag"
client_column = "site"
split_column = "split"
drop_columns = ["row", "diagnosis"]
missing = "impute-mean"
[partition]
scheme = "natural"
[[methods]]
name = "fedavg"
detector = "autoencoder"
[[methods]]
name = "local"
detector = "ocsvm"
"""


@pytest.fixture(scope="module")
def table_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    root = tmp_path_factory.mktemp("scored")
    df = frame(150, seed=4)
    df["split"] = np.where(np.arange(len(df)) % 3 == 0, "test", "train")
    df.loc[7, "age"] = np.nan  # imputed with the training mean, in training and scoring
    df.to_csv(root / "records.csv", index=False)
    (root / "c.toml").write_text(CONFIG.format(path=root / "records.csv"))
    res = runner.invoke(app, ["run", str(root / "c.toml"), "--out", str(root / "run"), "-q"])
    assert res.exit_code == 0, res.output
    return root, df


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


@pytest.mark.parametrize("label", ["fedavg", "local"])
def test_scores_equal_the_runs_own_test_scores(
    table_run: tuple[Path, pd.DataFrame], label: str
) -> None:
    root, df = table_run
    test = df[df["split"] == "test"].drop(columns=["split"])
    test.to_csv(root / "new.csv", index=False)
    out = root / f"scores-{label}.csv"
    res = runner.invoke(app, ["score", str(root / "run"), str(root / "new.csv"), "--method",
                              label, "--out", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert f"scored {len(test)} inputs" in res.output
    rows = _rows(out.read_text())
    assert [r["id"] for r in rows] == [str(i) for i in range(len(test))]
    assert [r["client"] for r in rows] == test["site"].tolist()  # each row by its own client
    z = np.load(root / "run" / "scores.npz")
    names = read_inputs(root / "run").client_names
    for k, name in enumerate(names):
        mine = np.array([float(r["score"]) for r in rows if r["client"] == name])
        theirs = z[f"{label}/score"][z[f"{label}/client"] == k]
        np.testing.assert_allclose(np.sort(mine), np.sort(theirs), rtol=1e-6, atol=1e-9)
        flagged = sum(int(r["anomaly"]) for r in rows if r["client"] == name)
        assert flagged == int(z[f"{label}/pred"][z[f"{label}/client"] == k].sum())


def test_python_api_takes_a_dataframe(table_run: tuple[Path, pd.DataFrame]) -> None:
    root, df = table_run
    run = fedad.load(str(root / "run"))
    test = df[(df["split"] == "test") & (df["site"] == "b")]
    det = run.detector("fedavg", 1)
    got = det.score(test)
    z = np.load(root / "run" / "scores.npz")
    theirs = z["fedavg/score"][z["fedavg/client"] == 1]
    np.testing.assert_allclose(np.sort(got), np.sort(theirs), rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(det.predict(test), (got > det.threshold_).astype(int))
    np.testing.assert_allclose(run.score("fedavg", test, client=1), got)
    # arrays are model inputs, as before
    x = run.inputs.table(test) if run.inputs else None
    np.testing.assert_allclose(det.score(x), got)


def test_client_option_by_name_or_number(table_run: tuple[Path, pd.DataFrame]) -> None:
    root, df = table_run
    df.drop(columns=["site"]).head(10).to_csv(root / "anon.csv", index=False)
    by_name = runner.invoke(app, ["score", str(root / "run"), str(root / "anon.csv"), "-m",
                                  "local", "--client", "c"])  # fmt: skip
    by_number = runner.invoke(app, ["score", str(root / "run"), str(root / "anon.csv"), "-m",
                                    "local", "--client", "2"])  # fmt: skip
    assert by_name.exit_code == 0 and by_number.stdout == by_name.stdout
    assert {r["client"] for r in _rows(by_name.stdout)} == {"c"}


def test_an_unseen_category_scores(table_run: tuple[Path, pd.DataFrame]) -> None:
    root, df = table_run
    new = df.head(4).copy()
    new["ward"] = "never-seen"
    run = fedad.load(str(root / "run"))
    x = run.inputs.table(new) if run.inputs else None
    assert x is not None
    ward = [j for j, c in enumerate(run.inputs.columns) if c == "ward"] if run.inputs else []
    assert ward and np.isfinite(run.detector("fedavg", 0).score(new)).all()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--method", "nope"], "has no method 'nope'"),
        (["--method", "fedavg", "--client", "zz"], "--client 'zz' is not a client of the run"),
        (["-m", "fedavg", "--client", "99999999999999999999999"], "run, which had 3 clients"),
        (["-m", "fedavg", "--client", "3"], "give a client number from 0 to 2 or one of a, b"),
        (["-m", "fedavg", "--client", "\u00b2"], "--client '\u00b2' is not a client"),
        (["--method", "fedavg", "--id-column", "zz"], "has no column 'zz'"),
    ],
)
def test_bad_requests_exit_2(
    table_run: tuple[Path, pd.DataFrame], args: list[str], needle: str
) -> None:
    root, df = table_run
    df.head(3).to_csv(root / "few.csv", index=False)
    res = runner.invoke(app, ["score", str(root / "run"), str(root / "few.csv"), *args])
    assert res.exit_code == 2 and needle in res.output
    assert "Traceback" not in res.output


def test_bad_data_exit_2(table_run: tuple[Path, pd.DataFrame], tmp_path: Path) -> None:
    root, df = table_run
    run = str(root / "run")
    df.drop(columns=["bp"]).head(3).to_csv(tmp_path / "nobp.csv", index=False)
    bad = df.head(3).copy()
    bad["age"] = bad["age"].astype(object)
    bad.loc[bad.index[1], "age"] = "old"
    bad.to_csv(tmp_path / "text.csv", index=False)
    stranger = df.head(3).copy()
    stranger["site"] = "z"
    stranger.to_csv(tmp_path / "z.csv", index=False)
    (tmp_path / "x.json").write_text("{}")
    cases = [
        ("nobp.csv", "lacks the feature column 'bp'"),
        ("text.csv", "column 'age' holds 'old' in data row 2"),
        ("z.csv", "names client 'z'"),
        ("x.json", "neither a folder of images nor a .csv"),
    ]
    for name, needle in cases:
        res = runner.invoke(app, ["score", run, str(tmp_path / name), "-m", "fedavg"])
        assert res.exit_code == 2 and needle in res.output, (name, res.output)
    # an existing --out is kept unless --force
    out = tmp_path / "keep.csv"
    out.write_text("mine")
    df.head(3).to_csv(tmp_path / "ok.csv", index=False)
    res = runner.invoke(app, ["score", run, str(tmp_path / "ok.csv"), "-m", "fedavg", "-o",
                              str(out)])  # fmt: skip
    assert res.exit_code == 2 and out.read_text() == "mine"


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda d: d.update(std=[0.0] * len(d["std"])), "'std' has a value that is not positive"),
        (lambda d: d.update(mean=[1.0]), "'mean' is not"),
        (lambda d: d.update(kind="code"), "'kind' is not"),
        (lambda d: d.update(feature_shape=[10**9]), "'feature_shape'"),
        (lambda d: d.update(categories={"nope": ["a"]}), "'categories'"),
        (lambda d: d.update(columns="age"), "'columns' is not a list of strings"),
    ],
)
def test_crafted_inputs_json_is_refused(
    table_run: tuple[Path, pd.DataFrame], tmp_path: Path, edit: object, needle: str
) -> None:
    import shutil

    root, _ = table_run
    copy = tmp_path / "run"
    shutil.copytree(root / "run", copy)
    raw = json.loads((copy / "inputs.json").read_text())
    edit(raw)  # type: ignore[operator]
    (copy / "inputs.json").write_text(json.dumps(raw))
    with pytest.raises(FedadError, match=needle) as err:
        read_inputs(copy)
    assert "\n" not in str(err.value)
    (copy / "inputs.json").write_text("[1, 2")
    with pytest.raises(FedadError, match="not readable JSON"):
        fedad.load(str(copy))


def test_resolved_config_names_the_natural_client_count(
    table_run: tuple[Path, pd.DataFrame],
) -> None:
    from fedad.config import load_config
    from fedad.federation import build_federation

    root, _ = table_run
    cfg = load_config(root / "run" / "config.toml")
    assert cfg.partition.clients == 3
    assert [c.name for c in build_federation(cfg).clients] == ["a", "b", "c"]


def test_image_folder_scores_equal_the_runs_own(tmp_path: Path) -> None:
    """Train on data.path/train/<class>/, then score data.path/test/ with fedad score."""
    from PIL import Image

    rng = np.random.default_rng(0)
    root = tmp_path / "photos"
    for split, n_good, n_bad in (("train", 24, 4), ("test", 8, 6)):
        for cls, n in (("good", n_good), ("bad", n_bad)):
            for i in range(n):
                arr = rng.integers(90, 130, size=(12, 12), dtype=np.uint8)
                if cls == "bad":
                    arr[3:8, 3:8] = 250
                (root / split / cls).mkdir(parents=True, exist_ok=True)
                Image.fromarray(arr).save(root / split / cls / f"{i:03d}.png")
    (tmp_path / "c.toml").write_text(
        f'rounds = 2\n[data]\nname = "image_folder"\npath = "{root}"\nnormal = ["good"]\n'
        'anomaly = ["bad"]\n[partition]\nclients = 2\n'
        '[[methods]]\nname = "fedavg"\ndetector = "autoencoder"\n'
    )
    res = runner.invoke(app, ["run", str(tmp_path / "c.toml"), "-o", str(tmp_path / "run"), "-q"])
    assert res.exit_code == 0, res.output
    z = np.load(tmp_path / "run" / "scores.npz")
    for k in (0, 1):
        res = runner.invoke(app, ["score", str(tmp_path / "run"), str(root / "test"), "-m",
                                  "fedavg", "--client", str(k)])  # fmt: skip
        assert res.exit_code == 0, res.output
        rows = _rows(res.stdout)
        assert len(rows) == 14 and rows[0]["id"] == "bad/000.png"
        # the pooled test set is every test image; each client scored its share of it
        mine = {r["id"]: float(r["score"]) for r in rows}
        theirs = z["fedavg/score"][z["fedavg/client"] == k]
        got = np.array(sorted(mine.values()))
        assert all(np.isclose(got, s, rtol=1e-6).any() for s in theirs)
    res = runner.invoke(app, ["score", str(tmp_path / "run"), str(tmp_path / "c.toml"), "-m",
                              "fedavg"])  # fmt: skip
    assert res.exit_code == 2 and "neither a folder of images" in res.output
    (root / "test" / "good" / "notes.txt").write_text("not an image")
    res = runner.invoke(app, ["score", str(tmp_path / "run"), str(root / "test"), "-m", "fedavg"])
    assert res.exit_code == 2 and "notes.txt" in res.output and "Traceback" not in res.output


def _at_odds(root: Path, tmp_path: Path, edit: object) -> Path:
    """A copy of the run whose inputs.json, consistent in itself, was edited."""
    import shutil

    copy = tmp_path / "odd"
    shutil.copytree(root / "run", copy)
    raw = json.loads((copy / "inputs.json").read_text())
    edit(raw)  # type: ignore[operator]
    (copy / "inputs.json").write_text(json.dumps(raw))
    return copy


def _one_more_feature(raw: dict[str, Any]) -> None:
    raw["columns"].append("row")  # a numeric column of the data, not a feature of the run
    raw["feature_shape"] = [raw["feature_shape"][0] + 1]
    for key in ("mean", "std", "impute_means"):
        if raw.get(key) is not None:
            raw[key].append(1.0)


def test_inputs_json_at_odds_with_the_detector_is_one_line(
    table_run: tuple[Path, pd.DataFrame], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 26 #6: 6 features for a 5-feature model, or images for a table model."""
    root, df = table_run
    df.head(4).to_csv(tmp_path / "few.csv", index=False)
    wide = _at_odds(root, tmp_path / "wide", _one_more_feature)
    for label, takes in (("fedavg", "vectors of 5 values"), ("local", "samples of 5 values")):
        res = runner.invoke(app, ["score", str(wide), str(tmp_path / "few.csv"), "-m", label])
        assert res.exit_code == 2 and "Traceback" not in res.output, res.output
        assert f"inputs.json' describes vector data of shape (6,), but method '{label}''s " \
            f"detector takes {takes}" in res.output  # fmt: skip
    with pytest.raises(
        FedadError, match=r"takes samples of 5 values, got an array of shape \(2, 6\)"
    ):
        fedad.load(str(root / "run")).detector("fedavg", 0).score(np.zeros((2, 6)))
    # a detector that declares nothing and still cannot score: one line, naming it
    from fedad.components.detectors.ocsvm import OCSVMDetector

    monkeypatch.setattr(OCSVMDetector, "expected_input", lambda self: None)
    res = runner.invoke(app, ["score", str(wide), str(tmp_path / "few.csv"), "-m", "local"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert "method 'local''s detector of client 0 cannot score these inputs" in res.output

    from PIL import Image

    (tmp_path / "pics").mkdir()
    Image.fromarray(np.zeros((4, 4), np.uint8)).save(tmp_path / "pics" / "a.png")
    images = _at_odds(
        root, tmp_path / "img", lambda d: d.update(kind="image", feature_shape=[1, 1, 5])
    )
    res = runner.invoke(app, ["score", str(images), str(tmp_path / "pics"), "-m", "fedavg"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert "describes image data of shape (1, 1, 5), but method 'fedavg''s detector takes " \
        "vectors of 5 values" in res.output  # fmt: skip
