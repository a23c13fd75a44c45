"""Choosing FGAD's options on training data only: a validation split of every client's
training graphs and the generated graphs of the candidates (ours, for ``fgad-plus``).

The validation AUC of a trained detector is the AUROC of its score between graphs it never
trained on, all of them normal, the held-out share of its client's training graphs
(:func:`validation_federation`), and the 0/1 graphs that generators make from those held-out
graphs (:func:`generated_graphs`, as training makes them: one symmetric draw per node pair
from the decoder's adjacency). Pooled over the candidates of a comparison, the generated
graphs are negatives that no one candidate's own generator decides. No test graph and no
test label is read: the federation the candidates train on has the held-out graphs in place
of its test sets, every one labelled normal, and :func:`choose` sees validation numbers only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from fedad.blas import one_blas_thread
from fedad.components.nn.gin import dense_graphs, dense_nodes
from fedad.core.algorithm import Setup, build_algorithm
from fedad.core.messages import Message
from fedad.core.types import ClientData, Federation, GraphSet, concat
from fedad.evaluation.metrics import auroc
from fedad.methods.fgad.detector import FGADDetector
from fedad.methods.fgad.losses import edge_prior_shift
from fedad.methods.fgad.model import Generator
from fedad.methods.fgad.train import degree_cap, degree_features, sample_adjacency

InProcessRun = Callable[..., Any]
"""The in-process engine's run function (:func:`fedad.fl.engine.run_inprocess`), passed in by
the caller: a method folder runs no engine of its own."""

__all__ = [
    "Candidate",
    "choose",
    "generated_graphs",
    "split_validation",
    "validate",
    "validation_auc",
    "validation_federation",
]

Candidate = tuple[str, str, Mapping[str, Any]]
"""(label, method name, ``[methods.params]``) of one candidate configuration."""


def split_validation(
    graphs: GraphSet, fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Indices ``(train, validation)`` of ``graphs``: a seeded ``fraction`` (at least one graph,
    and at least one left to train on) held out."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"validation fraction must be in (0, 1), not {fraction}")
    n = len(graphs)
    if n < 2:
        raise ValueError("a validation split needs at least two graphs")
    order = rng.permutation(n)
    k = min(max(1, round(fraction * n)), n - 1)
    return np.sort(order[k:]), np.sort(order[:k])


def validation_federation(
    fed: Federation, fraction: float, seed: int
) -> tuple[Federation, dict[int, GraphSet]]:
    """``fed`` with every client's training graphs split (:func:`split_validation`): the
    clients train on the rest, and their test sets are the held-out graphs, every one
    labelled 0. Returns that federation and the held-out graphs per client id; nothing of
    ``fed``'s test sets is in either."""
    clients: list[ClientData] = []
    held: dict[int, GraphSet] = {}
    for c in fed.clients:
        if not isinstance(c.x_train, GraphSet):
            raise TypeError("a validation federation is made of graphs")
        rng = np.random.default_rng([seed, c.client_id, 0x5E1])
        tr, va = split_validation(c.x_train, fraction, rng)
        val = c.x_train[va]
        held[c.client_id] = val
        clients.append(
            replace(
                c,
                x_train=c.x_train[tr],
                y_train=c.y_train[tr],
                c_train=c.c_train[tr],
                x_test=val,
                y_test=np.zeros(len(val), dtype=np.int64),
                mask_train=None,
                mask_test=None,
            )
        )
    return replace(fed, clients=clients), held


def generated_graphs(
    det: FGADDetector, graphs: GraphSet, rng: np.random.Generator, batch_size: int = 64
) -> GraphSet:
    """0/1 graphs that ``det``'s generator makes from ``graphs``, one per graph: eq. 5-7 as the
    detector trains with them (its decoder, the balanced loss's prior shift, a symmetric
    draw per node pair), the node features of the real graph, or the degree features of the
    drawn adjacency where the real ones are one-hot degrees and the detector is configured
    so (``fake_features = "auto"``)."""
    det._check_width(graphs)
    cap = degree_cap(graphs) if det.params.fake_features == "auto" else None
    noise = torch.Generator().manual_seed(int(rng.integers(2**62)))
    out: list[tuple[np.ndarray, np.ndarray]] = []
    dev = next(det.net_.parameters()).device
    with torch.no_grad():
        for start in range(0, len(graphs), batch_size):
            b = graphs.batch(np.arange(start, min(start + batch_size, len(graphs)))).to(dev)
            n = int(b.num_graphs)
            x, adj, mask = dense_graphs(b)
            mu, logstd = det.gen_.encode(b.x, b.edge_index)
            z = Generator.sample(mu, logstd, noise)
            logits = det.gen_.logits(dense_nodes(z, b.batch, n, x.shape[1]))
            if det.params.reconstruction == "balanced":
                logits = logits - edge_prior_shift(adj, mask)
            fake = sample_adjacency(Generator.adjacency(logits, mask), noise)
            feats = x if cap is None else degree_features(fake, mask, cap)
            sizes = mask.sum(1).tolist()
            for i, k in enumerate(int(s) for s in sizes):
                a = fake[i, :k, :k].cpu().numpy()
                out.append((feats[i, :k].cpu().numpy(), np.stack(np.nonzero(a))))
    return GraphSet.from_graphs(out)


