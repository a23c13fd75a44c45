"""ONLAD under hostile updates and odd data."""

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
from sklearn.metrics import roc_auc_score

import fedad
from fedad.attacks import attacked_clients, poison_update
from fedad.config import AttackConfig, parse_config
from fedad.core.algorithm import Algorithm, Setup, build_algorithm, registry
from fedad.core.detector import detector_from_config
from fedad.core.errors import FedadError, RunError
from fedad.core.messages import Message
from fedad.core.types import ClientData, Federation
from fedad.data.idx import FASHION_MNIST_DIR
from fedad.evaluation.families import pooled_arrays
from fedad.federation import build_federation
from fedad.fl.drive import RunOutcome
from fedad.fl.engine import run_inprocess
from fedad.methods.onlad.credit import exceedance_mass
from fedad.methods.onlad.detector import OSELMAutoEncoder
from fedad.methods.onlad.federated import (
    _ONLAD,
    FIXED,
    TRAIN,
    ExceedanceTally,
    stream_chunks,
)
from fedad.methods.onlad.model import default_hidden
from fedad.resolve import make_setup, with_server_data
from fedad.runner import run_experiment, run_method
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
            reply: Message = super().client_train(state, data, msg)
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
    det = algo.make_detector()
    assert isinstance(det, OSELMAutoEncoder)
    assert det.params.n_hidden == width == default_hidden(math.prod(shape))
    assert algo.detector_config()["params"]["n_hidden"] == width
    assert width < math.prod(shape) or width == 1
    explicit = build_algorithm("onlad", {"n_hidden": 64}, setup)
    wide = explicit.make_detector()
    assert isinstance(wide, OSELMAutoEncoder) and wide.params.n_hidden == 64


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


# -- the exceedance check ---------------------------------------------------------------------


def _first_train_reply(name: str, fed: Federation) -> tuple[Message, np.ndarray, float]:
    """One client's reply to round 1 of 2 (with the server's initial model), its first chunk's
    prequential scores and the tau it was sent."""
    setup = Setup("vector", fed.feature_shape, 2, seed=0, contamination=0.05, num_clients=4)
    algo = build_algorithm(name, {}, setup)
    assert isinstance(algo, _ONLAD)
    server = np.asarray(fed.server_normal)
    det = algo.make_detector().fit(server)
    tau = float(np.quantile(det.score(server), 0.8))
    arrays = {k: v for k, v in det.get_arrays().items() if k in (*FIXED, "beta", "p")}
    msg = Message(TRAIN, arrays, {"round": 1, "rounds": 2, "tau": tau})
    client = fed.clients[1]
    (first, _) = stream_chunks(client.n_train, 2, 0, client.client_id)
    scores = det.score(np.asarray(client.x_train)[first])
    return algo.client_train({}, client, msg), scores, tau


def test_only_onlad_robust_clients_report_their_exceedance() -> None:
    """The faithful methods' protocol is unchanged; an onlad-robust client reports the score
    mass above tau of the chunk it scored before learning it, and how many it scored."""
    fed = _low_rank(bad=(1,))
    reply, scores, tau = _first_train_reply("onlad-robust", fed)
    assert float(reply.scalars["scored"]) == len(scores) == 150
    assert float(reply.scalars["exceedance"]) == pytest.approx(exceedance_mass(scores, tau))
    assert float(reply.scalars["exceedance"]) > 0
    for name in ("onlad", "onlad-score", "onlad-selective"):
        plain, _, _ = _first_train_reply(name, fed)
        assert set(plain.scalars) == {"num_examples", "learned"}


def test_exceedance_tally_accumulates_and_refuses_a_negative_report() -> None:
    tally = ExceedanceTally()

    def report(mass: float, scored: int) -> Message:
        return Message(TRAIN, {}, {"exceedance": mass, "scored": scored})

    assert tally.add(0, report(3.0, 100), 0.01)  # expected 1.0
    assert tally.add(0, report(1.0, 100), 0.02)  # expected 2.0 more
    assert tally.add(1, report(0.5, 50), 0.01)
    assert not tally.add(2, report(-1.0, 50), 0.01)
    assert tally.add(2, report(1.0, 50), 0.01)  # later reports cannot repair it
    r = tally.ratios()
    assert r[0] == pytest.approx(4.0 / 3.0) and r[1] == pytest.approx(1.0)
    assert math.isinf(r[2])


def test_a_negative_exceedance_report_excludes_the_client_and_says_so() -> None:
    fed = _low_rank()

    class Liar(registry()["onlad-robust"]):  # type: ignore[misc]
        def client_train(self, state: Any, data: ClientData, msg: Message) -> Message:
            reply: Message = super().client_train(state, data, msg)
            if data.client_id != 2:
                return reply
            lie: Message = Message(reply.kind, reply.arrays, {**reply.scalars, "exceedance": -5.0})
            return lie

    setup = Setup("vector", fed.feature_shape, 3, seed=0, contamination=0.05, num_clients=4)
    out = run_inprocess(Liar(Liar.ParamsModel.model_validate({}), setup), fed, rounds=3, seed=0)
    said = "round 1: node 2: its exceedance report is negative"
    assert any(e.startswith(said) for e in out.events)
    assert all(_weights(r)[2] == 0.0 for r in _rows(out))
    assert all(w > 0 for i, w in _weights(_rows(out)[0]).items() if i != 2)


