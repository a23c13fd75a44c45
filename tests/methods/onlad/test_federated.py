"""ONLAD's federated protocol on real (digits) data: scenarios, exclusion, rejection."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fedad.config import parse_config
from fedad.core.messages import Message
from fedad.federation import build_federation
from fedad.fl.drive import RunOutcome
from fedad.methods.onlad.federated import stream_chunks
from fedad.resolve import build_algorithms, with_server_data
from fedad.runner import run_method, summarize


def _run(method: str, attack: dict[str, Any] | None = None, **params: Any) -> RunOutcome:
    raw: dict[str, Any] = {
        "seed": 0,
        "rounds": 3,
        "data": {"name": "digits", "normal": [0, 1, 2, 3, 4, 5], "anomaly": [7, 8, 9]},
        "partition": {"scheme": "iid", "clients": 5},
        "engine": {"progress": False},
        "methods": [{"name": method, "params": {"observed": 100, "init_samples": 40, **params}}],
    }
    if attack:
        raw["attack"] = attack
    cfg = with_server_data(parse_config(raw))
    fed = build_federation(cfg)
    (algo,) = build_algorithms(cfg, fed).values()
    return run_method(cfg, algo, fed)


def _weights(row: dict[str, Any]) -> dict[int, float]:
    return {int(k): float(v) for k, v in (p.split(":") for p in row["client_weights"].split())}


def test_gaussian_poisoned_client_is_excluded() -> None:
    """Scenario 3 as the paper runs it: every sample is learned (no local detection)."""
    attack = {"kind": "gaussian-data", "clients": 1}
    out = _run("onlad-selective", attack, detect=False)
    from fedad.attacks import attacked_clients
    from fedad.config import AttackConfig

    (bad,) = attacked_clients(AttackConfig(**attack), 5, 0)  # type: ignore[arg-type]
    rounds = [row for row in out.history if row["round"] >= 1]
    assert len(rounds) == 3  # every round ran and was recorded: nothing passes vacuously
    for row in rounds:
        w = _weights(row)
        assert set(w) == set(range(5))  # every client was weighed, the poisoned one included
        assert w[bad] == 0.0
        assert row["excluded"] == 1  # the server really excluded one client: the poisoned one
        assert all(w[c] > 0.0 for c in w if c != bad)  # and only it
        assert sum(w.values()) == pytest.approx(1.0, abs=1e-3)
    # FedAvg gives it its full n_k / N share
    plain = [r for r in _run("onlad", attack, detect=False).history if r["round"] >= 1]
    assert len(plain) == 3
    assert all(_weights(r)[bad] > 0.1 for r in plain)


def test_clean_run_excludes_nobody_and_detects() -> None:
    out = _run("onlad-selective")
    assert all(r["excluded"] == 0 for r in out.history if r["round"] >= 1)
    metrics, _ = summarize("m", *_algo_and(out))
    assert metrics["auroc"] > 0.8


def test_normal_positive_metrics_come_from_onlads_declared_family() -> None:
    """metrics.json keeps its keys in their order: image metrics, then the normal-positive
    ones (ONLAD's Table I), then the run's costs; no pixel keys on data without masks."""
    from fedad.evaluation.families import NORMAL_POSITIVE
    from fedad.evaluation.metrics import EVALUATE_KEYS, normal_positive_metrics

    out = _run("onlad-selective")
    algo, _ = _algo_and(out)
    assert NORMAL_POSITIVE in type(algo).metric_families
    metrics, arrays = summarize("m", algo, out)
    keys = list(metrics)
    want = [*EVALUATE_KEYS, "normal_precision", "normal_recall", "normal_f1", "bytes_up"]
    assert keys[: len(want)] == want
    np_ = normal_positive_metrics(arrays["m/label"], arrays["m/pred"])
    assert [metrics[f"normal_{k}"] for k in ("precision", "recall", "f1")] == list(np_.values())
    assert "pixel_auroc" not in metrics
    assert list(metrics["per_client"][0]) == ["client", *EVALUATE_KEYS, "threshold"]


def _algo_and(out: RunOutcome) -> tuple[Any, RunOutcome]:
    from fedad.core.algorithm import Setup, build_algorithm

    return build_algorithm("onlad", {}, Setup("image", (1, 8, 8), 3, 0, 0.05, 5)), out


def test_everyone_over_lambda_keeps_the_previous_model() -> None:
    out = _run("onlad-selective", lam=1e-9)
    assert all(r["excluded"] == 5 for r in out.history if r["round"] >= 1)
    assert any("global model kept" in e for e in out.events)
    losses = [r["loss"] for r in out.history if r["round"] >= 1]
    assert losses[0] == losses[-1]  # nothing changed the model


def test_local_detection_rejects_gaussian_data_on_its_own() -> None:
    """With detect-then-learn the poisoned client learns (almost) none of its N(0,1) data."""
    out = _run("onlad", {"kind": "gaussian-data", "clients": 1})
    counts = {i: m.arrays["prequential"] for i, m in out.evaluations.items()}
    tp, _fp, fn, _tn = (int(v) for v in np.sum(list(counts.values()), axis=0))
    assert tp > 0 and fn <= 0.05 * (tp + fn)


def test_stream_covers_the_data_once() -> None:
    chunks = stream_chunks(103, 10, seed=1, client_id=4)
    assert len(chunks) == 10
    assert sorted(np.concatenate(chunks).tolist()) == list(range(103))


def test_detect_then_learn_records_prequential_counts() -> None:
    out = _run("onlad", {"kind": "contamination", "clients": 1, "fraction": 0.3})
    counts = np.array([m.arrays["prequential"] for m in out.evaluations.values()])
    tp, fp, fn, tn = counts.sum(0)
    assert tp + fp + fn + tn == sum(
        int(m.scalars["num_examples"]) for m in out.evaluations.values()
    )
    assert tp > 0  # some injected anomalies were detected (and so not learned)
    assert tp / (tp + fn) > fp / (fp + tn)  # detection beats chance on the stream


def test_malformed_onlad_reply_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    from fedad.methods.onlad import federated

    original = federated._ONLAD.client_train

    def broken(self: Any, state: Any, data: Any, msg: Message) -> Message:
        reply = original(self, state, data, msg)
        if data.client_id == 2:
            beta = np.full_like(reply.arrays["beta"], np.nan)
            return Message(reply.kind, {**reply.arrays, "beta": beta}, reply.scalars)
        if data.client_id == 3:
            return Message(reply.kind, {**reply.arrays, "p": np.zeros((3, 3))}, reply.scalars)
        return reply

    monkeypatch.setattr(federated._ONLAD, "client_train", broken)
    out = _run("onlad")
    rows = [r for r in out.history if r["round"] >= 1]
    assert all(r["clients_rejected"] == 2 and r["clients_replied"] == 3 for r in rows)
    assert np.all(np.isfinite(out.result.arrays["beta"]))
