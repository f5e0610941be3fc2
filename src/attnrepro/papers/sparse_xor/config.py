"""Schemas of paper A: the sparse-XOR task, the two-head attention model, the FFNN baseline."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any, Optional


class Attention(str, Enum):
    """Attention map phi applied to the scores s = V theta."""

    softmax = "softmax"
    linear = "linear"
    erf = "erf"


class Init(str, Enum):
    """theta~(0) = -theta(0) (antisymmetric), or drawn independently."""

    antisymmetric = "antisymmetric"
    independent = "independent"


@dataclass
class SparseXorTask:
    """x ~ Unif{+-1}^d, y = -x_p x_q, labels flipped with probability ``noise``.

    ``n`` = None trains on the exact population loss; an integer trains on n
    i.i.d. samples (drawn from the job seed) and reports the population loss.
    """

    name: str = "sparse_xor"
    d: int = 64
    noise: float = 0.0
    n: Optional[int] = None
    n_test: int = 4096


@dataclass
class XorAttentionModel:
    """Two-head attention f(x) = -(phi(V theta) . x)(phi(V theta~) . x), V frozen on S^{m-1}.

    ``m`` = None sets m = ceil(m_c * log2(d)^2), the polylog width of the paper.
    """

    name: str = "xor_attention"
    attention: Attention = Attention.softmax
    m: Optional[int] = None
    m_c: float = 1.0
    init: Init = Init.antisymmetric

    def width(self, d: int) -> int:
        return self.m if self.m is not None else max(1, math.ceil(self.m_c * math.log2(d) ** 2))


@dataclass
class FfnnModel:
    """Two-layer ReLU net f(x) = sum_j a_j ReLU(w_j . x + b_j) + c, width k: k(d+2)+1 parameters."""

    name: str = "ffnn"
    k: int = 8


SCHEMAS = {
    "task": {"sparse_xor_schema": SparseXorTask},
    "model": {"xor_attention_schema": XorAttentionModel, "ffnn_schema": FfnnModel},
}


def checks(cfg: Any, need) -> None:
    """Range checks of paper A's sections; need(cond, field, message)."""
    task, model = cfg.task, cfg.model
    if isinstance(task, SparseXorTask):
        need(task.d >= 2, "task.d", f"must be >= 2 (two support positions), got {task.d}")
        need(0.0 <= task.noise < 0.5, "task.noise", f"must be in [0, 0.5), got {task.noise}")
        need(task.n is None or task.n >= 1, "task.n", f"must be >= 1 or null, got {task.n}")
        need(task.n_test >= 1, "task.n_test", f"must be >= 1, got {task.n_test}")
    if isinstance(model, XorAttentionModel):
        need(isinstance(task, SparseXorTask), "model", "xor_attention needs task=sparse_xor")
        need(model.m is None or model.m >= 1, "model.m", f"must be >= 1 or null, got {model.m}")
        need(model.m_c > 0, "model.m_c", f"must be > 0, got {model.m_c}")
    if isinstance(model, FfnnModel):
        need(model.k >= 1, "model.k", f"must be >= 1, got {model.k}")
        need(isinstance(task, SparseXorTask) and task.n is not None, "task.n",
             "the FFNN baseline trains on samples: set task.n")


def d_log2d(d: int, c: float = 1.0) -> int:
    """ceil(c d log2 d): a sample size growing like d polylog(d), as `${attnrepro.d_log2d:${task.d},c}`."""
    return math.ceil(float(c) * int(d) * math.log2(int(d)))


RESOLVERS = {"attnrepro.d_log2d": d_log2d}
