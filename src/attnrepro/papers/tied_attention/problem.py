"""Tied single-head attention on the attention-indexed model (paper B): data, objective, metrics.

Objective per replica (loss summed over samples, as SPEC):

    L(S) = sum_mu 1/2 ||out_hat(X_mu) - y_mu||_F^2 + penalty,

out_hat = A_hat (seq2lab) or A_hat X (seq2seq), y_mu the noisy label. Metrics
(evaluate(), one value per replica, no gradient):

- train_loss: (1/n) sum_mu 1/2 ||out_hat - y||_F^2, without the penalty;
- objective: L(S), with the penalty;
- val_error: (1/n_val) sum_mu ||out_hat - y||_F^2 on held-out samples noisy like training
  (for cross-validating lambda);
- test_error: E ||out_hat(X) - out0(X)||_F^2 on n_test fresh noiseless samples,
  out0 = A0 or A0 X;
- attention_error (seq2seq only): E ||A_hat(X) - A0(X)||_F^2 on the same test samples;
- estimation_error: ||S - S0||_F^2 / d = Q0 - 2m + q, with q = ||S||_F^2 / d and
  m = Tr(S S0) / d (also reported);
- rank_collapse: fraction of eigenvalues of S with |s_i| <= 1e-3 max_j |s_j|;
- e_approx, e_under, e_over, e_coupling, n_recovered: the decomposition of the estimation
  error along S0's eigenspaces (problems.tied_decomposition; the four terms add up to it).

seq2seq normalisation: train_loss, val_error and test_error are divided by d
(the label A0 X has T d entries of size O(1)); since the tokens are nearly
orthogonal with |x_a|^2 ~ d, ||(A_hat - A0) X||_F^2 / d = ||A_hat - A0||_F^2 (1 + O(d^-1/2)),
so these match the seq2lab numbers. The objective is the raw sum, as SPEC writes it.
"""

from __future__ import annotations

from typing import Callable, Iterator, Optional

import torch
from torch import Tensor, nn

from attnrepro.papers.tied_attention import task as AI
from attnrepro.papers.tied_attention.model import FactorizedTiedAttention, TiedAttention, draw_student
from attnrepro.theory.error_decomposition import decompose, relative_column_error

Backward = Optional[Callable[[Tensor], None]]

COLLAPSE_THRESHOLD = 1e-3  # an eigenvalue counts as collapsed when |s| <= this times the largest |s|
CPU_CHUNK_BYTES = 32_000_000
"""On CPU the factorized model takes the samples in chunks whose tokens and projections (R chunk T (d + p)
values) fill about this many bytes (at most train.chunk samples): the element-wise work of a chunk then
stays in cache from the forward to the backward pass, and its matrix products stay large. At d = 200,
p = 100, n = 8400, float32, 4 replicas, a step took 163 ms with 2.5 MB chunks, 106 ms with 16 or 32 MB and
116 ms in one chunk; with 1 replica 41, 31 and 27 ms. It changes the order of the sums (rounding), not the
maths. The direct model forms S once per chunk, so it is not re-chunked; on other devices train.chunk
alone applies."""
PAIR_CHUNK_BYTES = 1_000_000
"""The factorized model's gradient by hand (T = 2, seq2lab: FactorizedTiedAttention.pair_fit_gradient) takes
chunks whose tokens and projections fill about this many bytes per replica (T chunk (d + p) values), whatever
the number of replicas: each replica's operations are then the same alone or beside others, to the bit. One
thread, d = p = 200 (through W^T W), n = 6400, an evaluation took (chunk 156 / 312 / 625 / 1250 samples) 16.1 /
13.7 / 13.1 / 13.5 ms with 1 replica and 105 / 100 / 103 / 119 ms with 8 in float32; in float64 (78 / 156 / 312 /
625) 31.2 / 26.5 / 23.9 / 22.4 and 202 / 190 / 183 / 189 ms."""


