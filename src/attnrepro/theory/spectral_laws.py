"""Spectral laws mu0 of the target S0 (paper B), as the free-convolution solver needs them.

A law gives, for omega = u + iv in the upper half-plane,

    f(u, v) = int mu0(dt) / ((u - t)^2 + v^2),      h(u, v) = int (u - t) mu0(dt) / ((u - t)^2 + v^2),

i.e. its Stieltjes transform G0(omega) = int mu0(dt) / (omega - t) = h - i v f, its point masses
(where the solver refines its grid) and the interval holding its support.

- :class:`Atomic`: a finite list of eigenvalues with weights (explicit targets, the power law at
  finite d, the empirical spectrum of one drawn S0);
- :class:`MarchenkoPastur`: the d -> infinity law of the Wishart target S0 = W0 W0^T / sqrt(p0 d),
  kappa0 = p0/d: S0 = sqrt(kappa0) W0 W0^T / p0, so its law is sqrt(kappa0) x MP(ratio a = 1/kappa0),
  with an atom of mass 1 - kappa0 at 0 when kappa0 < 1, mean sqrt(kappa0) and Q0 = E x^2 = 1 + kappa0.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

CHUNK_ENTRIES = 2**15  # u-rows x atoms summed at a time by Atomic (each row's sum is the same for any chunk)


class SpectralLaw:
    """Interface: f_h(u, v) -> (f, h); f(u, v) alone; dstieltjes(z) = G0'(z); atoms -> [(position, mass)];
    support -> (lo, hi); moment(k)."""

    atoms: tuple[tuple[float, float], ...] = ()
    support: tuple[float, float] = (0.0, 0.0)

    def f_h(self, u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def f(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """f(u, v) of f_h, where h is not needed (the solver's bisections)."""
        return self.f_h(u, v)[0]

    def moment(self, k: int) -> float:
        raise NotImplementedError

    def dstieltjes(self, z: np.ndarray) -> np.ndarray:
        """G0'(z) = -int mu0(dt) / (z - t)^2, Im z >= 0 (z off the support)."""
        raise NotImplementedError

    @property
    def Q0(self) -> float:
        """int x^2 mu0(dx) = ||S0||_F^2 / d."""
        return self.moment(2)


@dataclass(frozen=True)
class Atomic(SpectralLaw):
    """mu0 = sum_i w_i delta_{t_i} (weights default to 1/len(values))."""

    values: tuple[float, ...]
    weights: tuple[float, ...] | None = None

    def __post_init__(self):
        t = np.asarray(self.values, dtype=float).ravel()
        if t.size == 0 or not np.isfinite(t).all():
            raise ValueError("an atomic law needs at least one finite eigenvalue")
        w = np.full(t.size, 1.0 / t.size) if self.weights is None else np.asarray(self.weights, dtype=float)
        if w.shape != t.shape or (w < 0).any() or not math.isclose(w.sum(), 1.0, rel_tol=1e-9):
            raise ValueError("weights must be non-negative, one per value, and sum to 1")
        # merge equal values (a zero-padded spectrum has one atom at 0, not d - k of them; the same
        # eigenvalues computed for several seeds differ only by rounding)
        t, inverse = np.unique(np.round(t, 12), return_inverse=True)
        w = np.bincount(inverse, weights=w)
        object.__setattr__(self, "_t", t)
        object.__setattr__(self, "_w", w)

    @property
    def atoms(self):
        return tuple(zip(self._t.tolist(), self._w.tolist()))

    @property
    def support(self):
        return float(self._t[0]), float(self._t[-1])

    def f_h(self, u, v):
        return self._sums(u, v, with_h=True)

    def f(self, u, v):
        return self._sums(u, v, with_h=False)[0]

    def _sums(self, u, v, with_h: bool):
        """(f, h) at (u, v), h None when not with_h (the same operations for f either way)."""
        u, v = np.asarray(u, float), np.asarray(v, float)
        if u.shape != v.shape:
            u, v = np.broadcast_arrays(u, v)
        out_f, out_h = np.empty(u.shape), np.empty(u.shape) if with_h else None
        flat_u, flat_v = u.ravel(), v.ravel()
        chunk = max(1, CHUNK_ENTRIES // self._t.size)  # rows of a few hundred KiB: they stay in cache
        for s in range(0, flat_u.size, chunk):
            du = flat_u[s:s + chunk, None] - self._t[None, :]
            inv = du * du
            inv += flat_v[s:s + chunk, None] ** 2
            np.divide(self._w, inv, out=inv)
            out_f.ravel()[s:s + chunk] = inv.sum(axis=1)
            if with_h:
                out_h.ravel()[s:s + chunk] = (du * inv).sum(axis=1)
        return out_f, out_h

    def dstieltjes(self, z):
        z = np.asarray(z, dtype=complex)
        out = np.empty(z.shape, dtype=complex)
        flat = z.ravel()
        chunk = max(1, 2_000_000 // self._t.size)
        for s in range(0, flat.size, chunk):
            out.ravel()[s:s + chunk] = -(self._w / (flat[s:s + chunk, None] - self._t[None, :]) ** 2).sum(axis=1)
        return out

    def moment(self, k):
        return float(np.sum(self._w * self._t ** k))


@dataclass(frozen=True)
class MarchenkoPastur(SpectralLaw):
    """Law of S0 = W0 W0^T / sqrt(p0 d), kappa0 = p0 / d, as d -> infinity.

    With a = 1/kappa0 and c = sqrt(a) - 1/sqrt(a), its Stieltjes transform solves
    -sqrt(a) z g^2 + (z + c) g - 1 = 0 (SPEC's cubic at Delta = 0), so
    g = 2 / (z + c + sqrt(z - l-) sqrt(z - l+)), l+- = sqrt(kappa0) (1 +- sqrt(a))^2:
    the continuous part on [l-, l+] and, for kappa0 < 1, an atom 1 - kappa0 at 0.
    """

    kappa0: float

    def __post_init__(self):
        if not self.kappa0 > 0:
            raise ValueError(f"kappa0 must be > 0, got {self.kappa0}")

    @property
    def edges(self) -> tuple[float, float]:
        s, r = math.sqrt(self.kappa0), math.sqrt(1 / self.kappa0)
        return s * (1 - r) ** 2, s * (1 + r) ** 2

    @property
    def atoms(self):
        return ((0.0, 1.0 - self.kappa0),) if self.kappa0 < 1 else ()

    @property
    def support(self):
        lo, hi = self.edges
        return (0.0 if self.kappa0 < 1 else lo), hi

    @functools.cached_property
    def _constants(self) -> tuple[float, float, float]:
        """(c, l-, l+) of _g, computed once (the solver's bisections call it ~10^5 times)."""
        a = 1 / self.kappa0
        return (math.sqrt(a) - 1 / math.sqrt(a), *self.edges)

    def _g(self, z):
        c, lo, hi = self._constants
        return 2.0 / (z + c + np.sqrt(z - lo) * np.sqrt(z - hi))

    def f_h(self, u, v):
        u, v = np.asarray(u, float), np.asarray(v, float)
        if u.shape != v.shape:
            u, v = np.broadcast_arrays(u, v)
        g = self._g(u + 1j * v)
        with np.errstate(divide="ignore", invalid="ignore"):  # v = 0: f is not needed there
            return -g.imag / v, g.real

    def dstieltjes(self, z):
        a = 1 / self.kappa0
        c = math.sqrt(a) - 1 / math.sqrt(a)
        lo, hi = self.edges
        z = np.asarray(z, dtype=complex)
        s = np.sqrt(z - lo) * np.sqrt(z - hi)
        ds = 0.5 * s * (1 / (z - lo) + 1 / (z - hi))
        return -2.0 * (1 + ds) / (z + c + s) ** 2

    def density(self, x: np.ndarray) -> np.ndarray:
        """The continuous part: sqrt((l+ - x)(x - l-)) / (2 pi sqrt(kappa0) x / kappa0) on [l-, l+]
        (mass min(1, kappa0))."""
        x = np.asarray(x, float)
        lo, hi = self.edges
        inside = (x > lo) & (x < hi)
        out = np.zeros_like(x)
        xi = x[inside]
        out[inside] = np.sqrt((hi - xi) * (xi - lo)) * self.kappa0 / (2 * math.pi * math.sqrt(self.kappa0) * xi)
        return out

    def moment(self, k):
        """kappa0^(k/2) m_k, m_k the moments of W0 W0^T / p0 (ratio a = 1/kappa0): 1, 1, 1 + a, 1 + 3a + a^2."""
        a = 1 / self.kappa0
        m = {0: 1.0, 1: 1.0, 2: 1 + a, 3: 1 + 3 * a + a * a}
        if k not in m:
            raise ValueError("moments up to 3 only")
        return self.kappa0 ** (k / 2) * m[k]


def power_law(d: int, gamma: float) -> Atomic:
    """The power-law target at dimension d: eigenvalues sqrt(d) i^-gamma, i = 1..d."""
    i = np.arange(1, d + 1, dtype=float)
    return Atomic(tuple(math.sqrt(d) * i ** (-gamma)))


def coarsened(law: Atomic, resolution: float) -> Atomic:
    """The atoms grouped left to right into runs whose span is at most `resolution`, each run one atom
    at its weighted mean carrying its summed weight: the mass and the mean are exact, a run's second
    moment is off by at most (resolution / 2)^2 times its weight. At d = 10^4 the power-law target's
    atoms below ~0.3 lie 1e-4 apart (gamma = 1); merged within 1e-3 there are 577 atoms instead of 10^4
    (183 at gamma = 1.5, 1222 at gamma = 0.75)."""
    if not resolution > 0:
        return law
    t, w = law._t, law._w
    starts = [0]
    for i in range(1, t.size):
        if t[i] - t[starts[-1]] > resolution:
            starts.append(i)
    bounds = np.append(starts, t.size)
    weights = np.add.reduceat(w, bounds[:-1])
    values = np.add.reduceat(w * t, bounds[:-1]) / weights
    return Atomic(tuple(values), tuple(weights / weights.sum()))


def target_law(target: str, d: int | None = None, kappa0: float = 0.5, gamma: float = 1.0,
               eigenvalues=None, resolution: float = 0.0) -> SpectralLaw:
    """mu0 of a task's target: wishart (the d -> infinity law), power_law (at dimension d, its atoms
    merged within `resolution` when > 0: coarsened), explicit (the given eigenvalues, zero-padded to d)."""
    if target == "wishart":
        return MarchenkoPastur(kappa0)
    if d is None:
        raise ValueError(f"target {target!r} needs d")
    if target == "power_law":
        return coarsened(power_law(d, gamma), resolution)
    if target == "explicit":
        ev = list(eigenvalues or [])
        return Atomic(tuple(ev + [0.0] * (d - len(ev))))
    raise ValueError(f"unknown target {target!r}")
