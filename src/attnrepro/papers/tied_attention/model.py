"""Tied single-head attention students of paper B, replicated over seeds (leading axis R).

Query = key = W in R^{p x d}, value = identity. The student's attention on tokens
X in R^{T x d} is A_hat = softmax_rows(beta h(S)), with h as in
tasks.attention_indexed.preactivations, and its output is A_hat (seq2lab) or
A_hat X (seq2seq). Two parametrisations of S:

- factorized: S = W^T W / sqrt(p d), penalty (lambda/2) ||W||_F^2
  = (lambda/2) sqrt(p d) Tr S (a nuclear norm on S, which is PSD);
- direct: S symmetric, penalty (lambda/2) c ||S||_F^2 with c = sqrt(p d).

Why c = sqrt(p d): both penalties are then (lambda/2) sqrt(p d) sum_i f(s_i) over the
eigenvalues s_i of S, f(s) = |s| (factorized) or s^2 (direct), so lambda carries the
same prefactor per unit of S and the two agree on eigenvalues 0 and 1; in the
theory's units both have lambda~ = sqrt(kappa) lambda, i.e. (lambda~/2) d Tr S
and (lambda~/2) d ||S||_F^2. For the direct model kappa (p) sets only this
constant and the scale of the trained tensor below.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnrepro.papers.tied_attention.task import attention, output, preactivations


class TiedAttention(nn.Module):
    """Shared part: A_hat = softmax_rows(beta h(S)) and the output; subclasses define S and the penalty."""

    def __init__(self, d: int, p: int, beta: float, lam: float, out: str):
        super().__init__()
        self.d, self.p, self.beta, self.lam, self.out = d, p, beta, lam, out

    def S(self) -> Tensor:
        """The learned S, (R, d, d)."""
        raise NotImplementedError

    def penalty(self) -> Tensor:
        """The weight-decay term of the objective, (R,)."""
        raise NotImplementedError

    def preactivations(self, X: Tensor) -> Tensor:
        """h(S) for tokens X (R, n, T, d) -> (R, n, T, T), forming S and X S once: O(n T d^2)."""
        return preactivations(X, self.S())

    def attention(self, X: Tensor) -> Tensor:
        """A_hat = softmax_rows(beta h(S)), (R, n, T, T)."""
        return attention(self.preactivations(X), self.beta)

    def forward(self, X: Tensor) -> Tensor:
        """A_hat (seq2lab, (R, n, T, T)) or A_hat X (seq2seq, (R, n, T, d))."""
        return output(self.attention(X), X, self.out)


class _TokenGram(torch.autograd.Function):
    """G_ab = (W x_a) . (W x_b) per sample, W (R, p, d), X (R, n, T, d) -> G (R, n, T, T).

    Forward: z_a = W x_a as T products (R, p, d)(R, d, n) (X's token slices as strided operands),
    then G_ab = sum_k z_ak z_bk. Backward: dz_a = sum_b (dG_ab + dG_ba) z_b and dW = sum_a dz_a x_a^T,
    T more products (R, p, n)(R, n, d). The element-wise work runs over (R, p, n) blocks with n
    innermost. The route before (Z = X W^T, then per-sample (T x p)(p x T) Grams with a broadcast
    backward) took 148 against 106 ms per 4-replica step at d = 200, p = 100, T = 2, n = 8400, float32
    (2 threads, plain steps, two runs minutes apart, with 16 MB chunks for the new route).
    """

    @staticmethod
    def forward(ctx, W: Tensor, X: Tensor) -> Tensor:
        T = X.shape[-2]
        Z = [W @ X[..., a, :].transpose(-1, -2) for a in range(T)]  # each (R, p, n)
        G = X.new_empty(X.shape[:-2] + (T, T))
        for a in range(T):
            for b in range(a, T):
                G[..., a, b] = G[..., b, a] = (Z[a] * Z[b]).sum(-2)
        ctx.save_for_backward(X, *Z)
        return G

    @staticmethod
    def backward(ctx, dG: Tensor) -> tuple[Tensor, None]:
        X, *Z = ctx.saved_tensors
        sym = (dG + dG.transpose(-1, -2)).unsqueeze(-4)  # (R, 1, n, T, T)
        dW = None
        for a in range(X.shape[-2]):
            dz = sym[..., a, 0] * Z[0]
            for b in range(1, len(Z)):
                dz = torch.addcmul(dz, sym[..., a, b], Z[b])
            term = dz @ X[..., a, :]
            dW = term if dW is None else dW + term
        return dW, None


class FactorizedTiedAttention(TiedAttention):
    """S = W^T W / sqrt(p d), W (R, p, d); penalty (lambda/2) ||W||_F^2 = (lambda/2) sqrt(p d) Tr S.

    The pre-activations go through z_a = W x_a (O(n T p d), against O(n T d^2) through X S):
    h_ab = (z_a . z_b - delta_ab ||W||_F^2) / (sqrt(p d) sqrt(d)), since Tr S = ||W||_F^2 / sqrt(p d).
    """

    def __init__(self, W: Tensor, beta: float, lam: float, out: str):
        super().__init__(W.shape[-1], W.shape[-2], beta, lam, out)
        self.W = nn.Parameter(W)

    @classmethod
    def draw(cls, gens: list[torch.Generator], d: int, p: int, beta: float, lam: float, out: str,
             init_scale: float = 1.0, dtype=torch.float64) -> "FactorizedTiedAttention":
        """W(0) entries i.i.d. N(0, init_scale^2), one (p, d) draw per replica generator."""
        W = torch.stack([init_scale * torch.randn(p, d, generator=g, dtype=torch.float64) for g in gens])
        return cls(W.to(dtype), beta, lam, out)

    def S(self) -> Tensor:
        return self.W.transpose(-1, -2) @ self.W / math.sqrt(self.p * self.d)

    def preactivations(self, X: Tensor) -> Tensor:
        """h(S) for tokens X (R, n, T, d) through z_a = W x_a: O(n T p d)."""
        T = X.shape[-2]
        trace = (self.W**2).sum((-1, -2))[..., None, None, None]
        h = _TokenGram.apply(self.W, X) - trace * torch.eye(T, dtype=X.dtype, device=X.device)
        return h / (math.sqrt(self.p * self.d) * math.sqrt(self.d))

    def penalty(self) -> Tensor:
        return 0.5 * self.lam * (self.W**2).sum((-1, -2))

    @torch.no_grad()
    def pair_fit_gradient(self, V: Tensor, U: Tensor, A: Tensor, chunk: int) -> tuple[Tensor, Tensor]:
        """T = 2, seq2lab, without autograd: the fit (1/2) sum_mu ||A_hat_mu - A_mu||_F^2 per replica over samples
        given by v = x_1 - x_2 and u = x_1 + x_2 (V, U: (R, n, d)), labels A (R, n, 2, 2), and its gradient in
        W (R, p, d); `chunk` samples at a time.

        With z_v = W v, z_u = W u (so z_1 = (z_u + z_v)/2, z_2 = (z_u - z_v)/2), q = |z_v|^2 = v^T W^T W v,
        k = z_u . z_v = u^T W^T W v, tau = ||W||_F^2 and s = sqrt(p d) sqrt(d): h_11 - h_12 = ((k + q)/2 - tau)/s,
        h_22 - h_21 = ((q - k)/2 - tau)/s, and A_hat's rows are softmax(x_1, 0) and softmax(0, x_2),
        x_i = beta (h_ii - h_12). With r = A_hat - A: dl/dx_1 = a_11 a_12 (r_11 - r_12) =: g_1,
        dl/dx_2 = a_22 a_21 (r_22 - r_21) =: g_2; dl/dq = beta (g_1 + g_2)/(2 s), dl/dk = beta (g_1 - g_2)/(2 s),
        dl/dtau = -beta (g_1 + g_2)/s. Two routes to q, k and dl/dW, whichever multiplies less:
        - through z (8 p d per sample): dl/dW = sum_mu [(2 dl/dq z_v + dl/dk z_u) v^T + dl/dk z_v u^T] + 2 (sum_mu
          dl/dtau) W;
        - through G = W^T W (4 d^2 per sample, and 4 p d^2 per evaluation: d < 2 p, as at kappa = 1): q = v^T G v,
          k = u^T G v, dl/dG = sum_mu (dl/dq v + dl/dk u) v^T =: M, dl/dW = W (M + M^T) + 2 (sum_mu dl/dtau) W.
        """
        W, beta = self.W, self.beta
        s = math.sqrt(self.p * self.d) * math.sqrt(self.d)
        shift = (beta / s) * (W * W).sum((-1, -2))[:, None]                 # beta tau / s, (R, 1)
        fit = torch.zeros(W.shape[0], dtype=W.dtype, device=W.device)
        dtau = torch.zeros_like(fit)                                         # -sum_mu dl/dtau
        through_gram = self.d < 2 * self.p
        G = W.transpose(-1, -2) @ W if through_gram else None                # (R, d, d)
        grad = torch.zeros_like(G if through_gram else W)                    # M, or dl/dW
        for i in range(0, V.shape[1], chunk):
            v, u, Y = V[:, i:i + chunk], U[:, i:i + chunk], A[:, i:i + chunk]
            if through_gram:
                Gv = v @ G                                                   # (R, c, d): rows G v
                q, k = (Gv * v).sum(-1), (Gv * u).sum(-1)                    # (R, c)
            else:
                zv, zu = W @ v.transpose(-1, -2), W @ u.transpose(-1, -2)    # (R, p, c)
                q, k = (zv * zv).sum(-2), (zv * zu).sum(-2)
            logits = torch.zeros(Y.shape, dtype=W.dtype, device=W.device)  # beta (h - h_12), (R, c, 2, 2)
            logits[..., 0, 0] = (beta / (2 * s)) * (k + q) - shift
            logits[..., 1, 1] = (beta / (2 * s)) * (q - k) - shift
            a = torch.softmax(logits, -1)  # row by row whatever the batch (a sigmoid's vector and scalar paths differ)
            r = a - Y
            fit += 0.5 * (r * r).sum((-1, -2, -3))
            g1 = a[..., 0, 0] * a[..., 0, 1] * (r[..., 0, 0] - r[..., 0, 1])
            g2 = a[..., 1, 1] * a[..., 1, 0] * (r[..., 1, 1] - r[..., 1, 0])
            dq2, dk = (beta / s) * (g1 + g2), (beta / (2 * s)) * (g1 - g2)  # 2 dl/dq, dl/dk
            dtau += dq2.sum(-1)
            # products added, not baddbmm: with one replica that rounds as addmm, unlike the batch
            if through_gram:
                grad += torch.addcmul(u * dk[..., None], v, (0.5 * dq2)[..., None]).transpose(-1, -2) @ v
            else:
                grad += torch.addcmul(zu * dk[:, None, :], zv, dq2[:, None, :]) @ v
                grad += zv.mul_(dk[:, None, :]) @ u                          # z_v's last use: dl/dz_u in place
        if through_gram:
            grad = W @ (grad + grad.transpose(-1, -2))
        return fit, grad.add_(W * (-2.0 * dtau)[:, None, None])


class DirectTiedAttention(TiedAttention):
    """S = sym(A) / sqrt(p d), sym(A) = (A + A^T)/2, A (R, d, d) the trained tensor;
    penalty (lambda/2) sqrt(p d) ||S||_F^2.

    S stays symmetric for any A. A(0) is symmetric (i.i.d. N(0, init_scale^2) on and
    above the diagonal), and the gradient in A is symmetric, so an element-wise
    optimiser keeps A = A^T. The scale sqrt(p d) makes A's entries the size of those
    of sqrt(p d) S, as in the authors' direct runs, so that Adam's step on S is
    eta / sqrt(p d).
    """

    def __init__(self, A: Tensor, p: int, beta: float, lam: float, out: str):
        super().__init__(A.shape[-1], p, beta, lam, out)
        self.A = nn.Parameter(A)

    @classmethod
    def draw(cls, gens: list[torch.Generator], d: int, p: int, beta: float, lam: float, out: str,
             init_scale: float = 1.0, dtype=torch.float64) -> "DirectTiedAttention":
        """A(0) symmetric, entries on and above the diagonal i.i.d. N(0, init_scale^2)."""
        As = []
        for g in gens:
            a = torch.triu(init_scale * torch.randn(d, d, generator=g, dtype=torch.float64))
            As.append(a + torch.triu(a, 1).T)
        return cls(torch.stack(As).to(dtype), p, beta, lam, out)

    def S(self) -> Tensor:
        return 0.5 * (self.A + self.A.transpose(-1, -2)) / math.sqrt(self.p * self.d)

    def penalty(self) -> Tensor:
        return 0.5 * self.lam * math.sqrt(self.p * self.d) * (self.S() ** 2).sum((-1, -2))


MODELS = {"factorized": FactorizedTiedAttention, "direct": DirectTiedAttention}


def draw_student(param: str, gens: list[torch.Generator], d: int, p: int, beta: float, lam: float,
                 out: str, init_scale: float = 1.0, dtype=torch.float64) -> TiedAttention:
    """The student of parametrisation `param` (factorized | direct), drawn from the replica generators."""
    if param not in MODELS:
        raise ValueError(f"param must be one of {sorted(MODELS)}, got {param!r}")
    return MODELS[param].draw(gens, d, p, beta, lam, out, init_scale, dtype)
