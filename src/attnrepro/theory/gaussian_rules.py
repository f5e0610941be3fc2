"""Integration rules for E f(xi), xi ~ N(0, I_k): nodes (N, k) and weights (N,) summing to 1.

    E f(xi) ~= sum_i w_i f(xi_i)

- ``gauss_hermite(k, n)``: the tensor product of n-point Gauss-Hermite rules (probabilists'
  weight), n^k nodes; exact for polynomials of degree < 2n in each coordinate.
- ``sobol(k, log2_n, seed)``: 2^log2_n points of a scrambled Sobol' sequence mapped through the
  normal quantile, equal weights; a fixed seed makes it deterministic.
- ``monte_carlo(k, n, seed)``: n pseudo-random normal draws, equal weights (the reference route
  of the accuracy tests, with its standard error).

Every rule is deterministic given its arguments; nothing is kept between calls of its users.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class GaussianRule:
    nodes: np.ndarray     # (N, k)
    weights: np.ndarray   # (N,), sum 1
    name: str

    @property
    def size(self) -> int:
        return len(self.weights)


def gauss_hermite(k: int, n: int) -> GaussianRule:
    """n^k-node product rule for N(0, I_k) (numpy's hermite_e nodes, weights / sqrt(2 pi))."""
    x, w = np.polynomial.hermite_e.hermegauss(n)
    w = w / math.sqrt(2 * math.pi)
    nodes = np.array(list(itertools.product(x, repeat=k)))
    weights = np.prod(np.array(list(itertools.product(w, repeat=k))), axis=1)
    return GaussianRule(nodes, weights / weights.sum(), f"gauss_hermite({k}, {n})")


def sobol(k: int, log2_n: int, seed: int = 0) -> GaussianRule:
    """2^log2_n scrambled Sobol' points through the normal quantile (scipy.stats.qmc)."""
    from scipy.stats import norm, qmc

    u = qmc.Sobol(d=k, scramble=True, seed=seed).random_base2(log2_n)
    n = len(u)
    return GaussianRule(norm.ppf(u), np.full(n, 1.0 / n), f"sobol({k}, 2^{log2_n}, seed {seed})")


def monte_carlo(k: int, n: int, seed: int = 0) -> GaussianRule:
    """n i.i.d. N(0, I_k) draws (numpy's default generator), equal weights."""
    nodes = np.random.default_rng(seed).standard_normal((n, k))
    return GaussianRule(nodes, np.full(n, 1.0 / n), f"monte_carlo({k}, {n}, seed {seed})")


RULES = {"gauss_hermite": gauss_hermite, "sobol": sobol, "monte_carlo": monte_carlo}


def make_rule(kind: str, k: int, size: int, seed: int = 0) -> GaussianRule:
    """A rule by name: size is n per coordinate (gauss_hermite), log2 of the points (sobol), or the
    number of draws (monte_carlo)."""
    if kind == "gauss_hermite":
        return gauss_hermite(k, size)
    if kind == "sobol":
        return sobol(k, size, seed)
    if kind == "monte_carlo":
        return monte_carlo(k, size, seed)
    raise ValueError(f"integration rule must be one of {sorted(RULES)}, got {kind!r}")
