"""Paper B's baselines built on mu_delta, each against a route that does not reuse the code under test:
the Bayes-optimal MMSE curve (PriorCurve) against the state-evolution iteration, Gaussian and point-mass
priors and the linear estimator; the interpolation threshold against SPEC's cubic; the learned-spectrum
law and its fit against spectra of eta ReLU(S0 + delta Z - eps) drawn as random matrices."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.integrate import quad, trapezoid

from attnrepro.theory.bayes_optimal import PriorCurve, prior_mmse
from attnrepro.theory.free_convolution import FreeConvolution, wishart_cubic_stieltjes
from attnrepro.theory.interpolation import bayes_perfect_recovery, interpolation_threshold
from attnrepro.theory.learned_spectrum import LearnedSpectrum, fit, ks_distance
from attnrepro.theory.random_matrix import eigenvalues
from attnrepro.theory.spectral_laws import Atomic, MarchenkoPastur, power_law
from test_free_convolution import Semicircle


def wishart_tail_mass(kappa0: float, delta: float, eps: float) -> float:
    """mu_delta((eps, inf)) for the Wishart target by quadrature of -Im g / pi, g the root of SPEC's cubic."""
    upper = math.sqrt(kappa0) * (1 + math.sqrt(1 / kappa0)) ** 2 + 2.5 * delta  # right of the support
    dens = lambda x: -wishart_cubic_stieltjes(x, kappa0, delta ** 2).imag[0] / math.pi
    return quad(dens, eps, upper, limit=400)[0]


def wishart_J(kappa0: float, delta: float) -> float:
    """J(delta, 0) = int_0^inf x^2 mu_delta(dx) by quadrature of the cubic's density."""
    upper = math.sqrt(kappa0) * (1 + math.sqrt(1 / kappa0)) ** 2 + 2.5 * delta
    dens = lambda x: -wishart_cubic_stieltjes(x, kappa0, delta ** 2).imag[0] / math.pi
    return quad(lambda x: x * x * dens(x), 0.0, upper, epsabs=1e-13, epsrel=1e-12, limit=400)[0]


def brute_force_ks(y: np.ndarray, cdf) -> float:
    """sup_x |F_n(x) - F(x)| over a fine grid, the sample points and their left limits (x - 1e-12), with both
    CDFs evaluated pointwise (F_n by counting)."""
    y = np.sort(np.ravel(y))
    grid = np.concatenate([np.linspace(y[0] - 1.0, y[-1] + 1.0, 20001), y, y - 1e-12])
    emp = np.searchsorted(y, grid, side="right") / y.size
    return float(np.max(np.abs(emp - cdf(grid))))


# ================================================================ Bayes-optimal MMSE
KAPPAS = (0.25, 0.5, 0.75)


@pytest.fixture(scope="module")
def curves():
    return {k: PriorCurve.tabulate(MarchenkoPastur(k)) for k in KAPPAS}


@pytest.mark.parametrize("kappa0", KAPPAS)
def test_mmse_starts_at_prior_variance(curves, kappa0):
    """alpha -> 0: no information, the MMSE is Var mu0 = Q0 - (mean of mu0)^2 (1 for every kappa0)."""
    law = MarchenkoPastur(kappa0)
    variance = law.Q0 - law.moment(1) ** 2
    for T in (2, 3):
        assert curves[kappa0].mmse(1e-9, T)[0] == pytest.approx(variance, rel=1e-3)


@pytest.mark.parametrize("kappa0", KAPPAS)
@pytest.mark.parametrize("T", [2, 3])
def test_perfect_recovery_threshold(curves, kappa0, T):
    """The curve reaches 0 at alpha_PR = (2 kappa0 - kappa0^2) / (T^2 + T - 2) (SPEC), not before."""
    alpha_pr = (2 * kappa0 - kappa0 ** 2) / (T * T + T - 2)
    curve = curves[kappa0]
    assert bayes_perfect_recovery(kappa0, T) == pytest.approx(alpha_pr, rel=1e-12)
    assert curve.perfect_recovery(T) == pytest.approx(alpha_pr, rel=1e-4)
    below, above = curve.mmse([0.999 * alpha_pr, 1.001 * alpha_pr], T)
    assert below > 0
    assert above == 0


