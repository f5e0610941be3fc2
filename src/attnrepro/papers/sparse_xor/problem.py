"""Sparse XOR problems: the two-head attention model and the FFNN baseline."""

from __future__ import annotations

from typing import Callable, Iterator, Optional

import torch
from torch import Tensor, nn

from attnrepro.papers.sparse_xor import task as X
from attnrepro.papers.sparse_xor.attention import TwoHeadXorAttention
from attnrepro.papers.sparse_xor.ffnn import ReluFFNN

Backward = Optional[Callable[[Tensor], None]]

# A chunk of samples holds at most this many entries (R * chunk * d): 2 GiB in float64. The paper profile's
# one-step jobs have R = 100 seeds at d = 1024, where train.chunk = 8192 samples alone would be 6.7 GB per
# chunk (and its autograd copies); every quick-profile job stays below it, so its chunks are train.chunk.
CHUNK_ENTRIES = 2**28
# x is kept in the training dtype up to this many entries (R * n * d; 128 MiB in float64), else as int8. Fresh
# memory is dear: the quick profile's d = 256, n = 32768 one-step job (40 replicas) spent 7.7 s of kernel time
# on its 2.7 GB float64 copy of x (945k page faults) against 7.6 s of computing; one reused chunk buffer
# (671 MB there) gives the same numbers.
STORED_ENTRIES = 2**24


