"""What metrics.json says of a run: each method's metrics (every metric family that applies,
its cost, its own entries) and the facts of the experiment, assembled from what an engine
returned (:class:`~fedad.fl.engine.RunOutcome`) and the federation it ran on. No files are
written here (:mod:`fedad.rundir.outputs` writes them) and nothing is run."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from fedad.config import ExperimentConfig
from fedad.core.algorithm import Algorithm
from fedad.core.messages import Message
from fedad.core.types import Federation
from fedad.devices import resolve_device
from fedad.evaluation.families import MetricFamily, Pooled, evaluate_replies, families_for
from fedad.evaluation.samples import embedding_sample, map_sample
from fedad.fl.drive import RunOutcome
from fedad.rundir.checkpoints import node_models
from fedad.rundir.outputs import EMBED_PREFIX, MAPS_PREFIX, _clean

__all__ = [
    "experiment_facts",
    "mean_over_clients",
    "method_entries",
    "method_seconds",
    "run_families",
    "summarize",
]


def method_seconds(outcome: RunOutcome, wall: float) -> dict[str, float]:
    """metrics.json's timing of one method: ``seconds`` is its whole cost, the wall time
    from its start to its metrics (every phase of the server program, the evaluation phase
    with whatever the clients do there, such as fitting a head, and the metrics); the
    server program alone is ``train_seconds``."""
    return {"seconds": wall, "train_seconds": outcome.seconds}


def method_entries(algorithm: Algorithm, evaluations: dict[int, Message]) -> dict[str, Any]:
    """A method's own entries for its metrics: its ``extra_metrics`` and, where it puts its
    clients' scores on one scale before pooling, ``score_scale`` (one sentence)."""
    out = dict(algorithm.extra_metrics(evaluations))
    scale = algorithm.score_scale()
    if scale is not None:
        out["score_scale"] = scale
    return out


