"""The ERM state evolution (theory.output_channel, theory.state_evolution) against independent routes:
brute-force minimisation of the proximal problem, the general softmax formulas, closed forms of
quadratic channels, finite differences, SPEC's closed-form linear-channel solution, and the
closed-form lambda -> 0+ limit."""

import math

import numpy as np
import pytest
import torch
from scipy.optimize import fsolve, minimize

from attnrepro.theory import softmax_prox
from attnrepro.theory.free_convolution import FreeConvolution
from attnrepro.theory.gaussian_rules import gauss_hermite, monte_carlo, sobol
from attnrepro.theory.interpolation import interpolation_threshold
from attnrepro.theory.output_channel import LinearChannel, LogitDifferenceChannel, SoftmaxChannel
from attnrepro.theory.softmax_prox import DifferenceCoordinates, ProxNotSolved, pair_loss, prox, softmax_loss
from attnrepro.theory.spectral_laws import MarchenkoPastur
from attnrepro.theory.state_evolution import (
    FixedPointMap,
    NotConverged,
    interpolating_limit,
    null_point,
    solve,
    solve_damped,
    state_evolution_curve,
)

LAW = MarchenkoPastur(0.5)
Q0, DELTA = LAW.Q0, 0.5
POINTS = [(0.5, 0.8, 1.0), (3.0, 1.0, 1.2), (100.0, 1.2, 1.3)]


@pytest.fixture(scope="module")
def channel():
    return SoftmaxChannel(2, Q0, DELTA, sobol(4, 12))


