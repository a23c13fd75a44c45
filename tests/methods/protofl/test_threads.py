"""Small tensors train on one thread (train.one_thread_below_grain) at both call sites: the
detector's flow fit and a client's phase-1 epochs on an MLP trunk."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from fedad.methods.protofl import detector as det_mod
from fedad.methods.protofl import federated as fed_mod
from fedad.methods.protofl.detector import ProtoFLDetector
from fedad.methods.protofl.train import GRAIN, one_thread_below_grain


@pytest.fixture
def two_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.mark.usefixtures("two_threads")
@pytest.mark.parametrize(("elements", "inside"), [(GRAIN - 1, 1), (GRAIN, 2)])
def test_one_thread_below_the_grain_size_and_the_count_restored_after(
    elements: int, inside: int
) -> None:
    with one_thread_below_grain(elements):
        assert torch.get_num_threads() == inside
    assert torch.get_num_threads() == 2
    with pytest.raises(RuntimeError), one_thread_below_grain(elements):
        raise RuntimeError  # restored on the way out of an error too
    assert torch.get_num_threads() == 2


def _spy(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    seen: list[int] = []
    real = getattr(module, name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)  # the name the call site uses
    return seen


@pytest.mark.usefixtures("two_threads")
def test_a_table_flow_trains_on_one_thread_and_an_image_flow_keeps_its_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = _spy(monkeypatch, det_mod, "train_flow")
    rows = np.random.default_rng(0).standard_normal((64, 6)).astype(np.float32)
    ProtoFLDetector(kind="vector", input_shape=[6], epochs=0, flow_epochs=2, flow_val=0.0,
                    head="flow").fit(rows)  # fmt: skip
    wide = ProtoFLDetector(kind="vector", input_shape=[6], epochs=0, flow_epochs=2,
                           flow_val=0.0, head="flow", flow_hidden=256, rep_dim=256)  # fmt: skip
    wide.fit(rows)  # batches of 256 x 256 units: at torch's grain size
    assert seen == [1, 2]


@pytest.mark.usefixtures("two_threads")
def test_a_clients_phase_one_on_a_table_trains_on_one_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fedad.core.algorithm import Setup, build_algorithm
    from fedad.fl.engine import run_inprocess
    from tests.conftest import make_federation

    seen = _spy(monkeypatch, fed_mod, "train_encoder")
    fed = make_federation("vector", clients=2)
    setup = Setup(fed.kind, fed.feature_shape, rounds=1, seed=0, contamination=0.1,
                  num_clients=2)  # fmt: skip
    params = {"rep_dim": 4, "width": 4, "flow_layers": 2, "flow_hidden": 8, "flow_epochs": 2}
    run_inprocess(build_algorithm("protofl", params, setup), fed, rounds=1, seed=0)
    assert seen == [1, 1]  # phase 1 ran on both clients, each on one thread
