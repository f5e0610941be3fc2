"""mu_delta = mu0 [+] semicircle(delta) by subordination (theory.free_convolution), each claim checked
against a route that does not use the solver: closed forms, free cumulants, quadrature of mu0, sampled
Wishart matrices, SPEC's cubic for the Wishart target, eigenvalues of S0 + delta Z, finite differences."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
from scipy.integrate import quad

from attnrepro.theory.free_convolution import FreeConvolution, wishart_cubic_stieltjes
from attnrepro.theory.random_matrix import J_monte_carlo
from attnrepro.theory.spectral_laws import Atomic, MarchenkoPastur, SpectralLaw, coarsened, power_law

ZERO = Atomic((0.0,))
LAWS = {"mp0.5": MarchenkoPastur(0.5), "mp2": MarchenkoPastur(2.0), "power50": power_law(50, 1.0)}


# ---------------------------------------------------------------- closed forms used below
def semicircle_density(x, var):
    """The semicircle law of variance var: sqrt(4 var - x^2) / (2 pi var)."""
    x = np.asarray(x, float)
    return np.sqrt(np.maximum(4 * var - x * x, 0.0)) / (2 * math.pi * var)


def semicircle_cdf(x, var):
    """Its CDF: 1/2 + (t sqrt(4 - t^2) / 4 + arcsin(t / 2)) / pi, t = x / sqrt(var) in [-2, 2]."""
    t = np.clip(np.asarray(x, float) / math.sqrt(var), -2.0, 2.0)
    return 0.5 + (t * np.sqrt(4 - t * t) / 4 + np.arcsin(t / 2)) / math.pi


@dataclass(frozen=True)
class Semicircle(SpectralLaw):
    """A continuous mu0 with a closed-form Stieltjes transform: the semicircle of variance s^2,
    G(z) = (z - sqrt(z - 2s) sqrt(z + 2s)) / (2 s^2). Its free convolution with sc(delta) is the
    semicircle of variance s^2 + delta^2 (free cumulants add)."""

    s: float

    atoms = ()

    @property
    def support(self):
        return -2 * self.s, 2 * self.s

    def _root(self, z):
        return np.sqrt(z - 2 * self.s) * np.sqrt(z + 2 * self.s)

    def f_h(self, u, v):
        u, v = np.broadcast_arrays(np.asarray(u, float), np.asarray(v, float))
        z = u + 1j * v
        g = (z - self._root(z)) / (2 * self.s ** 2)
        with np.errstate(divide="ignore", invalid="ignore"):
            return -g.imag / v, g.real

    def dstieltjes(self, z):
        z = np.asarray(z, dtype=complex)
        return (1 - z / self._root(z)) / (2 * self.s ** 2)

    def moment(self, k):
        return {0: 1.0, 1: 0.0, 2: self.s ** 2, 3: 0.0, 4: 2 * self.s ** 4}[k]


def mp_cdf(law: MarchenkoPastur, x: float) -> float:
    """CDF of the Marchenko-Pastur law by quadrature of its density plus the atom 1 - kappa0 at 0."""
    lo, hi = law.edges
    atom = max(1.0 - law.kappa0, 0.0) if x >= 0 else 0.0
    return atom + (quad(law.density, lo, min(x, hi), limit=200)[0] if x > lo else 0.0)


def mu0_moment(law: SpectralLaw, k: int) -> float:
    """The k-th moment of mu0 from its atoms or by quadrature of the MP density (not law.moment)."""
    if isinstance(law, MarchenkoPastur):
        lo, hi = law.edges
        return quad(lambda x: x ** k * law.density(np.array(x)), lo, hi, limit=200)[0] + (
            (1 - law.kappa0) * (k == 0) if law.kappa0 < 1 else 0.0)
    t, w = np.array(law.atoms).T
    return float(np.sum(w * t ** k))


# ---------------------------------------------------------------- S0 = 0: the semicircle itself
@pytest.mark.parametrize("delta", [0.05, 0.3, 1.0, 2.5])
def test_zero_target_is_the_semicircle(delta):
    """S0 = 0: mu_delta is the semicircle of variance delta^2, so J(delta, 0) = delta^2 / 2 (half its second
    moment, by symmetry), dJ/ddelta = delta, and the density at the solver's nodes is the closed form."""
    fc = FreeConvolution(ZERO, delta)
    assert fc.J(0.0) == pytest.approx(delta ** 2 / 2, rel=1e-9)
    assert fc.dJ_ddelta(0.0) == pytest.approx(delta, rel=1e-9)
    assert fc.mass == pytest.approx(1.0, abs=1e-9)
    np.testing.assert_allclose(fc.p, semicircle_density(fc.x, delta ** 2), rtol=0, atol=1e-9 / delta)
    # the support is [-2 delta, 2 delta] and the Hilbert transform there is x / (2 delta^2)
    assert fc.components[0][:2] == pytest.approx((-2 * delta, 2 * delta), rel=1e-9)
    np.testing.assert_allclose(fc.H, fc.x / (2 * delta ** 2), rtol=0, atol=1e-9 / delta)


