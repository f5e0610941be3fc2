"""The estimator that paper B's Claim 4.1 says ERM behaves like, sampled at finite d, and its error
decomposition: S_eff = eta ReLU(S0 + delta Z - eps I) with Z ~ GOE(d) independent of S0 and
(eta, delta, eps) from the ERM state evolution. Its estimation error along S0's eigenspaces
(problems.tied_decomposition: E_approx, E_under, E_over, E_coupling) is the theory of figure
tied_error_decomposition, by Monte Carlo over draws of (S0, Z) at the simulations' d.
Assumption (stated in the figure's caption): Claim 4.1 holds for the matrix jointly with S0, not
only for its eigenvalues.
"""

from __future__ import annotations

import math

import torch

from attnrepro.papers.tied_attention.task import draw_target
from attnrepro.theory.error_decomposition import TERMS, decompose


def decomposition(d: int, eta: float, delta: float, eps: float, target: str = "wishart", kappa0: float = 0.5,
                  gamma: float = 1.0, draws: int = 16, seed: int = 0) -> dict[str, float]:
    """Mean over draws of the four terms, their sum (= ||S_eff - S0||^2 / d) and n_recovered."""
    gen = torch.Generator().manual_seed(seed)
    acc = {k: 0.0 for k in (*TERMS, "estimation_error", "n_recovered")}
    for _ in range(draws):
        S0 = draw_target(gen, d, target, kappa0, gamma)
        g = torch.randn(d, d, generator=gen, dtype=torch.float64)
        Z = (g + g.T) / math.sqrt(2 * d)
        w, V = torch.linalg.eigh(S0 + delta * Z - eps * torch.eye(d, dtype=torch.float64))
        S = (V * (eta * torch.clamp(w, min=0.0))) @ V.T
        lam, U = torch.linalg.eigh(S0)
        keep = lam.abs() > 1e-9 * lam.abs().max()
        terms = decompose(S, U[:, keep], lam[keep])
        for k in (*TERMS, "n_recovered"):
            acc[k] += float(terms[k]) / draws
        acc["estimation_error"] += float(((S - S0) ** 2).sum()) / d / draws
    return acc
