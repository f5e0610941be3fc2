"""Beyond paper A, k-sparse parity: the closed-form population loss against enumeration of all 2^d
inputs, its k = 2 reduction to paper A, its gradient, the step unit and the k-head inits."""

import itertools
import math

import pytest
import torch

from attnrepro.papers.sparse_xor import kparity as K
from attnrepro.papers.sparse_xor import task as X
from attnrepro.papers.sparse_xor.attention import step_unit
from attnrepro.papers.sparse_xor.kheads import KHeadParityAttention, draw_queries, step_unit_k
from attnrepro.seeding import replica_generators

DT = torch.float64


def _gammas(kind, R, k, d, seed):
    g = torch.Generator().manual_seed(seed)
    if kind == "softmax":
        return torch.softmax(2.0 * torch.randn(R, k, d, generator=g, dtype=DT), -1)
    return torch.randn(R, k, d, generator=g, dtype=DT)  # arbitrary real vectors


def _supports(R, d, k, seed):
    gens = replica_generators(seed, R)
    return torch.tensor([K.draw_support_k(gen, d, k) for gen in gens])


def test_rademacher_cumulants():
    """kappa_2,4,6,8 = 1, -2, 16, -272, odd ones 0: from the moments and from log cosh's series."""
    kap = K.rademacher_cumulants(8)
    assert {n: kap[n] for n in (2, 4, 6, 8)} == K.RADEMACHER_CUMULANTS
    assert all(kap[n] == 0 for n in (1, 3, 5, 7))
    # log cosh t = sum kappa_n t^n / n!: check the series against the function at small t
    t = 0.3
    series = sum(kap[n] * t**n / math.factorial(n) for n in range(1, 9))
    assert abs(series - math.log(math.cosh(t))) < 1e-7


@pytest.mark.parametrize("k", [3, 4])
@pytest.mark.parametrize("d", [6, 9, 12])
@pytest.mark.parametrize("kind", ["softmax", "real"])
@pytest.mark.parametrize("noise", [0.0, 0.15])
def test_population_loss_k_equals_enumeration(k, d, kind, noise):
    R = 3
    gam = _gammas(kind, R, k, d, seed=10 * d + k)
    S = _supports(R, d, k, seed=d + k)
    closed = K.population_loss_k(gam, S, noise)
    brute = K.brute_force_population_loss_k(gam, S, d, noise)
    assert torch.allclose(closed, brute, rtol=0, atol=1e-10 * max(1.0, brute.abs().max().item()))
    assert (closed - 0.5).abs().max() > 1e-3  # the gammas are not a trivial point


def test_loss_k_at_perfect_heads_and_permuted_heads():
    """Heads one-to-one on S (any order) give L = 0, or 2 eps with label noise; two heads on the
    same position of S give the uncorrelated 1/2 (1 + 1) = 1."""
    d, k = 10, 3
    S = torch.tensor([[1, 4, 7]])
    gam = torch.zeros(1, k, d, dtype=DT)
    for h, i in enumerate([7, 1, 4]):
        gam[0, h, i] = 1.0
    assert torch.allclose(K.population_loss_k(gam, S), torch.zeros(1, dtype=DT), atol=1e-14)
    assert torch.allclose(K.population_loss_k(gam, S, 0.1), torch.tensor([0.2], dtype=DT), atol=1e-14)
    gam[0, 2] = 0.0
    gam[0, 2, 7] = 1.0  # heads 0 and 2 both on 7: f = -x_1, y = -x_1 x_4 x_7, E f y = 0, E f^2 = 1
    assert torch.allclose(K.population_loss_k(gam, S), torch.ones(1, dtype=DT), atol=1e-14)


@pytest.mark.parametrize("kind", ["softmax", "real"])
def test_k2_reduces_to_paper_A(kind):
    R, d = 5, 11
    gam = _gammas(kind, R, 2, d, seed=3)
    S = _supports(R, d, 2, seed=4)
    for noise in (0.0, 0.2):
        ours = K.population_loss_k(gam, S, noise)
        theirs = X.population_loss(gam[:, 0], gam[:, 1], S[:, 0], S[:, 1], noise)
        assert torch.allclose(ours, theirs, rtol=0, atol=1e-12)
    assert K.second_moment_polynomial(2)[2] == (1, 2, -2)


@pytest.mark.parametrize("k", [3, 4])
def test_gradient_of_loss_k_matches_finite_differences(k):
    d, R = 7, 2
    g = torch.Generator().manual_seed(k)
    s = torch.randn(R, k, d, generator=g, dtype=DT, requires_grad=True)
    S = _supports(R, d, k, seed=7)

    def loss(scores):
        return K.population_loss_k(torch.softmax(scores, -1), S, 0.1).sum()

    (auto,) = torch.autograd.grad(loss(s), s)
    fd = torch.zeros_like(auto)
    h = 1e-6
    with torch.no_grad():
        for idx in itertools.product(*(range(n) for n in s.shape)):
            e = torch.zeros_like(s)
            e[idx] = h
            fd[idx] = (loss(s + e) - loss(s - e)) / (2 * h)
    assert auto.abs().max() > 1e-3
    assert torch.allclose(auto, fd, rtol=0, atol=1e-8)
    # and the brute-force loss has the same gradient
    (brute,) = torch.autograd.grad(K.brute_force_population_loss_k(torch.softmax(s, -1), S, d, 0.1).sum(), s)
    assert torch.allclose(auto, brute, rtol=0, atol=1e-12)