def test_zero_target_density_between_nodes():
    """density() interpolates linearly between nodes: still within 1e-4 of the closed form on a uniform grid
    (the error sits at the square-root edges)."""
    delta = 0.7
    x = np.linspace(-2.2 * delta, 2.2 * delta, 1001)
    dens = FreeConvolution(ZERO, delta).density(x)
    assert np.max(np.abs(dens - semicircle_density(x, delta ** 2))) < 1e-4 / delta


def test_zero_target_cdf_and_quantile():
    """F_delta of the semicircle against its closed-form CDF (arcsin formula), at the solver's nodes."""
    delta = 1.0
    fc = FreeConvolution(ZERO, delta)
    np.testing.assert_allclose(fc.cdf(fc.x), semicircle_cdf(fc.x, delta ** 2), rtol=0, atol=2e-5)
    q = np.linspace(0.01, 0.99, 99)
    np.testing.assert_allclose(semicircle_cdf(fc.quantile(q), delta ** 2), q, rtol=0, atol=2e-5)


@pytest.mark.parametrize("s, delta", [(0.5, 0.3), (1.0, 1.0), (2.0, 0.5)])
def test_semicircle_plus_semicircle(s, delta):
    """A continuous mu0 without atoms: sc(s) [+] sc(delta) = sc(sqrt(s^2 + delta^2)) (free cumulants add)."""
    fc = FreeConvolution(Semicircle(s), delta)
    var = s ** 2 + delta ** 2
    assert fc.mass == pytest.approx(1.0, abs=1e-9)
    np.testing.assert_allclose(fc.p, semicircle_density(fc.x, var), rtol=0, atol=1e-8 / math.sqrt(var))
    assert fc.J(0.0) == pytest.approx(var / 2, rel=1e-8)


# ---------------------------------------------------------------- moments: free cumulants
@pytest.mark.parametrize("name", list(LAWS))
@pytest.mark.parametrize("delta", [0.1, 0.5, 1.0, 2.0])
def test_moments_follow_free_cumulants(name, delta):
    """Free convolution with sc(delta) adds delta^2 to the second free cumulant only, so
    m0 = 1, m1 = m1(mu0), m2 = m2(mu0) + delta^2, m3 = m3(mu0) + 3 delta^2 m1,
    m4 = m4(mu0) + 4 delta^2 m2 + 2 delta^2 m1^2 + 2 delta^4 (a classical Gaussian would add 3 delta^4);
    the moments of mu0 come from its atoms or from quadrature of the MP density."""
    law = LAWS[name]
    fc = FreeConvolution(law, delta)
    m = [mu0_moment(law, k) for k in range(5)]
    assert fc.mass == pytest.approx(1.0, abs=1e-9)
    assert fc.moment(1) == pytest.approx(m[1], rel=1e-9)
    assert fc.moment(2) == pytest.approx(m[2] + delta ** 2, rel=1e-9)
    assert fc.moment(3) == pytest.approx(m[3] + 3 * delta ** 2 * m[1], rel=1e-8)
    m4 = m[4] + 4 * delta ** 2 * m[2] + 2 * delta ** 2 * m[1] ** 2 + 2 * delta ** 4
    assert fc.moment(4) == pytest.approx(m4, rel=1e-8)


