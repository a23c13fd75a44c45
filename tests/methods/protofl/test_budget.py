"""What bounds ProtoFL's cost on a large client: at most ``max_samples`` samples per phase-1
epoch and for the flow (whose selection's flow is then kept), subnormal floats flushed while
the flow trains, the augmentations seeded on the CPU generator alone; the instance-contrastive
term of the registered phase-1 variant."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from fedad.core.rng import torch_seeded
from fedad.methods.protofl import train
from fedad.methods.protofl.augment import cpu_seeded, two_views
from fedad.methods.protofl.detector import ProtoFLDetector
from fedad.methods.protofl.model import Encoder, Trunk, instance_contrastive_loss, make_flow


def test_cpu_seeded_draws_what_torch_seeded_draws() -> None:
    x = torch.rand(16, 5)
    with torch_seeded(7):
        want = torch.rand(4), torch.randn(3)
    with cpu_seeded(7):
        got = torch.rand(4), torch.randn(3)
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))
    a = two_views(x, np.random.default_rng(1))
    b = two_views(x, np.random.default_rng(1))
    assert all(torch.equal(p, q) for p, q in zip(a, b, strict=True))


def test_flushed_denormals_only_inside() -> None:
    tiny = torch.tensor([1e-40])
    with train.flushed_denormals():
        assert float(tiny * 1.0) == 0.0
    assert float(tiny * 1.0) > 0.0  # torch's default again


def _encoder() -> Encoder:
    enc = Encoder((4,), 8, 16, 4)
    enc.trunk = Trunk((4,), 8, 4, False)
    return enc


def test_an_epoch_takes_at_most_max_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    sizes: list[int] = []
    real = train.phase1_loss

    def spy(v: Any, r: torch.Tensor, *args: Any) -> Any:
        sizes.append(len(r))
        return real(v, r, *args)

    monkeypatch.setattr(train, "phase1_loss", spy)
    x = np.random.default_rng(0).normal(size=(300, 4)).astype(np.float32)
    train.train_encoder(_encoder(), x, None, 2, 32, 1e-3, np.random.default_rng(0),
                        max_samples=100)  # fmt: skip
    assert sum(sizes) == 200 and max(sizes) == 32
    sizes.clear()
    train.train_encoder(_encoder(), x[:90], None, 1, 32, 1e-3, np.random.default_rng(0),
                        max_samples=100)  # fmt: skip
    assert sum(sizes) == 90  # a smaller client: every sample, as before


def test_select_flow_keeps_the_flow_of_its_best_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    script = iter([5.0, 3.0, 4.0, 4.5, 6.0])
    kept: list[dict[str, torch.Tensor]] = []

    def fake(flow: torch.nn.Module, h: torch.Tensor, batch_size: int = 1024) -> float:
        kept.append({k: v.clone() for k, v in flow.state_dict().items()})
        return next(script)

    monkeypatch.setattr(train, "_mean_nll", fake)
    h = torch.randn(40, 3, generator=torch.Generator().manual_seed(0))
    epoch, flow = train.select_flow(lambda: make_flow(3, 2, 8), h, None, 40, 0.25, 50, 3, 8,
                                    1e-2, 0.0, np.random.default_rng(0))  # fmt: skip
    assert epoch == 2 and flow is not None
    for k, v in flow.state_dict().items():
        torch.testing.assert_close(v, kept[1][k], rtol=0, atol=0)
    assert not all(torch.equal(v, kept[-1][k]) for k, v in flow.state_dict().items())


def test_a_large_clients_flow_is_fit_on_max_samples_and_selected_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[str, int]] = []
    real_select, real_train = train.select_flow, train.train_flow
    from fedad.methods.protofl import detector as mod

    def select(make: Any, h: torch.Tensor, *args: Any) -> Any:
        calls.append(("select", len(h)))
        return real_select(make, h, *args)

    def fit(flow: Any, h: torch.Tensor, *args: Any) -> Any:
        calls.append(("train", len(h)))
        return real_train(flow, h, *args)

    monkeypatch.setattr(mod, "select_flow", select)
    monkeypatch.setattr(mod, "train_flow", fit)
    x = np.random.default_rng(0).normal(size=(120, 5)).astype(np.float32)
    kw = {"kind": "vector", "input_shape": [5], "rep_dim": 4, "width": 4, "epochs": 0,
          "flow_layers": 2, "flow_hidden": 8, "flow_epochs": 3}  # fmt: skip
    ProtoFLDetector(**kw, max_samples=50).fit(x)
    assert calls == [("select", 50)]  # no second training over all samples
    calls.clear()
    det = ProtoFLDetector(**kw, max_samples=500).fit(x)
    assert [c[0] for c in calls] == ["train"] and calls[0][1] == 120  # as before
    assert np.all(np.isfinite(det.score(x)))


def test_instance_contrastive_loss_hand_cases() -> None:
    r = torch.eye(3, dtype=torch.float64)
    perfect = instance_contrastive_loss(r, r.clone(), temperature=0.1)
    swapped = instance_contrastive_loss(r, r[[1, 0, 2]], temperature=0.1)
    want = -np.log(np.exp(10.0) / (np.exp(10.0) + 2.0))  # each row: its own view, two others
    assert float(perfect) == pytest.approx(want, rel=1e-6)
    assert float(swapped) > float(perfect)
    assert float(instance_contrastive_loss(r[:1], r[:1])) == 0.0  # no negative


def test_contrast_adds_its_term_and_logs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    v = np.ones(16, np.float32)
    plain = train.train_encoder(_encoder(), x, v, 1, 32, 1e-3, np.random.default_rng(0))
    both = train.train_encoder(_encoder(), x, v, 1, 32, 1e-3, np.random.default_rng(0),
                               contrast=2.0)  # fmt: skip
    assert "l_nce" not in plain and both["l_nce"] > 0
    assert both["loss"] == pytest.approx(0.9 * both["l_pd"] + 0.1 * both["l_p"]
                                         + 2.0 * both["l_nce"], rel=1e-5)  # fmt: skip
