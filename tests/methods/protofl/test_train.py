"""The flow's training budget chosen on held-out training samples."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedad.methods.protofl import train
from fedad.methods.protofl.detector import ProtoFLDetector
from fedad.methods.protofl.model import make_flow


def _views(n: int, pairs: int, d: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(n * pairs, d, generator=g), torch.randn(n * pairs, d, generator=g)


def test_picks_the_epoch_of_lowest_held_out_nll_and_stops_after_patience(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = iter([5.0, 4.0, 3.0, 3.5, 3.2, 4.0, 9.0, 1.0, 0.5])
    calls: list[int] = []

    def fake(flow: torch.nn.Module, h: torch.Tensor, batch_size: int = 1024) -> float:
        calls.append(len(h))
        return next(script)

    monkeypatch.setattr(train, "_mean_nll", fake)
    h, h_hat = _views(20, 2)
    got = train.choose_flow_epochs(
        lambda: make_flow(3, 2, 8), h, h_hat, 20, 0.25, 50, 3, 16, 1e-3, 0.01,
        np.random.default_rng(0),
    )  # fmt: skip
    assert got == 3  # the later 1.0 and 0.5 come after 3 epochs without improvement
    assert len(calls) == 6
    assert set(calls) == {2 * 2 * 5}  # 5 held-out samples, both views of both pairs


def test_held_out_rows_are_whole_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, torch.Tensor] = {}

    def fake(flow: torch.nn.Module, h: torch.Tensor, batch_size: int = 1024) -> float:
        seen["val"] = h
        return 1.0

    monkeypatch.setattr(train, "_mean_nll", fake)
    n, pairs = 10, 3
    base = torch.arange(n, dtype=torch.float32)
    h = torch.stack([base.repeat(pairs), torch.zeros(n * pairs)], dim=1)  # row -> sample id
    train.choose_flow_epochs(
        lambda: make_flow(2, 2, 8), h, h.clone(), n, 0.4, 2, 5, 8, 1e-3, 0.0,
        np.random.default_rng(1),
    )  # fmt: skip
    ids = seen["val"][:, 0].long().tolist()
    held = set(ids)
    assert len(held) == 4
    assert sorted(ids) == sorted([i for i in held for _ in range(2 * pairs)])


def test_too_few_samples_or_no_share_keeps_the_maximum() -> None:
    h, h_hat = _views(8, 1)
    rng = np.random.default_rng(0)
    mk = lambda: make_flow(3, 2, 8)  # noqa: E731
    assert train.choose_flow_epochs(mk, h, h_hat, 8, 0.0, 7, 2, 4, 1e-3, 0.0, rng) == 7
    assert train.choose_flow_epochs(mk, h, h_hat, 8, 0.25, 7, 2, 4, 1e-3, 0.0, rng) == 7


def test_detector_trains_the_chosen_budget_within_the_maximum() -> None:
    x = np.random.default_rng(0).normal(size=(60, 6)).astype(np.float32)
    det = ProtoFLDetector(
        kind="vector", input_shape=[6], rep_dim=4, width=4, epochs=1,
        flow_layers=2, flow_hidden=8, flow_epochs=30, flow_patience=3,
    )  # fmt: skip
    det.fit(x)
    assert 1 <= det.flow_epochs_used_ <= 30
    assert np.all(np.isfinite(det.score(x)))
