"""Paper B's simulation core: attention-indexed data, tied-attention students, the problem."""

from __future__ import annotations

import math

import pytest
import torch

from attnrepro.config import ConfigError, DType, Optimizer, TrainConfig, validate
from attnrepro.jobs.grid import compose as grid_compose
from attnrepro.papers.tied_attention import task as AI
from attnrepro.papers.tied_attention.config import AttentionIndexedTask, Output, Param, Target, TiedAttentionModel
from attnrepro.papers.tied_attention.problem import build
from attnrepro.seeding import replica_generators

F64 = torch.float64


def make(seed=0, n_seeds=2, param="factorized", output="seq2lab", chunk=8192, **kw):
    """A problem from small configs; kw goes to the task or the model by field name."""
    model_fields = {"kappa", "beta", "lam", "init_scale"}
    task = AttentionIndexedTask(d=kw.pop("d", 8), T=kw.pop("T", 3), alpha=kw.pop("alpha", 0.5),
                                output=Output(output), n_val=kw.pop("n_val", 16), n_test=kw.pop("n_test", 16),
                                **{k: v for k, v in kw.items() if k not in model_fields})
    model = TiedAttentionModel(param=Param(param), **{k: v for k, v in kw.items() if k in model_fields})
    train = TrainConfig(optimizer=Optimizer.adam, lr=0.1, dtype=DType.float64, chunk=chunk)
    return build(task, model, train, replica_generators(seed, n_seeds))


def backward(loss):
    loss.backward()


def set_S(problem, S):
    """Put the student at S: direct A = sqrt(p d) S; factorized (p = d) W = (p d)^(1/4) S^(1/2), S PSD."""
    model = problem.model
    scale = math.sqrt(model.p * model.d)
    with torch.no_grad():
        if hasattr(model, "A"):
            model.A.copy_(scale * S)
        else:
            vals, vecs = torch.linalg.eigh(S)
            root = (vecs * vals.clamp(min=0).sqrt()[..., None, :]) @ vecs.transpose(-1, -2)
            model.W.copy_(math.sqrt(scale) * root)


# --- data ---------------------------------------------------------------------------------------

def test_preactivations_match_definition_and_subtract_trace():
    g = torch.Generator().manual_seed(1)
    d, T = 6, 3
    S = AI.wishart_target(g, d, 3)
    X = AI.draw_tokens(g, 5, T, d)
    naive = torch.einsum("nad,de,nbe->nab", X, S, X) - torch.trace(S) * torch.eye(T, dtype=F64)
    assert torch.allclose(AI.preactivations(X, S), naive / math.sqrt(d), atol=1e-12)
    # E h_aa = 0 although Tr S / sqrt(d) is O(1): Monte Carlo with 5 standard errors
    X = AI.draw_tokens(g, 20000, T, d)
    h = AI.preactivations(X, S)
    diag = torch.diagonal(h, dim1=-2, dim2=-1)
    se = math.sqrt(2 * (S**2).sum() / d / diag.numel())
    assert torch.trace(S) / math.sqrt(d) > 10 * se
    assert abs(diag.mean()) < 5 * se


def test_noise_covariance():
    g = torch.Generator().manual_seed(2)
    N, T, Delta = 100000, 3, 0.7
    xi = AI.draw_noise(g, N, T, Delta)
    assert torch.equal(xi, xi.transpose(-1, -2))
    diag = torch.diagonal(xi, dim1=-2, dim2=-1).flatten()
    off = xi[:, 0, 1:].flatten()  # independent off-diagonal entries of row 0
    for x, var in ((diag, Delta), (off, Delta / 2)):
        assert abs(x.var() - var) < 5 * var * math.sqrt(2 / x.numel())
        assert abs(x.mean()) < 5 * math.sqrt(var / x.numel())


def test_wishart_Q0_close_to_one_plus_kappa0():
    d, kappa0 = 200, 0.5
    q0 = [(AI.draw_target(g, d, "wishart", kappa0) ** 2).sum() / d for g in replica_generators(0, 3)]
    assert abs(sum(q0) / 3 - (1 + kappa0 + 1 / d)) < 0.05