@pytest.mark.parametrize("name", list(LAWS))
def test_J_below_the_support_is_a_polynomial(name):
    """For eps left of supp mu_delta, (x - eps)_+^2 = (x - eps)^2, so J = Q0 + delta^2 - 2 eps m1 + eps^2 and
    dJ/ddelta = 2 delta, dJ/deps = -2 (m1 - eps) (m1, Q0 by quadrature or from the atoms)."""
    law, delta = LAWS[name], 0.5
    fc = FreeConvolution(law, delta)
    eps = fc.components[0][0] - 0.5
    m1, q0 = mu0_moment(law, 1), mu0_moment(law, 2)
    assert fc.J(eps) == pytest.approx(q0 + delta ** 2 - 2 * eps * m1 + eps ** 2, rel=1e-9)
    assert fc.dJ_ddelta(eps) == pytest.approx(2 * delta, rel=1e-9)
    assert fc.dJ_deps(eps) == pytest.approx(-2 * (m1 - eps), rel=1e-9)


# ---------------------------------------------------------------- delta -> 0 gives back mu0
def test_small_delta_gives_back_marchenko_pastur():
    """MP(0.5) [+] sc(1e-3) against mu0 itself: its CDF (quad of MarchenkoPastur.density + the atom at 0) away
    from the smeared atom, and J(eps) = quad of (x - eps)_+^2 over the MP density (+ the atom's eps_-^2)."""
    law, delta = MarchenkoPastur(0.5), 1e-3
    fc = FreeConvolution(law, delta)
    lo, hi = law.edges
    x = np.linspace(-0.1, hi + 0.1, 301)
    x = x[np.abs(x) > 0.01]  # the atom is smeared over |x| <= 2 delta sqrt(1 - kappa0)
    ref = np.array([mp_cdf(law, t) for t in x])
    assert np.max(np.abs(fc.cdf(x) - ref)) < 1e-4
    for eps in (-0.5, 0.0, 0.3, 1.0, 2.0):
        ref_J = quad(lambda t, e=eps: max(t - e, 0.0) ** 2 * law.density(np.array(t)), lo, hi, limit=200)[0]
        ref_J += (1 - law.kappa0) * max(-eps, 0.0) ** 2
        assert fc.J(eps) == pytest.approx(ref_J, rel=1e-5)  # J moves by O(delta^2) = 1e-6


# ---------------------------------------------------------------- the MP law against sampling
@pytest.fixture(scope="module", params=[400, pytest.param(1000, marks=pytest.mark.slow)], ids=lambda d: f"d{d}")
def wishart_samples(request):
    """Eigenvalues of W0 W0^T / sqrt(p0 d), p0 = d / 2: 4 independent draws (rows); d = 400 by default,
    also d = 1000 in the slow suite."""
    d = request.param
    p0 = d // 2
    rng = np.random.default_rng(20250)
    out = []
    for _ in range(4):
        w0 = rng.standard_normal((d, p0))
        out.append(np.linalg.eigvalsh(w0 @ w0.T / math.sqrt(p0 * d)))
    return np.array(out)


def test_marchenko_pastur_matches_sampled_wishart(wishart_samples):
    """Kolmogorov-Smirnov distance of one draw to the MP CDF (quad of its density + atom) < 0.02; the rank
    deficit d - p0 is the atom 1 - kappa0."""
    law = MarchenkoPastur(0.5)
    ev = np.sort(wishart_samples[0])
    assert np.mean(np.abs(ev) < 1e-8) == pytest.approx(1 - law.kappa0)
    pos = ev[ev > 1e-8]
    ranks = np.searchsorted(ev, pos, side="right") / ev.size
    F = np.array([mp_cdf(law, t) for t in pos])
    ks = max(np.max(np.abs(ranks - F)), np.max(np.abs(ranks - 1 / ev.size - F)))
    assert ks < 0.02


