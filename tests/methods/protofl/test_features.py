"""The ``trunk = "pretrained"`` variant: cached view features, two distinct views per pair."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedad.methods.protofl.detector import ProtoFLDetector
from fedad.methods.protofl.features import pick_two
from tests.components.detectors.test_pretrained import needs_weights
from tests.conftest import make_federation
from tests.methods.protofl.test_federated import _run


def test_pick_two_draws_two_different_views_of_the_same_sample() -> None:
    v, n = 3, 50
    views = torch.stack([torch.full((n, 2), float(k)) for k in range(v)])
    views[..., 1] = torch.arange(n, dtype=torch.float32)  # column 1: the sample id
    idx = torch.arange(0, n, 2)
    a, b = pick_two(views, idx, np.random.default_rng(0))
    assert torch.equal(a[:, 1], idx.float()) and torch.equal(b[:, 1], idx.float())
    assert torch.all(a[:, 0] != b[:, 0])
    assert len(set(a[:, 0].tolist())) == v  # every view gets used


@needs_weights
def test_pretrained_trunk_runs_saves_and_reloads() -> None:
    fed = make_federation("image", clients=3)
    algo, out = _run(fed, rounds=1, trunk="pretrained", trunk_size=32, trunk_views=2)
    assert out.events == []
    assert algo.make_encoder().trunk.net[1].in_features == 1280  # type: ignore[index]
    for cid, m in out.evaluations.items():
        assert out.client_states[cid]["feature_views"].shape == (2, fed.clients[cid].n_train, 1280)
        arrays = {k[9:]: v for k, v in m.arrays.items() if k.startswith("detector/")}
        det = ProtoFLDetector(**algo.make_detector().get_params()).set_arrays(arrays)
        np.testing.assert_allclose(det.score(fed.clients[cid].x_test), m.arrays["score"], rtol=1e-5)


def test_pretrained_trunk_on_vectors_is_a_config_error() -> None:
    from fedad.core.algorithm import Setup, build_algorithm
    from fedad.core.errors import ConfigError

    setup = Setup("vector", (6,), rounds=1, seed=0, contamination=0.1, num_clients=3)
    with pytest.raises(ConfigError, match="image"):
        build_algorithm("protofl", {"trunk": "pretrained"}, setup)
