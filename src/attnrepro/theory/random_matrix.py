"""The second route to mu_delta: eigenvalues of large random matrices S0 + delta Z.

Z ~ GOE(N): (G + G^T) / sqrt(2N), off-diagonal variance 1/N, semicircle on [-2, 2]. Z is
rotation-invariant, so S0 may be drawn diagonal: its eigenvalues are sampled from mu0
(Wishart: the eigenvalues of W0 W0^T / sqrt(p0 N); atomic: the values repeated by weight).
Used by the tests as a Monte Carlo check of the subordination solver.
"""

from __future__ import annotations

import math

import numpy as np

from attnrepro.theory.spectral_laws import Atomic, MarchenkoPastur, SpectralLaw


def target_eigenvalues(law: SpectralLaw, N: int, rng: np.random.Generator) -> np.ndarray:
    """N eigenvalues of an S0 whose empirical law tends to mu0."""
    if isinstance(law, MarchenkoPastur):
        p0 = max(1, round(law.kappa0 * N))
        w0 = rng.standard_normal((N, p0))
        return np.linalg.eigvalsh(w0 @ w0.T / math.sqrt(p0 * N))
    if isinstance(law, Atomic):
        t, w = np.array(law.atoms).T
        counts = np.floor(w * N).astype(int)
        counts[np.argsort(w * N - counts)[::-1][: N - counts.sum()]] += 1  # largest remainders
        return np.repeat(t, counts)
    raise TypeError(f"no sampler for {type(law).__name__}")


def goe(N: int, rng: np.random.Generator) -> np.ndarray:
    g = rng.standard_normal((N, N))
    return (g + g.T) / math.sqrt(2 * N)


def eigenvalues(law: SpectralLaw, delta: float, N: int, draws: int, seed: int = 0) -> np.ndarray:
    """(draws, N) eigenvalues of diag(S0 eigenvalues) + delta Z, independent draws."""
    rng = np.random.default_rng(seed)
    return np.stack([np.linalg.eigvalsh(np.diag(target_eigenvalues(law, N, rng)) + delta * goe(N, rng))
                     for _ in range(draws)])


def J_monte_carlo(law: SpectralLaw, delta: float, eps: float, N: int = 800, draws: int = 4,
                  seed: int = 0) -> tuple[float, float]:
    """(mean, standard error over draws) of (1/N) sum_i (lambda_i - eps)_+^2."""
    per_draw = np.mean(np.maximum(eigenvalues(law, delta, N, draws, seed) - eps, 0.0) ** 2, axis=1)
    return float(per_draw.mean()), float(per_draw.std(ddof=1) / math.sqrt(draws)) if draws > 1 else math.nan
