"""Schemas of paper B: the attention-indexed task and the tied single-head attention student.

Scalings (SPEC, paper B): n = round(alpha d^2) samples, student width p = round(kappa d),
Wishart target rank p0 = round(kappa0 d).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any, List, Optional


class Target(str, Enum):
    """The target S0: Wishart W0 W0^T / sqrt(p0 d); power law O diag(sqrt(d) i^-gamma) O^T;
    explicit eigenvalues with Haar eigenvectors."""

    wishart = "wishart"
    power_law = "power_law"
    explicit = "explicit"


class Output(str, Enum):
    """seq2lab: the label is the attention matrix A0 (T x T); seq2seq: A0 X (T x d)."""

    seq2lab = "seq2lab"
    seq2seq = "seq2seq"


class Param(str, Enum):
    """factorized: S = W^T W / sqrt(p d), W in R^{p x d}; direct: S symmetric, trained entry-wise."""

    factorized = "factorized"
    direct = "direct"


@dataclass
class AttentionIndexedTask:
    """Attention-indexed model: T tokens x_a ~ N(0, I_d), labels from A0 = softmax_rows(beta0 (h(S0) + xi)).

    ``eigenvalues`` (target=explicit): at most d values, the eigenvalues of S0, padded
    with zeros up to d. Training and validation labels carry the noise xi
    (Var xi_aa = Delta, Var xi_ab = Delta/2); the n_test test samples are noiseless.
    """

    name: str = "attention_indexed"
    d: int = 100
    T: int = 2
    alpha: float = 0.2
    target: Target = Target.wishart
    kappa0: float = 0.5
    gamma: float = 1.0
    eigenvalues: Optional[List[float]] = None
    Delta: float = 0.0
    beta0: float = 1.0
    output: Output = Output.seq2lab
    n_val: int = 1000
    n_test: int = 1000

    def n(self) -> int:
        """Training samples n = round(alpha d^2)."""
        return round(self.alpha * self.d**2)

    def p0(self) -> int:
        """Wishart rank p0 = round(kappa0 d)."""
        return round(self.kappa0 * self.d)


@dataclass
class TiedAttentionModel:
    """Tied single-head attention A_hat = softmax_rows(beta h(S)), value = identity.

    ``lam`` is the weight decay lambda (``lambda`` is a Python keyword): the penalty is
    (lambda/2)||W||_F^2 (factorized) or (lambda/2) sqrt(p d) ||S||_F^2 (direct).
    ``init_scale``: the trained entries (W, or sqrt(p d) S for direct) start i.i.d.
    N(0, init_scale^2).
    """

    family: str = "tied_attention"  # the model family (tied_factorized, tied_direct are options of it)
    param: Param = Param.factorized
    kappa: float = 0.5
    beta: float = 1.0
    lam: float = 0.0
    init_scale: float = 1.0

    def p(self, d: int) -> int:
        """Student width p = round(kappa d)."""
        return round(self.kappa * d)


@dataclass
class ExactFitModel:
    """The exact-fit test (problems.tied_exact_fit): is there a PSD S, of any rank, whose logit
    differences h_aa(S) - h_12(S) equal the labels' (the lambda = 0 question of paper B's
    interpolation threshold)? Solved (train=solved) as PSD least squares by accelerated projected gradient
    (FISTA with gradient restart, step 1/L, projection onto the PSD cone) in float64;
    ``fit_tol``: an exact fit is a residual per sample 1/2 |A(S) - t|^2 / n at most this; ``gap_tol``:
    the relative duality gap at which a certified minimum with no fit is accepted; ``max_iter``: the
    iteration cap (a seed with neither a fit nor a certificate there is "undecided"); ``log_every``:
    iterations between progress lines."""

    family: str = "psd_exact_fit"
    fit_tol: float = 1e-12
    gap_tol: float = 1e-6
    max_iter: int = 5000
    log_every: int = 500


SCHEMAS = {
    "task": {"attention_indexed_schema": AttentionIndexedTask},
    "model": {"tied_attention_schema": TiedAttentionModel, "exact_fit_schema": ExactFitModel},
}


def _finite(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def checks(cfg: Any, need) -> None:
    """Range checks of paper B's sections; need(cond, field, message)."""
    task, model = cfg.task, cfg.model
    if isinstance(task, AttentionIndexedTask):
        need(isinstance(model, (TiedAttentionModel, ExactFitModel)), "model",
             "task=attention_indexed needs a tied_* model or model=psd_exact_fit")
        need(task.d >= 2, "task.d", f"must be >= 2, got {task.d}")
        need(task.T >= 2, "task.T", f"must be >= 2 tokens, got {task.T}")
        need(_finite(task.alpha) and task.alpha > 0, "task.alpha", f"must be > 0, got {task.alpha}")
        need(task.n() >= 1, "task.alpha", f"n = round(alpha d^2) = {task.n()}: no training sample")
        need(_finite(task.kappa0) and task.kappa0 > 0, "task.kappa0", f"must be > 0, got {task.kappa0}")
        if task.target == Target.wishart:
            need(1 <= task.p0(), "task.kappa0", f"p0 = round(kappa0 d) = {task.p0()}: must be >= 1")
        need(_finite(task.gamma) and task.gamma > 0.5, "task.gamma",
             f"must be > 1/2 (else Var h diverges with d), got {task.gamma}")
        if task.target == Target.explicit:
            need(task.eigenvalues is not None, "task.eigenvalues", "target=explicit needs eigenvalues")
        if task.eigenvalues is not None:
            ev = list(task.eigenvalues)
            need(len(ev) <= task.d, "task.eigenvalues", f"at most d = {task.d} values, got {len(ev)}")
            need(all(_finite(v) for v in ev), "task.eigenvalues", "must be finite")
            need(task.target == Target.explicit, "task.eigenvalues", "only read with target=explicit")
        need(_finite(task.Delta) and task.Delta >= 0, "task.Delta",
             f"noise variance must be >= 0, got {task.Delta}")
        need(_finite(task.beta0) and task.beta0 > 0, "task.beta0", f"must be > 0, got {task.beta0}")
        need(task.n_val >= 1, "task.n_val", f"must be >= 1, got {task.n_val}")
        need(task.n_test >= 1, "task.n_test", f"must be >= 1, got {task.n_test}")
    if isinstance(model, TiedAttentionModel):
        need(isinstance(task, AttentionIndexedTask), "model", "tied_attention needs task=attention_indexed")
        need(_finite(model.kappa) and model.kappa > 0, "model.kappa", f"must be > 0, got {model.kappa}")
        if isinstance(task, AttentionIndexedTask):
            p = model.p(task.d)
            need(p >= 1, "model.kappa", f"p = round(kappa d) = {p}: must be >= 1")
        need(_finite(model.beta) and model.beta > 0, "model.beta", f"must be > 0, got {model.beta}")
        need(_finite(model.lam) and model.lam >= 0, "model.lam",
             f"weight decay lambda must be >= 0, got {model.lam}")
        need(_finite(model.init_scale) and model.init_scale > 0, "model.init_scale",
             f"must be > 0, got {model.init_scale}")
    if isinstance(model, ExactFitModel):
        need(isinstance(task, AttentionIndexedTask) and task.T == 2, "model",
             "model=psd_exact_fit needs task=attention_indexed with T = 2")
        need(_finite(model.fit_tol) and model.fit_tol > 0, "model.fit_tol", f"must be > 0, got {model.fit_tol}")
        need(_finite(model.gap_tol) and model.gap_tol > 0, "model.gap_tol", f"must be > 0, got {model.gap_tol}")
        need(model.max_iter >= 1, "model.max_iter", f"must be >= 1, got {model.max_iter}")
        need(model.log_every >= 1, "model.log_every", f"must be >= 1, got {model.log_every}")


RESOLVERS: dict = {}
