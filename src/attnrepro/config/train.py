"""The shared training schemas: TrainConfig (full-batch training by one of the trainer's optimizers) and
SolvedConfig (``train=solved``: a model its paper solves). A paper extends TrainConfig with fields of its
own (papers.sparse_xor.config.SparseXorTrainConfig). Imports nothing of attnrepro, so that a paper's config
module can import it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Optional

from omegaconf import MISSING


class Optimizer(str, Enum):
    sgd = "sgd"
    adam = "adam"
    lbfgs = "lbfgs"


class DType(str, Enum):
    float32 = "float32"
    float64 = "float64"


@dataclass
class TrainConfig:
    """Full-batch training: ``steps`` steps of ``optimizer``.

    ``lr``: the learning rate in the step unit the problem defines. The optimiser's learning rate is
    derived["lr"] of the problem's build(), lr times that unit: 1 for Adam and L-BFGS (absolute units), and
    for SGD the model's natural scale where the paper defines one (paper A: d^2 sqrt(m) for softmax
    attention, so that lr is SPEC's eta_0 in eta = eta_0 d^2 sqrt(m)). A paper adds its own training fields
    by extending this schema (paper A: papers.sparse_xor.config.SparseXorTrainConfig). Early stop once every
    seed has converged (relative gradient ||grad L|| ||theta|| / |L_0| <= tol_grad)
    or stalled (relative objective change between logs < tol); 0 disables each. Neither counts
    while a seed's objective is within tol_move (relative) of its initial value.
    With tol_grad > 0 each seed's record says whether it converged. Every trained run has a
    stopping test (tol_grad > 0), or says ``fixed_steps: true`` where a fixed number of steps is the
    protocol (paper A's one gradient step); its conf file says why, and its claims name the step count.

    L-BFGS in two precisions: with ``coarse_dtype`` set, a seed first trains in that dtype until its
    relative gradient is at most ``coarse_tol_grad`` or its objective stalls (relative change below
    ``coarse_tol`` between logs), then goes on in ``dtype`` from there to tol_grad. Both stages measure
    the gradient against the same L_0 (the objective at the initial point, in dtype); the recorded gradient
    is the one in dtype; ``steps`` caps each stage.
    """

    name: str = MISSING  # the option's name (conf/train/<name>.yaml)
    optimizer: Optimizer = Optimizer.sgd
    steps: int = 1
    lr: float = 1.0
    log_every: int = 1
    chunk: int = 8192
    dtype: DType = DType.float64
    tol: float = 0.0
    tol_grad: float = 0.0
    tol_move: float = 0.0
    fixed_steps: bool = False
    coarse_dtype: Optional[DType] = None
    coarse_tol_grad: float = 0.0
    coarse_tol: float = 0.0


@dataclass
class SolvedConfig:
    """``train=solved``: no training. The model is solved by its paper's solver (a paper's SOLVERS,
    papers/__init__.py), whose settings (iteration cap, tolerances) are the model's own fields."""

    name: str = "solved"
