"""mu_delta = mu0 [+] sc(delta): the spectral law of S0 + delta Z, Z ~ GOE (semicircle on [-2, 2]).

Route (Biane's subordination). With G(z) = int mu(dt) / (z - t), the free convolution with a
semicircle of variance delta^2 satisfies G_delta(z) = G0(omega), omega = z - delta^2 G_delta(z).
On the real axis write omega = u + iv. Then, with f and h of the target law (spectral_laws),

    v(u) > 0 solves  f(u, v) = 1 / delta^2      (v = 0 where f(u, 0+) <= 1 / delta^2),
    x(u) = u + delta^2 h(u, v(u)),               p_delta(x(u)) = v(u) / (pi delta^2),

and u -> x(u) is increasing. The support of mu_delta is the image of the u-intervals where
f(u, 0+) > 1 / delta^2 (all inside [min supp mu0 - delta, max supp mu0 + delta]). On each
interval the solver puts nodes u = c - r cos(theta), theta equally spaced (dense at the
square-root edges), finds v by bisection in log v and integrates by the trapezoid rule in
theta with the exact Jacobian dx/du = |z'|^2 / Re z', z' = 1 + delta^2 G0'(u + iv). The real part of G_delta, the
Hilbert transform of p_delta, is H(x) = Re G_delta(x) = (x - u) / delta^2.

Functionals (the theory of paper B):

    J(delta, eps)     = int_eps^inf (x - eps)^2 mu_delta(dx)
    dJ/deps           = -2 int (x - eps)_+ mu_delta(dx)
    dJ/ddelta         = 4 delta int (x - eps)_+ H(x) mu_delta(dx)      (free heat equation:
                        d/d(delta^2) int phi dmu_delta = int phi'(x) H(x) mu_delta(dx))
    K(delta, eps)     = int x (x - eps)_+ mu_delta(dx)
    F_delta(x)        = mu_delta((-inf, x])

Accuracy (tests/test_free_convolution.py): the mass and the moments of mu_delta are exact to
about 1e-12 (the trapezoid rule in theta is spectrally accurate for smooth integrands); J and its
derivatives to about 1e-9 when eps lies outside the support, and to about 1e-5 relative at the
default 400 nodes when the kink of (x - eps)_+ lies inside it (1.6e-6 at 1600 nodes).
"""

from __future__ import annotations

import math
from functools import cached_property

import numpy as np

from attnrepro.theory.spectral_laws import SpectralLaw

BISECTIONS = 56
NODES = 400


