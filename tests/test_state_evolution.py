"""The ERM state evolution (theory.output_channel, theory.state_evolution) against independent routes:
closed forms of quadratic channels, finite differences, and SPEC's closed-form linear-channel solution."""

import math

import numpy as np
import pytest
import torch
from scipy.optimize import fsolve

from attnrepro.theory.free_convolution import FreeConvolution
from attnrepro.theory.output_channel import LinearChannel, OutputChannel, closed_form_M, entries, out_map
from attnrepro.theory.spectral_laws import MarchenkoPastur
from attnrepro.theory.state_evolution import NotConverged, solve, solve_continued

LAW = MarchenkoPastur(0.5)
Q0, DELTA = LAW.Q0, 0.5
POINTS = [(0.3, 0.8, 1.0), (2.0, 0.5, 0.7)]


def _fd(f, x, h=1e-5):
    return (f(x + h) - f(x - h)) / (2 * h)


@pytest.mark.parametrize("sigma, m, q", POINTS)
def test_linear_channel_monte_carlo_matches_its_closed_form(sigma, m, q):
    """Newton + Monte Carlo (the linear channel through the generic proximal solver) against
    closed_form_M and its finite-difference derivatives, within the Monte Carlo error (2%)."""
    mc = OutputChannel(2, Q0, DELTA, channel="linear", samples=40000).evaluate(sigma, m, q)
    exact = LinearChannel(2, Q0, DELTA)
    A = exact.A
    M = lambda s_, m_, q_: closed_form_M(2, Q0, DELTA, s_, m_, q_, A)  # noqa: E731
    assert mc.M == pytest.approx(M(sigma, m, q), rel=0.02)
    assert mc.dSigma == pytest.approx(_fd(lambda s_: M(s_, m, q), sigma), rel=0.02)
    assert mc.dm == pytest.approx(_fd(lambda m_: M(sigma, m_, q), m), rel=0.02)
    assert mc.dq == pytest.approx(_fd(lambda q_: M(sigma, m, q_), q), rel=0.03)
    ex = exact.evaluate(sigma, m, q)  # the exact channel's autograd derivatives = finite differences
    assert ex.dSigma == pytest.approx(_fd(lambda s_: M(s_, m, q), sigma), rel=1e-6)
    assert ex.train_loss == pytest.approx(mc.train_loss, rel=0.03)


def test_softmax_at_small_beta_is_the_affine_channel():
    """As beta -> 0 the row softmax is affine, 1/T + J x: M tends to the closed form with A = J^T J."""
    beta, T = 0.02, 2
    n_e = T * (T + 1) // 2
    J = torch.autograd.functional.jacobian(lambda x: out_map(x, T, beta, "softmax").reshape(-1),
                                           torch.zeros(n_e, dtype=torch.float64))
    A = J.T @ J
    ch = OutputChannel(T, Q0, DELTA, beta=beta, beta0=beta, samples=40000)
    for sigma, m, q in POINTS:
        got = ch.evaluate(sigma, m, q).M
        assert got == pytest.approx(closed_form_M(T, Q0, DELTA, sigma, m, q, A), rel=0.03)


def test_softmax_derivatives_are_finite_differences_of_M():
    """The envelope-theorem derivatives (autograd at x* held fixed) = finite differences of M itself
    (common random numbers make M a smooth function)."""
    ch = OutputChannel(3, Q0, DELTA, samples=3000)
    sigma, m, q = 0.7, 0.6, 0.9
    v = ch.evaluate(sigma, m, q)
    h = 1e-5
    assert v.newton_residual < 1e-9
    assert v.dSigma == pytest.approx((ch.evaluate(sigma + h, m, q).M - ch.evaluate(sigma - h, m, q).M) / (2 * h),
                                     rel=1e-4)
    assert v.dm == pytest.approx((ch.evaluate(sigma, m + h, q).M - ch.evaluate(sigma, m - h, q).M) / (2 * h), rel=1e-4)
    assert v.dq == pytest.approx((ch.evaluate(sigma, m, q + h).M - ch.evaluate(sigma, m, q - h).M) / (2 * h), rel=1e-4)


def test_entries_carry_the_variance_of_h():
    """Scale 2 on the diagonal, 1 off it: Var h_aa = 2 ||S||^2/d, Var h_ab = ||S||^2/d."""
    a, b, s = entries(3)
    assert torch.equal(s, torch.where(a == b, 2.0, 1.0).double()) and len(s) == 6


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
def test_solver_with_the_linear_channel_gives_spec_closed_form(alpha, lam):
    p = solve(LAW, LinearChannel(2, Q0, DELTA), alpha, lam, 1.0, tol=1e-11, max_iter=3000, nodes=400)
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


def test_failure_is_clear():
    with pytest.raises(NotConverged, match="no convergence in 2 iterations"):
        solve(LAW, LinearChannel(2, Q0, DELTA), 0.1, 0.1, 1.0, tol=1e-12, max_iter=2)
    with pytest.raises(ValueError, match="alpha > 0"):
        solve(LAW, LinearChannel(2, Q0, DELTA), 0.0, 0.1, 1.0)


def test_strong_weight_decay_gives_the_null_point():
    """lambda beyond the reach of the spectrum: S = 0, every eigenvalue in the atom, E = Q0."""
    p = solve(LAW, LinearChannel(2, Q0, DELTA), 0.05, 50.0, 1.0, tol=1e-8, max_iter=2000)
    assert p.rank == 0 and p.estimation_error == pytest.approx(Q0) and p.q == 0
    assert p.test_error == pytest.approx(LinearChannel(2, Q0, DELTA).test_error(0.0, 0.0))


def test_continuation_reaches_small_lambda_where_a_cold_start_fails():
    """Softmax, kappa = 1, lambda = 0.03 at alpha = 0.1: from the default start the iteration leaves the
    domain or stalls; following lambda down from 0.1 reaches a fixed point, which solve() then confirms."""
    ch = OutputChannel(2, Q0, DELTA, samples=3000)
    p = solve_continued(LAW, ch, 0.1, 0.03, 1.0, tol=1e-6, max_iter=300)
    again = solve(LAW, ch, 0.1, 0.03, 1.0, init=(p.Sigma, p.m, p.q), tol=1e-6, max_iter=5)
    assert again.iterations <= 2 and again.estimation_error == pytest.approx(p.estimation_error, rel=1e-5)
    assert p.valid and 0 < p.rank < 1