def test_robust_scaling_is_untouched_by_the_federations_pooled_statistics() -> None:
    """Issue 26: the federation z-scores vector data with statistics pooled over the clients'
    training data, which a contamination attacker shifts. That is a per-feature affine map
    of every array (clients, server, tests); onlad-robust standardizes again with the server's
    own normal data, which undoes any such map: its scores do not change. onlad, which keeps
    the federation's scaling, does change."""
    fed = _low_rank(bad=(1,))
    rng = np.random.default_rng(5)
    a = rng.uniform(0.2, 5.0, 20).astype(np.float32)
    b = rng.normal(0.0, 3.0, 20).astype(np.float32)
    moved = _low_rank(bad=(1,))
    for c in moved.clients:
        c.x_train, c.x_test = np.asarray(c.x_train) * a + b, np.asarray(c.x_test) * a + b
    moved.server_normal = np.asarray(moved.server_normal) * a + b
    for name, same in (("onlad-robust", True), ("onlad", False)):
        one, two = _fit(name, fed, rounds=3), _fit(name, moved, rounds=3)
        s1 = np.concatenate([one.evaluations[i].arrays["score"] for i in range(4)])
        s2 = np.concatenate([two.evaluations[i].arrays["score"] for i in range(4)])
        if same:
            np.testing.assert_allclose(s1, s2, rtol=1e-5)  # float32 data: rounding only
        else:
            assert not np.allclose(s1, s2, rtol=1e-3)


def _fashion(attack: dict[str, Any] | None) -> tuple[Any, Federation]:
    raw: dict[str, Any] = {
        "seed": 0,
        "rounds": 4,
        "data": {
            "name": "fashion_mnist",
            "normal": [0, 2, 3, 5, 7],
            "anomaly": [1, 4, 6, 8, 9],
            "max_train_per_client": 400,
            "max_test": 800,
        },
        "partition": {"scheme": "dirichlet", "clients": 4, "alpha": 0.5},
        "engine": {"progress": False},
        "methods": [{"name": "onlad-robust", "params": {"observed": 500, "init_samples": 100}}],
    }
    if attack:
        raw["attack"] = attack
    cfg = with_server_data(parse_config(raw))
    return cfg, build_federation(cfg)


@pytest.mark.skipif(
    not Path(FASHION_MNIST_DIR, "train-images-idx3-ubyte.gz").exists(),
    reason="Debian package dataset-fashion-mnist is not installed",
)
def test_default_robust_holds_under_contamination_where_the_effect_gate_alone_does_not() -> None:
    """Issue 26, small: Fashion-MNIST (normal 0, 2, 3, 5, 7), four clients, half of one
    client's data replaced by anomalies, default params (detect = true). The contaminated
    client's update helps the observed loss, so the effect gate alone keeps it, and onlad-robust
    without the exceedance check falls as far as FedAvg; with it, the client is refused from
    round 1 and the AUROC stays within 0.02 of the clean run."""
    attack = {"kind": "contamination", "clients": 1, "fraction": 0.5}
    (bad,) = attacked_clients(AttackConfig(**attack), 4, 0)  # type: ignore[arg-type]
    auc: dict[tuple[str, bool], float] = {}
    outs: dict[tuple[str, bool], RunOutcome] = {}
    variants: dict[str, tuple[str, dict[str, Any]]] = {
        "onlad": ("onlad", {}),
        "gate-only": ("onlad-robust", {"exceedance_factor": math.inf}),
        "robust": ("onlad-robust", {}),
    }
    for attacked in (False, True):
        cfg, fed = _fashion(attack if attacked else None)
        for label, (name, params) in variants.items():
            setup = make_setup(cfg, fed)
            algo = build_algorithm(name, {"observed": 500, "init_samples": 100, **params}, setup)
            out = run_method(cfg, algo, fed)
            scores, labels, _, _ = pooled_arrays(out.evaluations)
            auc[label, attacked] = float(roc_auc_score(labels, scores))
            outs[label, attacked] = out
    drop = {label: auc[label, False] - auc[label, True] for label in variants}
    assert drop["robust"] < 0.02
    assert drop["gate-only"] > 0.03 and drop["onlad"] > 0.03
    assert all(_weights(r)[bad] == 0.0 for r in _rows(outs["robust", True]))
    assert all(_weights(r)[bad] > 0.2 for r in _rows(outs["gate-only", True]))
    clean = _rows(outs["robust", False])
    assert sum(r["excluded"] for r in clean) <= 1  # the check leaves a clean run alone