def summarize(
    label: str,
    algorithm: Algorithm,
    outcome: RunOutcome,
    fed: Federation | None = None,
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Pooled and per-client metrics of one method, plus its pooled score arrays.

    The metrics are those of every metric family that applies (:mod:`fedad.evaluation.families`),
    family by family. With ``fed`` (the federation the method ran on) and anomaly maps in
    the replies, the arrays also hold a capped sample of maps with their test images for
    ``maps.npz`` (keys ``maps:LABEL/...``, a prefix no label can have;
    :func:`fedad.evaluation.samples.map_sample`). With representations in the replies (a
    detector with ``represent``), a capped sample of them for ``embeddings.npz`` (keys
    ``embeddings:LABEL/...``; :func:`fedad.evaluation.samples.embedding_sample`).
    """
    ids = sorted(outcome.evaluations)
    ev = [outcome.evaluations[i] for i in ids]
    pooled_ev = Pooled(outcome.evaluations)
    score = pooled_ev.score
    client_mean = fed is not None and fed.notes.get("pooled") == "client-mean"
    pooled, per_client = evaluate_replies(pooled_ev, families_for(algorithm), client_mean)
    thresholds = {i: float(m.scalars["threshold"]) for i, m in zip(ids, ev, strict=True)}
    names = {c.client_id: c.name for c in fed.clients if c.name} if fed is not None else {}
    for row in per_client:
        row["threshold"] = thresholds.get(int(row["client"] or 0))
        if names:  # natural partitions: the client's id value (data.client_column ...)
            row["client_name"] = names.get(int(row["client"] or 0), "")
    n_train = [float(m.scalars.get("num_examples", 1)) for m in ev]
    mean_threshold = (
        float(np.average(list(thresholds.values()), weights=n_train)) if thresholds else None
    )
    last_loss = next(
        (r["loss"] for r in reversed(outcome.history) if r.get("loss") is not None), None
    )
    rounds = max((int(r["round"]) for r in outcome.history), default=0)
    metrics: dict[str, Any] = {
        **pooled,
        "bytes_up": outcome.bytes_up,
        "bytes_down": outcome.bytes_down,
        # what one client uploads in a round, on average (the papers' communication column)
        "bytes_up_per_client_round": outcome.bytes_up
        / max(rounds, 1)
        / max(algorithm.setup.num_clients, 1),
        "seconds": outcome.seconds,
        "client_seconds": outcome.client_seconds,
        "rounds": rounds,
        "threshold": mean_threshold,
        "client_mean_auroc": mean_over_clients(per_client, "auroc"),
        "final_loss": last_loss,
        "method": algorithm.name,
        "detector": algorithm.detector,
        "params": algorithm.params.model_dump(),
        "personalized": algorithm.personalized,
        "nonfinite_scores": int(np.sum(~np.isfinite(score))),
        "missing_nodes": outcome.missing_nodes,
        "events": outcome.events,
        "per_client": per_client,
        **method_entries(algorithm, outcome.evaluations),
    }
    homes = node_models(algorithm, outcome)
    if homes:
        metrics["node_models"] = {str(i): p for i, p in homes.items()}
    return _clean(metrics), _kept_arrays(label, pooled_ev, fed)


def _kept_arrays(label: str, pooled: Pooled, fed: Federation | None) -> dict[str, np.ndarray]:
    """A method's pooled score arrays, and the samples of its maps and representations
    (``maps:LABEL/...``, ``embeddings:LABEL/...``)."""
    arrays = {
        f"{label}/score": pooled.score,
        f"{label}/label": pooled.label,
        f"{label}/client": pooled.client,
        f"{label}/pred": pooled.pred,
    }
    if fed is not None and pooled.maps is not None:
        images = {c.client_id: c.x_test for c in fed.clients}
        sample = map_sample(pooled, images)
        arrays.update({f"{MAPS_PREFIX}{label}/{k}": v for k, v in sample.items()})
    embedded = embedding_sample(pooled)
    arrays.update({f"{EMBED_PREFIX}{label}/{k}": v for k, v in embedded.items()})
    return arrays


def mean_over_clients(per_client: list[dict[str, Any]], key: str) -> float | None:
    """The mean of the clients' finite ``key`` (``None`` when no client has one): the
    papers' per-client figure beside the pooled one."""
    values = [
        float(r[key])
        for r in per_client
        if isinstance(r.get(key), int | float) and math.isfinite(float(r[key]))
    ]
    return float(np.mean(values)) if values else None


def experiment_facts(cfg: ExperimentConfig, fed: Federation) -> dict[str, Any]:
    y = fed.y_test
    return {
        "dataset": fed.name,
        "kind": fed.kind,
        "feature_shape": list(fed.feature_shape),
        "normal_classes": fed.normal_classes,
        "anomaly_classes": fed.anomaly_classes,
        "scheme": cfg.partition.scheme,
        "clients": len(fed.clients),
        "train_per_client": [c.n_train for c in fed.clients],
        "contaminated_per_client": [int(c.y_train.sum()) for c in fed.clients],
        "n_train": fed.n_train,
        "n_test": len(y),
        "n_test_anomalies": int(y.sum()),
        "seed": cfg.seed,
        "rounds": cfg.rounds,
        "engine": cfg.engine.name,
        "device": resolve_device(cfg.engine.device),
        "server_normal": 0 if fed.server_normal is None else len(fed.server_normal),
        "attack": cfg.attack.kind,
        "attacked_clients": fed.notes.get("attacked_clients", []),
        "privacy": cfg.privacy.mechanism,
        "secagg": cfg.privacy.secagg,
        # one-vs-rest: pooled metrics are means over clients (overlapping local tests)
        **({"pooled": "client-mean"} if fed.notes.get("pooled") == "client-mean" else {}),
    }


def run_families(algorithms: Iterable[Algorithm]) -> tuple[MetricFamily, ...]:
    """Every metric family of the run's methods, each once, built-in ones first."""
    out: dict[str, MetricFamily] = {}
    for alg in algorithms:
        for f in families_for(alg):
            out.setdefault(f.name, f)
    return tuple(out.values())
