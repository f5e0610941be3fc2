"""Paper A maths: the closed-form population loss against brute-force enumeration."""

import math

import pytest
import torch

from attnrepro.papers.sparse_xor import task as X
from attnrepro.papers.sparse_xor.attention import TwoHeadXorAttention
from attnrepro.seeding import replica_generators

torch.set_default_dtype(torch.float64)


def _model(d, m, attention, init, seed=0, n_seeds=3, scale=1.0):
    model = TwoHeadXorAttention.draw(replica_generators(seed, n_seeds), d, m, attention, init)
    with torch.no_grad():  # move off the init symmetry so every term of L matters
        model.theta.mul_(scale)
        model.theta_tilde.add_(0.7 * torch.randn(model.theta_tilde.shape, generator=torch.Generator().manual_seed(9)))
    return model


@pytest.mark.parametrize("attention", ["softmax", "linear", "erf"])
@pytest.mark.parametrize("d,noise", [(2, 0.0), (5, 0.1), (8, 0.0), (10, 0.25)])
def test_population_loss_and_gradient_equal_enumeration(attention, d, noise):
    """L(theta, theta~) and its gradients in closed form = mean over all 2^d inputs, to 1e-10."""
    model = _model(d, 3, attention, "independent", scale=3.0)
    R = model.theta.shape[0]
    p = torch.tensor([0, 1, d - 1][:R])
    q = torch.tensor([1, 0, d - 2][:R])
    x = X.all_inputs(d)

    gamma, gamma_t = model.heads()
    closed = X.population_loss(gamma, gamma_t, p, q, noise)
    g_closed = torch.autograd.grad(closed.sum(), [model.theta, model.theta_tilde])

    f = model(x.expand(R, *x.shape))
    brute = torch.stack([X.brute_force_population_loss(f[r], x, int(p[r]), int(q[r]), noise) for r in range(R)])
    g_brute = torch.autograd.grad(brute.sum(), [model.theta, model.theta_tilde])

    assert torch.allclose(closed, brute, rtol=0, atol=1e-10)
    for a, b in zip(g_closed, g_brute):
        assert torch.allclose(a, b, rtol=0, atol=1e-10)
    assert closed.min() > 0  # non-trivial point


def test_gamma_gradient_formula():
    """dL/dgamma_i = g_i|g~|^2 + 2(g.g~)g~_i - 2 g_i g~_i^2 - 1[i=p] g~_q - 1[i=q] g~_p (SPEC)."""
    d, p, q = 7, 2, 5
    g = torch.randn(1, d, requires_grad=True)
    gt = torch.randn(1, d)
    L = X.population_loss(g, gt, torch.tensor([p]), torch.tensor([q]))
    (auto,) = torch.autograd.grad(L.sum(), g)
    formula = g * (gt**2).sum() + 2 * (g * gt).sum() * gt - 2 * g * gt**2
    formula[0, p] -= gt[0, q]
    formula[0, q] -= gt[0, p]
    assert torch.allclose(auto, formula.detach(), atol=1e-12)


def test_perfect_heads_have_zero_loss_and_uniform_heads_half():
    d = 16
    p, q = torch.tensor([3]), torch.tensor([11])
    e = torch.eye(d)
    assert X.population_loss(e[3:4], e[11:12], p, q).item() == pytest.approx(0.0, abs=1e-15)
    u = torch.full((1, d), 1.0 / d)  # softmax at theta = 0
    expect = 0.5 * (1 / d**2 + 2 / d**2 - 2 / d**3 - 4 / d**2 + 1)
    assert X.population_loss(u, u, p, q).item() == pytest.approx(expect, rel=1e-12)


def test_labels_and_noise_rate():
    g = torch.Generator().manual_seed(0)
    x = X.draw_inputs(g, 20000, 6)
    assert set(x.unique().tolist()) == {-1, 1}
    clean = X.labels(x, 1, 4, 0.0, g)
    assert torch.equal(clean, -(x[:, 1] * x[:, 4]))
    noisy = X.labels(x, 1, 4, 0.2, g)
    rate = (noisy != clean).double().mean().item()
    assert abs(rate - 0.2) < 4 * math.sqrt(0.2 * 0.8 / 20000)


@pytest.mark.parametrize("attention", ["linear", "erf"])
def test_odd_maps_stay_antisymmetric_and_above_quarter(attention):
    """theta~ = -theta is invariant under GD for odd maps, so f = (g.x)^2 >= 0 and L >= 1/4."""
    d = 32
    model = TwoHeadXorAttention.draw(replica_generators(0, 8), d, 25, attention, "antisymmetric")
    p, q = torch.arange(8), torch.arange(8) + 8
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * (25 / d) ** 2)
    lows = []
    for _ in range(2000):
        opt.zero_grad()
        L = X.population_loss(*model.heads(), p, q)
        L.sum().backward()
        opt.step()
        lows.append(L.min().item())
    assert torch.allclose(model.theta_tilde, -model.theta, atol=1e-12)
    assert min(lows) >= 0.25
    assert lows[-1] < lows[0]  # it did descend, towards the 1/4 floor