def test_marchenko_pastur_moments_match_samples(wishart_samples):
    """Mean sqrt(kappa0), Q0 = 1 + kappa0 and MarchenkoPastur.moment(k) against sample moments: within 4 standard
    errors over the draws + the O(1/d) finite-size bias (E Q0 = 1 + kappa0 + 1/d)."""
    law, d = MarchenkoPastur(0.5), wishart_samples.shape[1]
    assert law.moment(1) == pytest.approx(math.sqrt(law.kappa0))
    assert law.Q0 == pytest.approx(1 + law.kappa0)
    for k in (1, 2, 3):
        per_draw = np.mean(wishart_samples ** k, axis=1)
        se = per_draw.std(ddof=1) / math.sqrt(len(per_draw))
        assert abs(per_draw.mean() - law.moment(k)) < 4 * se + 5 * law.moment(k) / d, k
    for k in range(4):
        assert law.moment(k) == pytest.approx(mu0_moment(law, k), rel=1e-9)


# ---------------------------------------------------------------- subordination vs SPEC's cubic
@pytest.mark.parametrize("kappa0", [0.5, 2.0])
@pytest.mark.parametrize("delta", [0.3, 1.0])
def test_wishart_density_matches_the_cubic(kappa0, delta):
    """Wishart target: the density -Im g / pi and the Hilbert transform Re g from the root of SPEC's cubic
    (companion eigenvalues, no subordination) at the solver's nodes; on a uniform grid the linear
    interpolation of density() costs up to ~6e-4 at the edges."""
    fc = FreeConvolution(MarchenkoPastur(kappa0), delta)
    g = wishart_cubic_stieltjes(fc.x, kappa0, delta ** 2)
    np.testing.assert_allclose(fc.p, -g.imag / math.pi, rtol=0, atol=1e-7)
    np.testing.assert_allclose(fc.H, g.real, rtol=0, atol=1e-6)
    x = np.linspace(fc.x.min() - 0.5, fc.x.max() + 0.5, 2001)
    g = wishart_cubic_stieltjes(x, kappa0, delta ** 2)
    assert np.max(np.abs(fc.density(x) + g.imag / math.pi)) < 2e-3


# ---------------------------------------------------------------- subordination vs random matrices
@pytest.mark.parametrize("name", ["mp0.5", "power50"])
@pytest.mark.parametrize("delta, eps", [(0.3, 0.0), (1.0, 0.2), (1.0, 1.0)])
def test_J_matches_random_matrices(name, delta, eps):
    """J(delta, eps) against (1/N) sum (lambda_i - eps)_+^2 over eigenvalues of S0 + delta Z, N = 800, 3 draws:
    within 4 standard errors + 1% (finite-N bias)."""
    law = LAWS[name]
    mean, se = J_monte_carlo(law, delta, eps, N=800, draws=3, seed=7)
    theory = FreeConvolution(law, delta).J(eps)
    assert abs(mean - theory) < 4 * se + 0.01 * theory


# ---------------------------------------------------------------- derivatives and K
DERIV_NODES = 1600  # (x - eps)_+ has a kink inside the support: the trapezoid rule converges algebraically there


@pytest.mark.parametrize("name", list(LAWS))
@pytest.mark.parametrize("delta", [0.3, 1.0])
def test_partial_derivatives_match_finite_differences(name, delta):
    """dJ/deps and dJ/ddelta (the free heat equation) against central differences of J, h = 1e-4 (in eps) and
    1e-5 (in delta), eps inside the support; with a kink there the quadrature needs more nodes than the default."""
    law = LAWS[name]
    fc = FreeConvolution(law, delta, DERIV_NODES)
    plus, minus = FreeConvolution(law, delta + 1e-5, DERIV_NODES), FreeConvolution(law, delta - 1e-5, DERIV_NODES)
    for eps in (0.0, 0.7, 1.5):
        fd_eps = (fc.J(eps + 1e-4) - fc.J(eps - 1e-4)) / 2e-4
        fd_delta = (plus.J(eps) - minus.J(eps)) / 2e-5
        assert fc.dJ_deps(eps) == pytest.approx(fd_eps, rel=1e-5)
        assert fc.dJ_ddelta(eps) == pytest.approx(fd_delta, rel=1e-5)


