"""Empirical decomposition of the estimation error ||S - S0||_F^2 / d along S0's eigenspaces.

Let u_1..u_d be an orthonormal eigenbasis of S0 (S0 u_i = lambda_i u_i) and split it into

- R, the *recovered* target directions: lambda_i != 0 and S acts on u_i as S0 does up to a
  relative error RECOVERED = 1/2, ||(S - S0) u_i|| <= |lambda_i| / 2 (these give the outliers
  of the learned spectrum; the quadratic overlap u_i^T S u_i / lambda_i > 1/2 alone would count
  weak modes as recovered whenever the noise bulk happens to be large along them),
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

Only the top r eigenvectors U (d, r) of S0 (those with lambda_i != 0) are needed: with
B = U^T S U and M = S U - U B = P_Z S U, P_Z S P_Z = S - U (S U)^T - M U^T (formed explicitly
rather than as ||S||^2 - 2||S U||^2 + ||B||^2, which loses every digit when S is near S0).
"""

from __future__ import annotations

import torch
from torch import Tensor

RECOVERED = 0.5  # ||(S - S0) u_i|| / |lambda_i| below this: target direction i is recovered
TERMS = ("e_approx", "e_under", "e_over", "e_coupling")


def relative_column_error(S: Tensor, U: Tensor, lam: Tensor) -> Tensor:
    """||(S - S0) u_i|| / |lambda_i| for each target direction, (..., r)."""
    return torch.linalg.vector_norm(S @ U - U * lam[..., None, :], dim=-2) / lam.abs()


def decompose(S: Tensor, U: Tensor, lam: Tensor, threshold: float = RECOVERED) -> dict[str, Tensor]:
    """The four terms (module docstring) and n_recovered = |R|, each (...,).

    S (..., d, d) symmetric; U (..., d, r) orthonormal eigenvectors of S0 spanning its range
    (every lambda_i != 0); lam (..., r) their eigenvalues. Leading axes: replicas.
    """
    d = S.shape[-1]
    SU = S @ U
    B = U.transpose(-1, -2) @ SU                                    # (.., r, r) = U^T S U
    D = B - torch.diag_embed(lam)                                   # S - S0 in the target space
    rec = (relative_column_error(S, U, lam) <= threshold).to(S.dtype)
    pair_r = rec[..., :, None] * rec[..., None, :]                  # (i, j) both recovered
    pair_n = (1 - rec)[..., :, None] * (1 - rec)[..., None, :]      # (i, j) both not recovered
    D2 = D**2
    pair_rn = 1 - pair_r - pair_n                                   # one recovered, the other not
    M = SU - U @ B                                                  # P_Z S U
    zz = S - U @ SU.transpose(-1, -2) - M @ U.transpose(-1, -2)     # P_Z S P_Z
    coupling = (pair_rn * D2).sum((-1, -2)) + 2 * (M**2).sum((-1, -2))
    return {"e_approx": (pair_r * D2).sum((-1, -2)) / d, "e_under": (pair_n * D2).sum((-1, -2)) / d,
            "e_over": (zz**2).sum((-1, -2)) / d, "e_coupling": coupling / d, "n_recovered": rec.sum(-1)}
