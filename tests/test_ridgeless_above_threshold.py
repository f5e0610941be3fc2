"""The lambda -> 0+ curve above alpha_interp (theory.state_evolution.solve_ridgeless): the fixed point at
lambda = 0 against the lambda path lambda = 1e-4, 1e-5, 1e-6 (independent sweeps at lambda > 0, each
point from its own cold start) extrapolated to lambda = 0, the two branches meeting at alpha_interp, the
machinery against a channel in closed form, and a point that cannot be solved reported as such.

kappa = 1, kappa0 = 0.5, T = 2, Delta = 0.5 (alpha_interp = 0.15348). Small Sobol' rules keep the default
suite fast; each tolerance is the measured agreement at that rule with a margin (docs/state_evolution.md,
"Above alpha_interp")."""

import math

import pytest

from attnrepro.theory import state_evolution
from attnrepro.theory.free_convolution import FreeConvolution
from attnrepro.theory.gaussian_rules import sobol
from attnrepro.theory.interpolation import interpolation_threshold
from attnrepro.theory.output_channel import LogitDifferenceChannel, SoftmaxChannel
from attnrepro.theory.spectral_laws import MarchenkoPastur
from attnrepro.theory.state_evolution import NotConverged, solve, solve_ridgeless, state_evolution_curve

LAW = MarchenkoPastur(0.5)
Q0, DELTA = LAW.Q0, 0.5
THRESHOLD = interpolation_threshold(LAW, 2, DELTA)
PATH = (1e-4, 1e-5, 1e-6)


def _extrapolated(f5: float, f6: float) -> float:
    """f(0) from f(1e-5), f(1e-6), linear in lambda (the gaps fall tenfold per decade at these alphas)."""
    return f6 + (f6 - f5) / 9


def _path_against_zero(points: int, alphas, tol: float = 1e-8, descending: bool = False):
    """The lambda = 0 rows, and the lambda path's sweeps (each from a cold start at its first alpha, from the
    largest alpha down when `descending`)."""
    ch = SoftmaxChannel(2, Q0, DELTA, sobol(4, points))
    zero = state_evolution_curve(LAW, ch, alphas, 0.0, 1.0, 2, DELTA, tol=tol)
    path = {lam: state_evolution_curve(LAW, ch, alphas, lam, 1.0, 2, DELTA, tol=tol, descending=descending)
            for lam in PATH}
    return zero, path


def _check_limit(zero, path, rel_extrapolation: float):
    for i, row in enumerate(zero):
        assert row["converged"] and row["method"] == "lambda_zero", row["reason"]
        assert row["eps"] == 0 and row["lam"] == 0 and row["prox_residual"] <= 1e-9 and row["train_loss"] > 0
        for lam in PATH:
            assert path[lam][i]["converged"], path[lam][i]["reason"]
        for k in ("test_error", "q", "m"):
            f4, f5, f6 = (path[lam][i][k] for lam in PATH)
            gap5, gap6 = abs(row[k] - f5), abs(row[k] - f6)
            # the path closes in on the lambda = 0 row, about tenfold per decade (linear in lambda) ...
            assert abs(row[k] - f4) > gap5 > gap6 > 0, (row["alpha"], k, f4, f5, f6, row[k])
            assert 5 < gap5 / gap6 < 15, (row["alpha"], k, gap5 / gap6)
            # ... and its extrapolation is the row, far inside the last step's gap
            assert abs(row[k] - _extrapolated(f5, f6)) <= rel_extrapolation * abs(row[k]), (row["alpha"], k)
            assert abs(row[k] - _extrapolated(f5, f6)) < 0.2 * gap6
        # the training loss barely moves with lambda here (relative gaps ~1e-6)
        assert row["train_loss"] == pytest.approx(path[1e-6][i]["train_loss"], rel=1e-4)


