"""The PSD exact-fit solver (problems.psd_exact_fit): operator, adjoint, fit / no-fit decisions,
KKT and duality, checked against explicit B matrices and an independent Burer-Monteiro solve."""

import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from attnrepro.papers.tied_attention import exact_fit as pf
from attnrepro.papers.tied_attention.task import preactivations

torch.set_num_threads(1)


def planted_problem(d: int, n: int, R: int = 1, Delta: float = 0.5, p0=None, seed: int = 0):
    """X (R, n, 2, d) i.i.d. N(0, 1); S0 (R, d, d) = W0 W0^T / sqrt(p0 d), W0 (d, p0), p0 = d // 2 by
    default; noise xi symmetric 2x2, Var xi_aa = Delta, Var xi_ab = Delta/2; targets
    t_1 = (h_11 + xi_11) - (h_12 + xi_12), t_2 = (h_22 + xi_22) - (h_12 + xi_12) at S0."""
    gen = torch.Generator().manual_seed(seed)
    p0 = max(1, d // 2) if p0 is None else p0
    W0 = torch.randn(R, d, p0, generator=gen, dtype=torch.float64)
    S0 = W0 @ W0.transpose(-1, -2) / math.sqrt(p0 * d)
    X = torch.randn(R, n, 2, d, generator=gen, dtype=torch.float64)
    g = torch.randn(R, n, 2, 2, generator=gen, dtype=torch.float64)
    xi = math.sqrt(Delta) * 0.5 * (g + g.transpose(-1, -2))
    noise = torch.stack((xi[..., 0, 0] - xi[..., 0, 1], xi[..., 1, 1] - xi[..., 0, 1]), dim=-1)
    return X, pf.logit_differences(X, S0) + noise, S0



def explicit_B(X):
    """B (n, 2, d, d) built from the definition, for one replica X (n, 2, d)."""
    d = X.shape[-1]
    x1, x2 = X[:, 0], X[:, 1]
    eye = torch.eye(d, dtype=X.dtype)
    cross = 0.5 * (x1[:, :, None] * x2[:, None, :] + x2[:, :, None] * x1[:, None, :])
    B1 = x1[:, :, None] * x1[:, None, :] - eye - cross
    B2 = x2[:, :, None] * x2[:, None, :] - eye - cross
    return torch.stack((B1, B2), dim=1) / math.sqrt(d)


def A_explicit(B, S):
    return torch.einsum("nkij,ij->nk", B, S)


def At_explicit(B, r):
    return torch.einsum("nkij,nk->ij", B, r)


def bm_minimum(B, t, restarts=2, seed=0):
    """min over S = L L^T (L lower triangular, full) of 1/2 ||A(S) - t||^2 with scipy L-BFGS, best of
    several random starts; uses only the explicit B (independent of the module's operators)."""
    d = B.shape[-1]
    Bm = B.reshape(-1, d * d).numpy()
    tv = t.reshape(-1).numpy()
    il = np.tril_indices(d)
    rng = np.random.default_rng(seed)

    def fg(p):
        L = np.zeros((d, d))
        L[il] = p
        S = L @ L.T
        res = Bm @ S.reshape(-1) - tv
        G = (Bm.T @ res).reshape(d, d)
        G = 0.5 * (G + G.T)
        return 0.5 * res @ res, (2 * G @ L)[il]

    best = np.inf
    best_S = None
    for _ in range(restarts):
        p0 = rng.standard_normal(len(il[0]))
        out = minimize(fg, p0, jac=True, method="L-BFGS-B",
                       options=dict(maxiter=20000, maxfun=40000, ftol=1e-16, gtol=1e-13, maxcor=50))
        if out.fun < best:
            best = out.fun
            L = np.zeros((d, d))
            L[il] = out.x
            best_S = L @ L.T
    return best, torch.from_numpy(best_S)


def test_logit_differences_match_definition_and_preactivations():
    X, _, _ = planted_problem(7, 25, R=2, Delta=0.0, seed=3)
    S = torch.randn(2, 7, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    S = S + S.transpose(-1, -2)
    u = pf.logit_differences(X, S)
    h = preactivations(X, S)
    ref = torch.stack((h[..., 0, 0] - h[..., 0, 1], h[..., 1, 1] - h[..., 0, 1]), dim=-1)
    assert torch.allclose(u, ref, rtol=0, atol=1e-12)
    for i in range(2):
        assert torch.allclose(u[i], A_explicit(explicit_B(X[i]), S[i]), rtol=0, atol=1e-12)


def test_adjoint_identity_and_explicit_sum():
    gen = torch.Generator().manual_seed(5)
    for d, n in [(5, 17), (30, 200)]:
        X = torch.randn(3, n, 2, d, dtype=torch.float64, generator=gen)
        S = torch.randn(3, d, d, dtype=torch.float64, generator=gen)
        S = S + S.transpose(-1, -2)
        r = torch.randn(3, n, 2, dtype=torch.float64, generator=gen)
        Ar = pf.adjoint(X, r)
        assert torch.equal(Ar, Ar.transpose(-1, -2))
        lhs = (pf.logit_differences(X, S) * r).sum((-2, -1))
        rhs = (S * Ar).sum((-2, -1))
        scale = pf.logit_differences(X, S).norm(dim=(-2, -1)) * r.norm(dim=(-2, -1))
        assert ((lhs - rhs).abs() / scale).max() < 1e-12
        if d == 5:
            for i in range(3):
                assert torch.allclose(Ar[i], At_explicit(explicit_B(X[i]), r[i]), rtol=0, atol=1e-12)


def test_lipschitz_matches_largest_singular_value():
    X, _, _ = planted_problem(6, 20, R=2, seed=2)
    L = pf.lipschitz(X, iters=300, safety=1.0)
    for i in range(2):
        Bm = explicit_B(X[i]).reshape(40, 36)
        # operator on Sym(6) in an orthonormal basis: columns E_ii and (E_ij + E_ji)/sqrt 2
        cols = []
        for a in range(6):
            for b in range(a, 6):
                E = torch.zeros(6, 6, dtype=torch.float64)
                E[a, b] = E[b, a] = 1.0 if a == b else 1 / math.sqrt(2)
                cols.append(Bm @ E.reshape(-1))
        exact = torch.linalg.matrix_norm(torch.stack(cols, 1), ord=2) ** 2
        assert L[i] <= exact * (1 + 1e-10)
        assert L[i] >= exact * (1 - 1e-6)


def test_noiseless_targets_fit_exactly():
    # Delta = 0: S0 fits; at alpha = 0.6 (2n > d(d+1)/2) it is the unique PSD fit, so S -> S0
    X, t, S0 = planted_problem(12, 86, R=2, Delta=0.0, seed=4)
    res = pf.solve(X, t, max_iter=5000)
    assert res.status == ["fit", "fit"]
    assert (res.loss_per_sample <= 1e-12).all()
    assert (pf.objective(X, res.S, t) / 86 <= 1e-12).all()  # recomputed from the returned S
    assert (res.eigenvalues.min(-1).values >= -1e-12).all()
    assert torch.linalg.matrix_norm(res.S - S0).max() < 1e-4
    lam = res.eigenvalues
    assert ((lam > 1e-4 * lam.amax(-1, keepdim=True)).sum(-1) == 6).all()  # the Wishart rank p0 = d/2


def test_low_alpha_noisy_targets_fit():
    # alpha = 0.08, far below the threshold: noisy targets are still fitted by some PSD S
    d = 20
    n = round(0.08 * d * d)
    X, t, _ = planted_problem(d, n, R=2, Delta=0.5, seed=6)
    res = pf.solve(X, t, max_iter=3000)
    assert res.status == ["fit", "fit"]
    assert (pf.objective(X, res.S, t) / n <= 1e-12).all()
    assert (res.eigenvalues.min(-1).values >= -1e-12).all()
    assert (res.max_abs_residual < 1e-4).all()


@pytest.fixture(scope="module")
def small_no_fit():
    """d = 6, n = 60: replica 0 noiseless (fit), replicas 1, 2 noisy (no fit), in one batch."""
    X, t, S0 = planted_problem(6, 60, R=3, Delta=0.5, seed=7)
    t = t.clone()
    t[0] = pf.logit_differences(X[:1], S0[:1])[0]
    res = pf.solve(X, t, max_iter=20000, gap_tol=1e-10)  # tighter than the default, for the KKT checks
    return X, t, res


def test_no_fit_value_matches_independent_solver(small_no_fit):
    X, t, res = small_no_fit
    assert res.status == ["fit", "no_fit", "no_fit"]
    for i in (1, 2):
        B = explicit_B(X[i])
        ref, S_ref = bm_minimum(B, t[i])
        ours = float(res.loss_per_sample[i]) * 60
        assert abs(ours - ref) <= 1e-6 * ref
        assert ref / 60 > 1e-3  # a clear no-fit
        # the certified lower bound is below the independent primal value, and close to it
        D = float(res.dual_bound_per_sample[i]) * 60
        assert D <= ref * (1 + 1e-12)
        assert D >= ref * (1 - 2e-6)
        assert res.gap[i] <= 1e-10
        assert torch.linalg.matrix_norm(res.S[i] - S_ref) < 1e-2 * torch.linalg.matrix_norm(S_ref) + 1e-3


def test_kkt_at_no_fit_solution(small_no_fit):
    X, t, res = small_no_fit
    for i in (1, 2):
        B = explicit_B(X[i])
        S = res.S[i]
        G = At_explicit(B, A_explicit(B, S) - t[i])
        lam, U = torch.linalg.eigh(S)
        on = lam > 1e-8 * lam.max()
        gnorm = torch.linalg.matrix_norm(G)
        assert 0 < on.sum() < 6  # the constraint is active: a rank-deficient optimum
        Uc = U[:, ~on]
        assert torch.linalg.eigvalsh(Uc.T @ G @ Uc).min() >= -1e-7 * gnorm  # G PSD off the range of S
        assert abs((G * S).sum()) <= 1e-7 * gnorm * torch.linalg.matrix_norm(S)  # complementarity
        assert torch.linalg.matrix_norm(G @ U[:, on]) <= 1e-6 * gnorm  # G vanishes on the range of S
        assert torch.linalg.eigvalsh(G).min() >= -1e-6 * gnorm


def test_dual_certificate_is_feasible_and_below_primal(small_no_fit):
    X, t, res = small_no_fit
    for i in (1, 2):
        B = explicit_B(X[i])
        y = res.dual_y[i]
        Ay = At_explicit(B, y)
        assert torch.linalg.eigvalsh(Ay).min() >= 0  # dual feasible (explicit B, independent of the module)
        D = -0.5 * y.square().sum() - (t[i] * y).sum()
        assert torch.isclose(D / 60, res.dual_bound_per_sample[i], rtol=1e-10, atol=0)
        assert D <= 0.5 * (A_explicit(B, res.S[i]) - t[i]).square().sum()  # weak duality


def test_a_bad_dual_candidate_is_rejected():
    # a residual far from optimal (S = 0) has an indefinite A*(r): the certificate must not accept it
    X, t, _ = planted_problem(6, 60, R=1, Delta=0.5, seed=7)
    r = -t
    G = pf.adjoint(X, r)
    assert torch.linalg.eigvalsh(G)[0, 0] < 0
    y, D = pf.dual_certificate(X, t, r, G)
    lam = torch.linalg.eigvalsh(pf.adjoint(X, y))
    assert (D == 0 and torch.all(y == 0)) or lam[0, 0] >= 0
    assert D <= pf.objective(X, torch.zeros(1, 6, 6, dtype=torch.float64), t)


def test_unconstrained_least_squares_optimum_when_psd():
    # a well-conditioned full-rank S0: the unconstrained least-squares solution is PD, so it is the
    # constrained optimum (G* = 0: the certificate has to work on the whole space)
    d, n = 6, 60
    gen = torch.Generator().manual_seed(11)
    X = torch.randn(1, n, 2, d, dtype=torch.float64, generator=gen)
    S0 = 3 * torch.eye(d, dtype=torch.float64)[None]
    t = pf.logit_differences(X, S0) + 0.3 * torch.randn(1, n, 2, dtype=torch.float64, generator=gen)
    Bm = explicit_B(X[0]).reshape(2 * n, d * d)
    sol = (torch.linalg.pinv(Bm) @ t[0].reshape(-1)).reshape(d, d)  # min-norm: symmetric
    sol = 0.5 * (sol + sol.T)
    assert torch.linalg.eigvalsh(sol).min() > 0.5
    ref = 0.5 * (Bm @ sol.reshape(-1) - t[0].reshape(-1)).square().sum()
    res = pf.solve(X, t, max_iter=20000)
    assert res.status == ["no_fit"]
    assert abs(float(res.loss_per_sample[0]) * n - float(ref)) <= 1e-8 * float(ref)
    assert torch.linalg.matrix_norm(res.S[0] - sol) < 1e-5
    assert res.rank[0] == d


def test_undecided_when_out_of_iterations():
    X, t, _ = planted_problem(6, 60, R=2, Delta=0.5, seed=7)
    logs = []
    res = pf.solve(X, t, max_iter=7, log=lambda k, info: logs.append(k), log_every=3)
    assert res.status == ["undecided", "undecided"]
    assert res.iterations.tolist() == [7, 7]
    assert logs == [3, 6]
    assert (res.loss_per_sample > 1e-3).all()


def test_factor_jacobian_matches_autograd():
    X, _, _ = planted_problem(5, 7, R=1, seed=3)
    V = torch.randn(5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    ref = torch.autograd.functional.jacobian(lambda v: pf.logit_differences(X, (v @ v.T)[None])[0].flatten(), V)
    assert torch.allclose(pf.factor_jacobian(X[0], V), ref.reshape(14, 15), rtol=1e-12, atol=1e-12)


def test_polish_reaches_the_same_minimum_in_fewer_iterations():
    # a no-fit problem near the threshold, where FISTA's tail is long: Newton at the rank of the iterate
    # (face_polish) must end at the same certified minimum, sooner
    X, t, _ = planted_problem(12, 30, R=3, Delta=0.5, seed=5)
    plain = pf.solve(X, t, max_iter=20000, polish=False)
    fast = pf.solve(X, t, max_iter=20000)
    assert plain.status == fast.status and "no_fit" in fast.status
    for i, status in enumerate(fast.status):
        if status == "no_fit":
            assert fast.gap[i] <= 1e-6 and plain.gap[i] <= 1e-6
            assert torch.isclose(fast.loss_per_sample[i], plain.loss_per_sample[i], rtol=2e-6, atol=0)
            assert torch.linalg.eigvalsh(fast.S[i]).min() >= -1e-12 * fast.eigenvalues[i].max()
    polished = fast.polishes > 0
    assert polished.any()
    assert (fast.iterations[polished] < plain.iterations[polished]).all()
