"""FADngs's encoder learns: the contrastive losses leave their collapsed value in a small
federation, and the collapse guard (:mod:`fedad.core.collapse`) says so when not."""

from __future__ import annotations

from typing import Any

import pytest

from fedad.config import parse_config
from fedad.core.algorithm import Setup, build_algorithm
from fedad.core.types import Federation
from fedad.federation import build_federation
from fedad.fl.drive import RunOutcome
from fedad.fl.engine import run_inprocess
from tests.conftest import COLLAPSE_WARNING


@pytest.fixture(scope="module")
def fashion() -> Federation:
    """Three clients of 96 real Fashion-MNIST images each, mostly one class each."""
    cfg = parse_config({
        "seed": 0, "rounds": 3,
        "data": {"name": "fashion_mnist", "normal": [0, 1, 2, 3, 4], "anomaly": [5, 6, 7, 8, 9],
                 "max_train_per_client": 96, "max_test": 60},
        "partition": {"scheme": "dominant", "clients": 3},
        "methods": [{"name": "fadngs-nosed"}],
    })  # fmt: skip
    return build_federation(cfg)


def _run(fed: Federation, **params: Any) -> RunOutcome:
    setup = Setup(fed.kind, fed.feature_shape, rounds=3, seed=1, contamination=0.02,
                  num_clients=len(fed.clients))  # fmt: skip
    small = {"width": 8, "proj_dim": 32, "batch_size": 16, "warmup_rounds": 2}
    algo = build_algorithm("fadngs-nosed", {**small, **params}, setup)
    return run_inprocess(algo, fed, rounds=3, seed=1)


@pytest.mark.parametrize(("stem_stride", "ratio"), [(1, 0.95), (2, 0.975)])
def test_the_warm_up_leaves_the_collapsed_value_and_the_guard_stays_quiet(
    fashion: Federation, stem_stride: int, ratio: float
) -> None:
    """SimCLR's loss falls well below log(2B - 1) in two warm-up rounds, where the collapsed
    encoder of the next test stays above 0.998 of it. The default stem at stride 2 (maps
    half as wide) learns the warm-up more slowly on 96 images (0.969 after two rounds,
    0.923 at stride 1; at the benchmark's scale 0.925 against 0.896), hence its bound."""
    out = _run(fashion, stem_stride=stem_stride)
    warm = [r for r in out.history if r["round"] in (1, 2)]
    assert all(r["loss"] < r["loss_collapsed"] for r in warm)
    assert warm[-1]["loss_ratio"] < min(ratio, warm[0]["loss_ratio"])  # and still falling
    assert warm[-1]["rep_cos"] < 0.6
    assert not any(COLLAPSE_WARNING in e for e in out.events)
    crad = out.history[-1]
    assert crad["loss_ratio"] == pytest.approx(crad["loss"] / crad["loss_collapsed"])
    assert crad["loss_collapsed"] > warm[-1]["loss_collapsed"]  # CRAD's pairs: more views


def test_a_collapsed_encoder_stays_at_its_collapsed_value_and_is_named(
    fashion: Federation,
) -> None:
    """The group-norm encoder without the head's batch norm, as FADngs was before the audit:
    the warm-up sits at log(2B - 1) with every z pointing one way, and the run ends with the
    guard's one warning line."""
    out = _run(fashion, head_norm="none")
    warm = [r for r in out.history if r["round"] in (1, 2)]
    assert all(r["loss_ratio"] > 0.98 and r["rep_cos"] > 0.95 for r in warm)
    warnings = [e for e in out.events if COLLAPSE_WARNING in e]
    assert len(warnings) == 1 and warnings[0].startswith("round 3:")