class FreeConvolution:
    """mu_delta for one (law, delta), solved once on its nodes; functionals are integrals over them."""

    def __init__(self, law: SpectralLaw, delta: float, nodes: int = NODES):
        if not (delta > 0 and math.isfinite(delta)):
            raise ValueError(f"delta must be > 0 and finite, got {delta}")
        self.law, self.delta, self.nodes = law, float(delta), int(nodes)
        lo, hi = law.support
        scale = max(abs(lo), abs(hi), self.delta)
        self._v_min = 1e-13 * scale
        self._intervals = self._support_intervals(lo - 1.01 * self.delta, hi + 1.01 * self.delta)
        theta = np.linspace(0.0, math.pi, self.nodes)
        us, jac = [], []
        for a, b in self._intervals:
            us.append(0.5 * (a + b) - 0.5 * (b - a) * np.cos(theta))
            jac.append(0.5 * (b - a) * np.sin(theta))  # du/dtheta
        u = np.concatenate(us) if us else np.zeros(0)
        v = self._solve_v(u)
        for k in range(len(us)):  # edges: v = 0 exactly
            v[k * self.nodes] = v[(k + 1) * self.nodes - 1] = 0.0
        f, h = law.f_h(u, v)
        self.u, self.v = u, v
        self.x = u + self.delta ** 2 * h
        self.p = v / (math.pi * self.delta ** 2)
        self.H = (self.x - u) / self.delta ** 2
        # z(omega) = omega + delta^2 G0(omega) is real along omega(u) = u + i v(u), so
        # dx/du = |z'|^2 / Re z' with z' = 1 + delta^2 G0'(omega); quadrature weights of the
        # trapezoid rule in theta (smooth integrands there: spectral accuracy).
        zp = 1.0 + self.delta ** 2 * law.dstieltjes(u + 1j * v)
        with np.errstate(divide="ignore", invalid="ignore"):
            dxdu = np.where(v > 0, np.abs(zp) ** 2 / zp.real, 0.0)
        step = math.pi / (self.nodes - 1)
        self._weights = self.p * dxdu * np.concatenate(jac) * step if us else np.zeros(0)
        self._slices = [slice(k * self.nodes, (k + 1) * self.nodes) for k in range(len(us))]

    # ------------------------------------------------------------ solve
    def _inside(self, u: np.ndarray) -> np.ndarray:
        return self.law.f(u, np.full_like(u, self._v_min)) > self.delta ** -2

    def _support_intervals(self, lo: float, hi: float) -> list[tuple[float, float]]:
        """The u-intervals where f(u, 0+) > 1/delta^2, edges bisected to machine precision."""
        scan = [np.linspace(lo, hi, 8 * self.nodes)]
        for t, w in self.law.atoms:  # an atom's own component: |u - t| <= delta sqrt(w) at least
            if w > 0:
                r = self.delta * math.sqrt(w)
                scan.append(t + r * np.linspace(-0.999, 0.999, 9))
        t = np.array([a for a, w in self.law.atoms if w > 0])
        if t.size > 1:  # a gap narrower than the scan's step: f(., 0+) is convex between two atoms
            scan.append(self._gap_minima(t))
        u = np.unique(np.concatenate(scan))
        inside = self._inside(u)
        if not inside.any():
            raise RuntimeError(f"free convolution: no support found for delta = {self.delta:g}")
        change = np.flatnonzero(np.diff(inside.astype(np.int8)))
        out_side = np.where(inside[change], u[change + 1], u[change])  # the outside end of each bracket
        in_side = np.where(inside[change], u[change], u[change + 1])
        for _ in range(BISECTIONS):
            mid = 0.5 * (out_side + in_side)
            ins = self._inside(mid)
            in_side = np.where(ins, mid, in_side)
            out_side = np.where(ins, out_side, mid)
        edges = 0.5 * (out_side + in_side)
        starts = edges[inside[change + 1]]   # outside -> inside
        ends = edges[~inside[change + 1]]
        return list(zip(starts.tolist(), ends.tolist(), strict=True))

    def _gap_minima(self, t: np.ndarray) -> np.ndarray:
        """The minimiser of f(u, 0+) between every two neighbouring atoms (ternary search; f is
        convex there), so that the scan sees every gap of the support, however narrow."""
        lo, hi = t[:-1].copy(), t[1:].copy()
        for _ in range(BISECTIONS):
            a, b = lo + (hi - lo) / 3, hi - (hi - lo) / 3
            fa = self.law.f(a, np.full_like(a, self._v_min))
            fb = self.law.f(b, np.full_like(b, self._v_min))
            lo, hi = np.where(fa > fb, a, lo), np.where(fa > fb, hi, b)
        return 0.5 * (lo + hi)

    def _solve_v(self, u: np.ndarray) -> np.ndarray:
        """v(u): f(u, v) = 1/delta^2 by bisection in log v on [v_min, delta] (f <= 1/v^2)."""
        target = self.delta ** -2
        lo = np.full(u.shape, math.log(self._v_min))
        hi = np.full(u.shape, math.log(self.delta))
        for _ in range(BISECTIONS):
            mid = 0.5 * (lo + hi)
            above = self.law.f(u, np.exp(mid)) > target  # f decreasing in v: the root is higher
            lo = np.where(above, mid, lo)
            hi = np.where(above, hi, mid)
        return np.exp(0.5 * (lo + hi))

    # ------------------------------------------------------------ integrals
    def integrate(self, values: np.ndarray) -> np.ndarray:
        """int phi(x) mu_delta(dx) for phi given at the nodes (last axis)."""
        return np.asarray(values, dtype=float) @ self._weights

    def integrate_pieces(self, values: np.ndarray) -> np.ndarray:
        """int_c phi(x) mu_delta(dx) over each connected piece c of the support (the order of components)."""
        values = np.asarray(values, dtype=float)
        return np.array([values[s] @ self._weights[s] for s in self._slices])

    @cached_property
    def mass(self) -> float:
        """int mu_delta: 1 up to the quadrature error."""
        return float(self.integrate(np.ones_like(self.x)))

    def _relu(self, eps) -> np.ndarray:
        return np.maximum(self.x[None, :] - np.atleast_1d(np.asarray(eps, float))[:, None], 0.0)

    def _shaped(self, out: np.ndarray, eps):
        return float(out[0]) if np.ndim(eps) == 0 else out.reshape(np.shape(eps))

    def J(self, eps=0.0):
        """int_eps^inf (x - eps)^2 mu_delta(dx) (eps scalar or array)."""
        return self._shaped(self.integrate(self._relu(eps) ** 2), eps)

    def dJ_deps(self, eps=0.0):
        """-2 int (x - eps)_+ mu_delta(dx)."""
        return self._shaped(-2.0 * self.integrate(self._relu(eps)), eps)

    def dJ_ddelta(self, eps=0.0):
        """4 delta int (x - eps)_+ H(x) mu_delta(dx)."""
        return self._shaped(4.0 * self.delta * self.integrate(self._relu(eps) * self.H[None, :]), eps)

    def K(self, eps=0.0):
        """int x (x - eps)_+ mu_delta(dx)."""
        return self._shaped(self.integrate(self._relu(eps) * self.x[None, :]), eps)

    def moment(self, k: int) -> float:
        return float(self.integrate(self.x ** k))

    # ------------------------------------------------------------ density, CDF, quantiles
    @cached_property
    def _cumulative(self) -> np.ndarray:
        """F_delta at the nodes: each node's weight covers the half-steps either side of it, so
        F(x_k) = sum_{j<k} w_j + w_k/2 (the edges carry no weight); normalised to total mass 1."""
        c = np.cumsum(self._weights) - 0.5 * self._weights
        return c / self._weights.sum()

    def density(self, x) -> np.ndarray:
        """p_delta(x) (0 outside the support)."""
        x = np.asarray(x, float)
        out = np.zeros_like(x)
        for s in self._slices:
            out += np.interp(x, self.x[s], self.p[s], left=0.0, right=0.0)
        return out

    def cdf(self, x) -> np.ndarray:
        """F_delta(x) = mu_delta((-inf, x]) (normalised to total mass 1)."""
        return np.interp(np.asarray(x, float), self.x, self._cumulative, left=0.0, right=1.0)

    def quantile(self, q) -> np.ndarray:
        """F_delta^-1(q), q in [0, 1] (the left end of a gap for a q that falls in one)."""
        c, keep = self._cumulative, np.r_[True, np.diff(self._cumulative) > 0]
        return np.interp(np.asarray(q, float), c[keep], self.x[keep])

    @property
    def components(self) -> list[tuple[float, float, float]]:
        """(left edge, right edge, mass) of every connected piece of the support."""
        return [(float(self.x[s][0]), float(self.x[s][-1]),
                 float(self._cumulative[s][-1] - self._cumulative[s][0])) for s in self._slices]