def test_simplex_init_k2_is_antisymmetric():
    for seed in range(5):
        th = draw_queries(torch.Generator().manual_seed(seed), 9, 2, "simplex")
        assert torch.equal(th[1], -th[0])
        assert abs(th[0].norm().item() - 1) < 1e-14


@pytest.mark.parametrize("k", [3, 4, 5])
def test_simplex_and_orthogonal_inits(k):
    m = 12
    model = KHeadParityAttention.draw(replica_generators(0, 4), 20, m, k, "softmax", "simplex")
    th = model.theta.detach()
    gram = th @ th.transpose(-1, -2)
    target = torch.full((k, k), -1.0 / (k - 1), dtype=DT) + (1 + 1.0 / (k - 1)) * torch.eye(k, dtype=DT)
    assert torch.allclose(th.sum(1), torch.zeros(4, m, dtype=DT), atol=1e-14)
    assert torch.allclose(gram, target.expand(4, k, k), atol=1e-13)
    assert (th[0] - th[1]).abs().max() > 0.1  # replicas differ
    ortho = KHeadParityAttention.draw(replica_generators(0, 4), 20, m, k, "softmax", "orthogonal").theta.detach()
    assert torch.allclose(ortho @ ortho.transpose(-1, -2), torch.eye(k, dtype=DT).expand(4, k, k), atol=1e-13)
    pairs = KHeadParityAttention.draw(replica_generators(0, 4), 20, m, k, "softmax", "antisymmetric_pairs").theta
    assert torch.equal(pairs[:, 1], -pairs[:, 0])
    scaled = KHeadParityAttention.draw(replica_generators(0, 4), 20, m, k, "softmax", "simplex", norm=3.0).theta
    assert torch.allclose(scaled, 3.0 * th, rtol=1e-14, atol=0)


def test_model_forward_and_seeding():
    d, m, k, R = 8, 5, 3, 3
    model = KHeadParityAttention.draw(replica_generators(1, R), d, m, k, "softmax", "independent")
    alone = KHeadParityAttention.draw(replica_generators(2, 1), d, m, k, "softmax", "independent")
    assert torch.equal(model.V[1], alone.V[0]) and torch.equal(model.theta[1], alone.theta[0])
    x = X.all_inputs(d)
    f = model(x.expand(R, *x.shape))
    gam = model.heads()
    assert torch.allclose(f, -torch.einsum("nd,rkd->rnk", x, gam).prod(-1))
    S = _supports(R, d, k, seed=0)
    y = -x[:, S].prod(-1).T  # (R, N)
    brute = (0.5 * (f - y) ** 2).mean(-1)
    assert torch.allclose(K.population_loss_k(gam, S), brute, atol=1e-12)
    lab = K.labels_k(x.to(torch.int8), tuple(S[0].tolist()), 0.0, torch.Generator())
    assert torch.equal(lab.to(DT), y[0])


@pytest.mark.parametrize("k", [2, 3, 4])
def test_step_unit_k_moves_support_scores_by_lr_sqrt_m(k):
    """One population step of eta = step_unit_k at a softmax init moves the support scores by
    about sqrt(m) (the derivation in step_unit_k), the other scores by O(1)."""
    d, m, R = 64, 144, 16
    model = KHeadParityAttention.draw(replica_generators(5, R), d, m, k, "softmax", "simplex")
    S = _supports(R, d, k, seed=11)
    (grad,) = torch.autograd.grad(K.population_loss_k(model.heads(), S).sum(), model.theta)
    ds = -step_unit_k("softmax", d, m, k) * torch.einsum("rdm,rkm->rkd", model.V, grad) / math.sqrt(m)
    on = K.support_matrix(ds, S)  # (R, k, k)
    mask = torch.ones(R, k, d, dtype=torch.bool)
    mask.scatter_(-1, S.unsqueeze(1).expand(R, k, k), False)
    assert abs(on.mean().item() - 1) < 0.15
    assert ds[mask].abs().mean() < 0.3
    # |grad_theta_h L| ~ sqrt(k) (k-1)!/d^k (the gradient is ~ -(k-1)!/d^k sum_{p in S} v_p)
    ratio = grad.norm(dim=-1).mean().item() * d**k / (math.sqrt(k) * math.factorial(k - 1))
    assert abs(ratio - 1) < 0.1
    if k == 2:
        assert step_unit_k("softmax", d, m, 2) == step_unit("softmax", d, m)
