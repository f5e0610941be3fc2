"""Beyond paper A: a k-head attention model for k-sparse parity, replicated over seeds.

Frozen positional embeddings v_1..v_d ~ Unif(S^{m-1}) (rows of V (R, d, m)), k trainable queries
theta_h in R^m (theta (R, k, m)), scores s_h = V theta_h, attention gamma_h = phi(s_h), output

    f(x) = -prod_{h=1}^k (gamma_h . x)

(k = 2 is paper A's TwoHeadXorAttention). Population loss: kparity.population_loss_k.

Initialisations (per replica, from that replica's generator: V first, then the queries):
- "independent": theta_h ~ Unif(S^{m-1}) independently;
- "orthogonal": theta_h = columns of Q, Q R = G, G an m x k Gaussian (orthonormal, unit norm);
- "simplex": the k vertices of a regular simplex centred at 0 in a random k-dim subspace,
  theta_h = Q (e_h - 1/k) / sqrt(1 - 1/k): unit norm, sum_h theta_h = 0,
  theta_h . theta_h' = -1/(k-1). For k = 2 this is theta~ = -theta, paper A's antisymmetric init;
- "antisymmetric_pairs": the heads in pairs (1,2), (3,4), ... with theta_{2j} = -theta_{2j-1},
  the pairs orthonormal (an odd last head gets its own orthogonal direction).
`norm` (default 1) rescales all queries: |theta_h| = norm, initial scores s_{h,i} ~ N(0, norm^2/m).

What was measured (population loss, 40 seeds, m = ceil(log2(d)^2), d = 16..256, k = 3, 4):
- one step at unit norm succeeds only when the heads' favourite support positions happen to be
  distinct (about 0.3 for k = 3, 0.05 for k = 4, any init, any lr): at small scores the step
  sends head h to argmax_p (s_{h,p} - mean_h' s_{h',p}), and collisions are frozen;
- one step from "simplex" with norm = 0.7 sqrt(m) (scores of order 1, so the step follows the
  soft assignment E_{hp} perm(E_{-h,-p}), E = exp(s)) and lr = 100: 0.72-0.90 (k = 3),
  0.35-0.65 (k = 4), flat in d;
- population GD from any of the inits at unit norm, lr = 1e-3 (k = 3) or 1e-4 (k = 4),
  succeeds in 0.93-1.00 of the seeds within ~50-150 (k = 3) or ~300-600 (k = 4) steps, the heads
  one-to-one on S; larger lr jumps early and freezes collisions.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnrepro.papers.sparse_xor.attention import ATTENTION_MAPS, uniform_sphere

INITS = ("independent", "orthogonal", "simplex", "antisymmetric_pairs")


def step_unit_k(attention: str, d: int, m: int, k: int) -> float:
    """The natural step size of the k-head parametrisation; eta = lr * step_unit_k.

    softmax: at init gamma_h = 1/d (1 + O(1/sqrt m)); the only non-uniform part of dL/dgamma_{h,i}
    is -(1 - 2 eps) times the (k-1) x (k-1) permanent minor for i in S, ~ (k-1)!/d^{k-1}
    (the E f^2 part is ~ d^{-k} and uniform over i, so the softmax Jacobian, ~ 1/d and
    centring, kills it to leading order). Hence dL/ds_{h,p} ~ -(k-1)!/d^k for p in S,
    grad_theta_h L ~ -(k-1)!/d^k sum_{p in S} v_p, and one step moves the support scores by
    eta (k-1)!/d^k (1 + O(sqrt(k/m))). With

        step_unit_k = d^k sqrt(m) / (k-1)!

    a step of lr moves them by lr sqrt(m), as paper A's d^2 sqrt(m) does for k = 2
    (equal to attention.step_unit there).
    linear, erf: gamma_i = O(1/sqrt m), |gamma_h|^2 ~ d/m, the loss Hessian in theta is
    O((d/m)^k), so GD is stable for eta ~ (m/d)^k ((m/d)^2 for k = 2, as paper A).
    """
    if attention == "softmax":
        return d**k * math.sqrt(m) / math.factorial(k - 1)
    return (m / d) ** k


def _orthonormal(gen: torch.Generator, m: int, k: int, dtype) -> Tensor:
    """k orthonormal vectors (k, m), Haar-distributed (QR of a Gaussian, signs fixed)."""
    if k > m:
        raise ValueError(f"need k <= m for orthogonal queries, got k={k}, m={m}")
    G = torch.randn(m, k, generator=gen, dtype=dtype)
    Q, Rm = torch.linalg.qr(G)
    Q = Q * torch.sign(torch.diagonal(Rm)).unsqueeze(0)
    return Q.T.contiguous()


def simplex_vertices(k: int, dtype=torch.float64) -> Tensor:
    """(k, k): rows e_h - 1/k, normalised: unit norm, sum zero, inner products -1/(k-1)."""
    E = torch.eye(k, dtype=dtype) - 1.0 / k
    return E / math.sqrt(1 - 1.0 / k)


def draw_queries(gen: torch.Generator, m: int, k: int, init: str, dtype=torch.float64) -> Tensor:
    """One replica's initial queries theta (k, m) under `init` (module docstring)."""
    if init == "independent":
        return uniform_sphere(gen, k, m, dtype=dtype)
    if init == "orthogonal":
        return _orthonormal(gen, m, k, dtype)
    if init == "simplex":
        return simplex_vertices(k, dtype) @ _orthonormal(gen, m, k, dtype)
    if init == "antisymmetric_pairs":
        Q = _orthonormal(gen, m, (k + 1) // 2, dtype)
        rows = []
        for h in range(k):
            rows.append(Q[h // 2] if h % 2 == 0 else -Q[h // 2])
        return torch.stack(rows)
    raise ValueError(f"init must be one of {INITS}, got {init!r}")


class KHeadParityAttention(nn.Module):
    def __init__(self, V: Tensor, theta: Tensor, attention: str):
        super().__init__()
        if attention not in ATTENTION_MAPS:
            raise ValueError(f"attention must be one of {sorted(ATTENTION_MAPS)}, got {attention!r}")
        if V.dim() != 3 or theta.dim() != 3 or V.shape[0] != theta.shape[0] or V.shape[2] != theta.shape[2]:
            raise ValueError(f"need V (R, d, m) and theta (R, k, m), got {tuple(V.shape)}, {tuple(theta.shape)}")
        self.attention = attention
        self.register_buffer("V", V)
        self.theta = nn.Parameter(theta)

    @property
    def k(self) -> int:
        return self.theta.shape[1]

    @classmethod
    def draw(cls, gens: list[torch.Generator], d: int, m: int, k: int, attention: str, init: str,
             dtype=torch.float64, norm: float = 1.0) -> "KHeadParityAttention":
        """Per replica: V rows ~ Unif(S^{m-1}), then the k queries under `init`, times `norm`."""
        Vs, th = [], []
        for g in gens:
            Vs.append(uniform_sphere(g, d, m, dtype=dtype))
            th.append(norm * draw_queries(g, m, k, init, dtype))
        return cls(torch.stack(Vs), torch.stack(th), attention)

    def scores(self) -> Tensor:
        """s_h = V theta_h, (R, k, d), as (R, k, m)(R, m, d): wide in d (on CPU a product with only k
        columns, (R, d, m)(R, m, k), is slower: 7.2 against 5.5 ms forward and backward at 40 seeds,
        d = 256, m = 64, k = 4)."""
        return torch.bmm(self.theta, self.V.transpose(-1, -2))

    def heads(self) -> Tensor:
        """gamma_h = phi(V theta_h), (R, k, d)."""
        return ATTENTION_MAPS[self.attention](self.scores())

    def forward(self, x: Tensor) -> Tensor:
        """f for inputs x (R, n, d) -> (R, n)."""
        return -torch.bmm(self.heads(), x.transpose(-1, -2)).prod(-2)