def test_rotated_targets_have_their_spectrum():
    g = torch.Generator().manual_seed(3)
    d, gamma = 10, 0.8
    S0 = AI.draw_target(g, d, "power_law", gamma=gamma)
    assert torch.allclose(torch.linalg.eigvalsh(S0).flip(0), AI.power_law_eigenvalues(d, gamma), atol=1e-12)
    S0 = AI.draw_target(g, d, "explicit", eigenvalues=[2.0, -1.0, 0.5])
    expected = torch.tensor([-1.0] + [0.0] * (d - 3) + [0.5, 2.0], dtype=F64)
    assert torch.allclose(torch.linalg.eigvalsh(S0), expected, atol=1e-12)


def test_seq2lab_and_seq2seq_share_draws():
    lab, _ = make(seed=5, output="seq2lab")
    seq, _ = make(seed=5, output="seq2seq")
    assert torch.equal(lab.S0, seq.S0)
    for name in ("train_set", "val_set", "test_set"):
        a, b = getattr(lab, name), getattr(seq, name)
        assert torch.equal(a.X, b.X) and torch.equal(a.A, b.A)
    X = lab.train_set.X
    assert torch.allclose(seq.model(X), lab.model(X) @ X, atol=1e-12)
    assert torch.allclose(AI.output(lab.train_set.A, X, "seq2seq"), lab.train_set.A @ X)


def test_alpha_sweep_keeps_target_init_and_held_out_sets():
    small, _ = make(alpha=0.3)
    large, _ = make(alpha=0.6)
    assert small.train_set.n < large.train_set.n
    assert torch.equal(small.S0, large.S0) and torch.equal(small.model.W, large.model.W)
    for name in ("val_set", "test_set"):
        assert torch.equal(getattr(small, name).X, getattr(large, name).X)


# --- students -----------------------------------------------------------------------------------

def test_factorized_preactivations_and_penalty():
    problem, derived = make(lam=0.3, kappa=0.75)
    model, X = problem.model, problem.train_set.X
    S = model.S()
    assert torch.allclose(model.preactivations(X), AI.preactivations(X, S), atol=1e-12)
    p, d = derived["p"], model.d
    expected = 0.5 * 0.3 * math.sqrt(p * d) * torch.diagonal(S, dim1=-2, dim2=-1).sum(-1)
    assert torch.allclose(model.penalty(), expected, rtol=1e-12)


