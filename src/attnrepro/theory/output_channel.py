"""The output term M(Sigma, m, q) of paper B's ERM state evolution, by Monte Carlo with a batched
proximal (Moreau) solver.

The T(T+1)/2 symmetric pre-activations e = (a <= b) of one sample enter with a scale s_e = 2 on
the diagonal (a = b) and 1 off it. Per entry, the target's and the student's pre-activations are
jointly Gaussian,

    (z0_e, z_e) ~ N(0, s_e [[Q0 + Delta/2, m], [m, q]])      (z0 with the label noise),

independent across entries. Writing X for the symmetric T x T matrix of the x_e and Z0 for that
of the z0_e, M is the Moreau envelope of the per-sample loss,

    M = E min_x [ sum_e (x_e - z_e)^2 / (2 s_e Sigma) + l(x; z0) ],
    l(x; z0) = 1/2 || out_beta(X) - out_beta0(Z0) ||_F^2,

with out = the row softmax (channel "softmax") or the identity (channel "linear": labels
h(S0) + xi, predictions h(S), SPEC's linear-channel limit). The draws are fixed (common random
numbers: z = sqrt(s q) g, z0 = sqrt(s) (m/sqrt(q) g + sqrt(Q0 + Delta/2 - m^2/q) g0)), so M is a
smooth function of (Sigma, m, q) and the fixed-point iteration sees no sampling noise between
its steps. The minimiser x* is found by damped Newton (Hessians by torch.func, shifted to be
positive definite); by the envelope theorem the derivatives of M are those of the objective
at x* held fixed, taken by autograd.

For a quadratic loss l = 1/2 (x - y)^T A (x - y), M has the closed form
1/2 (Q0 + Delta/2 - 2m + q) tr[(D^-1 + A^-1)^-1 diag(s)], D = diag(1/(s_e Sigma)) (closed_form_M),
the check of the solver; the row softmax at small beta is affine, so it reduces to that too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.func import grad, hessian, vmap

NEWTON_STEPS = 50
NEWTON_TOL = 1e-10


def entries(T: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(rows a, columns b, scales s_e) of the entries a <= b."""
    a, b = torch.triu_indices(T, T)
    return a, b, torch.where(a == b, 2.0, 1.0).double()


def symmetric(x: torch.Tensor, T: int) -> torch.Tensor:
    """(..., T(T+1)/2) entries -> (..., T, T) symmetric matrices."""
    a, b, _ = entries(T)
    out = x.new_zeros(*x.shape[:-1], T, T)
    out[..., a, b] = x
    out[..., b, a] = x
    return out


def out_map(x: torch.Tensor, T: int, beta: float, channel: str) -> torch.Tensor:
    """The channel's output for the entries x: softmax_rows(beta X) or X itself."""
    X = symmetric(x, T)
    return torch.softmax(beta * X, dim=-1) if channel == "softmax" else X


@dataclass
class ChannelValue:
    M: float
    dSigma: float
    dm: float
    dq: float
    train_loss: float          # E l(x*; z0): the training loss per sample
    newton_residual: float     # max |grad| of the proximal objective at x*