def test_difference_coordinates_of_two_tokens():
    """u = (x11 - x12, x22 - x12); G = D diag(2, 1, 2) D^T = [[3, 1], [1, 3]]; the logits X(u) differ from
    the symmetric matrix of x by x12 in every entry (the shift the row softmax ignores)."""
    c = DifferenceCoordinates(2)
    assert torch.allclose(c.G, torch.tensor([[3.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    x = torch.tensor([0.3, -1.1, 2.0], dtype=torch.float64)
    u = torch.tensor([x[0] - x[1], x[2] - x[1]])
    X = torch.tensor([[x[0], x[1]], [x[1], x[2]]])
    assert torch.allclose(c.logits(u), X - x[1])
    assert torch.allclose(torch.softmax(c.logits(u), -1), torch.softmax(X, -1))
    assert DifferenceCoordinates(3).n_u == 5


def test_pair_loss_is_the_general_softmax_loss():
    """T = 2 in closed form = the general row-softmax formulas (value, gradient, Hessian), and the gradient
    = autograd of the value."""
    gen = torch.Generator().manual_seed(0)
    u = 3 * torch.randn(64, 2, generator=gen, dtype=torch.float64)
    Y = torch.softmax(torch.randn(64, 2, 2, generator=gen, dtype=torch.float64) * 3, -1)
    Y = 0.5 * (Y + Y.flip(-1).flip(-2))  # rows (y, 1 - y), (1 - y2, y2) as the labels have
    c = DifferenceCoordinates(2)
    fast = pair_loss(u, Y, 1.3)
    P = torch.softmax(1.3 * c.logits(u), -1)
    assert torch.allclose(fast[0], 0.5 * ((P - Y) ** 2).sum((-1, -2)), atol=1e-12)
    uu = u.clone().requires_grad_(True)
    auto = torch.autograd.grad(pair_loss(uu, Y, 1.3)[0].sum(), uu)[0]
    assert torch.allclose(fast[1], auto, atol=1e-12)
    hess = torch.stack([torch.autograd.functional.hessian(
        lambda v, i=i: pair_loss(v[None], Y[i:i + 1], 1.3)[0].sum(), u[i]) for i in range(8)])
    assert torch.allclose(fast[2][:8], hess, atol=1e-10)


def test_general_softmax_loss_derivatives_at_three_tokens():
    """The general formulas (T = 3, n_u = 5) against autograd's gradient and Hessian."""
    c = DifferenceCoordinates(3)
    gen = torch.Generator().manual_seed(1)
    u = torch.randn(4, 5, generator=gen, dtype=torch.float64)
    Y = torch.softmax(torch.randn(4, 3, 3, generator=gen, dtype=torch.float64), -1)
    loss, g, H = softmax_loss(c, u, Y, 0.7)
    for i in range(4):
        f = lambda v, i=i: softmax_loss(c, v[None], Y[i:i + 1], 0.7, derivatives=False)[0].sum()  # noqa: E731
        assert torch.allclose(g[i], torch.autograd.functional.jacobian(f, u[i]), atol=1e-12)
        assert torch.allclose(H[i], torch.autograd.functional.hessian(f, u[i]), atol=1e-10)


@pytest.mark.parametrize("sigma", [0.5, 5.0, 60.0, 2000.0])
def test_prox_finds_the_global_minimum_against_a_grid_search(sigma):
    """On 150 draws (wide a, a0), the multi-start Newton minimum is never above a brute-force grid
    search refined by Nelder-Mead, and its gradient is below 1e-9."""
    coords = DifferenceCoordinates(2)
    gen = torch.Generator().manual_seed(int(sigma))
    a = 4 * torch.randn(150, 2, generator=gen, dtype=torch.float64)
    a0 = 4 * torch.randn(150, 2, generator=gen, dtype=torch.float64)
    Y0 = torch.softmax(coords.logits(a0), -1)
    sol = prox(coords, a, Y0, a0, sigma, 1.0)
    assert float(sol.residual.max()) <= 1e-9
    P = (coords.G_inv / sigma).numpy()
    grid = np.linspace(-30, 30, 601)
    U1, U2 = np.meshgrid(grid, grid, indexing="ij")
    for i in range(len(a)):
        ai, y = a[i].numpy(), (Y0[i, 0, 0].item(), Y0[i, 1, 1].item())

        def f(u, ai=ai, y=y):
            r = np.asarray(u) - ai
            p = 1 / (1 + np.exp(-np.asarray(u)))
            return 0.5 * r @ P @ r + (p[0] - y[0]) ** 2 + (p[1] - y[1]) ** 2

        R1, R2 = U1 - ai[0], U2 - ai[1]
        F = (0.5 * (P[0, 0] * R1 ** 2 + 2 * P[0, 1] * R1 * R2 + P[1, 1] * R2 ** 2)
             + (1 / (1 + np.exp(-U1)) - y[0]) ** 2 + (1 / (1 + np.exp(-U2)) - y[1]) ** 2)
        k = np.unravel_index(np.argmin(F), F.shape)
        best = minimize(f, [grid[k[0]], grid[k[1]]], method="Nelder-Mead",
                        options={"xatol": 1e-10, "fatol": 1e-14, "maxiter": 4000}).fun
        assert float(sol.f[i]) <= best + 1e-10 * (1 + abs(best)), (i, float(sol.f[i]), best)


def test_prox_finds_the_global_minimum_at_every_node_of_a_rule():
    """Every node of a 2^14-node Sobol' rule at a point of the lambda = 0 branch above alpha_interp
    (Sigma = 223; alpha = 0.24, kappa = 1), where a single Newton start from the scan's best point missed the
    global minimum at 6 nodes: the prox's minimum is never above a brute-force search, the lowest point of
    an 81 x 81 grid over the box holding the ellipse of the global minimiser (f written out for T = 2),
    refined by Newton."""
    sigma, m, q = 223.2, 2.3663, 7.06
    ch = SoftmaxChannel(2, Q0, DELTA, sobol(4, 14))
    a, a0, _, _ = ch._draws(m, q, Q0 + DELTA / 2)
    Y0 = ch._labels(a0)
    sol = prox(ch.coords, a, Y0, a0, sigma, 1.0)
    P = ch.coords.G_inv / sigma
    y = torch.stack([Y0[:, 0, 0], Y0[:, 1, 1]], -1)

    def f(u1, u2, a, y):  # 1/2 (u - a)^T P (u - a) + (sigmoid(u1) - y1)^2 + (sigmoid(u2) - y2)^2
        r1, r2 = u1 - a[..., :1, None], u2 - a[..., 1:, None]
        return (0.5 * (P[0, 0] * r1 ** 2 + 2 * P[0, 1] * r1 * r2 + P[1, 1] * r2 ** 2)
                + (torch.sigmoid(u1) - y[..., :1, None]) ** 2 + (torch.sigmoid(u2) - y[..., 1:, None]) ** 2)

    f_a, f_fit = (f(u[:, :1, None], u[:, 1:, None], a, y)[:, 0] for u in (a, a0))
    half = math.sqrt(sigma) * torch.sqrt(2 * torch.minimum(f_a, f_fit)) * ch.coords.L.norm(dim=1)[None]  # (N, 2)
    grid = torch.linspace(-1, 1, 81, dtype=torch.float64)
    u1 = (a[:, 0:1] + grid * half[:, 0:1])[:, :, None]                             # (N, 81, 1)
    u2 = (a[:, 1:2] + grid * half[:, 1:2])[:, None, :]                             # (N, 1, 81)
    k = f(u1, u2, a, y).flatten(1).argmin(1)
    best = torch.stack([u1[torch.arange(len(a)), k // 81, 0], u2[torch.arange(len(a)), 0, k % 81]], -1)
    brute, _ = softmax_prox._newton(best, a, Y0, P, ch.coords, 1.0)
    assert float(sol.residual.max()) <= 1e-9
    above = sol.f - brute > 1e-12 * (1 + brute.abs())
    assert not above.any(), [(int(i), float(sol.f[i]), float(brute[i])) for i in torch.nonzero(above)[:5, 0]]


def test_channel_keeps_no_state_and_is_deterministic(channel):
    """M does not depend on the order of the calls: A, B, A give A twice, to the last bit."""
    first = channel.evaluate(*POINTS[0])
    channel.evaluate(*POINTS[2])
    again = channel.evaluate(*POINTS[0])
    assert first == again


def test_a_prox_that_fails_is_an_error(monkeypatch):
    """With one Newton step the minimisers are not found to 1e-9: the channel raises, never returns M."""
    monkeypatch.setattr(softmax_prox, "NEWTON_STEPS", 1)
    with pytest.raises(ProxNotSolved, match="prox residual"):
        SoftmaxChannel(2, Q0, DELTA, sobol(4, 8)).evaluate(3.0, 1.0, 1.2)


def test_softmax_at_small_beta_is_the_quadratic_channel():
    """As beta -> 0 the row softmax is affine, so the loss is 1/2 (u - r a0)^T A (u - r a0) with A = beta^2
    B^T J0^2 B (J0 at the uniform point): M and its derivatives are LogitDifferenceChannel's closed form."""
    beta = 0.005
    ch = SoftmaxChannel(2, Q0, DELTA, sobol(4, 10), beta=beta, beta0=beta)
    quad = LogitDifferenceChannel(2, Q0, DELTA, 1.0, A=ch.surrogate().A)
    for sigma, m, q in [(30.0, 0.8, 1.0), (3000.0, 1.2, 1.3)]:
        got, exact = ch.evaluate(sigma, m, q), quad.evaluate(sigma, m, q)
        for name in ("M", "dSigma", "dm", "dq"):
            assert getattr(got, name) == pytest.approx(getattr(exact, name), rel=2e-3), name


def test_derivatives_are_finite_differences_of_M(channel):
    """The envelope-theorem derivatives against central differences of M (both through the same rule;
    they are different estimators of the same integrals, so they agree to the rule's accuracy)."""
    sigma, m, q = 3.0, 1.0, 1.2
    v, h = channel.evaluate(sigma, m, q), 1e-4
    fd = lambda k: (channel.evaluate(*[x + h * (i == k) for i, x in enumerate((sigma, m, q))]).M  # noqa: E731
                    - channel.evaluate(*[x - h * (i == k) for i, x in enumerate((sigma, m, q))]).M) / (2 * h)
    assert v.dSigma == pytest.approx(fd(0), rel=5e-3)
    assert v.dm == pytest.approx(fd(1), rel=5e-3)
    assert v.dq == pytest.approx(fd(2), rel=5e-3)


def test_channel_at_zero_is_the_small_state_limit(channel):
    """at_zero (Price's theorem) against the pathwise derivatives at small (Sigma, q), m = 0."""
    zero, small = channel.at_zero(), channel.evaluate(0.01, 0.0, 1e-4)
    assert small.M == pytest.approx(zero.M, rel=0.01)
    assert small.dSigma == pytest.approx(zero.dSigma, rel=0.02)
    assert small.dm == pytest.approx(zero.dm, rel=0.05)
    assert small.dq == pytest.approx(zero.dq, rel=0.02)
    assert zero.dq == pytest.approx(0.5 * 6 / 8)  # 1/2 sum_i G_ii beta^2/8 (p' = 1/4 at u = 0)


def test_logit_difference_channel_closed_form_against_a_rule():
    """LogitDifferenceChannel's M and training loss against the same quadratic problem integrated by
    Monte Carlo with its exact minimiser."""
    ch = LogitDifferenceChannel(2, Q0, DELTA)
    sigma, m, q = 2.0, 0.9, 1.1
    rule = monte_carlo(4, 200000, seed=3)
    c = DifferenceCoordinates(2)
    xi = torch.as_tensor(rule.nodes)
    a = math.sqrt(q) * xi[:, :2] @ c.L.T
    a0 = (m / math.sqrt(q)) * xi[:, :2] @ c.L.T + math.sqrt(Q0 + DELTA / 2 - m * m / q) * xi[:, 2:] @ c.L.T
    K = torch.linalg.inv(torch.eye(2, dtype=torch.float64) + sigma * c.G)
    r = (a - a0) @ K.T
    u = a0 + r
    M = (0.5 * ((u - a) @ c.G_inv * (u - a)).sum(-1) / sigma + 0.5 * (r * r).sum(-1)).mean()
    v = ch.evaluate(sigma, m, q)
    assert v.M == pytest.approx(float(M), rel=0.01)
    assert v.train_loss == pytest.approx(float(0.5 * (r * r).sum(-1).mean()), rel=0.01)


def _closed_linear(alpha3: float, lam: float, kappa: float):
    """SPEC's linear channel at T = 1 (alpha3 = 3 alpha for T = 2): delta^2 = (Delta + 2E)/(4 alpha),
    sqrt(kappa) lambda = eps (4 alpha - 2D), solved for (delta, eps) by fsolve."""

    def eqs(v):
        d, e = abs(v[0]), v[1]
        fc = FreeConvolution(LAW, d)
        D = fc.dJ_ddelta(e) / (2 * d)
        E = Q0 - 2 * (fc.K(e) - d * d * D) + fc.J(e)
        return [d * d - (DELTA + 2 * E) / (4 * alpha3), math.sqrt(kappa) * lam - e * (4 * alpha3 - 2 * D)]

    return eqs


@pytest.mark.parametrize("alpha, lam", [(0.1, 0.1), (0.3, 0.01), (0.05, 0.5)])
def test_root_finder_with_the_linear_channel_gives_spec_closed_form(alpha, lam):
    p, _ = solve(LAW, LinearChannel(2, Q0, DELTA), alpha, lam, 1.0, tol=1e-11, nodes=400)
    eqs = _closed_linear(3 * alpha, lam, 1.0)
    delta, eps = fsolve(eqs, [p.delta, p.eps], xtol=1e-12)
    assert np.max(np.abs(eqs([delta, eps]))) < 1e-9
    assert p.eta == pytest.approx(1.0, rel=1e-6)  # mhat = Sigmahat in the linear channel
    assert p.delta == pytest.approx(delta, rel=1e-5) and p.eps == pytest.approx(eps, rel=1e-5, abs=1e-9)
    fc = FreeConvolution(LAW, delta)
    D = fc.dJ_ddelta(eps) / (2 * delta)
    E = Q0 - 2 * (fc.K(eps) - delta ** 2 * D) + fc.J(eps)
    assert p.estimation_error == pytest.approx(E, rel=1e-5)
    # training loss per sample: three T = 1 terms, each 1/2 (Delta + 2E)(1 - D/(2 * 3 alpha))^2
    assert p.train_loss == pytest.approx(3 * 0.5 * (DELTA + 2 * E) * (1 - D / (6 * alpha)) ** 2, rel=1e-5)
    assert p.rank == pytest.approx(1 - fc.cdf(eps), abs=1e-6)


def test_damped_iteration_agrees_with_the_root_finder():
    ch = LinearChannel(2, Q0, DELTA)
    p, _ = solve(LAW, ch, 0.1, 0.1, 1.0, tol=1e-11)
    q = solve_damped(LAW, ch, 0.1, 0.1, 1.0, tol=1e-10, max_iter=3000)
    assert q.estimation_error == pytest.approx(p.estimation_error, rel=1e-7)


def test_failure_is_clear():
    with pytest.raises(NotConverged, match="after 2 evaluations"):
        solve(LAW, LinearChannel(2, Q0, DELTA), 0.1, 0.1, 1.0, tol=1e-14, max_evals=2)
    with pytest.raises(ValueError, match="alpha > 0"):
        solve(LAW, LinearChannel(2, Q0, DELTA), 0.0, 0.1, 1.0)


def test_strong_weight_decay_gives_the_null_point(channel):
    """lambda beyond the reach of the spectrum: S = 0 is the fixed point (eps beyond the support of
    mu_delta at the hats of S = 0): every eigenvalue in the atom, E = Q0."""
    p = null_point(LAW, channel, 0.01, 0.3, 0.5)
    assert p is not None and p.rank == 0 and p.estimation_error == pytest.approx(Q0) and p.q == 0
    assert null_point(LAW, channel, 0.2, 0.01, 1.0) is None


def test_interpolating_limit_meets_alpha_interp():
    """At eps = 0 the lambda -> 0+ equations are Corollary 3.2's: just below alpha_interp eps -> 0 and
    delta -> delta_bar (both like sqrt(alpha_interp - alpha)); above it there is no interpolating limit."""
    thr = interpolation_threshold(LAW, 2, DELTA)
    lim = interpolating_limit(LAW, 2, DELTA, thr.alpha * (1 - 1e-8))
    assert lim.eps < 1e-3 and lim.delta == pytest.approx(thr.delta, rel=1e-3) and lim.residual < 1e-10
    assert lim.rank == pytest.approx(thr.rank, abs=1e-2)
    with pytest.raises(ValueError, match="interpolation threshold"):
        interpolating_limit(LAW, 2, DELTA, thr.alpha * 1.01)


def test_interpolating_limit_is_the_quadratic_channels_small_lambda_fixed_point():
    """Independent route: the logit-difference channel (exact, closed form) has the softmax channel's
    large-Sigma form, so its root-found fixed point at lambda = 1e-9 must be the closed-form limit."""
    alpha = 0.1
    lim = interpolating_limit(LAW, 2, DELTA, alpha)
    p = state_evolution_curve(LAW, LogitDifferenceChannel(2, Q0, DELTA), [alpha], 1e-9, 1.0, 2, DELTA, tol=1e-12)[0]
    assert p["method"] == "newton"
    assert p["m"] == pytest.approx(lim.m, rel=1e-4) and p["q"] == pytest.approx(lim.q, rel=1e-4)
    assert p["delta"] == pytest.approx(lim.delta, rel=1e-4) and p["eps"] == pytest.approx(lim.eps, rel=1e-4)
    assert p["eta"] == pytest.approx(1.0, rel=1e-6) and p["train_loss"] < 1e-12


def _lambda_path_gaps(lams):
    """kappa = 1, alpha = 0.1 < alpha_interp: |E(lambda) - E(0+)| / E(0+) of the softmax state evolution
    (each point converged, every prox residual <= 1e-9) against the closed-form lambda -> 0+ limit."""
    ch = SoftmaxChannel(2, Q0, DELTA, sobol(4, 11))
    lim = interpolating_limit(LAW, 2, DELTA, 0.1)
    E_lim = Q0 - 2 * lim.m + lim.q
    gaps = []
    for lam in lams:
        row = state_evolution_curve(LAW, ch, [0.1], lam, 1.0, 2, DELTA)[0]
        assert row["converged"] and row["prox_residual"] <= 1e-9
        gaps.append(abs(row["estimation_error"] - E_lim) / E_lim)
    return gaps


def test_softmax_lambda_path_approaches_the_closed_form_limit():
    """lambda = 1e-3, 1e-5: the estimation error closes in on the limit's (within 4% at 1e-5, ~2.5%
    measured; the slow suite goes on to 1e-7)."""
    gaps = _lambda_path_gaps((1e-3, 1e-5))
    assert gaps[0] > gaps[1] and gaps[1] < 0.04


@pytest.mark.slow
def test_softmax_lambda_path_reaches_the_closed_form_limit():
    """lambda = 1e-3, 1e-5, 1e-7: the gap shrinks at every step and is below 1% at 1e-7."""
    gaps = _lambda_path_gaps((1e-3, 1e-5, 1e-7))
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 0.01


def test_noiseless_labels_above_the_threshold_recover_s0():
    """Delta = 0 above alpha_interp: the lambda -> 0+ row is perfect recovery, and the softmax state
    evolution at lambda = 1e-3 is already close (E << Q0)."""
    ch = SoftmaxChannel(2, Q0, 0.0, sobol(4, 11))
    rows = state_evolution_curve(LAW, ch, [0.3], 0.0, 1.0, 2, 0.0)
    assert rows[0]["method"] == "perfect_recovery" and rows[0]["estimation_error"] == 0
    p = state_evolution_curve(LAW, ch, [0.3], 1e-3, 1.0, 2, 0.0)[0]
    assert p["converged"] and p["estimation_error"] < 0.01 * Q0


def test_descending_sweep_gives_the_ascending_fixed_points():
    """The same curve solved from the largest alpha down (each point warm-started from the one above)
    gives the same fixed points, rows in ascending alpha."""
    ch = SoftmaxChannel(2, Q0, DELTA, sobol(4, 10))
    alphas = [0.3, 0.1, 0.2]
    up = state_evolution_curve(LAW, ch, alphas, 1e-2, 1.0, 2, DELTA)
    down = state_evolution_curve(LAW, ch, alphas, 1e-2, 1.0, 2, DELTA, descending=True)
    assert [r["alpha"] for r in down] == [r["alpha"] for r in up] == sorted(alphas)
    for a, b in zip(up, down, strict=True):
        assert a["converged"] and b["converged"]
        assert b["test_error"] == pytest.approx(a["test_error"], rel=1e-5)
        assert b["q"] == pytest.approx(a["q"], rel=1e-5)


def test_underflowed_state_is_out_of_the_domain():
    """A root-finder step so far that q = exp(y_q) is 0 in floating point is outside the domain (a
    ValueError, which the line search steps back from), not a division by zero."""
    fmap = FixedPointMap(LAW, SoftmaxChannel(2, Q0, DELTA, sobol(4, 8)), 0.1, 1e-3, 1.0, 50)
    with pytest.raises(ValueError, match="out of range"):
        fmap.residual(np.array([0.0, 0.1, -800.0]))


def test_an_overflow_far_out_is_stepped_back_from():
    """The line search treats a trial point whose evaluation overflows (sigma ** 2 with sigma = 6e263 did, in
    the slow suite) as out of the domain and backtracks, as it does a ValueError."""
    from attnrepro.theory.root_finding import newton_root

    def fun(y):
        if y[0] > 3:
            raise OverflowError(34, "Numerical result out of range")
        return y - 1.0, None

    y, r, _, _, _ = newton_root(fun, np.array([0.0]), jac=np.array([[0.25]]), tol=1e-12)  # full step: y = 4
    assert y == pytest.approx([1.0]) and abs(r[0]) <= 1e-12


def monte_carlo_reference(point, batches: int = 10, draws: int = 100_000):
    """M and its derivatives by 10^6 Monte Carlo draws in `batches` independent batches: (mean, s.e.)
    per quantity, from the spread of the batch means."""
    vals = np.array([[getattr(SoftmaxChannel(2, Q0, DELTA, monte_carlo(4, draws, seed=100 + b)).evaluate(*point), k)
                      for k in ("M", "dSigma", "dm", "dq")] for b in range(batches)])
    return vals.mean(0), vals.std(0, ddof=1) / math.sqrt(batches)


@pytest.mark.slow
def test_rule_accuracy_against_monte_carlo():
    """The paper profile's rule (Sobol', 2^16 points) against 10^6 Monte Carlo draws at five (Sigma, m, q),
    Sigma up to 3000: M and its three derivatives agree to 1e-3 (relative) + 3 Monte Carlo standard
    errors (docs/state_evolution.md tabulates the deviations)."""
    rule = SoftmaxChannel(2, Q0, DELTA, sobol(4, 16))
    for pt in [(0.5, 0.8, 1.0), (3.0, 1.0, 1.2), (30.0, 1.1, 1.3), (100.0, 1.2, 1.3), (3000.0, 1.3, 1.5)]:
        mean, se = monte_carlo_reference(pt)
        got = rule.evaluate(*pt)
        for k, name in enumerate(("M", "dSigma", "dm", "dq")):
            assert abs(getattr(got, name) - mean[k]) <= 1e-3 * abs(mean[k]) + 3 * se[k], (pt, name)


def test_gauss_hermite_rule_is_exact_for_low_degree_polynomials():
    rule = gauss_hermite(2, 5)
    x = rule.nodes
    assert rule.weights.sum() == pytest.approx(1.0)
    assert rule.weights @ (x[:, 0] ** 4) == pytest.approx(3.0)
    assert rule.weights @ (x[:, 0] ** 2 * x[:, 1] ** 2) == pytest.approx(1.0)
    assert rule.weights @ x[:, 1] ** 3 == pytest.approx(0.0, abs=1e-12)