def J(law: SpectralLaw, delta: float, eps=0.0, nodes: int = NODES):
    """J(delta, eps) = int_eps^inf (x - eps)^2 mu_delta(dx), delta > 0."""
    return FreeConvolution(law, delta, nodes).J(eps)


def wishart_cubic_stieltjes(z, kappa0: float, Delta: float) -> np.ndarray:
    """G of mu_sqrt(Delta) for the Wishart target by the closed route of SPEC (AIM-2025): the root g
    with Im g < 0 of  sqrt(a) Delta g^3 - (sqrt(a) z + Delta) g^2 + (z + sqrt(a) - 1/sqrt(a)) g - 1 = 0,
    a = 1/kappa0, at real z (the real root nearest 1/z outside the support, where all three are real).
    Independent of the subordination solver: used to check it."""
    z = np.atleast_1d(np.asarray(z, dtype=float))
    ra = math.sqrt(1 / kappa0)
    coeffs = np.stack(np.broadcast_arrays(ra * Delta, -(ra * z + Delta), z + ra - 1 / ra, -1.0), axis=-1)
    companion = np.zeros(z.shape + (3, 3))
    companion[..., 0, :] = -coeffs[..., 1:] / coeffs[..., :1]
    companion[..., 1, 0] = companion[..., 2, 1] = 1.0
    roots = np.linalg.eigvals(companion)
    complex_root = roots[np.arange(z.size), np.argmin(roots.imag, axis=-1)]
    nearest = roots[np.arange(z.size), np.argmin(np.abs(roots - 1 / z[:, None]), axis=-1)]
    return np.where(complex_root.imag < -1e-12, complex_root, nearest.real)
