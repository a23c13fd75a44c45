"""Evaluation as metric families: image level, pixel level from anomaly maps, and families
a method declares; metrics.json's columns; the capped maps.npz and the report's overlays.

A toy method that localises runs on a tiny registered image data set with defect masks
(bright blobs in the anomalous images). Nothing in the engine, runner or report knows it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np
import pytest
from pydantic import BaseModel, ConfigDict
from sklearn.metrics import roc_auc_score

from fedad.config import parse_config
from fedad.core import algorithm as algmod
from fedad.core.algorithm import Algorithm, ClientState, Params, ServerResult, register
from fedad.core.context import ServerContext
from fedad.core.detector import BaseDetector, localizes
from fedad.core.errors import FedadError
from fedad.core.messages import Message
from fedad.core.types import ClientData, Dataset, Federation
from fedad.data.registry import register_dataset, unregister_dataset
from fedad.evaluation.columns import (
    column_spec,
    columns_of,
    families_json,
    families_of,
    run_columns,
)
from fedad.evaluation.families import (
    IMAGE,
    NORMAL_POSITIVE,
    PIXEL,
    TRAINING,
    Pooled,
    evaluate_replies,
    families_for,
    monitor_metrics,
)
from fedad.evaluation.metrics import normal_positive_metrics
from fedad.evaluation.pixel import pro_score
from fedad.evaluation.samples import MAPS_CAP, client_sample_indices, map_sample, sample_indices
from fedad.fl.engine import run_inprocess
from fedad.resolve import build_algorithms
from fedad.runner import _clean, run_experiment, summarize

SIDE = 12


def _defects(n_good: int = 90, n_bad: int = 45, seed: int = 0) -> Dataset:
    """Grey 12x12 textures; a defect is a bright square of random size and place."""
    rng = np.random.default_rng(seed)
    n = n_good + n_bad
    x = rng.uniform(0.2, 0.4, (n, 1, SIDE, SIDE)).astype(np.float32)
    mask = np.zeros((n, SIDE, SIDE), np.uint8)
    for i in range(n_good, n):
        s = int(rng.integers(2, 5))
        r, c = rng.integers(0, SIDE - s, size=2)
        mask[i, r : r + s, c : c + s] = 1
        x[i, 0][mask[i] == 1] = rng.uniform(0.5, 1.0, size=s * s)
    y = np.r_[np.zeros(n_good), np.ones(n_bad)].astype(np.int64)
    return Dataset("toy_defects", x, y, "image", ("good", "defect"), mask=mask)


class _DevParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    contamination: float = 0.05


class _Dev(BaseDetector):
    """Squared deviation from the training mean image; the image score is its mean."""

    ParamsModel = _DevParams

    def __init__(self, contamination: float = 0.05) -> None:
        super().__init__(contamination)
        self.mean_ = np.zeros((1, SIDE, SIDE))

    def fit(self, x: np.ndarray) -> Self:
        self.mean_ = np.asarray(x, dtype=np.float64).mean(0)
        return self.set_threshold(x)

    def _maps(self, x: np.ndarray) -> np.ndarray:
        out: np.ndarray = ((np.asarray(x, dtype=np.float64) - self.mean_) ** 2).mean(1)
        return out

    def score(self, x: np.ndarray) -> np.ndarray:
        return self._maps(x).reshape(len(x), -1).mean(1)

    def get_params(self) -> dict[str, Any]:
        return {"contamination": self.contamination}

    def get_arrays(self) -> dict[str, np.ndarray]:
        return {"mean_": self.mean_}

    def set_arrays(self, arrays: dict[str, np.ndarray]) -> Self:
        self.mean_ = np.asarray(arrays["mean_"], dtype=np.float64)
        return self


class _DevMaps(_Dev):
    """The same detector, localising: its per-pixel deviations are its anomaly maps."""

    def score_maps(self, x: np.ndarray) -> np.ndarray:
        return self._maps(x)


class _ToyParams(Params):
    localize: bool = True


class _Toy(Algorithm):
    """Each client fits its own detector (no federated phase): enough to evaluate maps."""

    name = "toy-maps"
    kinds = ("image",)
    personalized = True
    ParamsModel = _ToyParams
    metric_families: ClassVar[tuple[Any, ...]] = (NORMAL_POSITIVE,)

    def server(self, ctx: ServerContext) -> ServerResult:
        for r in range(1, ctx.rounds + 1):
            ctx.end_round(r)
        return ServerResult({}, {})

    def client_detector(self, state: ClientState, data: ClientData, msg: Message) -> BaseDetector:
        return self.make_detector().fit(data.x_train)  # type: ignore[arg-type]

    def make_detector(self) -> BaseDetector:
        localize = bool(self.params.localize)  # type: ignore[attr-defined]
        return (_DevMaps if localize else _Dev)(self.contamination)


class _Plain(_Toy):
    """The toy without any declared family."""

    name = "toy-plain"
    metric_families: ClassVar[tuple[Any, ...]] = ()


RAW: dict[str, Any] = {
    "seed": 0,
    "rounds": 1,
    "data": {"name": "toy_defects", "normal": [0], "anomaly": [1]},
    "partition": {"scheme": "iid", "clients": 3},
    "engine": {"progress": False},
    "methods": [
        {"name": "toy-maps", "label": "maps"},
        {"name": "toy-maps", "label": "nomaps", "params": {"localize": False}},
    ],
}


@pytest.fixture
def toy() -> Iterator[None]:
    register_dataset("toy_defects", lambda path=None, size=None: _defects(), kind="image")
    register(_Toy)
    register(_Plain)
    from fedad.core.detector import _DETECTORS, register_detector

    for name, cls in (("toy-dev", _Dev), ("toy-dev-maps", _DevMaps)):
        if name not in _DETECTORS:
            register_detector(name)(cls)
    yield
    algmod._REGISTRY.pop("toy-maps", None)
    algmod._REGISTRY.pop("toy-plain", None)
    unregister_dataset("toy_defects")


def _run(raw: dict[str, Any]) -> tuple[Federation, dict[str, Any]]:
    from fedad.federation import build_federation

    cfg = parse_config(raw)
    fed = build_federation(cfg)
    algs = build_algorithms(cfg, fed)
    return fed, {lab: (alg, run_inprocess(alg, fed, rounds=1, seed=0)) for lab, alg in algs.items()}


# -- the evaluate reply ---------------------------------------------------------------------


def test_reply_carries_maps_only_for_a_localiser_on_masked_data(toy: None) -> None:
    fed, runs = _run(RAW)
    assert fed.has_masks
    for cid, reply in runs["maps"][1].evaluations.items():
        c = fed.clients[cid]
        assert set(reply.arrays) - {n for n in reply.arrays if n.startswith("detector")} == {
            "score",
            "label",
            "pred",
            "map",
            "mask",
        }
        assert reply.arrays["map"].dtype == np.float32 and reply.arrays["mask"].dtype == np.uint8
        assert reply.arrays["map"].shape == c.mask_test.shape  # type: ignore[union-attr]
        np.testing.assert_array_equal(reply.arrays["mask"], c.mask_test)  # type: ignore[arg-type]
    for reply in runs["nomaps"][1].evaluations.values():
        assert not {"map", "mask"} & set(reply.arrays)
    assert localizes(_DevMaps()) and not localizes(_Dev())


def test_no_masks_no_maps(toy: None) -> None:
    fed, runs = _run(RAW)
    alg = runs["maps"][0]
    c = fed.clients[0]
    plain = ClientData(c.client_id, c.x_train, c.y_train, c.c_train, c.x_test, c.y_test)
    reply = alg.client_evaluate({}, plain, Message("evaluate"))
    assert sorted(k for k in reply.arrays if not k.startswith("detector")) == [
        "label",
        "pred",
        "score",
    ]


def test_maps_of_the_wrong_shape_name_the_detector(toy: None) -> None:
    class _Bad(_DevMaps):
        def score_maps(self, x: np.ndarray) -> np.ndarray:
            return super().score_maps(x)[:, :4]

    fed, runs = _run(RAW)
    alg = runs["maps"][0]
    alg.make_detector = lambda: _Bad()  # type: ignore[method-assign]
    with pytest.raises(ValueError, match=r"_Bad.score_maps gave maps of shape"):
        alg.client_evaluate({}, fed.clients[0], Message("evaluate"))


def test_the_threshold_is_the_quantile_of_the_detectors_training_scores(toy: None) -> None:
    """client_evaluate thresholds on ``training_scores`` (held-out scores where a detector
    overrides it), not on ``score`` of the training data."""
    from fedad.core.detector import quantile_threshold

    class _Held(_DevMaps):
        def training_scores(self, x: np.ndarray) -> np.ndarray:
            return self.score(x) + 1.0

    fed, runs = _run(RAW)
    alg = runs["maps"][0]
    c = fed.clients[0]
    plain = alg.client_evaluate({}, c, Message("evaluate"))
    alg.make_detector = lambda: _Held()  # type: ignore[method-assign]
    held = alg.client_evaluate({}, c, Message("evaluate"))
    det = alg.client_detector({}, c, Message("evaluate"))
    want = quantile_threshold(det.score(c.x_train) + 1.0, alg.contamination)
    assert held.scalars["threshold"] == pytest.approx(want)
    assert held.scalars["threshold"] > plain.scalars["threshold"]


# -- pixel family ---------------------------------------------------------------------------


def test_pooled_pixel_auroc_is_sklearns_on_all_pixels(toy: None) -> None:
    fed, runs = _run(RAW)
    alg, out = runs["maps"]
    metrics, arrays = summarize("maps", alg, out, fed)
    maps, masks = [], []
    for c in fed.clients:  # the reference: every client's own detector, from scratch
        det = _DevMaps().fit(c.x_train)  # type: ignore[arg-type]
        maps.append(det.score_maps(c.x_test))  # type: ignore[arg-type]
        masks.append(c.mask_test)
    flat_maps = np.concatenate(maps).astype(np.float32)
    flat_masks = np.concatenate(masks)  # type: ignore[arg-type]
    want = roc_auc_score(flat_masks.ravel(), flat_maps.ravel())
    assert metrics["pixel_auroc"] == pytest.approx(want, abs=1e-12)
    assert metrics["pro"] == pytest.approx(pro_score(flat_maps, flat_masks), abs=1e-12)
    assert 0.5 < metrics["pixel_auroc"] <= 1.0
    rows = {r["client"]: r for r in metrics["per_client"]}
    for c, m, k in zip(fed.clients, maps, masks, strict=True):
        row = rows[c.client_id]
        want_c = roc_auc_score(k.ravel(), m.astype(np.float32).ravel())  # type: ignore[union-attr]
        assert row["pixel_auroc"] == pytest.approx(want_c, abs=1e-12)
        assert "pro" in row and list(row)[-1] == "threshold"
    # the image family is as it always was, and comes first
    keys = list(metrics)
    assert keys[: keys.index("pixel_auroc")][:2] == ["auroc", "aupr"]
    # no pixel keys for the method that does not localise
    other, _ = summarize("nomaps", *runs["nomaps"], fed)
    assert "pixel_auroc" not in other and "pixel_auroc" not in other["per_client"][0]
    assert not any(k.startswith("maps:") for k in summarize("nomaps", *runs["nomaps"], fed)[1])
    assert {f"maps:maps/{k}" for k in ("image", "map", "mask", "score", "label")} <= set(arrays)


def _reply(maps: np.ndarray, masks: np.ndarray) -> Message:
    n = len(maps)
    y = (masks.reshape(n, -1).max(1) > 0).astype(np.int64)
    score = maps.reshape(n, -1).mean(1)
    return Message(
        "evaluate",
        {"score": score, "label": y, "pred": y, "map": maps, "mask": masks},
    )


def test_undefined_pixel_metrics_are_null_in_json() -> None:
    rng = np.random.default_rng(1)
    masks = np.zeros((3, 5, 5), np.uint8)
    masks[1, 1:3, 1:3] = 1
    replies = {
        0: _reply(rng.random((3, 5, 5)).astype(np.float32), masks),
        1: _reply(rng.random((2, 5, 5)).astype(np.float32), np.zeros((2, 5, 5), np.uint8)),
    }
    pooled, rows = evaluate_replies(Pooled(replies), (IMAGE, PIXEL))
    assert np.isfinite(pooled["pixel_auroc"]) and np.isnan(rows[1]["pixel_auroc"])
    text = json.dumps(_clean({"pooled": pooled, "rows": rows}), allow_nan=False)
    assert json.loads(text)["rows"][1]["pixel_auroc"] is None
    assert json.loads(text)["rows"][1]["pro"] is None


def test_nonfinite_maps_rank_fail_closed() -> None:
    masks = np.zeros((2, 4, 4), np.uint8)
    masks[0, :2, :2] = 1
    maps = np.zeros((2, 4, 4), np.float32)
    maps[0, :2, :2] = np.nan  # the detector could not score the defect: flagged
    maps[1, 0, 0] = -np.inf
    pooled, _ = evaluate_replies(Pooled({0: _reply(maps, masks)}), (PIXEL,))
    assert pooled["pixel_auroc"] == 1.0


def test_malformed_maps_leave_out_the_pixel_family() -> None:
    good = _reply(np.zeros((2, 4, 4), np.float32), np.zeros((2, 4, 4), np.uint8))
    bad = Message("evaluate", {**good.arrays, "mask": np.zeros((2, 3, 4), np.uint8)})
    pooled, rows = evaluate_replies(Pooled({0: good, 1: bad}), (IMAGE, PIXEL))
    assert "pixel_auroc" not in pooled and "auroc" in pooled
    assert all("pro" not in r for r in rows)
    half = Message("evaluate", {k: v for k, v in good.arrays.items() if k != "map"})
    assert not PIXEL.applies(Pooled({0: good, 1: half}))


# -- declared families ----------------------------------------------------------------------


def test_normal_positive_is_declared_and_computed_from_the_same_decisions(toy: None) -> None:
    fed, runs = _run({**RAW, "methods": [{"name": "toy-maps"}, {"name": "toy-plain"}]})
    alg, out = runs["toy-maps"]
    metrics, arrays = summarize("toy-maps", alg, out, fed)
    want = normal_positive_metrics(arrays["toy-maps/label"], arrays["toy-maps/pred"])
    assert {k: metrics[f"normal_{k}"] for k in want} == want
    assert "eval_normal_f1" in monitor_metrics(out.evaluations, families_for(alg))
    plain, _ = summarize("toy-plain", *runs["toy-plain"], fed)
    assert not any(k.startswith("normal_") for k in plain)
    assert "eval_normal_f1" not in monitor_metrics(out.evaluations, (IMAGE, PIXEL))
    cols = run_columns([plain], (IMAGE, PIXEL))
    assert "normal-positive" not in cols and "pixel_auroc" in cols["summary"]
    cols = run_columns([plain, metrics], (IMAGE, PIXEL, NORMAL_POSITIVE))
    assert cols["normal-positive"] == ["normal_precision", "normal_recall", "accuracy", "normal_f1"]


def test_onlad_declares_normal_positive() -> None:
    from fedad.core.algorithm import registry

    for name in ("onlad", "onlad-score", "onlad-selective", "onlad-robust"):
        assert NORMAL_POSITIVE in registry()[name].metric_families


def test_monitor_metrics_keep_their_keys() -> None:
    masks = np.zeros((4, 3, 3), np.uint8)
    masks[:2, 0, 0] = 1
    reply = _reply(np.random.default_rng(0).random((4, 3, 3)), masks)
    assert list(monitor_metrics({0: reply})) == ["eval_auroc", "eval_f1"]
    m = monitor_metrics({0: reply}, (IMAGE, PIXEL, NORMAL_POSITIVE))
    assert list(m) == ["eval_auroc", "eval_f1", "eval_normal_f1"]
    assert monitor_metrics({}) == {}


def test_column_specs_known_and_generic() -> None:
    fams = (IMAGE, PIXEL, NORMAL_POSITIVE)
    assert column_spec("pixel_auroc", fams).header == "Pixel AUROC"
    assert column_spec("eer", fams).terminal is None and column_spec("eer", fams).better == "min"
    c = column_spec("my_new_metric", fams)
    assert (c.header, c.kind, c.better) == ("my_new_metric", "number", "")
    assert c.terminal == "my_new_metric"
    # an old metrics.json without columns: derived from its entries
    old = {"methods": {"a": {"auroc": 0.5, "normal_f1": 0.9}}}
    cols = columns_of(old, fams)
    assert cols["summary"][:2] == ["auroc", "aupr"] and "normal-positive" in cols
    assert columns_of({"columns": {"summary": ["x", 3, "x"]}}, fams)["summary"] == ["x"]


# -- maps.npz -------------------------------------------------------------------------------


def test_sample_indices_cap_and_balance() -> None:
    y = np.r_[np.zeros(50), np.ones(30)]
    idx = sample_indices(y)
    assert len(idx) == MAPS_CAP and np.all(np.diff(idx) > 0)
    assert int(y[idx].sum()) == 12
    assert len(sample_indices(np.ones(5))) == 5
    few = sample_indices(np.r_[np.zeros(40), np.ones(3)])
    assert len(few) == MAPS_CAP and int(few.size - np.count_nonzero(few < 40)) == 3
    assert len(sample_indices(np.zeros(0))) == 0


KEPT = 3 * (MAPS_CAP // 3)
"""Anomaly maps a run of the toy federation keeps: MAPS_CAP // 3 of each of its 3 clients."""


