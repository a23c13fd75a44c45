"""FedDyMem's networks [FedDyMem eq. 9-12]."""

from __future__ import annotations

import torch

from fedad.methods.feddymem.losses import metric_loss, scale_floor
from fedad.methods.feddymem.model import (
    FedDyMemNet,
    MemoryGenerator,
    coordinates,
    sample_grid,
)


def test_grid_sampling_at_integer_coordinates_returns_grid_cells() -> None:
    g = torch.randn(1, 5, 8, 8)
    # eq. 10: p~ = (p + 1)(W_G - 1)/2 is an integer j when p = 2j/(W_G - 1) - 1
    rows, cols = torch.meshgrid(torch.arange(8), torch.arange(8), indexing="ij")
    point = torch.stack([2 * cols / 7 - 1, 2 * rows / 7 - 1], dim=-1)[None].float()
    out = sample_grid(g, point)
    assert torch.allclose(out, g, atol=1e-5)
    # halfway between two cells: their mean (the weights of eq. 11)
    mid = torch.tensor([[[[(2 * 2.5 / 7) - 1, (2 * 4 / 7) - 1]]]])
    assert torch.allclose(sample_grid(g, mid)[0, :, 0, 0], (g[0, :, 4, 2] + g[0, :, 4, 3]) / 2)


def test_coordinates_span_minus_one_to_one() -> None:
    c = coordinates(2, 3, 4)
    assert c.shape == (2, 2, 3, 4)
    assert torch.equal(c[0, 0, 0], torch.linspace(-1, 1, 4))  # X along columns
    assert torch.equal(c[0, 1, :, 0], torch.linspace(-1, 1, 3))  # Y along rows


def test_shapes_grid_init_and_ablations() -> None:
    torch.manual_seed(0)
    net = FedDyMemNet(cin=6, channels=4, grid=8)
    x = torch.randn(2, 6, 5, 5)
    assert net(x).shape == (2, 4, 5, 5)
    gen = net.generator
    assert isinstance(gen, MemoryGenerator) and gen.grid.shape == (1, 4, 8, 8)
    # Xavier normal: std sqrt(2 / (fan_in + fan_out)) with fans 4*64 each (roughly)
    assert 0.02 < float(gen.grid.detach().std()) < 0.12
    bare = FedDyMemNet(cin=6, channels=6, projection=False, generator=False)
    assert torch.equal(bare(x), x) and not list(bare.parameters())


def test_metric_loss_is_eq_12() -> None:
    g = torch.Generator().manual_seed(0)
    mem = torch.randn(2, 3, 4, 4, generator=g)
    bank = torch.randn(10, 3, generator=g)
    patches = mem.permute(0, 2, 3, 1).reshape(-1, 3)
    d = torch.cdist(patches, bank).sort(dim=1).values[:, :3]
    want = torch.clamp(d - 0.01, min=0).mean()
    assert torch.allclose(metric_loss(mem, bank, k=3, th=0.01), want, atol=1e-6)
    # a patch within th of all its neighbours costs nothing
    assert float(metric_loss(torch.zeros(1, 3, 1, 1), torch.zeros(3, 3), th=0.01)) == 0.0


def test_the_scale_floor_is_a_hinge_on_the_spread_below_the_reference() -> None:
    m = torch.zeros(2, 3, 2, 2)
    m[0, 0] = 3.0
    m[1, 0] = -3.0
    m[:, 1] = 4.0  # a constant offset: the patches sit 3 from their mean (0, 4, 0): s = 3
    assert scale_floor(m, 2.0) == 0.0 and scale_floor(m, 3.0) == 0.0
    assert torch.isclose(scale_floor(m, 5.0), torch.tensor(2.0))
    assert torch.isclose(scale_floor(m / 2, 3.0), torch.tensor(1.5))  # shrinking costs
    offset = m.clone()
    offset[:, 2] = 100.0  # a larger norm does not help: the spread is unchanged
    assert torch.isclose(scale_floor(offset, 5.0), torch.tensor(2.0))
    m.requires_grad_(True)
    scale_floor(m, 5.0).backward()  # type: ignore[no-untyped-call]
    assert m.grad is not None and float((m.grad * m.detach()).sum()) < 0  # the gradient spreads m


def test_the_spread_divides_every_memory_feature_by_one_number() -> None:
    torch.manual_seed(0)
    net = FedDyMemNet(6, 4, grid=4, spread=True)
    x = torch.randn(5, 6, 3, 3)
    with torch.no_grad():
        raw = net(x)  # spread 1: the undivided features
        net.spread.fill_(2.5)  # type: ignore[union-attr]
        assert torch.allclose(net(x), raw / 2.5)  # one number: the geometry is kept
    assert "spread" in net.state_dict() and "spread" not in FedDyMemNet(6, 4).state_dict()