def test_direct_stays_symmetric_under_adam():
    problem, _ = make(param="direct", lam=0.1)
    A = problem.model.A
    assert torch.equal(A, A.transpose(-1, -2))
    opt = torch.optim.Adam(problem.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        problem.accumulate(backward)
        opt.step()
    assert torch.equal(A, A.transpose(-1, -2))


@pytest.mark.parametrize("output", ["seq2lab", "seq2seq"])
@pytest.mark.parametrize("param", ["factorized", "direct"])
def test_exact_target_has_zero_error(param, output):
    problem, _ = make(param=param, output=output, kappa=1.0, n_seeds=2)
    set_S(problem, problem.S0)
    m = problem.evaluate()
    for name in ("test_error", "train_loss", "val_error", "estimation_error"):
        assert float(m[name].abs().max()) < 1e-24, name


@pytest.mark.parametrize("output", ["seq2lab", "seq2seq"])
@pytest.mark.parametrize("param", ["factorized", "direct"])
def test_gradient_matches_finite_differences(param, output):
    problem, _ = make(param=param, output=output, d=5, alpha=0.5, lam=0.3, Delta=0.5, chunk=4)
    (theta,) = list(problem.parameters())
    problem.zero_grad()
    problem.accumulate(backward)
    grad = theta.grad.clone()
    g = torch.Generator().manual_seed(7)
    eps = 1e-6
    for _ in range(3):
        v = torch.randn(theta.shape, generator=g, dtype=F64)
        with torch.no_grad():
            theta += eps * v
            up = problem.accumulate(None).sum()
            theta -= 2 * eps * v
            down = problem.accumulate(None).sum()
            theta += eps * v
        fd = (up - down) / (2 * eps)
        assert torch.allclose(fd, (grad * v).sum(), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("param", ["factorized", "direct"])
def test_replicas_equal_separate_runs(param):
    def adam(problem, steps=4):
        opt = torch.optim.Adam(problem.parameters(), lr=0.1)
        for _ in range(steps):
            opt.zero_grad()
            problem.accumulate(backward)
            opt.step()
        return next(problem.parameters()).detach()

    joint = adam(make(seed=3, n_seeds=3, param=param, lam=0.05, Delta=0.2)[0])
    for r in range(3):
        alone = adam(make(seed=3 + r, n_seeds=1, param=param, lam=0.05, Delta=0.2)[0])
        assert torch.allclose(joint[r], alone[0], rtol=1e-10, atol=1e-12)


def test_metrics_and_arrays_shapes():
    problem, derived = make(n_seeds=2, d=8, kappa0=0.5, output="seq2seq")
    assert derived["p0"] == 4 and derived["n"] == round(0.5 * 64)
    m = problem.evaluate()
    assert {"train_loss", "objective", "val_error", "test_error", "attention_error", "estimation_error",
            "rank_collapse"} <= set(m)
    assert all(v.shape == (2,) for v in m.values())
    est = problem.S0.pow(2).sum((-1, -2)) / 8 - 2 * m["m"] + m["q"]
    assert torch.allclose(m["estimation_error"], est, atol=1e-12)
    arr = problem.arrays()
    assert arr["eigenvalues"].shape == (2, 8) and arr["overlap_quadratic"].shape == (2, 4)


def test_overlaps_at_the_target():
    problem, _ = make(kappa=1.0, d=10, kappa0=0.3)
    set_S(problem, problem.S0)
    arr = problem.arrays()
    assert torch.allclose(arr["overlap_quadratic"], torch.ones(2, 3, dtype=F64), atol=1e-8)
    assert torch.allclose(arr["overlap_subspace"], torch.ones(2, 3, dtype=F64), atol=1e-8)
    assert torch.allclose(problem.evaluate()["rank_collapse"], torch.full((2,), 0.7, dtype=F64))


# --- configs ------------------------------------------------------------------------------------

def compose(*overrides):
    base = ["task=attention_indexed", "model=tied_factorized", "train=adam_fullbatch"]
    return grid_compose([*base, *overrides])


def test_configs_compose_with_the_reference_defaults():
    for model in ("tied_factorized", "tied_direct"):
        obj = validate(compose(f"model={model}"))
        assert obj.task.target == Target.wishart and obj.task.T == 2 and obj.model.lam == 0.0
        assert obj.task.n() == 2000 and obj.model.p(obj.task.d) == 50 and obj.train.lr == 0.1


def test_impossible_values_are_named():
    bad = ["task.d=1", "task.T=1", "task.alpha=0", "task.kappa0=0", "task.gamma=0.5", "task.Delta=-1",
           "model.lam=-0.1", "model.kappa=0", "task.beta0=0", "model.init_scale=0"]
    with pytest.raises(ConfigError) as e:
        validate(compose(*bad))
    for field in ("task.d", "task.T", "task.alpha", "task.kappa0", "task.gamma", "task.Delta", "model.lam",
                  "model.kappa", "task.beta0", "model.init_scale"):
        assert field in str(e.value), field
    with pytest.raises(ConfigError, match="task.eigenvalues"):
        validate(compose("task.target=explicit"))
    with pytest.raises(ConfigError, match="task.eigenvalues"):
        validate(compose("task.target=explicit", "task.d=3", "task.eigenvalues=[1,2,3,4]"))


@pytest.mark.parametrize("T", [2, 3])
def test_factorized_preactivations_and_gradient_match_plain_autograd(T):
    """The fused token Gram (model._TokenGram) against autograd through h = X S X^T - Tr(S) I, S = W^T W /
    sqrt(p d), all divided by sqrt(d), in float64: values and dW to 1e-10 relative."""
    from attnrepro.papers.tied_attention.model import FactorizedTiedAttention

    g = torch.Generator().manual_seed(3)
    R, n, d, p = 3, 17, 9, 5
    X = torch.randn(R, n, T, d, generator=g, dtype=torch.float64)
    U = torch.randn(R, n, T, T, generator=g, dtype=torch.float64)
    model = FactorizedTiedAttention(torch.randn(R, p, d, generator=g, dtype=torch.float64), 1.0, 0.0, "seq2lab")
    fused = model.preactivations(X)
    (grad_fused,) = torch.autograd.grad((fused * U).sum(), model.W)
    S = model.W.transpose(-1, -2) @ model.W / math.sqrt(p * d)
    trace = torch.diagonal(S, dim1=-2, dim2=-1).sum(-1)[:, None, None, None]
    plain = (X @ S[:, None] @ X.transpose(-1, -2) - trace * torch.eye(T, dtype=X.dtype)) / math.sqrt(d)
    (grad_plain,) = torch.autograd.grad((plain * U).sum(), model.W)
    assert torch.allclose(fused, plain, rtol=1e-10, atol=1e-12)
    assert torch.allclose(grad_fused, grad_plain, rtol=1e-10, atol=1e-12)



@pytest.fixture
def by_hand_chunks(monkeypatch):
    """The chunk sizes FactorizedTiedAttention.pair_fit_gradient is called with, in order."""
    from attnrepro.papers.tied_attention.model import FactorizedTiedAttention

    calls = []
    original = FactorizedTiedAttention.pair_fit_gradient
    monkeypatch.setattr(FactorizedTiedAttention, "pair_fit_gradient",
                        lambda self, *a: calls.append(a[-1]) or original(self, *a))
    return calls


def _by_hand(problem):
    """problem.accumulate(Tensor.backward): the objective and W's gradient."""
    problem.zero_grad()
    f = problem.accumulate(torch.Tensor.backward)
    return f, problem.model.W.grad.clone()


@pytest.mark.parametrize("kappa", [0.4, 1.2])  # p = 3 and 8 at d = 7: through z, and through W^T W (d < 2 p)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_gradient_by_hand_is_autograds(dtype, kappa, by_hand_chunks):
    """T = 2, seq2lab, factorized: the objective and gradient by hand (FactorizedTiedAttention.pair_fit_gradient,
    in 10-sample chunks, by both of its routes) against autograd's route through _TokenGram and the softmax, at
    beta != 1, noisy labels and a penalty: float64 to 1e-12, float32 to its rounding."""
    problem, _ = make(n_seeds=3, T=2, d=7, alpha=2.0, lam=0.3, beta=1.7, kappa=kappa, Delta=0.5, chunk=10)
    problem = problem.to(dtype)
    f, grad = _by_hand(problem)
    assert by_hand_chunks == [10]
    problem.zero_grad()
    f_auto = problem.accumulate(backward)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(f, f_auto, rtol=tol, atol=0)
    torch.testing.assert_close(grad, problem.model.W.grad, rtol=tol, atol=tol * float(grad.abs().max()))


@pytest.mark.parametrize("kappa", [0.5, 1.0])
def test_gradient_by_hand_is_each_replicas_own(kappa, by_hand_chunks):
    """A replica's objective and gradient by hand are the same bits alone or beside others (its chunks do not
    depend on how many replicas there are), in float64 and float32, with several chunks, by both routes."""
    from attnrepro.lit.compaction import take

    problem, _ = make(n_seeds=4, T=2, d=12, alpha=3.0, lam=0.1, kappa=kappa, Delta=0.5, chunk=50)
    for dtype in (torch.float64, torch.float32):
        full = problem.to(dtype)
        f, grad = _by_hand(full)
        for rows in ([2], [0, 3]):
            f_part, grad_part = _by_hand(take(full, torch.tensor(rows)))
            assert torch.equal(f_part, f[rows]) and torch.equal(grad_part, grad[rows])
    assert set(by_hand_chunks) == {50}