def test_client_sample_indices_take_a_few_of_every_client() -> None:
    y = np.r_[np.zeros(30), np.ones(10), np.zeros(30), np.ones(10), np.zeros(5), np.ones(1)]
    c = np.r_[np.zeros(40), np.ones(40), np.full(6, 2)].astype(np.int64)
    idx = client_sample_indices(y, c)
    assert np.all(np.diff(idx) > 0) and len(idx) == KEPT
    per = MAPS_CAP // 3
    for cid in range(2):
        own = idx[c[idx] == cid]
        assert len(own) == per and int(y[own].sum()) == per - max(1, per // 4)
    # a client with one anomaly: that one and normals to fill its share
    own = idx[c[idx] == 2]
    assert len(own) == per and int(y[own].sum()) == 1
    # more clients than the cap can show two each of: every other one, two each
    many = np.repeat(np.arange(40), 4)
    idx = client_sample_indices(np.tile([0, 0, 1, 1], 40), many)
    assert len(idx) == MAPS_CAP and len(np.unique(many[idx])) == MAPS_CAP // 2
    assert np.all(np.bincount(many[idx])[np.unique(many[idx])] == 2)
    assert len(client_sample_indices(np.zeros(0), np.zeros(0))) == 0


def test_map_sample_holds_the_scored_images(toy: None) -> None:
    fed, runs = _run(RAW)
    ev = Pooled(runs["maps"][1].evaluations)
    images = {c.client_id: c.x_test for c in fed.clients}
    s = map_sample(ev, images)
    assert len(s["map"]) == KEPT
    for i in range(KEPT):
        c = fed.clients[int(s["client"][i])]
        j = int(s["index"][i])
        np.testing.assert_array_equal(s["image"][i], c.x_test[j])
        np.testing.assert_array_equal(s["mask"][i], c.mask_test[j])  # type: ignore[index]
        assert s["label"][i] == c.y_test[j]
    assert map_sample(Pooled(runs["nomaps"][1].evaluations), images) == {}


# -- a whole run ----------------------------------------------------------------------------


@pytest.fixture
def maps_run(toy: None, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    run_experiment(parse_config(RAW), out)
    return out


def test_run_writes_columns_maps_and_overlays(maps_run: Path) -> None:
    from fedad.rundir.read import read_maps

    m = json.loads((maps_run / "metrics.json").read_text())
    assert list(m) == ["methods", "experiment", "columns", "families"]
    assert m["families"] == families_json((IMAGE, PIXEL, TRAINING, NORMAL_POSITIVE))
    assert families_json(families_of(m) or ()) == m["families"]  # read back as written
    assert m["columns"]["summary"][:10] == [
        "auroc", "aupr", "eer", "f1", "precision", "recall", "fe", "me", "pixel_auroc", "pro"
    ]  # fmt: skip
    assert m["columns"]["per_client"] == ["auroc", "f1", "pixel_auroc", "pro"]
    assert m["methods"]["nomaps"].get("pixel_auroc") is None
    with np.load(maps_run / "maps.npz") as z:
        assert sorted({k.split("/")[0] for k in z.files}) == ["maps"]
        assert z["maps/map"].shape == (KEPT, SIDE, SIDE)
    with np.load(maps_run / "scores.npz") as z:
        assert not any("map" in k.split("/")[-1] for k in z.files)
    maps = read_maps(maps_run / "maps.npz", ["maps"])
    assert list(maps) == ["maps"] and maps["maps"].image.shape == (KEPT, 1, SIDE, SIDE)
    html = (maps_run / "report.html").read_text()
    assert "<h2>Anomaly maps</h2>" in html and "Pixel AUROC" in html and "<th>PRO</th>" in html
    assert "per-region-overlap" in html


def test_cli_table_shows_the_pixel_columns(maps_run: Path) -> None:
    from rich.console import Console

    from fedad.cli.summary import results_table

    console = Console(width=200, record=True)
    console.print(results_table(json.loads((maps_run / "metrics.json").read_text())))
    text = console.export_text()
    assert "pixel AUROC" in text and "PRO" in text and "EER" not in text


def test_damaged_maps_npz(maps_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fedad.rundir.read as rundir
    from fedad.report import write_report
    from fedad.rundir.read import read_maps

    path = maps_run / "maps.npz"
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    for damage in (
        {"maps/mask": np.full((KEPT, SIDE, SIDE), 7, np.uint8)},
        {"maps/map": np.zeros((KEPT, SIDE))},
        {"maps/image": np.zeros((KEPT, 5, SIDE, SIDE))},
        {"maps/image": np.array(["a"] * KEPT)},
    ):
        np.savez(path, **{**arrays, **damage})
        with pytest.raises(FedadError) as err:
            read_maps(path)
        assert "\n" not in str(err.value) and "maps.npz" in str(err.value)
        html = write_report(maps_run).read_text()
        assert "<h2>Anomaly maps</h2>" not in html and "maps.npz left out" in html
        assert "Pixel AUROC" in html
    path.write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(FedadError, match=r"not a readable \.npz"):
        read_maps(path)
    np.savez(path, **{"maps/map": np.array([{"a": 1}], dtype=object)})  # a pickle
    with pytest.raises(FedadError, match=r"not a readable \.npz"):
        read_maps(path)
    np.savez(path, **arrays)
    monkeypatch.setattr(rundir, "MAPS_MAX_BYTES", 1000)
    with pytest.raises(FedadError, match="would unpack to"):
        read_maps(path)
    monkeypatch.undo()
    assert read_maps(path)["maps"].map.shape == (KEPT, SIDE, SIDE)
    path.unlink()
    assert "<h2>Anomaly maps</h2>" not in write_report(maps_run).read_text()


def test_resume_keeps_maps(maps_run: Path) -> None:
    before = dict(np.load(maps_run / "maps.npz"))
    (maps_run / "maps.npz").unlink()
    run_experiment(parse_config(RAW), maps_run, resume=True)
    after = dict(np.load(maps_run / "maps.npz"))
    assert before.keys() == after.keys()
    for k in before:
        np.testing.assert_array_equal(before[k], after[k])


def test_seeds_aggregate_pixel_metrics(toy: None, tmp_path: Path) -> None:
    from fedad.seeds import run_seeds

    raw = {k: v for k, v in RAW.items() if k != "seed"}
    data = run_seeds(parse_config({**raw, "seeds": [0, 1]}), tmp_path / "s")
    per = [json.loads((tmp_path / "s" / f"seed-{s}" / "metrics.json").read_text()) for s in (0, 1)]
    entry = data["methods"]["maps"]
    for key in ("pixel_auroc", "pro", "auroc"):
        values = np.array([p["methods"]["maps"][key] for p in per])
        assert entry[key] == pytest.approx(float(np.mean(values)), abs=1e-15)
        assert entry["std"][key] == pytest.approx(float(np.std(values)), abs=1e-15)
    top = json.loads((tmp_path / "s" / "metrics.json").read_text())
    assert top["columns"] == per[0]["columns"]
    html = (tmp_path / "s" / "report.html").read_text()
    assert "Pixel AUROC" in html and html.count("<th>PRO</th>") >= 1 + 2  # summary, per seed


def test_one_vs_rest_pools_by_the_mean_over_clients(tmp_path: Path) -> None:
    raw = {
        "seed": 0,
        "rounds": 1,
        "data": {"name": "digits", "normal": [0, 1, 2]},
        "partition": {"scheme": "one-vs-rest", "clients": 3},
        "engine": {"progress": False},
        "methods": [{"name": "local", "detector": "autoencoder"}],
    }
    data = run_experiment(parse_config(raw), tmp_path / "run")
    m = data["methods"]["local"]
    rows = m["per_client"]
    for key in ("auroc", "aupr", "f1", "eer"):
        assert m[key] == pytest.approx(np.mean([r[key] for r in rows]))
    # counts stay totals: each client's test set holds every other class's test samples
    assert m["n"] == sum(r["n"] for r in rows)
    assert data["experiment"]["pooled"] == "client-mean"
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["experiment"]["pooled"] == "client-mean"
    # without the scheme, the key is absent and the pooled AUROC is over the union
    raw2 = {**raw, "data": {"name": "digits", "normal": [0, 1], "anomaly": [2]},
            "partition": {"scheme": "one-class", "clients": 3}}  # fmt: skip
    other = run_experiment(parse_config(raw2), tmp_path / "run2")
    assert "pooled" not in other["experiment"]