def validation_auc(
    det: FGADDetector, normal: GraphSet, generated: GraphSet, head: str = "student"
) -> float | None:
    """AUROC of ``det``'s ``head`` between held-out real graphs (``normal``, label 0) and
    ``generated`` graphs (label 1); ``None`` when either is empty."""
    if len(normal) == 0 or len(generated) == 0:
        return None
    probs = det._probabilities
    s = np.concatenate([probs(normal, head), probs(generated, head)])
    y = np.concatenate([np.zeros(len(normal), np.int64), np.ones(len(generated), np.int64)])
    return auroc(y, s)


def _train(
    fed: Federation,
    name: str,
    params: Mapping[str, Any],
    rounds: int,
    seed: int,
    run_inprocess: InProcessRun,
) -> tuple[dict[int, FGADDetector], dict[str, float]]:
    """One candidate trained on ``fed`` in this process: every client's detector (its own
    networks, the server's final head) and the last round's client-weighted ``loss_g`` and
    ``recon_constant``."""
    setup = Setup(
        "graph",
        fed.feature_shape,
        rounds=rounds,
        seed=seed,
        contamination=0.0,
        num_clients=len(fed.clients),
    )
    algo = build_algorithm(name, dict(params), setup)
    with one_blas_thread():
        run = run_inprocess(algo, fed, rounds=rounds, seed=seed)
    msg = Message("evaluate", run.result.arrays, run.result.scalars)
    dets: dict[int, FGADDetector] = {}
    for c in fed.clients:
        det = algo.client_detector(run.client_states[c.client_id], c, msg)
        assert isinstance(det, FGADDetector)
        dets[c.client_id] = det
    last = run.history[-1] if run.history else {}
    return dets, {k: float(last.get(k, np.nan)) for k in ("loss_g", "recon_constant")}


def validate(
    fed: Federation,
    candidates: Sequence[Candidate],
    rounds: int,
    seed: int,
    run_inprocess: InProcessRun,
    fraction: float = 0.2,
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[int, FGADDetector]]]:
    """Every candidate trained on :func:`validation_federation` of ``fed`` and scored on the
    held-out graphs. Per candidate: ``admissible`` (its generator's eq. 8 in the last round
    below the constant predictor's, the generator criterion: it has learnt the graphs),
    ``val`` (the student's :func:`validation_auc` against the generated graphs of every
    admissible candidate, pooled; of every candidate when none is), ``val_own`` (against its
    own generator's), ``val_teacher`` (the teacher's, pooled), each the mean over the
    clients, and ``loss_g``, ``recon_constant``. Also returns the detectors, per candidate
    and client id. Each candidate trains with ``run_inprocess(algorithm, federation, rounds=,
    seed=)`` (:func:`fedad.fl.engine.run_inprocess`). Reads nothing of ``fed``'s test sets."""
    vfed, held = validation_federation(fed, fraction, seed)
    dets: dict[str, dict[int, FGADDetector]] = {}
    rows: dict[str, dict[str, Any]] = {}
    for label, name, params in candidates:
        dets[label], gen = _train(vfed, name, params, rounds, seed, run_inprocess)
        rows[label] = {**gen, "admissible": bool(gen["loss_g"] < gen["recon_constant"])}
    fakes = {
        (label, cid): generated_graphs(d, held[cid], np.random.default_rng([seed, cid, 0x6E]))
        for label, ds in dets.items()
        for cid, d in ds.items()
    }
    pool = [lab for lab in dets if rows[lab]["admissible"]] or list(dets)
    for label, ds in dets.items():
        val, own, teacher = [], [], []
        for cid, d in ds.items():
            neg = concat_graphs([fakes[(lab, cid)] for lab in pool])
            val.append(validation_auc(d, held[cid], neg))
            own.append(validation_auc(d, held[cid], fakes[(label, cid)]))
            teacher.append(validation_auc(d, held[cid], neg, head="teacher"))
        for key, vals in (("val", val), ("val_own", own), ("val_teacher", teacher)):
            rows[label][key] = float(np.mean([v for v in vals if v is not None]))
    return rows, dets


def concat_graphs(parts: Sequence[GraphSet]) -> GraphSet:
    """One graph set of ``parts`` in order."""
    out = concat(list(parts))
    assert isinstance(out, GraphSet)
    return out


def choose(val: Mapping[str, Sequence[float]], admissible: Mapping[str, bool]) -> str:
    """The admissible candidate (a key of ``val``: its validation AUCs, one per seed) with
    the highest mean; the earlier-listed one on a tie. ``admissible``: whether its generator
    met the generator criterion on every seed."""
    ok = [k for k in val if admissible.get(k, False)]
    if not ok:
        raise ValueError("no admissible candidate to choose from")
    return max(ok, key=lambda k: float(np.mean(val[k])))
