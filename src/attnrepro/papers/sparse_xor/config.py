"""Schemas of paper A: the sparse-XOR task, the two-head attention model, the FFNN baseline, and its
training settings (the shared TrainConfig plus save_attention)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any, Optional

from attnrepro.config.train import TrainConfig


class Attention(str, Enum):
    """Attention map phi applied to the scores s = V theta."""

    softmax = "softmax"
    linear = "linear"
    erf = "erf"


class Init(str, Enum):
    """theta~(0) = -theta(0) (antisymmetric), or drawn independently."""

    antisymmetric = "antisymmetric"
    independent = "independent"


class Form(str, Enum):
    """How the two-head model is written: the paper's simplified form (attention.TwoHeadXorAttention,
    trainable theta, theta~), or the standard one-layer two-head transformer with a CLS token and a
    structural mask (transformer.TwoHeadXorTransformer, trainable W_Q^1, W_Q^2 whose CLS columns
    are theta, theta~). The two compute the same function and gradients (tests/test_standard_form.py)."""

    simplified = "simplified"
    standard = "standard"


@dataclass
class SparseXorTask:
    """x ~ Unif{+-1}^d, y = -x_p x_q, labels flipped with probability ``noise``.

    ``n`` = None trains on the exact population loss; an integer trains on n
    i.i.d. samples (drawn from the job seed) and reports the population loss and the
    0/1 error on ``n_test`` fresh samples. ``n_per_d`` sets n = ceil(n_per_d d) instead
    (a sample grid that scales with d).
    """

    name: str = "sparse_xor"
    d: int = 64
    noise: float = 0.0
    n: Optional[int] = None
    n_per_d: Optional[float] = None
    n_test: int = 4096

    def samples(self) -> Optional[int]:
        """The number of training samples: n, or ceil(n_per_d d); None for the population loss."""
        return math.ceil(self.n_per_d * self.d) if self.n_per_d is not None else self.n


@dataclass
class XorAttentionModel:
    """Two-head attention f(x) = -(phi(V theta) . x)(phi(V theta~) . x), V frozen on S^{m-1}.

    ``m`` = None sets m = ceil(m_c * log2(d)^2), the polylog width of the paper. ``form``: the
    simplified model or the equivalent standard CLS-token transformer (see Form).
    """

    family: str = "xor_attention"  # the model family build() dispatches on (softmax, linear, erf are options of it)
    attention: Attention = Attention.softmax
    m: Optional[int] = None
    m_c: float = 1.0
    init: Init = Init.antisymmetric
    form: Form = Form.simplified

    def width(self, d: int) -> int:
        return self.m if self.m is not None else max(1, math.ceil(self.m_c * math.log2(d) ** 2))


class KInit(str, Enum):
    """Initial queries of the k heads (kheads.draw_queries; unit norm): independent draws, orthonormal,
    the vertices of a regular simplex centred at 0 (sum_h theta_h = 0; for k = 2 theta~ = -theta), or
    antisymmetric pairs (theta_2 = -theta_1, theta_4 = -theta_3, the pairs orthonormal)."""

    independent = "independent"
    orthogonal = "orthogonal"
    simplex = "simplex"
    antisymmetric_pairs = "antisymmetric_pairs"


@dataclass
class KParityTask:
    """Beyond the paper: k-sparse parity, x ~ Unif{+-1}^d, y = -prod_{i in S} x_i, |S| = k,
    labels flipped with probability ``noise``; trained on the exact population loss."""

    name: str = "k_parity"
    d: int = 32
    k: int = 3
    noise: float = 0.0


@dataclass
class KHeadAttentionModel:
    """k heads f(x) = -prod_h (phi(V theta_h) . x), V frozen on S^{m-1}, k = task.k; m as in
    XorAttentionModel. ``norm_c`` = None draws unit-norm queries (paper A's init); a number
    rescales them to |theta_h(0)| = norm_c sqrt(m), initial scores of order norm_c."""

    family: str = "k_head_attention"
    attention: Attention = Attention.softmax
    m: Optional[int] = None
    m_c: float = 1.0
    init: KInit = KInit.simplex
    norm_c: Optional[float] = None

    def width(self, d: int) -> int:
        return self.m if self.m is not None else max(1, math.ceil(self.m_c * math.log2(d) ** 2))


@dataclass
class FfnnModel:
    """Two-layer ReLU net f(x) = sum_j a_j ReLU(w_j . x + b_j) + c, width k: k(d+2)+1 parameters."""

    family: str = "ffnn"
    k: int = 8


@dataclass
class SparseXorTrainConfig(TrainConfig):
    """Paper A's training (every conf/train option its experiments use): the shared TrainConfig, with SGD's
    step eta = lr * the attention's step unit (attention.step_unit: d^2 sqrt(m) for softmax, m^2/d^2 for
    linear/erf; kheads.step_unit_k for k-sparse parity; lr is SPEC's eta_0), and ``save_attention``: keep
    each head's attention on the d positions at the start and at the end (the record's arrays; figure
    xor_one_step_attention)."""

    save_attention: bool = False


SCHEMAS = {
    "train": {"sparse_xor_train_schema": SparseXorTrainConfig},
    "task": {"sparse_xor_schema": SparseXorTask, "k_parity_schema": KParityTask},
    "model": {"xor_attention_schema": XorAttentionModel, "ffnn_schema": FfnnModel,
              "k_head_attention_schema": KHeadAttentionModel},
}


def checks(cfg: Any, need) -> None:
    """Range checks of paper A's sections; need(cond, field, message)."""
    task, model, train = cfg.task, cfg.model, cfg.train
    if isinstance(train, SparseXorTrainConfig):
        need(train.name != "one_step" or train.steps == 1, "train.steps",
             f"train=one_step is paper A's one gradient step, got steps={train.steps} (more steps: train=gd "
             "train.steps=N, a fixed-step protocol)")
    if isinstance(task, SparseXorTask):
        need(task.d >= 2, "task.d", f"must be >= 2 (two support positions), got {task.d}")
        need(0.0 <= task.noise < 0.5, "task.noise", f"must be in [0, 0.5), got {task.noise}")
        need(task.n is None or task.n >= 1, "task.n", f"must be >= 1 or null, got {task.n}")
        need(task.n_per_d is None or task.n_per_d > 0, "task.n_per_d", f"must be > 0 or null, got {task.n_per_d}")
        need(task.n is None or task.n_per_d is None, "task.n_per_d", "set task.n or task.n_per_d, not both")
        need(task.n_test >= 1, "task.n_test", f"must be >= 1, got {task.n_test}")
    if isinstance(model, XorAttentionModel):
        need(isinstance(task, SparseXorTask), "model", "xor_attention needs task=sparse_xor")
        need(model.m is None or model.m >= 1, "model.m", f"must be >= 1 or null, got {model.m}")
        need(model.m_c > 0, "model.m_c", f"must be > 0, got {model.m_c}")
    if isinstance(task, KParityTask):
        need(2 <= task.k <= 4, "task.k", f"must be 2, 3 or 4 (the exact loss uses moments up to order 8), got {task.k}")
        need(task.d >= task.k, "task.d", f"must be >= task.k = {task.k}, got {task.d}")
        need(0.0 <= task.noise < 0.5, "task.noise", f"must be in [0, 0.5), got {task.noise}")
    if isinstance(model, KHeadAttentionModel):
        need(isinstance(task, KParityTask), "model", "k_head_attention needs task=k_parity")
        need(model.m is None or model.m >= 1, "model.m", f"must be >= 1 or null, got {model.m}")
        need(model.m_c > 0, "model.m_c", f"must be > 0, got {model.m_c}")
        need(model.norm_c is None or model.norm_c > 0, "model.norm_c", f"must be > 0 or null, got {model.norm_c}")
    if isinstance(model, FfnnModel):
        need(model.k >= 1, "model.k", f"must be >= 1, got {model.k}")
        need(isinstance(task, SparseXorTask) and task.samples() is not None, "task.n",
             "the FFNN baseline trains on samples: set task.n")


def d_log2d(d: int, c: float = 1.0) -> int:
    """ceil(c d log2 d): a sample size growing like d polylog(d), as `${attnrepro.d_log2d:${task.d},c}`."""
    return math.ceil(float(c) * int(d) * math.log2(int(d)))


RESOLVERS = {"attnrepro.d_log2d": d_log2d}