class SampleSet(nn.Module):
    """n i.i.d. (x, y) per replica: x (R, n, d), y (R, n) (buffers, so they follow the device).

    Stored in the training dtype up to STORED_ENTRIES entries, else as int8 and converted chunk by chunk
    into one buffer that every pass reuses; a chunk is at most train.chunk samples and CHUNK_ENTRIES
    entries. x is laid out position-major (a (R, n, d)
    view of a contiguous (R, d, n) tensor), so that the two heads' dot products, (R, 2, d)(R, d, n),
    and their gradient run as wide matrix products: on CPU (MKL) the (R, n, d)(R, d, 2) products
    took about 5x longer at d = 256, n = 4096, 24 replicas.
    """

    def __init__(self, x: Tensor, y: Tensor):
        super().__init__()
        self.register_buffer("x", x)
        self.register_buffer("y", y)

    @classmethod
    def draw(cls, gens, n: int, d: int, supports, noise: float, dtype) -> "SampleSet":
        """Each replica's inputs and labels from its generator, written straight into one position-major
        int8 buffer (peak memory: the buffer and one replica's draw)."""
        x = torch.empty(len(gens), d, n, dtype=torch.int8)
        y = torch.empty(len(gens), n, dtype=torch.int8)
        for r, (g, (p, q)) in enumerate(zip(gens, supports)):
            xr = X.draw_inputs(g, n, d)
            y[r] = X.labels(xr, p, q, noise, g)
            x[r] = xr.T
        x = x.transpose(1, 2)
        return cls(x.to(dtype), y.to(dtype)) if x.numel() <= STORED_ENTRIES else cls(x, y)

    def _chunk(self, chunk: int) -> int:
        """Samples per chunk: at most `chunk`, and at most CHUNK_ENTRIES entries (R * chunk * d)."""
        return max(1, min(chunk, CHUNK_ENTRIES // (self.x.shape[0] * self.x.shape[2])))

    def __getstate__(self):  # a copy (lit.compaction.take) makes its own chunk buffer
        state = super().__getstate__()
        state.pop("_buffer", None)
        return state

    def release_caches(self) -> None:
        """Free the chunk buffer (lit.replica: when training leaves this problem)."""
        self.__dict__.pop("_buffer", None)

    def _inputs(self, i: int, chunk: int, dtype) -> Tensor:
        """x of samples i to i + chunk in `dtype`: a view where x is stored in it, else converted into the
        chunk buffer (kept between passes; position-major, as x)."""
        x = self.x[:, i:i + chunk]
        if x.dtype == dtype:
            return x
        buf = self.__dict__.get("_buffer")
        if (buf is None or buf.dtype != dtype or buf.device != x.device or buf.shape[0] != x.shape[0]
                or buf.shape[1] < x.shape[1]):
            R, _, d = x.shape
            buf = torch.empty(R, d, x.shape[1], dtype=dtype, device=x.device).transpose(1, 2)
            self.__dict__["_buffer"] = buf
        return buf[:, :x.shape[1]].copy_(x)

    def _chunks(self, chunk: int, dtype) -> Iterator[tuple[Tensor, Tensor]]:
        """(x, y) of consecutive chunks of at most `chunk` samples (_chunk) in `dtype`; x is _inputs', valid until
        the next chunk."""
        n, chunk = self.x.shape[1], self._chunk(chunk)
        for i in range(0, n, chunk):
            yield self._inputs(i, chunk, dtype), self.y[:, i:i + chunk].to(dtype)

    def mse(self, f: Callable[[Tensor], Tensor], chunk: int, backward: Backward, dtype) -> Tensor:
        """(1/n) sum_mu 1/2 (f(x_mu) - y_mu)^2 per replica, evaluated `chunk` samples at a time.
        With `backward`, gradients are accumulated chunk by chunk (memory O(chunk d))."""
        n = self.x.shape[1]
        total = torch.zeros(self.x.shape[0], dtype=dtype, device=self.x.device)
        for xc, yc in self._chunks(chunk, dtype):
            with torch.set_grad_enabled(backward is not None):
                loss = 0.5 * ((f(xc) - yc) ** 2).sum(-1) / n
                if backward is not None:
                    backward(loss.sum())
            total += loss.detach()
        return total

    @torch.no_grad()
    def mse_and_gradient(self, model: TwoHeadXorAttention, chunk: int, dtype) -> Tensor:
        """mse with backward=Tensor.backward for softmax attention, by the model's own gradient
        (TwoHeadXorAttention.mse_gradient: the same numbers without autograd's graph), accumulated into
        theta.grad and theta~.grad chunk by chunk as autograd accumulates them."""
        n = self.x.shape[1]
        total = torch.zeros(self.x.shape[0], dtype=dtype, device=self.x.device)
        for xc, yc in self._chunks(chunk, dtype):
            loss, *grads = model.mse_gradient(xc, yc, n)
            for p, g in zip((model.theta, model.theta_tilde), grads, strict=True):
                if p.grad is None:
                    p.grad = g
                else:
                    p.grad += g
            total += loss
        return total

    @torch.no_grad()
    def zero_one_error(self, f: Callable[[Tensor], Tensor], chunk: int, dtype) -> Tensor:
        """(1/n) sum_mu 1[sign f(x_mu) != y_mu] per replica (f = 0 counts as an error), `chunk` at a time."""
        wrong = torch.zeros(self.x.shape[0], dtype=dtype, device=self.x.device)
        for xc, yc in self._chunks(chunk, dtype):
            wrong += (torch.sign(f(xc)) != yc).to(dtype).sum(-1)
        return wrong / self.x.shape[1]


def attention_share(gamma: Tensor, i: Tensor) -> Tensor:
    """|gamma_i| / sum_j |gamma_j|: a head's share of attention on position i (gamma_i for softmax)."""
    return X.at(gamma.abs(), i) / gamma.abs().sum(-1).clamp_min(1e-300)


class XorAttentionProblem(nn.Module):
    """Two-head attention on sparse XOR; population loss exact, or empirical on n samples (then
    also the 0/1 error on fresh test samples)."""

    def __init__(self, model: TwoHeadXorAttention, p: Tensor, q: Tensor, noise: float,
                 samples: Optional[SampleSet], chunk: int, save_attention: bool,
                 test: Optional[SampleSet] = None):
        super().__init__()
        self.model, self.samples, self.test_set, self.noise, self.chunk = model, samples, test, noise, chunk
        self.register_buffer("p", p)
        self.register_buffer("q", q)
        self.save_attention = save_attention
        self._init_heads = [h.detach().clone() for h in model.heads()] if save_attention else None

    def population_loss(self) -> Tensor:
        gamma, gamma_t = self.model.heads()
        return X.population_loss(gamma, gamma_t, self.p, self.q, self.noise)

    def accumulate(self, backward: Backward) -> Tensor:
        if self.samples is None:
            with torch.set_grad_enabled(backward is not None):
                loss = self.population_loss()
                if backward is not None:
                    backward(loss.sum())
            return loss.detach()
        dtype = next(self.model.parameters()).dtype
        if backward is torch.Tensor.backward and type(self.model) is TwoHeadXorAttention and \
                self.model.attention == "softmax":  # its gradient by hand (one device: no gradient to reduce)
            return self.samples.mse_and_gradient(self.model, self.chunk, dtype)
        return self.samples.mse(self.model, self.chunk, backward, dtype)

    @torch.no_grad()
    def evaluate(self) -> dict[str, Tensor]:
        gamma, gamma_t = self.model.heads()
        out = {
            "loss": X.population_loss(gamma, gamma_t, self.p, self.q, self.noise),
            "xor_correlation": X.xor_correlation(gamma, gamma_t, self.p, self.q),
            "mass_pq": X.at(gamma, self.p) + X.at(gamma, self.q),
            "mass_pq_tilde": X.at(gamma_t, self.p) + X.at(gamma_t, self.q),
            "share_p": attention_share(gamma, self.p),
            "share_q": attention_share(gamma, self.q),
            "share_tilde_p": attention_share(gamma_t, self.p),
            "share_tilde_q": attention_share(gamma_t, self.q),
        }
        if self.samples is not None:
            out["train_loss"] = self.accumulate(None)
        if self.test_set is not None:
            out["test_error"] = self.test_set.zero_one_error(self.model, self.chunk, gamma.dtype)
        return out

    @torch.no_grad()
    def arrays(self) -> dict[str, Tensor]:
        if not self.save_attention:
            return {}
        gamma, gamma_t = self.model.heads()
        return {"gamma_init": self._init_heads[0], "gamma_tilde_init": self._init_heads[1],
                "gamma": gamma, "gamma_tilde": gamma_t}


class XorFfnnProblem(nn.Module):
    """The ReLU FFNN baseline trained on n samples, tested on fresh ones."""

    def __init__(self, model: ReluFFNN, train: SampleSet, test: SampleSet, chunk: int):
        super().__init__()
        self.model, self.train_set, self.test_set, self.chunk = model, train, test, chunk

    def accumulate(self, backward: Backward) -> Tensor:
        return self.train_set.mse(self.model, self.chunk, backward, self.model.W.dtype)

    @torch.no_grad()
    def evaluate(self) -> dict[str, Tensor]:
        dtype = self.model.W.dtype
        x, y = self.test_set._inputs(0, self.test_set.x.shape[1], dtype), self.test_set.y.to(dtype)
        f = self.model(x)
        return {
            "test_mse": 0.5 * ((f - y) ** 2).mean(-1),
            "test_error": (torch.sign(f) != y).to(dtype).mean(-1),
            "train_loss": self.accumulate(None),
        }

    def arrays(self) -> dict[str, Tensor]:
        return {}


def build(task, model_cfg, train, gens) -> tuple[nn.Module, dict]:
    """The problem for (task, model, train) configs, and the derived quantities to record."""
    dtype = getattr(torch, train.dtype.value)
    supports = [X.draw_support(g, task.d) for g in gens]
    p = torch.tensor([s[0] for s in supports])
    q = torch.tensor([s[1] for s in supports])
    if model_cfg.family == "xor_attention":
        from attnrepro.papers.sparse_xor.attention import step_unit

        m = model_cfg.width(task.d)
        cls = TwoHeadXorAttention
        if getattr(model_cfg, "form", "simplified") == "standard":  # Form is a str Enum
            from attnrepro.papers.sparse_xor.transformer import TwoHeadXorTransformer as cls
        model = cls.draw(gens, task.d, m, model_cfg.attention.value, model_cfg.init.value, dtype)
        n = task.samples()
        samples = test = None
        if n is not None:
            samples = SampleSet.draw(gens, n, task.d, supports, task.noise, dtype)
            test = SampleSet.draw(gens, task.n_test, task.d, supports, 0.0, dtype)
        problem = XorAttentionProblem(model, p, q, task.noise, samples, train.chunk, train.save_attention, test)
        # SGD steps in the model's unit (d^2 sqrt(m) for softmax); Adam is scale-free: eta = lr
        unit = step_unit(model_cfg.attention.value, task.d, m) if train.optimizer.value == "sgd" else 1.0
        return problem, {"m": m, "n": n, "lr": train.lr * unit, "n_params": 2 * m,
                         "p": p.tolist(), "q": q.tolist()}
    if model_cfg.family == "ffnn":
        from attnrepro.papers.sparse_xor.ffnn import n_params

        model = ReluFFNN.draw(gens, task.d, model_cfg.k, dtype)
        train_set = SampleSet.draw(gens, task.samples(), task.d, supports, task.noise, dtype)
        test_set = SampleSet.draw(gens, task.n_test, task.d, supports, 0.0, dtype)
        problem = XorFfnnProblem(model, train_set, test_set, train.chunk)
        return problem, {"lr": train.lr, "n_params": n_params(task.d, model_cfg.k),
                         "p": p.tolist(), "q": q.tolist()}
    raise ValueError(f"model.family {model_cfg.family!r} does not fit task {task.name!r}")