class SampleSet(nn.Module):
    """Per replica: tokens X (R, n, T, d) and target attention A (R, n, T, T), as buffers.

    A = softmax_rows(beta0 (h(S0) + xi)), with the noise of its set (none for the test set).
    """

    def __init__(self, X: Tensor, A: Tensor):
        super().__init__()
        self.register_buffer("X", X)
        self.register_buffer("A", A)

    @classmethod
    def draw(cls, gens: list[torch.Generator], S0: Tensor, n: int, T: int, Delta: float, beta0: float,
             dtype=torch.float64) -> "SampleSet":
        """n samples per replica r from gens[r] and its target S0[r]."""
        draws = [AI.draw_samples(g, s0, n, T, Delta, beta0, dtype) for g, s0 in zip(gens, S0, strict=True)]
        return cls(torch.stack([x for x, _ in draws]), torch.stack([a for _, a in draws]))

    @property
    def n(self) -> int:
        return self.X.shape[1]

    def __getstate__(self):  # a copy (lit.compaction.take) makes its own pair tokens
        state = super().__getstate__()
        state.pop("_pairs", None)
        return state

    def release_caches(self) -> None:
        """Free the pair tokens (lit.replica: when training leaves this problem)."""
        self.__dict__.pop("_pairs", None)

    def pair_tokens(self) -> tuple[Tensor, Tensor]:
        """T = 2: v = x_1 - x_2 and u = x_1 + x_2 (R, n, d), made from X once and kept while X is the same tensor."""
        kept = self.__dict__.get("_pairs")
        if kept is None or kept[0] is not self.X:
            X = self.X
            kept = (X, (X[:, :, 0] - X[:, :, 1]).contiguous(), (X[:, :, 0] + X[:, :, 1]).contiguous())
            self.__dict__["_pairs"] = kept
        return kept[1], kept[2]

    def chunks(self, size: int) -> Iterator[tuple[Tensor, Tensor]]:
        """(X, A) over consecutive blocks of at most `size` samples."""
        for i in range(0, self.n, size):
            yield self.X[:, i:i + size], self.A[:, i:i + size]


def eigh_descending(S: Tensor) -> tuple[Tensor, Tensor]:
    """Eigenvalues (..., d) in decreasing order and the matching eigenvectors as columns (..., d, d)."""
    vals, vecs = torch.linalg.eigh(S)
    return vals.flip(-1), vecs.flip(-1)


