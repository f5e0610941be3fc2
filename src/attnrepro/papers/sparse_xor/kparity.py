"""Beyond paper A: k-sparse parity, y = -prod_{i in S} x_i, |S| = k, learned by k heads.

Task. x ~ Unif{+-1}^d, a hidden support S of k distinct positions, y = -prod_{i in S} x_i,
each label flipped independently with probability eps.

Model output (kheads.py): f(x) = -prod_{h=1}^k (gamma_h . x). The signs are chosen so that
k = 2 is exactly paper A (y = -x_p x_q, f = -(gamma.x)(gamma~.x)), and so that the correlation
is sign-free for every k:

    E[f y] = E[ prod_{i in S} x_i  prod_h (gamma_h . x) ] = perm(Gamma_S),
    Gamma_S[h, j] = gamma_{h, S_j}     (the k x k permanent).

(Expanding prod_h (gamma_h . x) = sum_{i_1..i_k} prod_h gamma_{h,i_h} x_{i_h}, a term survives
the expectation iff every index occurs an even number of times in (S, i_1..i_k); S has k
distinct elements and there are k indices i_h, so (i_1..i_k) is a permutation of S.)
With label noise, E[f y] = (1 - 2 eps) perm(Gamma_S).

Second moment. With u = (gamma_1, gamma_1, gamma_2, gamma_2, ..., gamma_k, gamma_k) (2k vectors),
E[f^2] = E[prod_{a=1}^{2k} (u_a . x)]. By the moment-cumulant formula, and because the
coordinates of x are independent (joint cumulants of sums of independent variables add up),

    E[f^2] = sum_{pi partition of {1..2k}} prod_{B in pi} kappa_|B| sum_i prod_{a in B} u_{a,i},

with the Rademacher cumulants kappa_2 = 1, kappa_4 = -2, kappa_6 = 16, kappa_8 = -272 (log cosh t
= t^2/2 - t^4/12 + t^6/45 - 17 t^8/2520 + ...) and kappa_odd = 0, so only partitions into blocks
of even size contribute. A block only sees how many copies of each head it holds, so the sum is
precomputed once per k (cached) as a polynomial in the power sums
P_n = sum_i prod_h gamma_{h,i}^{n_h}, n in {0,1,2}^k. For k = 2 it is paper A's
|g|^2|g~|^2 + 2(g.g~)^2 - 2 sum_i g_i^2 g~_i^2.

Population loss (exact, any gammas, real or attention weights):

    L = 1/2 E (f - y)^2 = 1/2 [ E f^2 - 2 (1 - 2 eps) perm(Gamma_S) + 1 ].

Cost O(d * 3^k) per evaluation; differentiable; leading axes (replicas) broadcast.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections import Counter

import torch
from torch import Tensor

from attnrepro.papers.sparse_xor.task import all_inputs

#: Cumulants of a Rademacher variable (odd ones vanish), up to order 8 (enough for k <= 4).
RADEMACHER_CUMULANTS = {2: 1, 4: -2, 6: 16, 8: -272}


def rademacher_cumulants(n_max: int) -> dict[int, int]:
    """Cumulants kappa_1..kappa_n_max of x = +-1 from its moments (m_even = 1, m_odd = 0), by
    kappa_n = m_n - sum_{j=1}^{n-1} C(n-1, j-1) kappa_j m_{n-j}; exact integers."""
    m = {n: 1 if n % 2 == 0 else 0 for n in range(n_max + 1)}
    kappa: dict[int, int] = {}
    for n in range(1, n_max + 1):
        kappa[n] = m[n] - sum(math.comb(n - 1, j - 1) * kappa[j] * m[n - j] for j in range(1, n))
    return kappa


def draw_support_k(gen: torch.Generator, d: int, k: int) -> tuple[int, ...]:
    """The hidden support S: k distinct positions, uniform among k-subsets (sorted)."""
    if not 1 <= k <= d:
        raise ValueError(f"need 1 <= k <= d, got k={k}, d={d}")
    return tuple(sorted(torch.randperm(d, generator=gen)[:k].tolist()))


def labels_k(x: Tensor, S, noise: float, gen: torch.Generator) -> Tensor:
    """y = -prod_{i in S} x_i for x (n, d), each flipped independently with probability noise."""
    y = -(x[:, list(S)].prod(-1)).to(x.dtype)
    if noise > 0:
        flip = torch.rand(x.shape[0], generator=gen) < noise
        y = torch.where(flip, -y, y)
    return y


def _set_partitions_even(n: int):
    """All set partitions of {0..n-1} whose blocks all have even size."""

    def rec(rest):
        if not rest:
            yield []
            return
        first, others = rest[0], rest[1:]
        # block containing `first`: first + an odd number of the others
        for size in range(1, len(others) + 1, 2):
            for comb in itertools.combinations(others, size):
                left = [o for o in others if o not in comb]
                for tail in rec(left):
                    yield [(first, *comb)] + tail

    yield from rec(list(range(n)))


@functools.lru_cache(maxsize=None)
def second_moment_polynomial(k: int):
    """E[f^2] as sum_t c_t prod_{n in term t} P_n, precomputed once per k.

    Returns (monomials, terms, coeffs): monomials is a tuple of multiplicity vectors n in
    {0,1,2}^k (P_n = sum_i prod_h gamma_{h,i}^{n_h}); terms is a tuple of tuples of indices into
    monomials; coeffs the integer coefficients (sum over the set partitions of the 2k slots
    u = (g_1, g_1, ..., g_k, g_k) mapping to the term, of prod_B kappa_|B|).
    """
    kappa = rademacher_cumulants(2 * k)
    head_of_slot = [a // 2 for a in range(2 * k)]
    acc: Counter = Counter()
    for part in _set_partitions_even(2 * k):
        coef = 1
        key = []
        for block in part:
            coef *= kappa[len(block)]
            n = [0] * k
            for a in block:
                n[head_of_slot[a]] += 1
            key.append(tuple(n))
        acc[tuple(sorted(key))] += coef
    monos = sorted({n for key in acc for n in key})
    index = {n: j for j, n in enumerate(monos)}
    keys = [key for key in sorted(acc) if acc[key] != 0]
    terms = tuple(tuple(index[n] for n in key) for key in keys)
    coeffs = tuple(acc[key] for key in keys)
    return tuple(monos), terms, coeffs


@functools.lru_cache(maxsize=None)
def _second_moment_tables(k: int) -> tuple[Tensor, Tensor, Tensor]:
    """second_moment_polynomial(k) as index tensors: every monomial's place in the row-major
    {0,1,2}^k grid (M,); every term's monomials (n_terms, longest term), padded with index M (the
    constant 1); the coefficients (n_terms,)."""
    monos, terms, coeffs = second_moment_polynomial(k)
    flat = [sum(nh * 3 ** (k - 1 - h) for h, nh in enumerate(n)) for n in monos]
    longest = max(len(t) for t in terms)
    padded = [list(t) + [len(monos)] * (longest - len(t)) for t in terms]
    return torch.tensor(flat), torch.tensor(padded), torch.tensor(coeffs, dtype=torch.float64)


def second_moment_k(gammas: Tensor) -> Tensor:
    """E[f^2] = E[prod_h (gamma_h . x)^2] for gammas (..., k, d) -> (...): the power sums
    P_n = sum_i prod_h gamma_{h,i}^{n_h} of every n in {0,1,2}^k at once, then
    sum_t c_t prod_{n in t} P_n. With G_h = (1, gamma_h, gamma_h^2) (3, d), P over the grid is
    A B^T, A (3^a, d) and B (3^(k-a), d) the row-wise outer products of G_1..G_a and G_(a+1)..G_k,
    a = ceil(k/2): one matrix product over i per replica."""
    k = gammas.shape[-2]
    flat, terms, coeffs = _second_moment_tables(k)
    G = torch.stack([torch.ones_like(gammas), gammas, gammas * gammas], dim=-2)  # (..., k, 3, d)

    def outer(heads: range) -> Tensor:  # (..., 3^len(heads), d), row-major in the heads' powers
        out = G[..., heads[0], :, :]
        for h in heads[1:]:
            out = (out.unsqueeze(-2) * G[..., h, None, :, :]).flatten(-3, -2)
        return out

    a = (k + 1) // 2
    P = outer(range(a)) @ outer(range(a, k)).transpose(-1, -2) if k > 1 else G[..., 0, :, :].sum(-1)
    P = P.flatten(-2)[..., flat] if k > 1 else P[..., flat]  # (..., M): P_n
    P = torch.cat([P, torch.ones_like(P[..., :1])], dim=-1)  # index M: the padding's 1
    return (P[..., terms].prod(-1) * coeffs.to(P)).sum(-1)


def support_matrix(gammas: Tensor, S: Tensor) -> Tensor:
    """Gamma_S[..., h, j] = gammas[..., h, S[..., j]]: gammas (..., k, d), S (..., k) -> (..., k, k)."""
    k = gammas.shape[-2]
    idx = S.unsqueeze(-2).expand(*S.shape[:-1], k, S.shape[-1])
    return gammas.gather(-1, idx)


def permanent(A: Tensor) -> Tensor:
    """perm of the trailing (k, k) matrix, by the sum over the k! permutations (k <= ~6)."""
    k = A.shape[-1]
    sigma = torch.tensor(list(itertools.permutations(range(k))))  # (k!, k)
    return A[..., torch.arange(k), sigma].prod(-1).sum(-1)


def parity_correlation(gammas: Tensor, S: Tensor) -> Tensor:
    """E[f y] for noiseless y: perm(Gamma_S); 1 when the heads sit one-to-one on S."""
    return permanent(support_matrix(gammas, S))


def population_loss_k(gammas: Tensor, S: Tensor, noise: float = 0.0) -> Tensor:
    """Exact E over x ~ Unif{+-1}^d and the label noise of 1/2 (f - y)^2, f = -prod_h (gamma_h . x):

        L = 1/2 [ E f^2 - 2 (1 - 2 eps) perm(Gamma_S) + 1 ]

    (module docstring). gammas (..., k, d), S (..., k) long -> (...). For k = 2 it equals
    task.population_loss(gammas[..., 0, :], gammas[..., 1, :], S[..., 0], S[..., 1], noise).
    """
    if S.shape[-1] != gammas.shape[-2]:
        raise ValueError(f"S has {S.shape[-1]} positions but gammas has {gammas.shape[-2]} heads")
    return 0.5 * (second_moment_k(gammas) - 2 * (1 - 2 * noise) * parity_correlation(gammas, S) + 1)


def brute_force_population_loss_k(gammas: Tensor, S: Tensor, d: int, noise: float = 0.0) -> Tensor:
    """The same loss by enumerating all 2^d inputs (d <= ~14): gammas (..., k, d), S (..., k)."""
    x = all_inputs(d, dtype=gammas.dtype)  # (N, d)
    f = -torch.einsum("nd,...kd->...nk", x, gammas).prod(-1)  # (..., N)
    xs = x[:, S.reshape(-1, S.shape[-1])]  # (N, B, k)
    y = -xs.prod(-1).T.reshape(*S.shape[:-1], x.shape[0])  # (..., N)
    return (0.5 * ((1 - noise) * (f - y) ** 2 + noise * (f + y) ** 2)).mean(-1)
