"""ONLAD under hostile updates and odd data (issue 8, items 2, 10, 11)."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fedad
from fedad.attacks import attacked_clients, poison_update
from fedad.config import AttackConfig, parse_config
from fedad.data.types import ClientData, Federation
from fedad.detector import detector_from_config
from fedad.errors import FedadError, RunError
from fedad.fl.algorithm import Algorithm, Setup, build_algorithm, registry
from fedad.fl.engine import RunOutcome, run_inprocess
from fedad.fl.messages import Message
from fedad.methods.onlad.detector import OSELMAutoEncoder
from fedad.methods.onlad.model import default_hidden
from fedad.runner import run_experiment
from tests.conftest import make_federation
from tests.methods.onlad.test_federated import _run, _weights

ONLAD = ("onlad", "onlad-score", "onlad-selective", "onlad-robust")
CREDIT = ("onlad-score", "onlad-selective", "onlad-robust")


def _rows(out: RunOutcome) -> list[dict[str, Any]]:
    return [r for r in out.history if r["round"] >= 1]


def _poisoned(name: str, bad: set[int], mag: float, mode: str, **params: Any) -> type[Algorithm]:
    """The registered method ``name`` whose clients in ``bad`` return hostile finite updates."""
    base = registry()[name]

    class Hostile(base):  # type: ignore[valid-type,misc]
        def client_train(self, state: Any, data: ClientData, msg: Message) -> Message:
            reply = super().client_train(state, data, msg)
            if data.client_id not in bad:
                return reply
            with np.errstate(over="ignore", invalid="ignore"):
                if mode == "scale-update":  # w + mag (w_k - w), as the scaled-update attack
                    return poison_update("scaled-update", msg.arrays, reply, mag)
                arrays = {k: mag * v for k, v in reply.arrays.items()}  # the model itself
            return Message(reply.kind, arrays, reply.scalars)

    return Hostile


def _run_hostile(name: str, bad: set[int], mag: float, mode: str, rounds: int = 2) -> RunOutcome:
    fed = make_federation("vector", clients=4)
    setup = Setup(fed.kind, fed.feature_shape, rounds, seed=1, contamination=0.1, num_clients=4)
    cls = _poisoned(name, bad, mag, mode)
    algo = cls(cls.ParamsModel.model_validate({}), setup)
    return run_inprocess(algo, fed, rounds=rounds, seed=1)


# -- item 2: any finite update --------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(ONLAD),
    exponent=st.integers(-300, 300),
    sign=st.sampled_from([1.0, -1.0]),
    bad=st.sets(st.integers(0, 3), min_size=1, max_size=4),
    mode=st.sampled_from(["scale-model", "scale-update"]),
)
def test_every_onlad_aggregation_survives_any_finite_update(
    name: str, exponent: int, sign: float, bad: set[int], mode: str
) -> None:
    """Updates of magnitude 1e-300 to 1e300: the run finishes with a finite global model and
    finite scores; a credit-based method that cannot rank a client says so, naming it. When
    every client is hostile the engine's norm bound may reject every update: a one-line
    RunError then says so."""
    try:
        out = _run_hostile(name, bad, sign * 10.0**exponent, mode)
    except RunError as err:
        assert bad == {0, 1, 2, 3} and "rejected every reply" in str(err), str(err)
        return
    assert all(np.all(np.isfinite(a)) for a in out.result.arrays.values())
    assert math.isfinite(out.result.scalars["threshold"])
    assert out.result.arrays["threshold_"] == out.result.scalars["threshold"]
    for m in out.evaluations.values():
        assert np.all(np.isfinite(m.arrays["score"]))
    for row in _rows(out):
        assert np.isfinite(row["loss"])
        weights = _weights(row) if row["client_weights"] else {}
        losses = {int(k): float(v) for k, v in (p.split(":") for p in row["client_losses"].split())}
        for i, v in losses.items():
            if name in CREDIT and not (np.isfinite(v) and v > 0):
                assert weights[i] == 0.0
                assert any(f"node {i}:" in e for e in out.events)


def test_scaled_update_of_1e200_is_excluded_not_fatal() -> None:
    """The reproduction of item 2: scale 1e200 used to raise in credit_scores."""
    attack = {"kind": "scaled-update", "clients": 1, "scale": 1e200}
    (bad,) = attacked_clients(AttackConfig(**attack), 5, 0)  # type: ignore[arg-type]
    for name in CREDIT:  # the engine's norm bound rejects it before credit scoring sees it
        out = _run(name, attack, detect=False)
        rows = _rows(out)
        assert all(_weights(r).get(bad, 0.0) == 0.0 for r in rows)
        assert any(f"node {bad}: its update's norm" in e for e in out.events), name
        assert all(sum(_weights(r).values()) == pytest.approx(1.0, abs=1e-3) for r in rows)
    out = _run("onlad", attack, detect=False)  # FedAvg too: the model stays finite
    assert any(f"node {bad}: its update's norm" in e for e in out.events)
    assert all(np.all(np.isfinite(a)) for a in out.result.arrays.values())


# -- item 10 (i): nothing new is not a failure ------------------------------------------------


def test_a_client_with_fewer_samples_than_rounds_is_idle_not_failed() -> None:
    fed = make_federation("vector", clients=3)
    small = fed.clients[1]
    small.x_train, small.y_train, small.c_train = (
        small.x_train[:2],
        small.y_train[:2],
        small.c_train[:2],
    )
    rounds = 5
    setup = Setup(fed.kind, fed.feature_shape, rounds, seed=0, contamination=0.1, num_clients=3)
    for name in ONLAD:
        algo = build_algorithm(name, {"detect": False}, setup)
        out = run_inprocess(algo, fed, rounds=rounds, seed=0)
        rows = _rows(out)
        assert out.events == [] and out.missing_nodes == []
        assert all(r["clients_missing"] == 0 and r["clients_rejected"] == 0 for r in rows)
        # two samples, five chunks: chunks 3-5 are empty, so from round 3 it has no update
        assert [r["clients_idle"] for r in rows] == [0, 0, 1, 1, 1]
        assert all(1 not in _weights(r) for r in rows[2:])
        assert sorted(out.evaluations) == [0, 1, 2]


def test_detect_and_learn_on_an_empty_chunk_changes_nothing() -> None:
    x = np.random.default_rng(0).random((30, 6))
    det = OSELMAutoEncoder(seed=0).fit(x)
    beta, p = det.beta_.copy(), det.p_.copy()
    assert det.detect_and_learn(x[:0], 0.1).shape == (0,)
    np.testing.assert_array_equal(det.beta_, beta)
    np.testing.assert_array_equal(det.p_, p)
    assert det.score(x[:0]).shape == (0,)


# -- item 10 (ii): the saved threshold is the one used ---------------------------------------


def test_saved_global_model_carries_the_threshold_used(tmp_path: Path) -> None:
    raw = {
        "seed": 0,
        "rounds": 2,
        "data": {"name": "digits", "normal": [0, 1, 2, 3, 4, 5], "anomaly": [7, 8, 9]},
        "partition": {"scheme": "iid", "clients": 3},
        "engine": {"progress": False},
        "methods": [
            {"name": "onlad-selective", "params": {"observed": 100, "init_samples": 40}},
            {"name": "onlad-robust", "params": {"observed": 100, "init_samples": 40}},
        ],
    }
    run_dir = tmp_path / "run"
    metrics = run_experiment(parse_config(raw), run_dir)
    run = fedad.load(str(run_dir))
    for label in ("onlad-selective", "onlad-robust"):
        m = metrics["methods"][label]
        for row in m["per_client"]:
            det = run.detector(label, int(row["client"]))
            assert det.threshold_ == pytest.approx(row["threshold"], rel=1e-12)
        with np.load(run_dir / "checkpoints" / label / "global.npz") as z:
            assert float(z["threshold_"]) == pytest.approx(m["threshold"], rel=1e-12)


# -- item 10 (iii): the default width follows the data ----------------------------------------


@pytest.mark.parametrize(
    ("shape", "width"), [((36,), 18), ((6,), 3), ((1,), 1), ((2,), 1), ((1, 28, 28), 64)]
)
def test_default_hidden_width_is_undercomplete(shape: tuple[int, ...], width: int) -> None:
    setup = Setup("vector" if len(shape) == 1 else "image", shape, 3, 0, 0.05, 3)
    algo = build_algorithm("onlad-selective", {}, setup)
    assert algo.make_detector().n_hidden == width == default_hidden(math.prod(shape))
    assert algo.detector_config()["params"]["n_hidden"] == width
    assert width < math.prod(shape) or width == 1
    explicit = build_algorithm("onlad", {"n_hidden": 64}, setup)
    assert explicit.make_detector().n_hidden == 64


def test_detector_records_the_resolved_width_and_loads() -> None:
    x = np.random.default_rng(0).random((40, 10))
    det = OSELMAutoEncoder(seed=1).fit(x)
    assert det.get_params()["n_hidden"] == 5
    again = detector_from_config(det.to_config(), det.get_arrays())
    np.testing.assert_allclose(again.score(x), det.score(x))
    # a checkpoint written with n_hidden unset takes the width from alpha
    cfg = {"class": "oselm-autoencoder", "params": {**det.get_params(), "n_hidden": None}}
    assert detector_from_config(cfg, det.get_arrays()).get_params()["n_hidden"] == 5
    wrong = {"class": "oselm-autoencoder", "params": {**det.get_params(), "n_hidden": 7}}
    with pytest.raises(FedadError):
        detector_from_config(wrong, det.get_arrays())


def test_rescaled_detector_round_trips_and_checks_its_scaling() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(5.0, 3.0, (50, 8))
    det = OSELMAutoEncoder(seed=0).set_scaling(x.mean(0), x.std(0)).fit(x)
    arrays = det.get_arrays()
    assert {"shift", "scale"} <= set(arrays)
    again = detector_from_config(det.to_config(), arrays)
    np.testing.assert_allclose(again.score(x), det.score(x))
    for bad in ({"scale": arrays["scale"][:3]}, {"scale": -arrays["scale"]}, {"shift": None}):
        broken = {k: v for k, v in {**arrays, **bad}.items() if v is not None}
        with pytest.raises(FedadError):
            detector_from_config(det.to_config(), broken)


# -- item 11: onlad-robust --------------------------------------------------------------------


def _low_rank(bad: tuple[int, ...] = (), n: int = 300, seed: int = 0) -> Federation:
    """Four clients of normal data on a 3-dim subspace of 20 features (plus noise); ``bad``
    clients have half of their data replaced by isotropic anomalies."""
    rng = np.random.default_rng(seed)
    d = 20
    w = rng.normal(size=(3, d))

    def normal(m: int) -> np.ndarray:
        return (rng.normal(size=(m, 3)) @ w + 0.1 * rng.normal(size=(m, d))).astype(np.float32)

    def anomal(m: int) -> np.ndarray:
        return (2.0 * rng.normal(size=(m, d))).astype(np.float32)

    clients = []
    for k in range(4):
        x, y = normal(n), np.zeros(n, np.int64)
        if k in bad:
            x[: n // 2], y[: n // 2] = anomal(n // 2), 1
        clients.append(
            ClientData(
                client_id=k,
                x_train=x,
                y_train=y,
                c_train=np.zeros(n, np.int64),
                x_test=np.concatenate([normal(40), anomal(10)]),
                y_test=np.r_[np.zeros(40), np.ones(10)].astype(np.int64),
            )
        )
    return Federation(
        name="low-rank",
        kind="vector",
        feature_shape=(d,),
        clients=clients,
        normal_classes=[0],
        anomaly_classes=[1],
        server_normal=normal(240),
    )


def _fit(name: str, fed: Federation, rounds: int = 4, **params: Any) -> RunOutcome:
    setup = Setup("vector", fed.feature_shape, rounds, seed=0, contamination=0.05, num_clients=4)
    algo = build_algorithm(name, {"detect": False, **params}, setup)
    return run_inprocess(algo, fed, rounds=rounds, seed=0)


def test_robust_excludes_a_contaminated_client_that_selective_keeps() -> None:
    fed = _low_rank(bad=(1,))
    robust = _fit("onlad-robust", fed)
    selective = _fit("onlad-selective", fed)
    assert all(_weights(r)[1] == 0.0 for r in _rows(robust)[1:])
    assert all(_weights(r)[1] > 0.1 for r in _rows(selective))
    assert robust.events == []
    # the global model's observed loss never rises (tolerance 0)
    losses = [r["loss"] for r in _rows(robust)]
    assert all(b <= a for a, b in itertools.pairwise(losses))


def test_robust_weights_are_the_credit_weights_when_all_is_clean() -> None:
    """Clean clients whose updates help get exactly the credit scores of ``onlad-score``.

    This federation has converged after one round (the observed loss then moves by under
    1%), so at ``tolerance = 0`` noise-level updates that raise it slightly are dropped; with
    a tolerance above that noise the two methods agree in every round.
    """
    fed = _low_rank(n=800)
    score = _fit("onlad-score", fed, rounds=3, rescale=True)
    robust = _fit("onlad-robust", fed, rounds=3)
    assert robust.events == []
    assert _weights(_rows(robust)[0]) == pytest.approx(_weights(_rows(score)[0]), abs=1e-4)
    tolerant = _fit("onlad-robust", fed, rounds=3, tolerance=0.01)
    for a, b in zip(_rows(tolerant), _rows(score), strict=True):
        assert a["excluded"] == 0
        assert _weights(a) == pytest.approx(_weights(b), abs=1e-4)


def test_robust_params_and_registration() -> None:
    assert "onlad-robust" in registry()
    setup = Setup("vector", (6,), 3, 0, 0.05, 3)
    algo = build_algorithm("onlad-robust", {}, setup)
    assert algo.params.rescale is True and algo.params.tolerance == 0.0  # type: ignore[attr-defined]
    assert build_algorithm("onlad-selective", {}, setup).params.rescale is False  # type: ignore[attr-defined]


def test_metrics_json_mentions_no_failure_for_idle_clients(tmp_path: Path) -> None:
    """The CLI path of item 10 (i), small: more rounds than some clients have samples."""
    raw = {
        "seed": 0,
        "rounds": 12,
        "data": {"name": "digits", "normal": [0, 1, 2], "anomaly": [7], "max_train_per_client": 10},
        "partition": {"scheme": "dirichlet", "clients": 12, "alpha": 0.1},
        "engine": {"progress": False},
        "methods": [{"name": "onlad", "params": {"observed": 60, "init_samples": 20}}],
    }
    metrics = run_experiment(parse_config(raw), tmp_path / "run")
    m = metrics["methods"]["onlad"]
    assert m["missing_nodes"] == [] and m["events"] == []
    history = (tmp_path / "run" / "history.csv").read_text().splitlines()
    head = history[0].split(",")
    idle = [int(line.split(",")[head.index("clients_idle")] or 0) for line in history[1:]]
    missing = [int(line.split(",")[head.index("clients_missing")]) for line in history[1:]]
    assert sum(idle) > 0 and sum(missing) == 0
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["methods"]["onlad"]