def test_lambda_zero_rows_are_the_lambda_path_limit():
    """alpha = 0.3, 0.4 at Sobol' 2^10: the lambda = 0 rows equal the lambda path's extrapolation to 2e-4
    (relative; measured 4e-6 at 2^10 and 2e-5 at 2^11), while the path at lambda = 1e-6 is still 5e-5 to
    4e-4 away and at 1e-5 ten times that."""
    zero, path = _path_against_zero(10, [0.3, 0.4])
    _check_limit(zero, path, 2e-4)


@pytest.mark.slow
def test_lambda_zero_rows_are_the_lambda_path_limit_at_more_alphas():
    """alpha = 0.22, 0.25, 0.3, 0.35, 0.4, 0.5 at Sobol' 2^12, the path's sweeps from alpha = 0.5 down (a cold
    start at lambda = 1e-6 and alpha = 0.22 fails at this rule) (measured: |row - extrapolation| <= 3.5e-4
    relative in q, <= 8e-5 in the test error, smallest at large alpha)."""
    zero, path = _path_against_zero(12, [0.22, 0.25, 0.3, 0.35, 0.4, 0.5], tol=1e-6, descending=True)
    _check_limit(zero, path, 1e-3)


def _threshold_point(ch):
    fc = FreeConvolution(LAW, THRESHOLD.delta, 400)
    J, D = fc.J(0.0), fc.dJ_ddelta(0.0) / (2 * THRESHOLD.delta)
    m, q = J - THRESHOLD.delta ** 2 * D, J
    return m, q, ch.test_error(m, q)


def test_branches_meet_at_alpha_interp():
    """Sobol' 2^10, the branch above at alpha_interp + 2e-3, 5e-4, 1e-4, 2e-5 (solved from the farthest down):
    Sigma grows without bound (like a power of 1/(alpha - alpha_interp)), the training loss falls to 0, and
    (m, q, delta) and the test error go to the threshold's (m = Q0 + Delta/2, q = J(dbar, 0), delta = dbar),
    which the closed-form branch below reaches too. Measured at alpha_interp + 2e-5 over the rules 2^10,
    2^11 (two seeds), 2^12, 2^14: |test error - threshold's| <= 3.6e-4 (the threshold's at the same rule),
    |q - q_thr|/q_thr <= 1.5e-3; at alpha_interp + 2e-3 the test error is still 2.9e-3 to 1.9e-2 away."""
    ch = SoftmaxChannel(2, Q0, DELTA, sobol(4, 10))
    a0 = THRESHOLD.alpha
    gaps = [2e-5, 1e-4, 5e-4, 2e-3]
    alphas = [a0 - 1e-8 * a0, a0, *(a0 + g for g in gaps)]
    rows = {r["alpha"]: r for r in state_evolution_curve(LAW, ch, alphas, 0.0, 1.0, 2, DELTA, tol=1e-6)}
    m_thr, q_thr, te_thr = _threshold_point(ch)
    assert m_thr == pytest.approx(Q0 + DELTA / 2, rel=1e-9)
    at = rows[a0]
    assert at["method"] == "threshold" and at["converged"] and at["eps"] == 0
    assert at["test_error"] == pytest.approx(te_thr, rel=1e-12) and at["q"] == pytest.approx(q_thr, rel=1e-12)
    below = rows[alphas[0]]
    assert below["method"] == "interpolating_limit" and below["converged"]
    assert below["test_error"] == pytest.approx(te_thr, abs=1e-3) and below["q"] == pytest.approx(q_thr, rel=3e-3)
    above = [rows[a0 + g] for g in gaps]
    for r in above:
        assert r["converged"] and r["method"] == "lambda_zero" and r["eps"] == 0, r["reason"]
    sigmas = [r["Sigma"] for r in above]
    assert all(s1 > 3 * s2 for s1, s2 in zip(sigmas, sigmas[1:]))  # Sigma -> infinity as alpha -> alpha_interp+
    losses = [r["train_loss"] for r in above]
    assert all(l1 < l2 for l1, l2 in zip(losses, losses[1:])) and losses[0] < 1e-10
    nearest = above[0]
    assert nearest["Sigma"] > 1e7
    assert nearest["test_error"] == pytest.approx(te_thr, abs=1e-3)
    assert nearest["q"] == pytest.approx(q_thr, rel=3e-3) and nearest["m"] == pytest.approx(m_thr, rel=3e-3)
    assert nearest["delta"] == pytest.approx(THRESHOLD.delta, rel=3e-3)


