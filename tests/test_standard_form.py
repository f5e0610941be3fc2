"""Paper A: the standard one-layer two-head CLS transformer equals the simplified model (outputs,
gradients, one SGD step), float64, to 1e-10; the non-CLS query columns get exactly zero gradient."""

import pytest
import torch

from attnrepro.papers.sparse_xor import task as X
from attnrepro.papers.sparse_xor.attention import TwoHeadXorAttention
from attnrepro.papers.sparse_xor.config import (
    Attention,
    Form,
    Init,
    SparseXorTask,
    SparseXorTrainConfig,
    XorAttentionModel,
)
from attnrepro.papers.sparse_xor.problem import build
from attnrepro.papers.sparse_xor.transformer import TwoHeadXorTransformer
from attnrepro.seeding import replica_generators

TOL = 1e-10
MAPS, INITS = ["softmax", "linear", "erf"], ["antisymmetric", "independent"]


def _dev(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b|."""
    return float((a - b).detach().abs().max())


def _pair(attention, init, point, d=9, m=6, R=3, seed=4):
    """(simplified, standard) at the same parameters: the draw scaled to norm 3 ('init'), or
    independent random queries of norm ~3 ('random')."""
    simple = TwoHeadXorAttention.draw(replica_generators(seed, R), d, m, attention, init)
    g = torch.Generator().manual_seed(17)
    with torch.no_grad():
        if point == "init":
            simple.theta.mul_(3.0)
            simple.theta_tilde.mul_(3.0)
        else:
            simple.theta.copy_(3.0 * torch.randn(R, m, generator=g, dtype=torch.float64) / m**0.5)
            simple.theta_tilde.copy_(3.0 * torch.randn(R, m, generator=g, dtype=torch.float64) / m**0.5)
    return simple, TwoHeadXorTransformer.from_simplified(simple)


def _inputs(R, n, d, seed=5):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 2, (R, n, d), generator=g) * 2 - 1).to(torch.float64)


def _grads(simple, std, loss_of):
    """Simplified (theta, theta~) grads and the standard W_Q grad of the same loss."""
    g_simple = torch.autograd.grad(loss_of(simple).sum(), [simple.theta, simple.theta_tilde])
    (g_std,) = torch.autograd.grad(loss_of(std).sum(), [std.W_Q])
    return g_simple, g_std


def test_draw_is_the_simplified_draw():
    for attention in MAPS:
        for init in INITS:
            a = TwoHeadXorAttention.draw(replica_generators(2, 3), 11, 4, attention, init)
            b = TwoHeadXorTransformer.draw(replica_generators(2, 3), 11, 4, attention, init)
            theta, theta_t = b.queries()
            assert torch.equal(a.V, b.V) and torch.equal(a.theta, theta) and torch.equal(a.theta_tilde, theta_t)
            assert [n for n, _ in b.named_parameters()] == ["W_Q"] and b.dtype == torch.float64


@pytest.mark.parametrize("point", ["init", "random"])
@pytest.mark.parametrize("init", INITS)
@pytest.mark.parametrize("attention", MAPS)
def test_outputs_and_gradients_equal_simplified(attention, init, point):
    simple, std = _pair(attention, init, point)
    R, d, m = simple.V.shape
    cls = m + 1
    x = _inputs(R, 50, d)
    y = _inputs(R, 50, 1, seed=6)[..., 0]
    assert _dev(std(x), simple(x)) <= TOL
    for a, b in zip(std.heads(), simple.heads()):
        assert _dev(a, b) <= TOL
    p, q = torch.tensor([0, 3, d - 1]), torch.tensor([1, 8, 2])
    losses = {"mse": lambda mod: 0.5 * ((mod(x) - y) ** 2).mean(-1),
              "population": lambda mod: X.population_loss(*mod.heads(), p, q, 0.1)}
    for loss_of in losses.values():
        (g_th, g_tht), g = _grads(simple, std, loss_of)
        assert _dev(g[:, 0, :, cls], g_th) <= TOL
        assert _dev(g[:, 1, :, cls], g_tht) <= TOL
        assert float(g_th.abs().max()) > 1e-6  # a non-trivial gradient
        others = torch.ones(g.shape[-1], dtype=torch.bool)
        others[cls] = False
        assert torch.equal(g[..., others], torch.zeros_like(g[..., others]))  # exactly 0


@pytest.mark.parametrize("attention", MAPS)
def test_cls_self_score_is_masked(attention):
    simple, std = _pair(attention, "independent", "random")
    R, d, _ = simple.V.shape
    assert std.mask.shape == (d + 1, d + 1) and not std.mask[:, 0].any() and std.mask[:, 1:].all()
    x = _inputs(R, 20, d)
    A = std.cls_attention(std.embed(x))
    assert A.shape == (R, 2, 20, d + 1) and torch.equal(A[..., 0], torch.zeros_like(A[..., 0]))
    if attention == "softmax":  # the mask matters: unmasked, CLS (score q_0 . k_0 = 0) takes weight
        assert torch.allclose(A.sum(-1), torch.ones_like(A.sum(-1)), rtol=0, atol=1e-12)
        std.mask.fill_(True)
        with torch.no_grad():
            assert float(std.cls_attention(std.embed(x))[..., 0].min()) > 1e-4
            assert float((std(x) - simple(x)).abs().max()) > 1e-4


@pytest.mark.parametrize("n", [None, 40])
@pytest.mark.parametrize("init", INITS)
@pytest.mark.parametrize("attention", MAPS)
def test_one_sgd_step_through_build_equal(attention, init, n):
    """problem.build for both forms, one SGD step on the population (n None) or empirical loss."""
    task = SparseXorTask(d=16, n=n, noise=0.1)
    train = SparseXorTrainConfig(name="one_step", lr=50.0 if attention == "softmax" else 0.2, chunk=16)
    after = {}
    for form in Form:
        model = XorAttentionModel(attention=Attention(attention), init=Init(init), m=5, form=form)
        problem, derived = build(task, model, train, replica_generators(3, 4))
        assert isinstance(problem.model, TwoHeadXorTransformer) == (form is Form.standard)
        opt = torch.optim.SGD(problem.parameters(), lr=derived["lr"])
        before = problem.accumulate(lambda loss: loss.backward())
        opt.step()
        after[form] = before, problem.population_loss().detach(), problem.model.heads()
    (b0, l0, h0), (b1, l1, h1) = after[Form.simplified], after[Form.standard]
    assert _dev(b1, b0) <= TOL
    assert _dev(l1, l0) <= TOL and float((l0 - b0).abs().max()) > 1e-8  # the step moved
    for a, b in zip(h1, h0):
        assert _dev(a, b) <= TOL

