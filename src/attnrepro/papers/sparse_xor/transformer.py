"""Paper A's model in the standard form: a one-layer, two-head transformer with a CLS token.

Tokens (D = m + 2 channels: value 0, positional 1..m, CLS m+1), for x in {+-1}^d:

    z_0 = [0; 0_m; 1] (CLS),    z_i = [x_i; v_i; 0]  (i = 1..d, v_i the frozen positional embedding).

Per head h = 1, 2 (stacked on a head axis): q_a = W_Q^h z_a, k_b = W_K^h z_b, u_b = W_V^h z_b with
W_K^h = [0 | I_m | 0] (k_b = v_b, k_0 = 0) and W_V^h = e_0^T (u_b = x_b, u_0 = 0) frozen, W_Q^h
(m x D) trainable. Scores S^h_ab = q_a . k_b (unscaled: a 1/sqrt(m) is absorbed into W_Q). The
structural mask M_ab = [b >= 1]: every token, the CLS one included, attends to the d input tokens and
never to CLS; only the CLS row is read after one layer, so only it is computed. Attention at CLS:
softmax(S^h_0 + log M) (masked entries weight 0 exactly), or phi(S^h_0) * M for phi = linear, erf.
Head outputs o^h = sum_b A^h_0b u_b are written at CLS through the frozen W_O = [e_0, e_1] (D x 2),
r_0 = z_0 + W_O [o^1; o^2], into channels 0 and 1, which are 0 in z_0; the readout is the fixed
bilinear f = -r_0[0] r_0[1] = -o^1 o^2 (this project's reading of the paper's standard form).

With W_Q^h = theta_h e_{m+1}^T (CLS column theta, theta~; other columns 0) the CLS query is q_0 = theta_h,
S^h_0b = v_b . theta_h, and f equals TwoHeadXorAttention's -(gamma . x)(gamma~ . x). Since z_0 is
one-hot, dL/dW_Q^h = (dL/dq_0) z_0^T: the non-CLS columns get exactly zero gradient.
Replica axis R first everywhere: V (R, d, m), W_Q (R, 2, m, D).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnrepro.papers.sparse_xor.attention import ATTENTION_MAPS, TwoHeadXorAttention


class TwoHeadXorTransformer(nn.Module):
    shared_buffers = ("mask",)  # one mask for every replica (lit.compaction)

    def __init__(self, V: Tensor, theta: Tensor, theta_tilde: Tensor, attention: str):
        super().__init__()
        if attention not in ATTENTION_MAPS:
            raise ValueError(f"attention must be one of {sorted(ATTENTION_MAPS)}, got {attention!r}")
        self.attention = attention
        R, d, m = V.shape
        D, cls = m + 2, m + 1
        eye = torch.eye(m, dtype=V.dtype, device=V.device)
        W_Q = V.new_zeros(R, 2, m, D)
        W_Q[:, 0, :, cls], W_Q[:, 1, :, cls] = theta, theta_tilde
        W_K = V.new_zeros(R, 2, m, D)
        W_K[:, :, :, 1:cls] = eye
        W_V = V.new_zeros(R, 2, 1, D)
        W_V[:, :, 0, 0] = 1.0
        W_O = V.new_zeros(R, D, 2)
        W_O[:, 0, 0] = W_O[:, 1, 1] = 1.0
        mask = torch.ones(d + 1, d + 1, dtype=torch.bool, device=V.device)
        mask[:, 0] = False  # nobody attends to CLS
        self.register_buffer("V", V)
        self.W_Q = nn.Parameter(W_Q)
        for name, t in (("W_K", W_K), ("W_V", W_V), ("W_O", W_O), ("mask", mask)):
            self.register_buffer(name, t)

    @classmethod
    def from_simplified(cls, model: TwoHeadXorAttention) -> "TwoHeadXorTransformer":
        return cls(model.V.detach().clone(), model.theta.detach().clone(),
                   model.theta_tilde.detach().clone(), model.attention)

    @classmethod
    def draw(cls, gens: list[torch.Generator], d: int, m: int, attention: str, init: str,
             dtype=torch.float64) -> "TwoHeadXorTransformer":
        """The simplified model's draw (TwoHeadXorAttention.draw), converted: identical random numbers."""
        return cls.from_simplified(TwoHeadXorAttention.draw(gens, d, m, attention, init, dtype))

    @property
    def dtype(self) -> torch.dtype:
        return self.W_Q.dtype

    def queries(self) -> tuple[Tensor, Tensor]:
        """(theta, theta~): views (R, m) of the CLS columns of W_Q^1, W_Q^2."""
        cls = self.W_Q.shape[-1] - 1
        return self.W_Q[:, 0, :, cls], self.W_Q[:, 1, :, cls]

    def embed(self, x: Tensor) -> Tensor:
        """Tokens Z (R, n, d+1, D) for x (R, n, d)."""
        R, n, d = x.shape
        m = self.V.shape[-1]
        Z = x.new_zeros(R, n, d + 1, m + 2)
        Z[:, :, 0, m + 1] = 1.0
        Z[:, :, 1:, 0] = x
        Z[:, :, 1:, 1:m + 1] = self.V.unsqueeze(1)
        return Z

    def cls_attention(self, Z: Tensor) -> Tensor:
        """A^h_0b (R, 2, n, d+1): the CLS row of S^h = Q K^T, masked by M_0, through phi."""
        q0 = torch.einsum("rhmD,rnD->rhnm", self.W_Q, Z[:, :, 0])
        K = torch.einsum("rhmD,rnbD->rhnbm", self.W_K, Z)
        S0 = torch.einsum("rhnm,rhnbm->rhnb", q0, K)
        keep = self.mask[0]
        if self.attention == "softmax":
            return torch.softmax(S0.masked_fill(~keep, float("-inf")), dim=-1)
        return torch.where(keep, ATTENTION_MAPS[self.attention](S0), torch.zeros((), dtype=S0.dtype,
                                                                                  device=S0.device))

    def heads(self) -> tuple[Tensor, Tensor]:
        """(gamma, gamma~), each (R, d): the CLS attention on tokens 1..d (it does not depend on x,
        as W_K reads no value channel; computed on the tokens of x = 0)."""
        R, d, _ = self.V.shape
        A = self.cls_attention(self.embed(self.V.new_zeros(R, 1, d)))[:, :, 0, 1:]
        return A[:, 0], A[:, 1]

    def forward(self, x: Tensor) -> Tensor:
        """f for inputs x (R, n, d) -> (R, n), through embed, projections, mask, attention, W_O, readout.
        Memory O(R n d m): use chunks of samples for large d."""
        Z = self.embed(x)
        A = self.cls_attention(Z)
        U = torch.einsum("rhkD,rnbD->rhnbk", self.W_V, Z)[..., 0]
        o = torch.einsum("rhnb,rhnb->rnh", A, U)
        r0 = Z[:, :, 0] + torch.einsum("rDh,rnh->rnD", self.W_O, o)
        return -r0[..., 0] * r0[..., 1]