@pytest.mark.parametrize("kappa0", KAPPAS)
def test_mmse_non_increasing(curves, kappa0):
    mmse = curves[kappa0].mmse(np.linspace(1e-4, 0.4, 400), 2)
    assert np.all(np.diff(mmse) <= 1e-12)
    assert mmse[0] > 0.9 and mmse[-1] == 0


@pytest.mark.parametrize("alpha", [0.03, 0.1, 0.16])
def test_mmse_matches_state_evolution_iteration(curves, alpha):
    """The state evolution of SPEC iterated from the uninformed start MMSE = Var mu0:
    qhat = (T^2 + T - 2) alpha / MMSE, MMSE <- prior_mmse(qhat), until it settles; PriorCurve inverts the
    fixed-point relation on a table instead."""
    law, T = MarchenkoPastur(0.5), 2
    c = T * T + T - 2
    m = law.Q0 - law.moment(1) ** 2
    for _ in range(500):
        new = prior_mmse(law, c * alpha / m)
        if abs(new - m) < 1e-10:
            break
        m = new
    assert abs(new - m) < 1e-10, "state evolution did not settle"
    assert curves[0.5].mmse(alpha, T)[0] == pytest.approx(m, rel=2e-3)


@pytest.mark.parametrize("value", [0.0, 1.0, -2.5])
@pytest.mark.parametrize("qhat", [0.1, 1.0, 10.0, 1e3])
def test_prior_mmse_of_a_point_mass_is_zero(value, qhat):
    """S0 = c I is known in advance: denoising it costs nothing (1/qhat cancels the semicircle's int p^3 term)."""
    assert abs(prior_mmse(Atomic((value,)), qhat)) < 1e-9 / qhat


