"""``vector_norm``: the MLP trunk for tables with the paper's group norm or without it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score
from torch import nn

from fedad.core.algorithm import Setup, build_algorithm
from fedad.core.detector import detector_from_config
from fedad.methods.protofl.detector import ProtoFLDetector
from fedad.methods.protofl.detector_params import ProtoFLDetectorParams
from fedad.methods.protofl.federated import ProtoFL
from fedad.methods.protofl.model import Trunk

SMALL: dict[str, Any] = {"rep_dim": 8, "width": 8, "epochs": 0, "head": "gaussian"}


def _group_norms(module: nn.Module) -> int:
    return sum(isinstance(m, nn.GroupNorm) for m in module.modules())


def test_the_vector_trunk_has_group_norm_only_when_asked() -> None:
    assert _group_norms(Trunk((10,), 4)) == 2
    assert _group_norms(Trunk((10,), 4, vector_norm=False)) == 0
    assert _group_norms(Trunk((1, 8, 8), 4, vector_norm=False)) == 3  # images: always


@pytest.mark.parametrize("norm", ["group", "none"])
def test_the_method_param_reaches_the_trunk(norm: str) -> None:
    table = Setup("vector", (10,), rounds=1, seed=0, contamination=0.1, num_clients=2)
    algo = build_algorithm("protofl", {"vector_norm": norm}, table)
    assert isinstance(algo, ProtoFL)
    assert _group_norms(algo.make_encoder()) == (2 if norm == "group" else 0)
    images = Setup("image", (1, 8, 8), rounds=1, seed=0, contamination=0.1, num_clients=2)
    algo = build_algorithm("protofl", {"vector_norm": norm, "trunk": "cnn"}, images)
    assert isinstance(algo, ProtoFL) and _group_norms(algo.make_encoder()) == 3


def test_rows_anomalous_by_their_size_are_lost_to_group_norm() -> None:
    """Anomalies: normal rows four times as large. Group norm rescales each row's hidden
    units, so the heads barely see the size; without it they do."""
    rng = np.random.default_rng(0)
    train = rng.standard_normal((300, 10)).astype(np.float32)
    test = rng.standard_normal((200, 10)).astype(np.float32)
    test[100:] *= 4.0
    y = np.r_[np.zeros(100), np.ones(100)]
    auroc = {}
    for norm in ("group", "none"):
        det = ProtoFLDetector(kind="vector", input_shape=[10], vector_norm=norm, **SMALL)
        auroc[norm] = roc_auc_score(y, det.fit(train).score(test))
    assert auroc["none"] > 0.95
    assert auroc["group"] < auroc["none"] - 0.1, auroc


def test_a_checkpoint_without_vector_norm_reads_as_group() -> None:
    saved = {"kind": "vector", "input_shape": [10]}
    assert ProtoFLDetectorParams.model_validate(saved).vector_norm == "group"
    x = np.random.default_rng(1).standard_normal((60, 10)).astype(np.float32)
    det = ProtoFLDetector(kind="vector", input_shape=[10], vector_norm="group", **SMALL).fit(x)
    config = det.to_config()
    del config["params"]["vector_norm"]
    back = detector_from_config(config, det.get_arrays())
    assert isinstance(back, ProtoFLDetector) and back.params.vector_norm == "group"
    np.testing.assert_allclose(back.score(x), det.score(x), rtol=1e-6)
