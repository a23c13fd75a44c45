"""Step 8 of the protocol: copy a plan's samples into a :class:`Federation`.

Encoding of a table's text columns, imputation (``data.missing = "impute-mean"``) and
standardization (vectors, ``data.standardize``), all with statistics of the clients'
training data only.
"""

from __future__ import annotations

import numpy as np

from fedad.core.errors import DataError
from fedad.core.types import ClientData, Features, Federation, GraphSet
from fedad.data.encoding import Encoding, seen_categories
from fedad.data.federation.plan import FederationPlan
from fedad.data.missing import fill_missing, training_means


def pooled_mean_std(
    blocks: list[np.ndarray], floor: float = 1e-12
) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature mean and (population) std of the union of ``blocks``, merged per block.

    The merge (Chan et al.) uses only each block's count, mean and sum of squared
    deviations, i.e. what clients could send; it equals the statistics of the concatenation.
    A std at or below ``floor`` (relative to ``max(1, |mean|)``) becomes 1.
    """
    n = 0
    mean: np.ndarray | None = None
    m2: np.ndarray | None = None
    for b in blocks:
        if len(b) == 0:
            continue
        x = b.reshape(len(b), -1).astype(np.float64)
        nb, mb = len(x), x.mean(axis=0)
        m2b = ((x - mb) ** 2).sum(axis=0)
        if mean is None or m2 is None:
            n, mean, m2 = nb, mb, m2b
            continue
        delta = mb - mean
        tot = n + nb
        mean = mean + delta * (nb / tot)
        m2 = m2 + m2b + delta**2 * (n * nb / tot)
        n = tot
    if mean is None or m2 is None:
        raise DataError("cannot standardize: the clients hold no training data")
    std = np.sqrt(m2 / n)
    std = np.where(std <= floor * np.maximum(1.0, np.abs(mean)), 1.0, std)
    return mean, std


def dense(x: Features) -> np.ndarray:
    """``x`` as a dense array; the planner and the attack step refuse imputation,
    standardization and data attacks for graphs, so a graph set here is a bug."""
    if isinstance(x, GraphSet):
        raise TypeError("dense operation on graph samples")
    return x


def materialize(plan: FederationPlan) -> Federation:
    """Copy the planned samples into a :class:`Federation` (and standardize vectors)."""
    cat = plan.catalog
    sources = plan.client_sources
    clients = []
    for k in range(len(plan.train_ids)):
        clients.append(
            ClientData(
                client_id=k,
                x_train=cat.gather(plan.train_ids[k]),
                y_train=plan.train_anomaly[k].copy(),
                c_train=plan.classes[plan.train_ids[k]],
                x_test=cat.gather(plan.test_ids[k]),
                y_test=plan.test_anomaly[k].copy(),
                source=sources[k],
                mask_train=cat.gather_masks(plan.train_ids[k]),
                mask_test=cat.gather_masks(plan.test_ids[k]),
                name=plan.client_names[k] if plan.client_names else "",
            )
        )
    server = cat.gather(plan.server_ids) if len(plan.server_ids) else None
    notes = dict(plan.notes)
    notes["columns"] = list(plan.columns)
    feature_shape, one_hot, server = _encode(plan, clients, server, notes)
    if plan.impute:
        server = _impute(plan.name, clients, server, notes)
    if plan.standardize:
        server = _standardize(clients, server, one_hot, notes)
    notes["standardized"] = plan.standardize
    return Federation(
        name=plan.name,
        kind=plan.kind,
        feature_shape=feature_shape,
        clients=clients,
        normal_classes=list(plan.normal_classes),
        anomaly_classes=list(plan.anomaly_classes),
        class_names=plan.class_names,
        server_normal=server,
        notes=notes,
    )


def _encode(
    plan: FederationPlan,
    clients: list[ClientData],
    server: Features | None,
    notes: dict[str, object],
) -> tuple[tuple[int, ...], np.ndarray | None, Features | None]:
    """One-hot encode a table's text columns (categories of the clients' training rows);
    returns the feature shape, the one-hot column mask and the server data."""
    if not plan.categorical:
        return plan.feature_shape, None, server
    raw = dict(plan.categorical)
    enc = Encoding(
        plan.columns, seen_categories([dense(c.x_train) for c in clients], plan.categorical)
    )
    for c in clients:
        c.x_train = enc.apply(dense(c.x_train), raw)
        c.x_test = enc.apply(dense(c.x_test), raw)
    if server is not None:
        server = enc.apply(dense(server), raw)
    notes["encoding"] = {
        "columns": list(plan.columns),
        "categories": {plan.columns[j]: list(v) for j, v in enc.categories.items()},
        "encoded_columns": list(enc.encoded_columns),
    }
    return (len(enc.encoded_columns),), enc.one_hot_mask, server


def _impute(
    name: str, clients: list[ClientData], server: Features | None, notes: dict[str, object]
) -> Features | None:
    """Missing values become their feature's mean over the clients' training data."""
    means = training_means([dense(c.x_train) for c in clients], name)
    for c in clients:
        c.x_train = fill_missing(dense(c.x_train), means)
        c.x_test = fill_missing(dense(c.x_test), means)
    if server is not None:
        server = fill_missing(dense(server), means)
    notes["imputed_means"] = [float(v) for v in means]
    return server


def _standardize(
    clients: list[ClientData],
    server: Features | None,
    one_hot: np.ndarray | None,
    notes: dict[str, object],
) -> Features | None:
    """z-score with the pooled statistics of the clients' training data (one-hot columns
    stay 0/1)."""
    mean, std = pooled_mean_std([dense(c.x_train) for c in clients])
    if one_hot is not None:  # one-hot columns stay 0/1
        mean, std = np.where(one_hot, 0.0, mean), np.where(one_hot, 1.0, std)
    mu, sd = mean.astype(np.float32), std.astype(np.float32)
    for c in clients:
        c.x_train = (dense(c.x_train) - mu) / sd
        c.x_test = (dense(c.x_test) - mu) / sd
    if server is not None:
        server = (dense(server) - mu) / sd
    notes["standardize_mean"] = [float(v) for v in mean]
    notes["standardize_std"] = [float(v) for v in std]
    return server
