"""ProtoFL's math: the flow against autograd, the losses on hand cases."""

from __future__ import annotations

import math

import torch
from torch.autograd.functional import jacobian

from fedad.methods.protofl.model import (
    Encoder,
    distillation_kl,
    flow_latent,
    flow_nll,
    make_flow,
    phase1_loss,
    phase2_loss,
    positive_cosine_loss,
    prototype_distillation_loss,
)


def _flow(dim: int = 4) -> torch.nn.Module:
    torch.manual_seed(0)
    flow = make_flow(dim, layers=8, hidden=8)
    # move off the near-identity initialisation so the test means something
    with torch.no_grad():
        for p in flow.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return flow.double()


def test_flow_is_invertible() -> None:
    flow = _flow()
    r = torch.randn(16, 4, dtype=torch.float64)
    z, _ = flow_latent(flow, r)
    back = flow().transform.inv(z)
    torch.testing.assert_close(back, r, atol=1e-8, rtol=1e-8)
    assert not torch.allclose(z, r)


def test_log_determinant_matches_autograd_jacobian() -> None:
    flow = _flow()
    r = torch.randn(5, 4, dtype=torch.float64)
    _, ladj = flow_latent(flow, r)
    for i in range(len(r)):
        jac = jacobian(lambda x: flow_latent(flow, x[None])[0][0], r[i])
        want = torch.linalg.slogdet(jac).logabsdet
        torch.testing.assert_close(ladj[i], want, atol=1e-8, rtol=1e-8)


def test_nll_is_the_change_of_variables_density() -> None:
    flow = _flow()
    r = torch.randn(7, 4, dtype=torch.float64)
    torch.testing.assert_close(flow_nll(flow, r), -flow().log_prob(r))
    z, ladj = flow_latent(flow, r)
    want = 0.5 * (z**2).sum(1) - ladj + 2 * math.log(2 * math.pi)
    torch.testing.assert_close(flow_nll(flow, r), want)


def test_positive_cosine_loss_hand_cases() -> None:
    a = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    b = torch.tensor([[2.0, 0.0], [0.0, 3.0], [-1.0, 0.0]])
    assert positive_cosine_loss(a[:1], b[:1]).item() == 0.0  # parallel
    assert positive_cosine_loss(a[1:2], b[1:2]).item() == 1.0  # orthogonal
    assert positive_cosine_loss(a[2:], b[2:]).item() == 2.0  # opposite
    assert math.isclose(positive_cosine_loss(a, b).item(), 1.0)


def test_kl_hand_case() -> None:
    # softmax([0, log 3]) = (1/4, 3/4); softmax([0, 0]) = (1/2, 1/2)
    v = torch.tensor([0.0, math.log(3.0)])
    r = torch.zeros(2, 2)
    want = 0.25 * math.log(0.5) + 0.75 * math.log(1.5)
    assert math.isclose(distillation_kl(v, r).item(), want, rel_tol=1e-6)
    assert abs(distillation_kl(v, v[None].repeat(3, 1)).item()) < 1e-7
    # a softmax is shift invariant: r = v + c gives zero divergence
    assert abs(distillation_kl(v, v[None] + 5.0).item()) < 1e-6
    # the two views contribute equally [ProtoFL eq. 7]
    assert math.isclose(prototype_distillation_loss(v, r, r).item(), 2 * want, rel_tol=1e-6)
    # temperature 2 halves the logits
    want_t = 0.25 * math.log(0.5) + 0.75 * math.log(1.5)
    v2 = 2 * v
    assert math.isclose(distillation_kl(v2, r, temperature=2.0).item(), want_t, rel_tol=1e-6)


def test_phase_losses_combine_as_eqs_8_and_11() -> None:
    torch.manual_seed(1)
    v, r, rh = torch.randn(6), torch.randn(3, 6), torch.randn(3, 6)
    total, lpd, lp = phase1_loss(v, r, rh, alpha=0.1)
    torch.testing.assert_close(lpd, prototype_distillation_loss(v, r, rh))
    torch.testing.assert_close(lp, positive_cosine_loss(r, rh))
    torch.testing.assert_close(total, 0.9 * lpd + 0.1 * lp)
    alone, _, _ = phase1_loss(None, r, rh)
    torch.testing.assert_close(alone, lp)

    flow = _flow(6)
    h, hh = torch.randn(5, 6, dtype=torch.float64), torch.randn(5, 6, dtype=torch.float64)
    total2, mle, reg = phase2_loss(flow, h, hh, lam=0.01)
    z, _ = flow_latent(flow, h)
    zh, _ = flow_latent(flow, hh)
    torch.testing.assert_close(reg, positive_cosine_loss(z, zh))
    c = 3 * math.log(2 * math.pi)  # eq. 9 drops the constant
    torch.testing.assert_close(
        mle, 0.5 * (flow_nll(flow, h).mean() + flow_nll(flow, hh).mean()) - c
    )
    torch.testing.assert_close(total2, mle + 0.01 * reg)


def test_encoder_takes_any_small_image_and_vectors() -> None:
    for shape in [(1, 8, 8), (1, 28, 28), (3, 32, 32), (12,)]:
        enc = Encoder(shape, rep_dim=16, proto_dim=40, width=8)
        assert enc(torch.rand(2, *shape)).shape == (2, 40)
        assert enc.trunk(torch.rand(2, *shape)).shape == (2, 16)
        names = [type(m).__name__ for m in enc.modules()]
        assert "GroupNorm" in names and not any("BatchNorm" in n for n in names)
