"""Sparse XOR: x ~ Unif{+-1}^d, y = -x_p x_q, labels flipped with probability eps.

Every draw of a replica comes from that replica's own generator
(tasks.seeding), in a fixed order.
"""

from __future__ import annotations

import itertools

import torch
from torch import Tensor


def draw_support(gen: torch.Generator, d: int) -> tuple[int, int]:
    """The hidden support {p, q}, p != q, uniform among pairs."""
    p, q = torch.randperm(d, generator=gen)[:2].tolist()
    return p, q


def draw_inputs(gen: torch.Generator, n: int, d: int) -> Tensor:
    """n inputs uniform on {+-1}^d, as int8 (n, d)."""
    return (torch.randint(0, 2, (n, d), generator=gen, dtype=torch.int8) * 2 - 1)


def labels(x: Tensor, p: int, q: int, noise: float, gen: torch.Generator) -> Tensor:
    """y = -x_p x_q, each flipped independently with probability noise (int8 (n,))."""
    y = -(x[:, p] * x[:, q])
    if noise > 0:
        flip = torch.rand(x.shape[0], generator=gen) < noise
        y = torch.where(flip, -y, y)
    return y


def population_loss(gamma: Tensor, gamma_t: Tensor, p: Tensor, q: Tensor, noise: float = 0.0) -> Tensor:
    """Exact E over all 2^d inputs (and the label noise) of 1/2 (f(x) - y)^2, f = -(gamma.x)(gamma~.x).

        L = 1/2 [ |g|^2 |g~|^2 + 2 (g.g~)^2 - 2 sum_i g_i^2 g~_i^2
                  - 2 (1 - 2 eps)(g_p g~_q + g_q g~_p) + 1 ]

    from E[x_a x_b x_c x_e] = d_ab d_ce + d_ac d_be + d_ae d_bc - 2 d_abce.
    gamma, gamma_t: (..., d); p, q: integer tensors of shape (...). Cost O(d).
    """
    gg = (gamma * gamma).sum(-1) * (gamma_t * gamma_t).sum(-1)
    cross = (gamma * gamma_t).sum(-1)
    diag = (gamma * gamma * gamma_t * gamma_t).sum(-1)
    return 0.5 * (gg + 2 * cross**2 - 2 * diag - 2 * (1 - 2 * noise) * xor_correlation(gamma, gamma_t, p, q) + 1)


def xor_correlation(gamma: Tensor, gamma_t: Tensor, p: Tensor, q: Tensor) -> Tensor:
    """E[f(x) y] for noiseless y: g_p g~_q + g_q g~_p; 1 when the heads sit on p and q."""
    return at(gamma, p) * at(gamma_t, q) + at(gamma, q) * at(gamma_t, p)


def at(v: Tensor, i: Tensor) -> Tensor:
    """v[..., i] with one index per leading position: v (..., d), i (...) -> (...)."""
    return v.gather(-1, i.unsqueeze(-1)).squeeze(-1)


def all_inputs(d: int, dtype=torch.float64) -> Tensor:
    """All 2^d points of {+-1}^d, (2^d, d). For brute-force checks (d <= ~16)."""
    return torch.tensor(list(itertools.product((-1.0, 1.0), repeat=d)), dtype=dtype)


def brute_force_population_loss(f: Tensor, x: Tensor, p: int, q: int, noise: float = 0.0) -> Tensor:
    """Mean over the enumerated inputs x of E_noise 1/2 (f - y)^2, f the outputs on x."""
    y = -x[:, p] * x[:, q]
    return (0.5 * ((1 - noise) * (f - y) ** 2 + noise * (f + y) ** 2)).mean(-1)
