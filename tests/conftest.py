"""Shared fixtures: tiny synthetic federations that build in milliseconds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedad.data.types import ClientData, Federation

torch.set_num_threads(1)


def make_federation(
    kind: str = "vector", clients: int = 3, n: int = 40, seed: int = 0
) -> Federation:
    """Normal data around 0, anomalies shifted by 4; images are 1x8x8 blobs."""
    rng = np.random.default_rng(seed)
    shape: tuple[int, ...] = (6,) if kind == "vector" else (1, 8, 8)

    def normal(m: int) -> np.ndarray:
        x = rng.normal(0.0, 1.0, (m, *shape))
        return (x if kind == "vector" else 1 / (1 + np.exp(-x))).astype(np.float32)

    def anomal(m: int) -> np.ndarray:
        x = rng.normal(4.0, 1.0, (m, *shape))
        return (x if kind == "vector" else 1 / (1 + np.exp(-x))).astype(np.float32)

    cs = []
    for k in range(clients):
        nk = n + 5 * k
        x_test = np.concatenate([normal(10), anomal(4)])
        y_test = np.r_[np.zeros(10), np.ones(4)].astype(np.int64)
        cs.append(
            ClientData(
                client_id=k,
                x_train=normal(nk),
                y_train=np.zeros(nk, np.int64),
                c_train=np.zeros(nk, np.int64),
                x_test=x_test,
                y_test=y_test,
            )
        )
    return Federation(
        name="synthetic",
        kind=kind,  # type: ignore[arg-type]
        feature_shape=shape,
        clients=cs,
        normal_classes=[0],
        anomaly_classes=[1],
        server_normal=normal(60),
    )


@pytest.fixture
def vector_federation() -> Federation:
    return make_federation("vector")


@pytest.fixture
def image_federation() -> Federation:
    return make_federation("image")
