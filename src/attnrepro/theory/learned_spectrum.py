"""The learned-spectrum law of paper B (Claim 4.1) and its fit to a simulated spectrum.

The eigenvalues of the ERM minimiser S are distributed as those of eta ReLU(S0 + delta Z - eps I):

    an atom at 0 of mass F_delta(eps)                          (rank collapse),
    density p(y) = p_delta(y/eta + eps) / eta for y > 0         (the deformed bulk),
    outliers: pieces of the support of mu_delta above eps that stand apart from the bulk
              (at finite d, isolated target eigenvalues give pieces of mass k/d).

Until the ERM state evolution supplies (eta, delta, eps), :func:`fit` estimates them from the
simulated eigenvalues by quantile matching: it minimises sum_k (y_(k) - Q(p_k))^2 over the
sorted eigenvalues y_(k) (the atom included, as zeros), p_k = (k - 1/2)/n, Q the law's
quantile function; eta enters linearly and is solved in closed form, (log delta, eps) by
Nelder-Mead from the best point of a coarse grid. Goodness of fit: the Kolmogorov-Smirnov
distance between the empirical and the fitted CDF.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.optimize import minimize

from attnrepro.theory.free_convolution import FreeConvolution
from attnrepro.theory.spectral_laws import SpectralLaw

FIT_NODES = 96   # nodes per support piece while fitting (spectral quadrature: ample for a fit)


@dataclass(frozen=True)
class LearnedSpectrum:
    law: SpectralLaw
    eta: float
    delta: float
    eps: float
    nodes: int = FIT_NODES

    @property
    def mu(self) -> FreeConvolution:
        return _mu(self.law, self.delta, self.nodes)

    @property
    def atom(self) -> float:
        """F_delta(eps): the fraction of zero eigenvalues."""
        return float(self.mu.cdf(self.eps))

    def density(self, y) -> np.ndarray:
        """Density of the continuous part at y > 0 (0 at y <= 0; the atom is separate)."""
        y = np.asarray(y, float)
        return np.where(y > 0, self.mu.density(y / self.eta + self.eps) / self.eta, 0.0)

    def cdf(self, y) -> np.ndarray:
        y = np.asarray(y, float)
        return np.where(y < 0, 0.0, self.mu.cdf(np.maximum(y, 0) / self.eta + self.eps))

    def quantile(self, q) -> np.ndarray:
        return self.eta * np.maximum(self.mu.quantile(q) - self.eps, 0.0)

    def pieces(self) -> list[tuple[float, float, float]]:
        """(left, right, mass) in y of every piece of the support above eps, left to right."""
        out = []
        for lo, hi, mass in self.mu.components:
            if hi > self.eps:
                part = mass if lo >= self.eps else mass * (1 - (self.mu.cdf(self.eps) - self.mu.cdf(lo)) / mass)
                out.append((self.eta * max(lo - self.eps, 0.0), self.eta * (hi - self.eps), float(part)))
        return out

    def outliers(self) -> list[tuple[float, float]]:
        """(position, mass) of the pieces of mu_delta right of its heaviest piece (the bulk, chosen
        before the cut at eps) that lie above eps: the outliers."""
        comps = self.mu.components
        if not comps:
            return []
        bulk = max(range(len(comps)), key=lambda i: comps[i][2])
        return [(self.eta * (0.5 * (lo + hi) - self.eps), m) for lo, hi, m in comps[bulk + 1:] if lo > self.eps]

    def error_split(self) -> tuple[float, float]:
        """(e_signal, e_bulk): the estimation error ||S - S0||_F^2 / d of S = eta ReLU(Y - eps I), a matrix
        function of Y = S0 + delta Z, split between the eigenvectors of Y in the bulk (the heaviest piece of
        mu_delta) and the rest. With xi(x) = x - 2 delta^2 H(x), H the Hilbert transform of mu_delta, the
        target's mean weight along Y's eigenvector at x (sum_i lambda_i <v_x, u_i>^2 = xi(x): the conditional
        mean of the additive free deformation, the state evolution's m = eta int (x - eps)_+ xi(x) dmu_delta),

            ||S - S0||^2 / d = Q0 + int e(x) mu_delta(dx),   e(x) = eta^2 (x - eps)_+^2 - 2 eta (x - eps)_+ xi(x),

        e_bulk = the integral over the bulk: what fitting along the bulk adds (noise fitted, less the weak
        target modes it catches); e_signal = Q0 + the integral over the other pieces = the error of S with
        its bulk removed: the recovered outliers' error plus the unrecovered target. e_signal + e_bulk =
        Q0 - 2m + q exactly (a partition of one quadrature)."""
        mu = self.mu
        if not mu.components:
            return math.nan, math.nan
        r = np.maximum(mu.x - self.eps, 0.0)
        per = mu.integrate_pieces(self.eta ** 2 * r ** 2 - 2 * self.eta * r * (mu.x - 2 * self.delta ** 2 * mu.H))
        bulk = max(range(len(per)), key=lambda i: mu.components[i][2])
        return float(self.law.Q0 + per.sum() - per[bulk]), float(per[bulk])

    def bulk_edge(self) -> float:
        """The right edge, in eigenvalues of S, of the bulk (the heaviest piece of mu_delta); 0 when
        the cut at eps removes it."""
        comps = self.mu.components
        if not comps:
            return math.nan
        lo, hi, _ = max(comps, key=lambda c: c[2])
        return self.eta * max(hi - self.eps, 0.0)


@lru_cache(maxsize=256)
def _mu(law: SpectralLaw, delta: float, nodes: int) -> FreeConvolution:
    return FreeConvolution(law, delta, nodes)


@dataclass(frozen=True)
class Fit:
    spectrum: LearnedSpectrum
    ks: float            # sup |F_empirical - F_fit|
    rms: float           # root mean squared quantile residual / rms eigenvalue
    n: int


def ks_distance(y: np.ndarray, cdf) -> float:
    """sup_y |F_n(y) - F(y)| for a sample y (ties allowed) and a CDF with an atom at 0."""
    y = np.sort(np.asarray(y, float))
    values, counts = np.unique(y, return_counts=True)
    upper = np.cumsum(counts) / y.size     # F_n(y)
    lower = upper - counts / y.size        # F_n(y-)
    left = cdf(np.nextafter(values, -np.inf))  # F(y-): below an atom, its mass is not counted
    return float(max(np.max(np.abs(upper - cdf(values))), np.max(np.abs(lower - left))))


def fit(law: SpectralLaw, eigenvalues: np.ndarray, zero: float = 0.0) -> Fit:
    """Fit (eta, delta, eps) of eta ReLU(S0 + delta Z - eps I) to eigenvalues (any shape, pooled);
    values <= zero count as the atom at 0."""
    y = np.sort(np.asarray(eigenvalues, float).ravel())
    y = np.where(y <= zero, 0.0, y)
    n = y.size
    levels = (np.arange(1, n + 1) - 0.5) / n
    scale = math.sqrt(law.Q0) if law.Q0 > 0 else 1.0

    def profile(params) -> tuple[float, float]:
        """(sum of squared residuals, eta) at (log delta, eps), eta solved in closed form."""
        delta, eps = math.exp(params[0]), params[1]
        r = np.maximum(_mu(law, delta, FIT_NODES).quantile(levels) - eps, 0.0)
        rr = float(r @ r)
        eta = float(r @ y) / rr if rr > 0 else 0.0
        return float(np.sum((y - eta * r) ** 2)), eta

    atom = float(np.mean(y == 0))
    starts = []
    for delta in scale * np.geomspace(0.03, 3.0, 12):
        eps = float(_mu(law, delta, FIT_NODES).quantile(min(max(atom, 1e-3), 0.999)))
        starts.append((profile((math.log(delta), eps))[0], (math.log(delta), eps)))
    res = min((minimize(lambda p: profile(p)[0], np.array(x0), method="Nelder-Mead",
                        options={"xatol": 1e-4, "fatol": 1e-10 * (y @ y), "maxiter": 400})
               for _, x0 in sorted(starts)[:3]), key=lambda r: r.fun)  # the three best starts: no local minimum
    eta = profile(res.x)[1]
    spectrum = LearnedSpectrum(law, eta, math.exp(res.x[0]), float(res.x[1]))
    rms = math.sqrt(res.fun / n) / math.sqrt(max(float(np.mean(y * y)), 1e-300))
    return Fit(spectrum, ks_distance(y, spectrum.cdf), rms, n)