@pytest.mark.slow
def test_the_curve_above_peaks_at_alpha_interp():
    """Sobol' 2^14, alpha from 0.5 down to 0.154 (alpha_interp + 5.2e-4): every point solved, the test error
    falls from alpha_interp on (it stays below the threshold's: measured margin 7e-4 at 0.155, and falls
    across 0.2, 0.3, 0.4, 0.5), and the nearest point is the threshold's to 2e-3 (measured 1.1e-3)."""
    ch = SoftmaxChannel(2, Q0, DELTA, sobol(4, 14))
    alphas = [0.154, 0.155, 0.16, 0.17, 0.18, 0.2, 0.22, 0.25, 0.3, 0.35, 0.4, 0.5]
    rows = state_evolution_curve(LAW, ch, alphas, 0.0, 1.0, 2, DELTA, tol=1e-6)
    for r in rows:
        assert r["converged"] and r["method"] == "lambda_zero", (r["alpha"], r["reason"])
    te = {r["alpha"]: r["test_error"] for r in rows}
    te_thr = _threshold_point(ch)[2]
    assert te[0.154] == pytest.approx(te_thr, abs=2e-3)
    assert max(te.values()) <= te_thr
    assert te[0.5] < te[0.4] < te[0.3] < te[0.2] < te_thr


def test_solve_ridgeless_with_a_closed_form_channel():
    """The machinery against a channel in closed form: the logit-difference square loss (Sigma finite at
    lambda = 0 above alpha_interp) solved by solve_ridgeless (its lambda-path route: this channel has no
    surrogate) equals its root-found fixed point at lambda = 1e-9 (to 1e-6) and the curve's own lambda = 0
    row (a lambda ladder down to 1e-8, then lambda = 0)."""
    ch = LogitDifferenceChannel(2, Q0, DELTA)
    p, _ = solve_ridgeless(LAW, ch, 0.3, 1.0, tol=1e-11)
    near, _ = solve(LAW, ch, 0.3, 1e-9, 1.0, init=(p.Sigma, p.m, p.q), tol=1e-11)
    row = state_evolution_curve(LAW, ch, [0.3], 0.0, 1.0, 2, DELTA, tol=1e-11)[0]
    assert p.method == "lambda_zero" and p.eps == 0 and math.isfinite(p.Sigma)
    for k in ("Sigma", "m", "q", "train_loss"):
        assert getattr(p, k) == pytest.approx(getattr(near, k), rel=1e-6), k
        assert getattr(p, k) == pytest.approx(row[k], rel=1e-8), k


def test_a_point_not_solved_is_a_failed_row_with_its_reason(monkeypatch):
    """Every root-finder call fails: the rows above alpha_interp are converged = False, with no number and
    a reason naming alpha_interp and every route; the closed-form row below is unaffected."""
    def refuse(*args, **kw):
        raise NotConverged("refused by the test")

    monkeypatch.setattr(state_evolution, "solve", refuse)
    monkeypatch.setattr(state_evolution, "solve_damped", refuse)
    ch = SoftmaxChannel(2, Q0, DELTA, sobol(4, 6))
    rows = state_evolution_curve(LAW, ch, [0.1, 0.3], 0.0, 1.0, 2, DELTA)
    assert rows[0]["converged"] and rows[0]["method"] == "interpolating_limit"
    bad = rows[1]
    assert not bad["converged"] and bad["method"] == "failed" and "test_error" not in bad
    for words in ("alpha_interp = 0.153482", "Sigma grows without bound", "surrogate", "lambda path",
                  "refused by the test"):
        assert words in bad["reason"], bad["reason"]
