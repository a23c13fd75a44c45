"""Representations for the report's t-SNE: the evaluate reply's sample, the runner's
``embeddings.npz`` and the report's section (FADngs's Fig. 6-7, generic for any detector
with ``represent``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedad.config import parse_config
from fedad.core.algorithm import Setup, build_algorithm
from fedad.core.messages import Message
from fedad.core.types import Dataset
from fedad.data.registry import register_dataset, unregister_dataset
from fedad.evaluation.families import Pooled
from fedad.evaluation.samples import EMBED_PER_CLIENT, embedding_indices, embedding_sample
from fedad.report.html import render_report
from fedad.runner import run_experiment
from tests.conftest import make_federation

FAST = {"width": 4, "proj_dim": 8, "public_n": 8, "distill_batch": 4, "queue_size": 12}


def test_embedding_indices_bounded_deterministic_both_classes() -> None:
    y = np.r_[np.zeros(900), np.ones(30)].astype(np.int64)
    take = embedding_indices(y)
    assert len(take) == EMBED_PER_CLIENT and take.dtype == np.int64
    assert np.all(np.diff(take) > 0)
    assert int(y[take].sum()) == 30  # every anomaly kept (fewer than half the cap)
    np.testing.assert_array_equal(take, embedding_indices(y.copy()))
    assert len(embedding_indices(y[:50])) == 50  # fewer samples than the cap: all
    assert len(embedding_indices(np.zeros(0, np.int64))) == 0


def _reply(cid: int, n: int, dim: int = 3, **arrays: np.ndarray) -> Message:
    y = (np.arange(n) % 4 == 0).astype(np.int64)
    idx = embedding_indices(y, 10)
    z = np.stack([y[idx], idx, np.full(len(idx), cid)], 1)[:, :dim].astype(np.float32)
    base = {"score": np.arange(n, dtype=np.float64) + 100 * cid, "label": y,
            "pred": y, "embedding": z, "embedding_index": idx}  # fmt: skip
    return Message("evaluate", {**base, **arrays}, {"threshold": 0.0})


def test_embedding_sample_is_aligned_bounded_and_skips_bad_replies() -> None:
    replies = {
        0: _reply(0, 30),
        1: _reply(1, 12),
        2: _reply(2, 20, embedding_index=np.array([0, 99])),  # out of range: left out
        3: _reply(3, 20, dim=2),  # another D: left out
    }
    got = embedding_sample(Pooled(replies))
    z = got["embedding"]
    assert z.dtype == np.float32 and z.shape[1] == 3
    assert set(got["client"].tolist()) == {0, 1}
    # each row is (label, index, client) of the sample it represents
    np.testing.assert_array_equal(z[:, 0], got["label"])
    np.testing.assert_array_equal(z[:, 1], got["index"])
    np.testing.assert_array_equal(z[:, 2], got["client"])
    np.testing.assert_array_equal(got["score"], got["index"] + 100 * got["client"])
    small = embedding_sample(Pooled(replies), cap=6)
    assert len(small["label"]) == 6 and set(small["label"].tolist()) == {0, 1}
    plain = {i: Message("evaluate", {k: v for k, v in m.arrays.items() if "embed" not in k})
             for i, m in replies.items()}  # fmt: skip
    assert embedding_sample(Pooled(plain)) == {}


class _Rep:
    def __init__(self, out: Any) -> None:
        self.out = out

    def represent(self, x: np.ndarray) -> Any:
        if isinstance(self.out, Exception):
            raise self.out
        return self.out(x) if callable(self.out) else self.out


def test_client_reply_embedding_matches_its_test_samples() -> None:
    fed = make_federation("image", n=40)
    setup = Setup(fed.kind, fed.feature_shape, rounds=1, seed=0, contamination=0.1,
                  num_clients=3)  # fmt: skip
    alg = build_algorithm("fadngs", FAST, setup)
    data = fed.clients[0]
    got = alg.embeddings(_Rep(lambda x: x.reshape(len(x), -1)), data)  # type: ignore[arg-type]
    idx = got["embedding_index"]
    np.testing.assert_array_equal(idx, embedding_indices(data.y_test))
    np.testing.assert_array_equal(got["embedding"], data.x_test[idx].reshape(len(idx), -1))
    assert got["embedding"].dtype == np.float32
    # a failing or malformed represent costs the figure, not the evaluation
    for bad in (RuntimeError("boom"), np.zeros(3), np.full((len(idx), 2), np.nan)):
        assert alg.embeddings(_Rep(bad), data) == {}  # type: ignore[arg-type]


# -- through the runner and the report --------------------------------------------------------


def _images(n_good: int = 60, n_bad: int = 30, seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 0.3, (n_good + n_bad, 1, 8, 8)).astype(np.float32)
    x[n_good:, :, 2:6, 2:6] += 0.6
    y = np.r_[np.zeros(n_good), np.ones(n_bad)].astype(np.int64)
    return Dataset("toy_embed", x, y, "image", ("good", "bad"))


@pytest.fixture
def toy() -> Iterator[None]:
    register_dataset("toy_embed", lambda path=None, size=None: _images(), kind="image")
    yield
    unregister_dataset("toy_embed")


def _raw(*methods: dict[str, Any]) -> dict[str, Any]:
    return {
        "seed": 0,
        "rounds": 1,
        "data": {"name": "toy_embed", "normal": [0], "anomaly": [1]},
        "partition": {"scheme": "iid", "clients": 2},
        "engine": {"progress": False},
        "methods": list(methods),
    }


def test_fadngs_run_writes_embeddings_and_the_report_draws_tsne(toy: None, tmp_path: Path) -> None:
    raw = _raw({"name": "fadngs", "label": "fad", "params": {**FAST, "density_noise": 1.0}},
               {"name": "local", "label": "ae", "detector": "autoencoder",
                "params": {"local_epochs": 1}})  # fmt: skip
    run_experiment(parse_config(raw), tmp_path / "run")
    # the privacy measures (Fig. 9) and the densities' epsilon in metrics.json and the report
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    fad = metrics["methods"]["fad"]
    for key in ("dcor_shared", "dcor_random"):
        assert 0.0 <= fad[key] <= 1.0, key
    assert fad["density_epsilon"] > 0 and 0 < fad["density_delta"] < 1
    assert "fadngs-privacy" in metrics["columns"] and "dcor_shared" not in metrics["methods"]["ae"]
    with np.load(tmp_path / "run" / "embeddings.npz", allow_pickle=False) as npz:
        keys = set(npz.files)
        z, y, c = npz["fad/embedding"], npz["fad/label"], npz["fad/client"]
        idx = npz["fad/index"]
    assert keys == {f"fad/{k}" for k in ("embedding", "label", "client", "index", "score")}
    assert z.shape == (len(y), 8) and z.dtype == np.float32 and set(c.tolist()) == {0, 1}
    with np.load(tmp_path / "run" / "scores.npz", allow_pickle=False) as npz:
        label, client = npz["fad/label"], npz["fad/client"]
    for cid in (0, 1):  # labels aligned with the client's test set
        np.testing.assert_array_equal(y[c == cid], label[client == cid][idx[c == cid]])
    text = (tmp_path / "run" / "report.html").read_text()
    assert "Representations (t-SNE)" in text and 'alt="t-SNE: fad"' in text
    assert 'alt="t-SNE: ae"' not in text
    assert "Scores per client" in text and 'alt="Scores per client"' in text
    assert "Privacy measures (FADngs)" in text and "ε of the densities" in text
    # a damaged embeddings.npz is a note, never a crash
    (tmp_path / "run" / "embeddings.npz").write_bytes(b"PK\x03\x04 not a zip")
    text = render_report(tmp_path / "run")
    assert "embeddings.npz left out" in text and "Representations (t-SNE)" not in text


def test_no_represent_no_embeddings(toy: None, tmp_path: Path) -> None:
    raw = _raw({"name": "local", "label": "ae", "detector": "autoencoder",
                "params": {"local_epochs": 1}})  # fmt: skip
    run_experiment(parse_config(raw), tmp_path / "run")
    assert not (tmp_path / "run" / "embeddings.npz").exists()
    text = (tmp_path / "run" / "report.html").read_text()
    assert "t-SNE" not in text and 'alt="Scores per client"' in text


def test_embeddings_of_methods_not_in_the_run_are_not_read(tmp_path: Path) -> None:
    from fedad.rundir.read import read_embeddings

    rng = np.random.default_rng(0)
    arrays = {}
    for lab in ("a", "b", "c"):
        arrays[f"{lab}/embedding"] = rng.normal(size=(6, 3)).astype(np.float32)
        arrays[f"{lab}/label"] = np.array([0, 0, 0, 1, 1, 1], dtype=np.int8)
        arrays[f"{lab}/client"] = np.zeros(6, dtype=np.int64)
    np.savez(tmp_path / "embeddings.npz", **arrays)
    assert list(read_embeddings(tmp_path / "embeddings.npz", ["b"])) == ["b"]
    assert list(read_embeddings(tmp_path / "embeddings.npz")) == ["a", "b", "c"]
