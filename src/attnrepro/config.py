"""Typed configuration: the schema behind every YAML file in conf/.

Each config group option in conf/ extends one of the dataclasses below (its
defaults list names the ``*_schema`` entry stored here), so Hydra rejects an
unknown key or a value of the wrong type at composition time, naming it.
Value ranges (d >= 2, m >= 1, a positive step size ...) are checked by
:func:`validate`, which every job and the grid sweeper call before any work.
"""

from __future__ import annotations

import math
import os
import secrets
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf


class Attention(str, Enum):
    """Attention map phi applied to the scores s = V theta."""

    softmax = "softmax"
    linear = "linear"
    erf = "erf"


class Init(str, Enum):
    """Initialisation of the second query: theta_tilde(0) = -theta(0), or drawn independently."""

    antisymmetric = "antisymmetric"
    independent = "independent"


class Optimizer(str, Enum):
    sgd = "sgd"
    adam = "adam"


class DType(str, Enum):
    float32 = "float32"
    float64 = "float64"


# --------------------------------------------------------------------------- tasks
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


# --------------------------------------------------------------------------- models
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


# --------------------------------------------------------------------------- training
@dataclass
class TrainConfig:
    """Full-batch training: ``steps`` steps of ``optimizer``.

    Step size eta = eta0 * unit, where the unit is the model's natural scale
    (see models.xor_attention.step_unit: d^2 sqrt(m) for softmax attention,
    m^2/d^2 for linear/erf attention, 1 for the FFNN).
    """

    name: str = "one_step"
    optimizer: Optimizer = Optimizer.sgd
    steps: int = 1
    eta0: float = 100.0
    log_every: int = 1
    chunk: int = 8192
    dtype: DType = DType.float64
    save_attention: bool = False


# --------------------------------------------------------------------------- run-time
@dataclass
class TrainerConfig:
    """Passed to lightning's Trainer. Not part of a job's key."""

    accelerator: str = "auto"
    devices: Any = 1


@dataclass
class LoggerConfig:
    """Tracking. The JSON record under outputs/runs/ is always written."""

    name: str = "csv"
    project: str = "attnrepro"
    mode: str = "auto"


@dataclass
class ProfileConfig:
    """Grid size: smoke (CI), quick (laptop, default), paper (paper-size)."""

    name: str = "quick"
    n_seeds: int = 8


@dataclass
class PathsConfig:
    outputs: str = "${oc.env:ATTNREPRO_OUTPUTS,outputs}"


@dataclass
class Config:
    task: Any = MISSING
    model: Any = MISSING
    train: Any = MISSING
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    logger: Any = MISSING
    profile: Any = MISSING
    paths: PathsConfig = field(default_factory=PathsConfig)
    experiment: str = "adhoc"
    seed: int = 0
    n_seeds: int = "${profile.n_seeds}"  # type: ignore[assignment]
    # grid[profile] = {override key: list of values}; read by the grid sweeper (-m).
    grid: Dict[str, Dict[str, Any]] = field(default_factory=dict)


SCHEMAS = {
    "task": {"sparse_xor_schema": SparseXorTask},
    "model": {"xor_attention_schema": XorAttentionModel, "ffnn_schema": FfnnModel},
    "train": {"train_schema": TrainConfig},
    "logger": {"logger_schema": LoggerConfig},
    "profile": {"profile_schema": ProfileConfig},
}

# The parts of a config that decide its numbers: a job's key hashes exactly these.
SEMANTIC_KEYS = ("task", "model", "train", "seed", "n_seeds")


def d_log2d(d: int, c: float = 1.0) -> int:
    """ceil(c d log2 d): a sample size that grows like d polylog(d), for `${attnrepro.d_log2d:${task.d},c}`."""
    return math.ceil(float(c) * int(d) * math.log2(int(d)))


def register_configs() -> None:
    """Store the schemas in Hydra's ConfigStore and register the `attnrepro.uid` resolver
    (a per-process id that keeps two sweeps started in the same second apart)."""
    if not OmegaConf.has_resolver("attnrepro.uid"):
        uid = f"{os.getpid()}-{secrets.token_hex(2)}"
        OmegaConf.register_new_resolver("attnrepro.uid", lambda: uid)
    if not OmegaConf.has_resolver("attnrepro.d_log2d"):
        OmegaConf.register_new_resolver("attnrepro.d_log2d", d_log2d)
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    for group, entries in SCHEMAS.items():
        for name, node in entries.items():
            cs.store(group=group, name=name, node=node)


# --------------------------------------------------------------------------- validation
class ConfigError(ValueError):
    """A config value outside its allowed range; the message names the field."""


def _checks(cfg: Any) -> List[str]:
    """Range checks, as 'field: problem' strings. cfg is the object form of Config."""
    errs: List[str] = []

    def need(cond: bool, key: str, msg: str) -> None:
        if not cond:
            errs.append(f"{key}: {msg}")

    task, model, train = cfg.task, cfg.model, cfg.train
    need(cfg.n_seeds >= 1, "n_seeds", f"must be >= 1, got {cfg.n_seeds}")
    need(cfg.seed >= 0, "seed", f"must be >= 0, got {cfg.seed}")
    if isinstance(task, SparseXorTask):
        need(task.d >= 2, "task.d", f"must be >= 2 (two support positions), got {task.d}")
        need(0.0 <= task.noise < 0.5, "task.noise", f"must be in [0, 0.5), got {task.noise}")
        need(task.n is None or task.n >= 1, "task.n", f"must be >= 1 or null, got {task.n}")
        need(task.n_test >= 1, "task.n_test", f"must be >= 1, got {task.n_test}")
    if isinstance(model, XorAttentionModel):
        need(model.m is None or model.m >= 1, "model.m", f"must be >= 1 or null, got {model.m}")
        need(model.m_c > 0, "model.m_c", f"must be > 0, got {model.m_c}")
    if isinstance(model, FfnnModel):
        need(model.k >= 1, "model.k", f"must be >= 1, got {model.k}")
        need(isinstance(task, SparseXorTask) and task.n is not None, "task.n",
             "the FFNN baseline trains on samples: set task.n")
    if isinstance(train, TrainConfig):
        need(train.steps >= 1, "train.steps", f"must be >= 1, got {train.steps}")
        need(math.isfinite(train.eta0) and train.eta0 > 0, "train.eta0",
             f"step size must be > 0, got {train.eta0}")
        need(train.log_every >= 1, "train.log_every", f"must be >= 1, got {train.log_every}")
        need(train.chunk >= 1, "train.chunk", f"must be >= 1, got {train.chunk}")
    return errs


def validate(cfg: DictConfig) -> Any:
    """Resolve cfg to dataclasses and check every range; raise ConfigError naming each bad field."""
    try:
        obj = OmegaConf.to_object(cfg)
    except Exception as e:  # omegaconf names the key in its message
        raise ConfigError(str(e)) from e
    errs = _checks(obj)
    if errs:
        raise ConfigError("invalid config:\n  " + "\n  ".join(errs))
    return obj