class OutputChannel:
    """M(Sigma, m, q) and its derivatives for T tokens, by Monte Carlo over `samples` fixed draws."""

    def __init__(self, T: int, Q0: float, Delta: float = 0.0, beta: float = 1.0, beta0: float = 1.0,
                 channel: str = "softmax", samples: int = 20000, seed: int = 0):
        if channel not in ("softmax", "linear"):
            raise ValueError(f"channel must be 'softmax' or 'linear', got {channel!r}")
        self.T, self.Q0, self.Delta, self.beta, self.beta0, self.channel = T, Q0, Delta, beta, beta0, channel
        gen = torch.Generator().manual_seed(seed)
        n_e = T * (T + 1) // 2
        self._g = torch.randn(samples, n_e, generator=gen, dtype=torch.float64)
        self._g0 = torch.randn(samples, n_e, generator=gen, dtype=torch.float64)
        self._gt = torch.randn(samples, n_e, generator=gen, dtype=torch.float64)  # test draws (noiseless)
        self._s = entries(T)[2]
        self._x = None  # warm start of the proximal solve

    # ------------------------------------------------------------ draws
    def _z(self, m, q, noise: float, g0: torch.Tensor):
        """(z0, z) for the fixed draws; z0 with total variance s (Q0 + noise)."""
        var0 = self.Q0 + noise
        rest = torch.clamp(var0 - m * m / q, min=0.0)
        root_s = torch.sqrt(self._s)
        z = root_s * torch.sqrt(q) * self._g
        z0 = root_s * (m / torch.sqrt(q) * self._g + torch.sqrt(rest) * g0)
        return z0, z

    def _loss(self, x, y0):
        out = out_map(x, self.T, self.beta, self.channel)
        return 0.5 * ((out - y0) ** 2).sum(dim=(-1, -2))

    # ------------------------------------------------------------ the proximal solve
    def _prox(self, z: torch.Tensor, y0: torch.Tensor, sigma: float) -> tuple[torch.Tensor, float]:
        inv = 1.0 / (self._s * sigma)
        T, beta, channel = self.T, self.beta, self.channel

        def objective(x, z_, y_):
            out = out_map(x, T, beta, channel)
            return 0.5 * (inv * (x - z_) ** 2).sum() + 0.5 * ((out - y_) ** 2).sum()

        g_fn, h_fn = vmap(grad(objective)), vmap(hessian(objective))
        x = self._x if self._x is not None and self._x.shape == z.shape else z.clone()
        eye = torch.eye(z.shape[-1], dtype=z.dtype)
        res = math.inf
        for _ in range(NEWTON_STEPS):
            g = g_fn(x, z, y0)
            res = float(g.abs().max())
            if res < NEWTON_TOL:
                break
            h = h_fn(x, z, y0)
            low = torch.linalg.eigvalsh(h)[..., :1]  # shift an indefinite Hessian to positive definite
            shift = torch.clamp(-low + 1e-3 * inv.min(), min=0.0)
            step = torch.linalg.solve(h + shift[..., None] * eye, g)
            x = x - step
        self._x = x
        return x, res

    # ------------------------------------------------------------ M and its derivatives
    def evaluate(self, sigma: float, m: float, q: float) -> ChannelValue:
        """M, dM/dSigma, dM/dm, dM/dq at (Sigma, m, q), and the training loss at x*."""
        if not (sigma > 0 and q > 0):
            raise ValueError(f"need Sigma > 0 and q > 0, got Sigma = {sigma}, q = {q}")
        s_t, m_t, q_t = (torch.tensor(float(v), dtype=torch.float64, requires_grad=True) for v in (sigma, m, q))
        with torch.no_grad():
            z0, z = self._z(m_t, q_t, self.Delta / 2, self._g0)
            y0 = out_map(z0, self.T, self.beta0, self.channel)
            x, res = self._prox(z, y0, float(sigma))
        z0, z = self._z(m_t, q_t, self.Delta / 2, self._g0)
        y0 = out_map(z0, self.T, self.beta0, self.channel)
        loss = self._loss(x, y0)
        total = ((x - z) ** 2 / (2 * self._s * s_t)).sum(-1) + loss
        value = total.mean()
        d_sigma, d_m, d_q = torch.autograd.grad(value, (s_t, m_t, q_t))
        return ChannelValue(float(value.detach()), float(d_sigma), float(d_m), float(d_q), float(loss.detach().mean()),
                            res)

    def test_error(self, m: float, q: float) -> float:
        """E || out_beta0(Z0) - out_beta(Z) ||_F^2 on noiseless test pre-activations."""
        m_t, q_t = torch.tensor(float(m), dtype=torch.float64), torch.tensor(float(q), dtype=torch.float64)
        z0, z = self._z(m_t, q_t, 0.0, self._gt)
        diff = out_map(z0, self.T, self.beta0, self.channel) - out_map(z, self.T, self.beta, self.channel)
        return float((diff ** 2).sum(dim=(-1, -2)).mean())


def closed_form_M(T: int, Q0: float, Delta: float, sigma: float, m: float, q: float, A: torch.Tensor) -> float:
    """M for a quadratic loss 1/2 (x - y)^T A (x - y) of the entries, y = z0:
    1/2 (Q0 + Delta/2 - 2m + q) tr[(D^-1 + A^-1)^-1 diag(s)], D = diag(1/(s_e Sigma)) (A may be singular:
    (D^-1 + A^-1)^-1 = D (D + A)^-1 A)."""
    s = entries(T)[2]
    D = torch.diag(1.0 / (s * sigma))
    K = D @ torch.linalg.solve(D + A, A)
    return float(0.5 * (Q0 + Delta / 2 - 2 * m + q) * torch.trace(K @ torch.diag(s)))


def linear_loss_matrix(T: int) -> torch.Tensor:
    """A of the linear channel: 1/2 ||X - Y||_F^2 counts an off-diagonal entry twice."""
    return torch.diag(torch.where(entries(T)[0] == entries(T)[1], 1.0, 2.0).double())


class LinearChannel:
    """The linear channel in closed form (closed_form_M; derivatives by autograd): the exact
    counterpart of OutputChannel(channel="linear"), for checking the fixed-point solver."""

    def __init__(self, T: int, Q0: float, Delta: float = 0.0):
        self.T, self.Q0, self.Delta = T, Q0, Delta
        self.A = linear_loss_matrix(T)

    def evaluate(self, sigma: float, m: float, q: float) -> ChannelValue:
        s_t, m_t, q_t = (torch.tensor(float(v), dtype=torch.float64, requires_grad=True) for v in (sigma, m, q))
        s = entries(self.T)[2]
        D = torch.diag(1.0 / (s * s_t))
        c = self.Q0 + self.Delta / 2 - 2 * m_t + q_t
        value = 0.5 * c * torch.trace(D @ torch.linalg.solve(D + self.A, self.A) @ torch.diag(s))
        d_sigma, d_m, d_q = torch.autograd.grad(value, (s_t, m_t, q_t))
        R = torch.linalg.solve(D + self.A, D)  # x* - y = R (z - y)
        train = 0.5 * c * torch.trace(R.T @ self.A @ R @ torch.diag(s))
        return ChannelValue(float(value.detach()), float(d_sigma), float(d_m), float(d_q), float(train.detach()), 0.0)

    def test_error(self, m: float, q: float) -> float:
        s = entries(self.T)[2]
        return float((self.A.diagonal() * s).sum() * (self.Q0 - 2 * m + q))
