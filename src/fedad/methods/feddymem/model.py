"""FedDyMem's trainable networks: the projection and the memory generator [FedDyMem Sec. IV-B].

Both run on the frozen multi-level features :math:`\\tilde F` of
:mod:`fedad.resources.multilevel` and are personal: they never leave their client.

* Projection [FedDyMem eq. 9]: :math:`P = \\sigma(\\mathrm{conv}_{1\\times 1}(\\tilde F))`.
  The paper leaves :math:`\\sigma` open; we use LeakyReLU(0.2), because the backbone's
  stage outputs are linear (EfficientNet's blocks end in a batch norm, ResNet's in a ReLU)
  and a ReLU would discard the sign of half of them.
* Memory generator [FedDyMem eq. 10-11]: a coordinate convolution
  :math:`\\hat P = \\mathrm{conv}_{1\\times 1}([P, X, Y])` with the Cartesian coordinates
  :math:`X, Y \\in [-1, 1]` of each position; two 1x1 convolutions map :math:`\\hat P` to a
  point :math:`p = (p_x, p_y) \\in [-1, 1]^2` (tanh) of a trainable grid
  :math:`G \\in \\mathbb{R}^{C \\times H_G \\times W_G}` (Xavier-normal initialisation,
  Algorithm 4 line 3); :math:`O` is :math:`G` sampled bilinearly at :math:`p` —
  :func:`torch.nn.functional.grid_sample` with ``align_corners=True`` is exactly eq. 10-11:
  :math:`\\tilde p_x = (p_x + 1)(W_G - 1)/2` and the four-neighbour weights
  :math:`w_{mn}`. The memory feature is :math:`M = \\mathrm{conv}([O, \\hat P])`; a 1x1
  convolution (the paper does not give its size; 1x1 keeps every patch's memory feature a
  function of that patch alone, as the memory bank's per-patch matching assumes).

Shapes: features ``(N, C_in, H, W)`` -> memory features ``(N, C, H, W)``.

The ablations of [FedDyMem Table III]: ``projection=False`` replaces the projection by the
identity (then ``C = C_in``); ``generator=False`` returns :math:`P` itself.

``spread=True`` (not in the paper) divides the memory features by one number, the
client's spread :math:`s`, the root mean square distance of its training memory features
from their mean (``net.spread``, a buffer; set by
:meth:`fedad.methods.feddymem.detector.FedDyMemDetector.set_spread` after each round's
training, kept fixed while it trains): :math:`M \\leftarrow M / s`. Eq. 12 has no
repulsive term, and the networks lower it by shrinking every feature, each client at its
own rate; with the division the features that travel (the banks) and score keep spread 1
on every client, while the networks train as in the paper within a round. One number,
not a per-channel standardisation: it keeps the features' geometry, and a per-channel
standardisation with batch statistics (BatchNorm) lets eq. 12 cluster the features
instead, which on a development federation ruined detection (docs/methods/feddymem.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "FedDyMemNet",
    "MemoryGenerator",
    "Projection",
    "coordinates",
    "sample_grid",
]


def coordinates(n: int, h: int, w: int, device: torch.device | None = None) -> torch.Tensor:
    """The coordinate channels ``(n, 2, h, w)``: X (columns) then Y (rows), each in [-1, 1]."""
    ys = torch.linspace(-1.0, 1.0, h, device=device) if h > 1 else torch.zeros(1, device=device)
    xs = torch.linspace(-1.0, 1.0, w, device=device) if w > 1 else torch.zeros(1, device=device)
    yy, xx = torch.meshgrid(ys, xs, indexing="ij")
    return torch.stack([xx, yy]).unsqueeze(0).expand(n, -1, -1, -1)


def sample_grid(grid: torch.Tensor, point: torch.Tensor) -> torch.Tensor:
    """[FedDyMem eq. 10-11]: bilinear samples of ``grid`` at ``point``.

    Shapes: grid ``(N, C, H_G, W_G)``, point ``(N, H, W, 2)`` holding :math:`(p_x, p_y)` in
    [-1, 1] -> ``(N, C, H, W)``. ``align_corners=True`` maps :math:`p_x = -1` and :math:`1`
    to the centres of the first and last grid columns: :math:`\tilde p_x = (p_x + 1)
    (W_G - 1) / 2` (eq. 10), and the four-neighbour weights are those of eq. 11.
    """
    return F.grid_sample(grid, point, mode="bilinear", align_corners=True)


class Projection(nn.Module):
    """[FedDyMem eq. 9] ``(N, C_in, H, W) -> (N, C, H, W)``: 1x1 convolution, LeakyReLU."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(self.conv(x), 0.2)


class MemoryGenerator(nn.Module):
    """[FedDyMem eq. 10-11] ``(N, C, H, W) -> (N, C, H, W)``: CoordConv, grid sampling, fusion."""

    def __init__(self, channels: int, grid: int = 8) -> None:
        super().__init__()
        c = channels
        self.coordconv = nn.Conv2d(c + 2, c, 1)
        self.to_point = nn.Sequential(nn.Conv2d(c, c, 1), nn.LeakyReLU(0.2), nn.Conv2d(c, 2, 1))
        self.grid = nn.Parameter(torch.empty(1, c, grid, grid))
        nn.init.xavier_normal_(self.grid)
        self.fuse = nn.Conv2d(2 * c, c, 1)

    def forward(self, p: torch.Tensor) -> torch.Tensor:
        n, _, h, w = p.shape
        p_hat = self.coordconv(torch.cat([p, coordinates(n, h, w, p.device)], dim=1))
        point = torch.tanh(self.to_point(p_hat)).permute(0, 2, 3, 1)  # (N, H, W, 2): (x, y)
        grid = self.grid.expand(n, -1, -1, -1)
        sampled = sample_grid(grid, point)
        out: torch.Tensor = self.fuse(torch.cat([sampled, p_hat], dim=1))
        return out


class FedDyMemNet(nn.Module):
    """Projection then memory generator (Algorithm 1 lines 2-4, after the frozen backbone)."""

    def __init__(
        self,
        cin: int,
        channels: int,
        grid: int = 8,
        projection: bool = True,
        generator: bool = True,
        spread: bool = False,
    ) -> None:
        super().__init__()
        if not projection and channels != cin:
            raise ValueError("without the projection the memory has the input's channels")
        self.projection = Projection(cin, channels) if projection else nn.Identity()
        self.generator = MemoryGenerator(channels, grid) if generator else nn.Identity()
        self.spread: torch.Tensor | None
        if spread:
            self.register_buffer("spread", torch.ones(()))
        else:
            self.spread = None

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.generator(self.projection(features))
        return out if self.spread is None else out / self.spread