class TiedAttentionProblem(nn.Module):
    """A tied-attention student trained on the attention-indexed model; see the module docstring."""

    gradient_by_hand = True  # pipelines/bench.py turns it off for the protocols before it

    def __init__(self, model: TiedAttention, S0: Tensor, train: SampleSet, val: SampleSet, test: SampleSet,
                 chunk: int, n_top: int):
        super().__init__()
        self.model, self.train_set, self.val_set, self.test_set = model, train, val, test
        self.chunk, self.n_top = chunk, n_top
        self.register_buffer("S0", S0.to(torch.float64))
        vals, vecs = torch.linalg.eigh(self.S0)
        order = torch.sort(vals.abs(), dim=-1, descending=True, stable=True).indices
        self.register_buffer("target_eigenvalues", vals.gather(-1, order))
        vecs = vecs.gather(-1, order[:, None, :].expand_as(vecs))
        self.register_buffer("target_vectors", vecs[..., :n_top])
        self.norm = float(model.d) if model.out == "seq2seq" else 1.0

    def chunk_size(self, data: SampleSet, per_replica: bool = False) -> int:
        """train.chunk, capped on CPU for the factorized model: a chunk's tokens and projections fill about
        CPU_CHUNK_BYTES over all replicas, or PAIR_CHUNK_BYTES per replica with per_replica (the gradient by hand)."""
        X = data.X
        if X.device.type != "cpu" or not isinstance(self.model, FactorizedTiedAttention):
            return self.chunk
        R, _, T, d = X.shape
        budget = PAIR_CHUNK_BYTES if per_replica else CPU_CHUNK_BYTES // R
        return max(1, min(self.chunk, budget // (T * (d + self.model.p) * X.element_size())))

    def _by_hand(self) -> bool:
        """Whether the training fit's gradient has a route without autograd: the factorized model, T = 2, seq2lab."""
        return (self.gradient_by_hand and isinstance(self.model, FactorizedTiedAttention)
                and self.model.out == "seq2lab" and self.train_set.X.shape[-2] == 2)

    def _fit_and_gradient(self) -> Tensor:
        """sum_mu 1/2 ||A_hat - y||_F^2 per replica by FactorizedTiedAttention.pair_fit_gradient (PAIR_CHUNK_BYTES),
        its gradient added to W.grad."""
        V, U = self.train_set.pair_tokens()
        W, chunk = self.model.W, self.chunk_size(self.train_set, per_replica=True)
        fit, grad = self.model.pair_fit_gradient(V, U, self.train_set.A, chunk)
        if W.grad is None:
            W.grad = grad
        else:
            W.grad += grad
        return fit

    def _sq_error(self, X: Tensor, A: Tensor, attention_only: bool = False) -> Tensor:
        """||out_hat(X) - out(A, X)||_F^2 per replica, summed over the samples of the block:
        out = A or A X; the seq2seq residual is (A_hat - A) X. attention_only: ||A_hat - A||_F^2."""
        D = self.model.attention(X) - A
        if self.model.out == "seq2seq" and not attention_only:
            D = D @ X
        return (D**2).sum((-3, -2, -1))

    def _sum(self, data: SampleSet, weight: float = 1.0, backward: Backward = None,
             attention_only: bool = False) -> Tensor:
        """weight * sum_mu ||out_hat - y||_F^2 per replica, `chunk` samples at a time; with `backward`,
        gradients accumulate chunk by chunk (memory O(chunk T d))."""
        total = torch.zeros(data.X.shape[0], dtype=data.X.dtype, device=data.X.device)
        for X, A in data.chunks(self.chunk_size(data)):
            with torch.set_grad_enabled(backward is not None):
                err = weight * self._sq_error(X, A, attention_only)
                if backward is not None:
                    backward(err.sum())
            total += err.detach()
        return total

    def accumulate(self, backward: Backward) -> Tensor:
        """The objective sum_mu 1/2 ||out_hat - y||_F^2 + penalty, (R,); gradients via backward (by hand where
        backward is Tensor.backward, one device, and _by_hand: the same gradient to rounding, without autograd's
        graph)."""
        if backward is torch.Tensor.backward and self._by_hand():
            fit = self._fit_and_gradient()
        else:
            fit = self._sum(self.train_set, 0.5, backward)
        with torch.set_grad_enabled(backward is not None):
            penalty = self.model.penalty()
            if backward is not None:
                backward(penalty.sum())
        return fit + penalty.detach()

    def mean_error(self, data: SampleSet) -> Tensor:
        """(1/n) sum_mu ||out_hat - y||_F^2 over a sample set, divided by d for seq2seq."""
        return self._sum(data) / (data.n * self.norm)

    @torch.no_grad()
    def evaluate(self) -> dict[str, Tensor]:
        fit = self._sum(self.train_set, 0.5)
        S = self.model.S().to(torch.float64)
        d = S.shape[-1]
        s = torch.linalg.eigvalsh(S).abs()
        dtype = fit.dtype
        out = {
            "train_loss": fit / (self.train_set.n * self.norm),
            "objective": fit + self.model.penalty(),
            "val_error": self.mean_error(self.val_set),
            "test_error": self.mean_error(self.test_set),
            "estimation_error": (((S - self.S0) ** 2).sum((-1, -2)) / d).to(dtype),
            "q": ((S**2).sum((-1, -2)) / d).to(dtype),
            "m": ((S * self.S0).sum((-1, -2)) / d).to(dtype),
            "rank_collapse": (s <= COLLAPSE_THRESHOLD * s.amax(-1, keepdim=True)).to(dtype).mean(-1),
        }
        terms = decompose(S, self.target_vectors, self.target_eigenvalues[:, : self.n_top])
        out.update({k: v.to(dtype) for k, v in terms.items()})
        if self.model.out == "seq2seq":
            out["attention_error"] = self._sum(self.test_set, attention_only=True) / self.test_set.n
        return out

    @torch.no_grad()
    def arrays(self) -> dict[str, Tensor]:
        """Spectra and overlaps, each (R, .), for u_i the eigenvector of S0's eigenvalue lambda_i(S0)
        of i-th largest modulus, i < n_top (the rank of S0):

        - eigenvalues: S's eigenvalues, decreasing (R, d);
        - target_eigenvalues: S0's, by decreasing modulus (decreasing for the PSD targets) (R, d);
        - overlap_quadratic: u_i^T S u_i / lambda_i(S0) (1 when S acts on u_i as S0 does);
        - overlap_subspace: |P u_i|^2, P the projector onto the span of S's eigenvectors with
          eigenvalue > 1e-3 max_j |s_j| (the part of S that did not collapse); 1 = u_i fully inside;
        - column_error: ||(S - S0) u_i|| / |lambda_i(S0)| (u_i counts as recovered when <= 1/2,
          see problems.tied_decomposition).
        """
        S = self.model.S().to(torch.float64)
        vals, vecs = eigh_descending(S)
        U = self.target_vectors
        quad = torch.einsum("rdi,rde,rei->ri", U, S, U) / self.target_eigenvalues[:, : self.n_top]
        keep = (vals > COLLAPSE_THRESHOLD * vals.abs().amax(-1, keepdim=True)).to(vals.dtype)
        proj = (vecs.transpose(-1, -2) @ U) ** 2  # (R, d, n_top): (v_j . u_i)^2
        return {
            "eigenvalues": vals,
            "target_eigenvalues": self.target_eigenvalues,
            "overlap_quadratic": quad,
            "overlap_subspace": (keep[..., None] * proj).sum(-2),
            "column_error": relative_column_error(S, U, self.target_eigenvalues[:, : self.n_top]),
        }


def target_rank(task) -> int:
    """The rank of S0: min(p0, d) (Wishart), d (power law), the number of nonzero eigenvalues (explicit)."""
    if task.target.value == "wishart":
        return min(task.p0(), task.d)
    if task.target.value == "power_law":
        return task.d
    return sum(1 for v in task.eigenvalues if v != 0)


def build(task, model_cfg, train, gens) -> tuple[nn.Module, dict]:
    """The problem for (task, model, train) configs, and the derived quantities to record.

    Draw order per replica (its own generator): S0, the student's init, the test set,
    the validation set, the training set; so a sweep over alpha keeps the target, the
    init and the held-out sets of each seed.
    """
    if model_cfg.family != "tied_attention":
        raise ValueError(f"model.family {model_cfg.family!r} does not fit task {task.name!r}")
    dtype = getattr(torch, train.dtype.value)
    d, T, n, p = task.d, task.T, task.n(), model_cfg.p(task.d)
    S0 = torch.stack([AI.draw_target(g, d, task.target.value, task.kappa0, task.gamma, task.eigenvalues)
                      for g in gens])
    model = draw_student(model_cfg.param.value, gens, d, p, model_cfg.beta, model_cfg.lam, task.output.value,
                         model_cfg.init_scale, dtype)
    test = SampleSet.draw(gens, S0, task.n_test, T, 0.0, task.beta0, dtype)
    val = SampleSet.draw(gens, S0, task.n_val, T, task.Delta, task.beta0, dtype)
    train_set = SampleSet.draw(gens, S0, n, T, task.Delta, task.beta0, dtype)
    problem = TiedAttentionProblem(model, S0, train_set, val, test, train.chunk, target_rank(task))
    n_params = p * d if model_cfg.param.value == "factorized" else d * (d + 1) // 2
    derived = {"lr": train.lr, "n": n, "p": p, "p0": target_rank(task), "n_params": n_params,
               "Q0": ((S0**2).sum((-1, -2)) / d).tolist()}
    return problem, derived
