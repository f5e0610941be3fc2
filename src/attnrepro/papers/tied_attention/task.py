"""The attention-indexed model (paper B, after AIM-2025): targets S0, tokens, pre-activations, labels.

A sample is T tokens x_1..x_T ~ N(0, I_d), stacked as X in R^{T x d}. For a
symmetric S in R^{d x d}

    h_ab(S) = (x_a^T S x_b - delta_ab Tr S) / sqrt(d),        a, b = 1..T,

and the target attention is A0 = softmax_rows(beta0 (h(S0) + xi)), xi symmetric
Gaussian with Var xi_aa = Delta, Var xi_ab = Delta/2. The label is A0 (seq2lab)
or A0 X (seq2seq).

Every draw of a replica comes from that replica's own generator (tasks.seeding),
in a fixed order. Functions take any leading batch axes (replicas, samples).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
from torch import Tensor


def haar_orthogonal(gen: torch.Generator, d: int, dtype=torch.float64) -> Tensor:
    """O ~ Haar on O(d): the Q of a Gaussian matrix G = QR, columns signed so that diag R > 0."""
    q, r = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=torch.float64))
    return (q * torch.sign(torch.diagonal(r))).to(dtype)


def wishart_target(gen: torch.Generator, d: int, p0: int, dtype=torch.float64) -> Tensor:
    """S0 = W0 W0^T / sqrt(p0 d), W0 in R^{d x p0} i.i.d. N(0, 1). E ||S0||_F^2 / d = 1 + p0/d + 1/d."""
    w0 = torch.randn(d, p0, generator=gen, dtype=torch.float64)
    return (w0 @ w0.T / math.sqrt(p0 * d)).to(dtype)


def power_law_eigenvalues(d: int, gamma: float) -> Tensor:
    """sqrt(d) i^-gamma, i = 1..d (gamma > 1/2 keeps Q0 = ||S0||_F^2 / d = sum_i i^-2gamma finite)."""
    i = torch.arange(1, d + 1, dtype=torch.float64)
    return math.sqrt(d) * i ** (-gamma)


def padded_eigenvalues(eigenvalues: Sequence[float], d: int) -> Tensor:
    """The given eigenvalues (at most d), padded with zeros to length d."""
    ev = torch.zeros(d, dtype=torch.float64)
    ev[: len(eigenvalues)] = torch.tensor(list(eigenvalues), dtype=torch.float64)
    return ev


def rotated_target(gen: torch.Generator, eigenvalues: Tensor, dtype=torch.float64) -> Tensor:
    """S0 = O diag(eigenvalues) O^T with O Haar."""
    o = haar_orthogonal(gen, eigenvalues.shape[0])
    return ((o * eigenvalues) @ o.T).to(dtype)


def draw_target(gen: torch.Generator, d: int, target: str, kappa0: float = 0.5, gamma: float = 1.0,
                eigenvalues: Optional[Sequence[float]] = None, dtype=torch.float64) -> Tensor:
    """S0 (d, d) for target = wishart (rank p0 = round(kappa0 d)) | power_law (exponent gamma) |
    explicit (the given eigenvalues, zero-padded to d, Haar eigenvectors)."""
    if target == "wishart":
        return wishart_target(gen, d, round(kappa0 * d), dtype)
    if target == "power_law":
        return rotated_target(gen, power_law_eigenvalues(d, gamma), dtype)
    if target == "explicit":
        return rotated_target(gen, padded_eigenvalues(eigenvalues, d), dtype)
    raise ValueError(f"unknown target {target!r}")


def draw_tokens(gen: torch.Generator, n: int, T: int, d: int, dtype=torch.float64) -> Tensor:
    """X (n, T, d), i.i.d. N(0, 1) entries."""
    return torch.randn(n, T, d, generator=gen, dtype=torch.float64).to(dtype)


def draw_noise(gen: torch.Generator, n: int, T: int, Delta: float, dtype=torch.float64) -> Tensor:
    """xi = sqrt(Delta) (G + G^T) / 2, G (n, T, T) i.i.d. N(0, 1):
    symmetric, Var xi_aa = Delta, Var xi_ab = Delta/2 (a != b).
    G is drawn even when Delta = 0, so the random stream does not depend on Delta."""
    g = torch.randn(n, T, T, generator=gen, dtype=torch.float64)
    return (math.sqrt(Delta) * 0.5 * (g + g.transpose(-1, -2))).to(dtype)


def preactivations(X: Tensor, S: Tensor) -> Tensor:
    """h_ab(S) = (x_a^T S x_b - delta_ab Tr S) / sqrt(d), computing X S once.

    X (..., n, T, d), S (..., d, d) with the same leading axes (replicas) -> h (..., n, T, T).
    """
    d, T = X.shape[-1], X.shape[-2]
    xs = (X.flatten(-3, -2) @ S).view(X.shape)  # (..., n T, d) @ (..., d, d): no copy of S per sample
    h = xs @ X.transpose(-1, -2)
    trace = torch.diagonal(S, dim1=-2, dim2=-1).sum(-1)[..., None, None, None]
    return (h - trace * torch.eye(T, dtype=h.dtype, device=h.device)) / math.sqrt(d)


def attention(h: Tensor, beta: float) -> Tensor:
    """softmax_rows(beta h): A_ab = exp(beta h_ab) / sum_c exp(beta h_ac)."""
    return torch.softmax(beta * h, dim=-1)


def output(A: Tensor, X: Tensor, kind: str) -> Tensor:
    """The sequence output of attention A on tokens X: A (seq2lab) or A X (seq2seq)."""
    if kind == "seq2lab":
        return A
    if kind == "seq2seq":
        return A @ X
    raise ValueError(f"unknown output {kind!r}")


def draw_samples(gen: torch.Generator, S0: Tensor, n: int, T: int, Delta: float, beta0: float,
                 dtype=torch.float64) -> tuple[Tensor, Tensor]:
    """n samples: tokens X (n, T, d) then noise xi, and the target attention
    A0 = softmax_rows(beta0 (h(S0) + xi)) (n, T, T). Computed in float64, returned in dtype."""
    d = S0.shape[-1]
    X = draw_tokens(gen, n, T, d)
    xi = draw_noise(gen, n, T, Delta)
    A0 = attention(preactivations(X, S0.to(torch.float64)) + xi, beta0)
    return X.to(dtype), A0.to(dtype)
