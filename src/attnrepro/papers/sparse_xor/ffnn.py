"""Two-layer ReLU network, the baseline of paper A, replicated over seeds.

    f(x) = sum_j a_j ReLU(w_j . x + b_j) + c,   j = 1..k:  k(d + 2) + 1 parameters.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def n_params(d: int, k: int) -> int:
    return k * (d + 2) + 1


class ReluFFNN(nn.Module):
    def __init__(self, W: Tensor, b: Tensor, a: Tensor, c: Tensor):
        super().__init__()
        self.W, self.b, self.a, self.c = (nn.Parameter(t) for t in (W, b, a, c))

    @classmethod
    def draw(cls, gens: list[torch.Generator], d: int, k: int, dtype=torch.float32) -> "ReluFFNN":
        """PyTorch's default Linear init per replica: U(-1/sqrt(fan_in), 1/sqrt(fan_in)); c = 0."""
        def u(g, bound, *shape):
            return (torch.rand(*shape, generator=g, dtype=dtype) * 2 - 1) * bound
        W, b, a = [], [], []
        for g in gens:
            W.append(u(g, d**-0.5, k, d))
            b.append(u(g, d**-0.5, k))
            a.append(u(g, k**-0.5, k))
        return cls(torch.stack(W), torch.stack(b), torch.stack(a), torch.zeros(len(gens), dtype=dtype))

    def forward(self, x: Tensor) -> Tensor:
        """x (R, n, d) -> f (R, n); the hidden layer as (R, k, d)(R, d, n), a wide matrix product on the
        position-major samples (problem.SampleSet)."""
        h = torch.relu(torch.bmm(self.W, x.transpose(-1, -2)) + self.b[:, :, None])  # (R, k, n)
        return torch.einsum("rkn,rk->rn", h, self.a) + self.c[:, None]