@pytest.mark.parametrize("name", list(LAWS))
def test_K_is_its_definition(name):
    """K(delta, eps) = int x (x - eps)_+ dmu_delta, computed through fc.integrate, and K - eps (-dJ/deps / 2) = J
    (x (x - eps)_+ = (x - eps)_+^2 + eps (x - eps)_+)."""
    fc = FreeConvolution(LAWS[name], 0.6)
    eps = np.array([-0.5, 0.0, 0.4, 1.3])
    direct = np.array([fc.integrate(fc.x * np.maximum(fc.x - e, 0.0)) for e in eps])
    np.testing.assert_allclose(fc.K(eps), direct, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(fc.K(eps), fc.J(eps) - eps * fc.dJ_deps(eps) / 2, rtol=1e-12)


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("delta", [0.0, -0.5, math.nan, math.inf])
def test_bad_delta_raises(delta):
    with pytest.raises(ValueError):
        FreeConvolution(MarchenkoPastur(0.5), delta)


@pytest.mark.parametrize("values, weights", [
    ((), None),                       # empty
    ((1.0, math.nan), None),          # non-finite value
    ((1.0, 2.0), (0.5, 0.6)),         # weights not summing to 1
    ((1.0, 2.0), (1.5, -0.5)),        # negative weight
    ((1.0, 2.0), (1.0,)),             # one weight for two values
])
def test_bad_atomic_law_raises(values, weights):
    with pytest.raises(ValueError):
        Atomic(values, weights)


def test_bad_marchenko_pastur_raises():
    with pytest.raises(ValueError):
        MarchenkoPastur(0.0)


def test_atomic_merges_equal_values():
    """A zero-padded spectrum has one atom at 0 with the summed weight."""
    law = Atomic((0.0, 2.0, 0.0, 0.0))
    assert law.atoms == ((0.0, 0.75), (2.0, 0.25))


def test_coarsened_power_law_keeps_mass_mean_and_J():
    """Merging the power-law target's atoms within 1e-3 (the large-d scaling-law theory) keeps the
    mass and mean exactly and changes J(delta, eps) and its derivatives by < 1e-5 relative, against
    the free convolution of all d atoms."""
    exact = power_law(400, 1.0)
    merged = coarsened(exact, 1e-3)
    assert len(merged.atoms) < 0.7 * len(exact.atoms)  # a real reduction, else the test checks nothing
    assert sum(w for _, w in merged.atoms) == pytest.approx(1.0, abs=1e-12)
    assert merged.moment(1) == pytest.approx(exact.moment(1), rel=1e-12)
    spans = np.diff([t for t, _ in merged.atoms])
    assert spans.min() > 0
    for delta in (0.3, 1.0):
        a, b = FreeConvolution(exact, delta), FreeConvolution(merged, delta)
        for eps in (0.0, 0.5):
            for f in ("J", "dJ_deps", "dJ_ddelta"):
                assert getattr(b, f)(eps) == pytest.approx(getattr(a, f)(eps), rel=1e-5), (delta, eps, f)
    assert coarsened(exact, 0.0) is exact


@pytest.mark.parametrize("law", [power_law(300, 1.0), MarchenkoPastur(0.5)], ids=["atomic", "mp"])
def test_f_alone_is_f_of_f_h_and_of_its_definition(law):
    """SpectralLaw.f (the bisections' evaluation) gives f_h's f to the bit, over many chunks of u-rows, and for
    an atomic law also the definition sum_i w_i / ((u - t_i)^2 + v^2) summed row by row in one piece."""
    rng = np.random.default_rng(3)
    u = rng.uniform(-1.0, 4.0, 1000)  # 1000 rows x 300 atoms: ten chunks of CHUNK_ENTRIES
    v = 10.0 ** rng.uniform(-13, 0, 1000)
    f, h = law.f_h(u, v)
    assert law.f(u, v).tobytes() == f.tobytes()
    if isinstance(law, Atomic):
        t, w = np.asarray(law._t), np.asarray(law._w)
        du = u[:, None] - t[None, :]
        assert f.tobytes() == (w / (du * du + v[:, None] ** 2)).sum(axis=1).tobytes()
        assert h.tobytes() == (du * (w / (du * du + v[:, None] ** 2))).sum(axis=1).tobytes()
    assert np.array_equal(law.f(u, 0.5), law.f_h(u, np.full_like(u, 0.5))[0])  # a scalar v is broadcast
