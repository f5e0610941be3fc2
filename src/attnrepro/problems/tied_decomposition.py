"""Empirical decomposition of the estimation error ||S - S0||_F^2 / d along S0's eigenspaces.

Let u_1..u_d be an orthonormal eigenbasis of S0 (S0 u_i = lambda_i u_i) and split it into

- R, the *recovered* target directions: lambda_i != 0 and u_i^T S u_i / lambda_i > RECOVERED
  (S carries more than half of S0's curvature along u_i; these are the outliers of the
  learned spectrum),
- N, the target directions *not recovered*: lambda_i != 0, not in R (still inside the bulk),
- Z, the null space of S0 (lambda_i = 0), where every bit of S is fitted noise.

With P_R, P_N, P_Z the projectors and S0 = P_R S0 P_R + P_N S0 P_N block diagonal,

    E_approx   = ||P_R (S - S0) P_R||^2 / d      error along the recovered outliers,
    E_under    = ||P_N (S - S0) P_N||^2 / d      target directions not recovered
                                                 (= sum_{i in N} lambda_i^2 / d when S vanishes there),
    E_over     = ||P_Z S P_Z||^2 / d             over-fitting along the noise bulk outside S0's range,
    E_coupling = 2 (||P_R S P_N||^2 + ||P_R S P_Z||^2 + ||P_N S P_Z||^2) / d
                                                 couplings between the three subspaces (S0 has none),

and by Pythagoras over the blocks

    E_approx + E_under + E_over + E_coupling = ||S - S0||_F^2 / d       exactly.

For a full-rank target (power law) Z is empty, E_over = 0 and the fitted noise sits in
E_under. The mismatch term of paper B (student temperature beta != beta0) is not part
of the estimation error; it vanishes when beta = beta0.

Only the top r eigenvectors U (d, r) of S0 (those with lambda_i != 0) are needed:
with B = U^T S U, Z's part follows from ||S||^2, ||S U||^2 and ||B||^2.
"""

from __future__ import annotations

import torch
from torch import Tensor

RECOVERED = 0.5  # u_i^T S u_i / lambda_i above this: target direction i is recovered
TERMS = ("e_approx", "e_under", "e_over", "e_coupling")


def decompose(S: Tensor, U: Tensor, lam: Tensor, threshold: float = RECOVERED) -> dict[str, Tensor]:
    """The four terms (module docstring) and n_recovered = |R|, each (...,).

    S (..., d, d) symmetric; U (..., d, r) orthonormal eigenvectors of S0 spanning its range
    (every lambda_i != 0); lam (..., r) their eigenvalues. Leading axes: replicas.
    """
    d = S.shape[-1]
    SU = S @ U
    B = U.transpose(-1, -2) @ SU                                    # (.., r, r) = U^T S U
    D = B - torch.diag_embed(lam)                                   # S - S0 in the target space
    rec = (torch.diagonal(B, dim1=-2, dim2=-1) / lam > threshold).to(S.dtype)
    pair_r = rec[..., :, None] * rec[..., None, :]                  # (i, j) both recovered
    pair_n = (1 - rec)[..., :, None] * (1 - rec)[..., None, :]      # (i, j) both not recovered
    D2 = D**2
    s2, su2, b2 = (S**2).sum((-1, -2)), (SU**2).sum((-1, -2)), (B**2).sum((-1, -2))
    approx = (pair_r * D2).sum((-1, -2))
    under = (pair_n * D2).sum((-1, -2))
    rn = D2.sum((-1, -2)) - approx - under                          # 2 ||P_R S P_N||^2
    over = s2 - 2 * su2 + b2                                        # ||P_Z S P_Z||^2
    tz = 2 * (su2 - b2)                                             # 2 ||P_Z S P_T||^2, T = R + N
    return {"e_approx": approx / d, "e_under": under / d, "e_over": over.clamp_min(0) / d,
            "e_coupling": (rn + tz).clamp_min(0) / d, "n_recovered": rec.sum(-1)}
