"""The two-head attention model of paper A, in its simplified form, replicated over seeds.

Frozen positional embeddings v_1..v_d ~ Unif(S^{m-1}) (rows of V in R^{d x m}),
two trainable queries theta, theta~ in R^m, scores s = V theta, s~ = V theta~,
attention gamma = phi(s), gamma~ = phi(s~), output

    f(x) = -(gamma . x)(gamma~ . x).

All tensors carry a leading replica axis R: V (R, d, m), theta (R, m).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

ATTENTION_MAPS = {
    "softmax": lambda s: torch.softmax(s, dim=-1),
    "linear": lambda s: s,
    "erf": torch.erf,
}


def step_unit(attention: str, d: int, m: int) -> float:
    """The natural step size of the parametrisation; eta = lr * step_unit.

    softmax: the gradient at init is O(1/d^2), so one step needs eta ~ d^2 sqrt(m).
    linear, erf: gamma_i = O(1/sqrt(m)), the loss Hessian in theta is O((d/m)^2),
    so GD is stable for eta ~ (m/d)^2.
    """
    if attention == "softmax":
        return d**2 * math.sqrt(m)
    return (m / d) ** 2


def uniform_sphere(gen: torch.Generator, *shape: int, dtype=torch.float64) -> Tensor:
    """Points uniform on the unit sphere of the last axis."""
    g = torch.randn(*shape, generator=gen, dtype=dtype)
    return g / g.norm(dim=-1, keepdim=True)


class TwoHeadXorAttention(nn.Module):
    def __init__(self, V: Tensor, theta: Tensor, theta_tilde: Tensor, attention: str):
        super().__init__()
        if attention not in ATTENTION_MAPS:
            raise ValueError(f"attention must be one of {sorted(ATTENTION_MAPS)}, got {attention!r}")
        self.attention = attention
        self.register_buffer("V", V)
        self.theta = nn.Parameter(theta)
        self.theta_tilde = nn.Parameter(theta_tilde)

    @classmethod
    def draw(cls, gens: list[torch.Generator], d: int, m: int, attention: str, init: str,
             dtype=torch.float64) -> "TwoHeadXorAttention":
        """Per replica: V rows ~ Unif(S^{m-1}), theta(0) ~ Unif(S^{m-1}),
        theta~(0) = -theta(0) (antisymmetric) or an independent draw (independent)."""
        Vs, th, tht = [], [], []
        for g in gens:
            Vs.append(uniform_sphere(g, d, m, dtype=dtype))
            th.append(uniform_sphere(g, m, dtype=dtype))
            tht.append(-th[-1] if init == "antisymmetric" else uniform_sphere(g, m, dtype=dtype))
        return cls(torch.stack(Vs), torch.stack(th), torch.stack(tht), attention)

    def heads(self) -> tuple[Tensor, Tensor]:
        """(gamma, gamma~), each (R, d)."""
        phi = ATTENTION_MAPS[self.attention]
        s = torch.einsum("rdm,rm->rd", self.V, self.theta)
        s_t = torch.einsum("rdm,rm->rd", self.V, self.theta_tilde)
        return phi(s), phi(s_t)

    @torch.no_grad()
    def mse_gradient(self, x: Tensor, y: Tensor, n: int) -> tuple[Tensor, Tensor, Tensor]:
        """Softmax attention only: per replica the loss L = (1/n) sum_mu 1/2 (f(x_mu) - y_mu)^2 over the samples
        x (R, c, d), y (R, c), and its gradients dL/dtheta, dL/dtheta~ (R, m), by hand:

            r = f - y,   dL/dz_0 = -(r/n) z_1,   dL/dz_1 = -(r/n) z_0   (z_h = gamma_h . x),
            dL/dgamma_h = sum_mu dL/dz_h x_mu,   dL/ds_h = softmax'(s_h) dL/dgamma_h,   dL/dtheta_h = V^T dL/ds_h,

        with the operations autograd's backward pass of forward() runs, in its order, so that the numbers are
        the same to the bit (tests/test_sample_trained.py): a GD step of paper A's small problems was mostly the
        autograd graph's own cost (0.93 ms a step at d = 128, n = 256, 24 replicas)."""
        if self.attention != "softmax":
            raise ValueError(f"mse_gradient is softmax attention's, not {self.attention!r}'s")
        gamma, gamma_t = self.heads()
        xT = x.transpose(-1, -2)
        z = torch.bmm(torch.stack((gamma, gamma_t), dim=-2), xT)
        minus_z0, z1 = -z[:, 0], z[:, 1]
        r = minus_z0 * z1 - y
        loss = 0.5 * (r ** 2).sum(-1) / n
        # backward: loss.sum() -> / n -> * 0.5 -> sum(-1) -> ** 2 -> f = (-z0) z1 -> bmm -> stack -> softmax -> einsum
        df = (torch.ones_like(loss) / n * 0.5)[:, None].expand_as(r) * (2.0 * r)
        dG = torch.stack((-(df * z1), df * minus_z0), dim=1).bmm(xT.transpose(1, 2))
        ds = torch._softmax_backward_data(dG[:, 0], gamma, -1, gamma.dtype)
        ds_t = torch._softmax_backward_data(dG[:, 1], gamma_t, -1, gamma_t.dtype)
        Vt = self.V.transpose(1, 2)
        return loss, Vt.bmm(ds.unsqueeze(-1)).squeeze(-1), Vt.bmm(ds_t.unsqueeze(-1)).squeeze(-1)

    def forward(self, x: Tensor) -> Tensor:
        """f for inputs x (R, n, d) -> (R, n); both heads' dot products in one pass over x
        (and one more for the gradient), as (R, 2, d)(R, d, n): fast when x is laid out position-major
        (problem.SampleSet), correct for any layout."""
        z = torch.bmm(torch.stack(self.heads(), dim=-2), x.transpose(-1, -2))
        return -z[:, 0] * z[:, 1]