@pytest.mark.parametrize("s", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("qhat", [0.01, 0.3, 1.0, 5.0, 100.0])
def test_prior_mmse_of_a_gaussian_prior(s, qhat):
    """S0 ~ s GOE is a Gaussian prior: the Bayes estimator is linear and the MMSE is s^2 / (1 + qhat s^2)."""
    assert prior_mmse(Semicircle(s), qhat) == pytest.approx(s ** 2 / (1 + qhat * s ** 2), rel=1e-8)


@pytest.mark.parametrize("kappa0", KAPPAS)
@pytest.mark.parametrize("qhat", [0.01, 0.5, 3.0, 50.0])
def test_prior_mmse_beats_the_linear_estimator(kappa0, qhat):
    """Bayes <= best shrinkage mean I + c (Y - mean I), whose error is Var/(1 + qhat Var) <= 1/qhat (Y itself);
    strictly below for the non-Gaussian Wishart prior, and >= 0."""
    law = MarchenkoPastur(kappa0)
    variance = law.Q0 - law.moment(1) ** 2
    m = prior_mmse(law, qhat)
    assert 0 <= m < variance / (1 + qhat * variance) <= 1 / qhat


# ================================================================ interpolation threshold
DELTAS = (0.25, 0.5, 1.0)


@pytest.fixture(scope="module")
def thresholds():
    return {D: interpolation_threshold(MarchenkoPastur(0.5), 2, D) for D in DELTAS}


@pytest.mark.parametrize("Delta", DELTAS)
def test_threshold_solves_its_equation(thresholds, Delta):
    """dbar solves Q0 + Delta/2 = J(dbar, 0) - (dbar/2) dJ/ddelta(dbar, 0), recomputed with a fresh solver, and
    alpha = dJ/ddelta(dbar, 0) / (2 dbar (T^2 + T - 2))."""
    law, T, r = MarchenkoPastur(0.5), 2, thresholds[Delta]
    fc = FreeConvolution(law, r.delta)
    assert abs(law.Q0 + Delta / 2 - fc.J(0.0) + r.delta / 2 * fc.dJ_ddelta(0.0)) < 1e-8
    assert r.alpha == pytest.approx(fc.dJ_ddelta(0.0) / (2 * r.delta * (T * T + T - 2)), rel=1e-12)


@pytest.mark.parametrize("Delta", DELTAS)
def test_threshold_equation_by_the_cubic(thresholds, Delta):
    """The same equation with J from quadrature of the cubic's density and dJ/ddelta by central differences of
    it (no subordination solver): satisfied to the solver's quadrature error (~1e-5)."""
    law, r = MarchenkoPastur(0.5), thresholds[Delta]
    h = 1e-3
    J0 = wishart_J(0.5, r.delta)
    dJ = (wishart_J(0.5, r.delta + h) - wishart_J(0.5, r.delta - h)) / (2 * h)
    assert abs(law.Q0 + Delta / 2 - J0 + r.delta / 2 * dJ) < 5e-5


@pytest.mark.parametrize("Delta", DELTAS)
def test_threshold_rank_by_the_cubic(thresholds, Delta):
    """rank = 1 - F_dbar(0) = mu_dbar((0, inf)) by quadrature of the cubic's density."""
    r = thresholds[Delta]
    assert r.rank == pytest.approx(wishart_tail_mass(0.5, r.delta, 0.0), abs=2e-5)


def test_threshold_decreases_with_noise(thresholds):
    alphas = [thresholds[D].alpha for D in DELTAS]
    assert all(a > b > 0 for a, b in zip(alphas, alphas[1:]))


def test_threshold_small_target_limit():
    """Q0 -> 0 (S0 = c I, c -> 0): alpha_interp -> 1/(2 (T^2 + T - 2)) (SPEC), approached from above."""
    limit = 1 / (2 * (2 * 2 + 2 - 2))
    alphas = [interpolation_threshold(Atomic((c,)), 2, 0.25).alpha for c in (0.3, 0.1, 0.03)]
    assert all(a > b > limit for a, b in zip(alphas, alphas[1:]))
    assert alphas[-1] == pytest.approx(limit, rel=1e-2)


def test_threshold_without_target_raises():
    """S0 = 0 with Delta > 0: J(dbar, 0) - (dbar/2) dJ/ddelta = 0 for every dbar, so no solution (SPEC)."""
    with pytest.raises(ValueError):
        interpolation_threshold(Atomic((0.0,)), 2, 0.5)
    with pytest.raises(ValueError):
        interpolation_threshold(MarchenkoPastur(0.5), 1, 0.5)


# ================================================================ learned spectrum
ETA, DELTA, EPS = 1.3, 0.6, 0.4


def synthetic(law, N, draws, seed=0):
    """eta ReLU(S0 + delta Z - eps) from random matrices (random_matrix.eigenvalues), pooled over draws."""
    return ETA * np.maximum(eigenvalues(law, DELTA, N, draws, seed=seed) - EPS, 0.0).ravel()


@pytest.fixture(scope="module")
def power_fit():
    law = power_law(50, 1.0)
    y = synthetic(law, 50, 32)
    return law, y, fit(law, y)


def test_fit_recovers_power_law_spectrum(power_fit):
    """d = N = 50, 32 draws (8 leave eps up to 6% off from sampling alone): (eta, delta, eps) within 5%, and the
    fitted law within KS 0.05 of the sample (brute force)."""
    law, y, f = power_fit
    assert (f.spectrum.eta, f.spectrum.delta, f.spectrum.eps) == pytest.approx((ETA, DELTA, EPS), rel=0.05)
    assert brute_force_ks(y, f.spectrum.cdf) < 0.05


@pytest.fixture(scope="module")
def wishart_fit():
    law = MarchenkoPastur(0.5)
    y = synthetic(law, 400, 4)
    return law, y, fit(law, y)


def test_fit_recovers_wishart_spectrum(wishart_fit):
    """MP(0.5), N = 400, 4 draws: (eta, delta, eps) within 5%, KS < 0.05 (brute force)."""
    law, y, f = wishart_fit
    assert (f.spectrum.eta, f.spectrum.delta, f.spectrum.eps) == pytest.approx((ETA, DELTA, EPS), rel=0.05)
    assert brute_force_ks(y, f.spectrum.cdf) < 0.05


def quantile_residual(y, law, delta, eps) -> float:
    """The fit's criterion at (delta, eps): rms of y_(k) - eta Q(p_k), eta by least squares, over rms y."""
    y = np.sort(np.ravel(y))
    r = LearnedSpectrum(law, 1.0, delta, eps).quantile((np.arange(1, y.size + 1) - 0.5) / y.size)
    eta = (r @ y) / (r @ r)
    return math.sqrt(np.mean((y - eta * r) ** 2) / np.mean(y * y))


@pytest.mark.parametrize("sample", ["power_fit", "wishart_fit"])
def test_fit_is_no_worse_than_the_truth(request, sample):
    """The minimiser of the quantile criterion must do at least as well as the generating (delta, eps)
    (the samples and fits of the two tests above, seed 0)."""
    law, y, f = request.getfixturevalue(sample)
    assert f.rms <= quantile_residual(y, law, DELTA, EPS) * (1 + 1e-3)


@pytest.mark.parametrize("seed", [4, 7])
def test_fit_is_no_worse_than_the_truth_other_draws(seed):
    """The same on other draws of the Wishart sample."""
    law = MarchenkoPastur(0.5)
    y = synthetic(law, 400, 4, seed)
    assert fit(law, y).rms <= quantile_residual(y, law, DELTA, EPS) * (1 + 1e-3)


def test_fit_reports_its_ks(power_fit):
    """Fit.ks (ks_distance, with the atom at 0) = the brute-force KS distance."""
    law, y, f = power_fit
    assert f.ks == pytest.approx(brute_force_ks(y, f.spectrum.cdf), abs=1e-6)


def test_ks_distance_without_atom():
    """A sample with no zeros (eps left of the support) and a continuous CDF: ks_distance = brute force."""
    law = MarchenkoPastur(2.0)
    spectrum = LearnedSpectrum(law, 1.0, 0.5, -2.0)
    y = 1.0 * (eigenvalues(law, 0.5, 200, 2, seed=3).ravel() + 2.0)
    assert spectrum.atom == 0 and np.all(y > 0)
    assert ks_distance(y, spectrum.cdf) == pytest.approx(brute_force_ks(y, spectrum.cdf), abs=1e-6)


def test_ks_distance_with_atom():
    """Two zeros and two ones against the law with F = 1/2 on [0, 1) and 1 from 1 on: KS = 0."""
    y = np.array([0.0, 0.0, 1.0, 1.0])
    cdf = lambda x: np.where(np.asarray(x) < 0, 0.0, np.where(np.asarray(x) < 1, 0.5, 1.0))
    assert brute_force_ks(y, cdf) == 0
    assert ks_distance(y, cdf) == pytest.approx(0.0, abs=1e-12)


def test_density_integrates_to_the_tail_mass():
    """int_{y > 0} p(y) dy (trapezoid rule on a fine grid) = mu_delta((eps, inf)) by quadrature of the cubic's
    density (MP(0.5))."""
    spectrum = LearnedSpectrum(MarchenkoPastur(0.5), ETA, DELTA, EPS)
    y = np.linspace(0.0, spectrum.pieces()[-1][1] + 0.1, 400_001)  # density(): piecewise linear, many kinks
    total = trapezoid(spectrum.density(y), y)
    assert total == pytest.approx(wishart_tail_mass(0.5, DELTA, EPS), abs=1e-3)


def test_atom_is_F_delta_of_eps():
    """The atom F_delta(eps) = 1 - mu_delta((eps, inf)), the latter by quadrature of the cubic's density."""
    spectrum = LearnedSpectrum(MarchenkoPastur(0.5), ETA, DELTA, EPS)
    assert spectrum.atom == pytest.approx(1 - wishart_tail_mass(0.5, DELTA, EPS), abs=1e-3)


POWER_T = np.sqrt(50) / np.arange(1, 51)   # the power-law eigenvalues, largest first


def isolated_top_eigenvalues(delta: float) -> int:
    """How many of the top eigenvalues stand alone: t_i and t_{i+1} belong to different pieces of supp mu_delta
    iff f(u) = sum_j w_j / (u - t_j)^2 dips below 1/delta^2 between them (counted from the top down)."""
    for i in range(len(POWER_T) - 1):
        u = np.linspace(POWER_T[i + 1], POWER_T[i], 20003)[1:-1]
        if np.min(np.sum(1 / 50 / (u[:, None] - POWER_T[None, :]) ** 2, axis=1)) >= delta ** -2:
            return i
    return len(POWER_T)


@pytest.mark.parametrize("delta, nodes", [
    (0.2, None),
    (0.1, 400),
    (0.1, None),
    (0.05, None),
])
def test_power_law_outliers_are_the_isolated_eigenvalues(delta, nodes):
    """Outliers = the pieces right of the bulk: one per isolated top eigenvalue (counted independently from f),
    each of mass 1/d."""
    spectrum = LearnedSpectrum(power_law(50, 1.0), ETA, delta, EPS, **({"nodes": nodes} if nodes else {}))
    outliers = spectrum.outliers()
    assert len(outliers) == isolated_top_eigenvalues(delta)
    np.testing.assert_allclose([m for _, m in outliers], 1 / 50, rtol=1e-5)


def test_power_law_outlier_positions():
    """Second-order perturbation theory: the piece of an isolated eigenvalue t_i sits at
    t_i + delta^2 sum_{j != i} w_j / (t_i - t_j) + O(delta^3); its y-position is eta (that - eps). The check is
    sharper than the shift it tests (each residual < 5% of the delta^2 term)."""
    delta = 0.1
    outliers = LearnedSpectrum(power_law(50, 1.0), ETA, delta, EPS).outliers()
    positions = np.array([p for p, _ in outliers])[::-1]   # largest first
    t = POWER_T[: len(positions)]
    shift = np.array([np.sum(1 / 50 / (ti - np.delete(POWER_T, i))) for i, ti in enumerate(t)])
    predicted, unshifted = ETA * (t + delta ** 2 * shift - EPS), ETA * (t - EPS)
    assert len(positions) >= 8
    assert np.all(np.abs(positions - predicted) < 0.05 * np.abs(predicted - unshifted))


# ---------------------------------------------------------------- the learned spectrum's error split

def test_error_split_matches_monte_carlo_of_the_spectral_denoiser():
    """LearnedSpectrum.error_split against its definition, drawn: Y = S0 + delta Z (Z GOE, semicircle on
    [-2, 2]) at d = 1000 for the power-law target, S = eta ReLU(Y - eps I) as a matrix function of Y, and
    ||S - S0||^2 / d summed over Y's eigenvectors in the bulk (eigenvalues within the theory's heaviest piece)
    and outside it. The theory's conditional mean xi(x) = x - 2 delta^2 H(x) is not in this route: the draw
    uses v_k^T S0 v_k. Finite-d differences were 5e-4 at d = 300, 4e-4 at 600, 1e-4 at 1200 (6-8 draws)."""
    d, gamma, (eta, delta, eps) = 1000, 1.5, (0.8, 0.5, 0.3)
    law = power_law(d, gamma)
    signal, bulk = LearnedSpectrum(law, eta, delta, eps, nodes=400).error_split()
    lo, hi, _ = max(LearnedSpectrum(law, eta, delta, eps, nodes=400).mu.components, key=lambda c: c[2])
    lam = math.sqrt(d) * np.arange(1, d + 1) ** -gamma
    rng, draws = np.random.default_rng(0), []
    for _ in range(4):
        G = rng.standard_normal((d, d))
        y, V = np.linalg.eigh(np.diag(lam) + delta * (G + G.T) / math.sqrt(2 * d))
        s = eta * np.maximum(y - eps, 0.0)
        e = s ** 2 - 2 * s * (V ** 2 * lam[:, None]).sum(0)
        inside = (y >= lo - 0.05) & (y <= hi + 0.05)
        total = (((V * s) @ V.T - np.diag(lam)) ** 2).sum() / d
        draws.append((law.Q0 + e[~inside].sum() / d, e[inside].sum() / d, total))
    mc_signal, mc_bulk, mc_total = np.mean(draws, axis=0)
    assert mc_signal + mc_bulk == pytest.approx(mc_total, rel=1e-9)   # the draw's own bookkeeping
    assert signal == pytest.approx(mc_signal, abs=5e-4) and bulk == pytest.approx(mc_bulk, abs=5e-4)
    assert bulk > 0.1 * signal  # a split worth testing: both parts are sizeable here


def test_error_split_adds_up_to_the_state_evolutions_estimation_error():
    """e_signal + e_bulk = Q0 - 2m + q with the fixed-point map's m = eta (K - delta^2 D), q = eta^2 J
    (state_evolution.FixedPointMap.prior), on a law with outliers and one with a single piece."""
    for law, (eta, delta, eps) in ((power_law(300, 1.0), (0.9, 0.4, 0.2)), (MarchenkoPastur(0.5), (1.1, 0.7, 0.5))):
        fc = FreeConvolution(law, delta, 400)
        J, K, D = fc.J(eps), fc.K(eps), fc.dJ_ddelta(eps) / (2 * delta)
        m, q = eta * (K - delta ** 2 * D), eta ** 2 * J
        signal, bulk = LearnedSpectrum(law, eta, delta, eps, nodes=400).error_split()
        assert signal + bulk == pytest.approx(law.Q0 - 2 * m + q, rel=1e-9)
