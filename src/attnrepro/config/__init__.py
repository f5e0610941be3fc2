"""Typed configuration: the schema behind every YAML file in conf/.

Each config group option in conf/ extends a dataclass stored here in Hydra's
ConfigStore (its defaults list names a ``*_schema`` entry), so Hydra rejects an
unknown key or a value of the wrong type at composition time, naming it.
Value ranges (d >= 2, m >= 1, a positive step size ...) are checked by
:func:`validate`, which every job and the grid sweeper call before any work.

Each paper's schemas live in its package (papers/<paper>/config.py), which
exports SCHEMAS (group -> {name: dataclass}), checks(cfg, need) and RESOLVERS.
"""

from __future__ import annotations

import dataclasses
import math
import os
import secrets
from dataclasses import dataclass, field
from typing import Any, Dict, List

from hydra.core.config_store import ConfigStore
from hydra.errors import CompactHydraException
from omegaconf import MISSING, DictConfig, OmegaConf

from attnrepro.config.theory import theory_config
from attnrepro.config.train import DType, Optimizer, SolvedConfig, TrainConfig  # noqa: F401 (re-exported)
from attnrepro.papers import config_modules, solver_module


@dataclass
class TrainerConfig:
    """Passed to Lightning's Trainer. Not part of a job's key."""

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
    # exit 0 although jobs failed (each failure is recorded with its reason; not part of any key)
    accept_failed: bool = False
    # grid[profile] = {override key: list of values}, or a list of such maps (their union); swept by the
    # grid sweeper (-m), expanded by jobs.grid.product.
    grid: Dict[str, Any] = field(default_factory=dict)


SCHEMAS = {
    "train": {"train_schema": TrainConfig, "solved_schema": SolvedConfig},
    "logger": {"logger_schema": LoggerConfig},
    "profile": {"profile_schema": ProfileConfig},
}

# The parts of a config that decide its numbers: a job's key hashes exactly these.
SEMANTIC_KEYS = ("task", "model", "train", "seed", "n_seeds")


def register_configs() -> None:
    """Store the schemas in Hydra's ConfigStore and register the resolvers, among them
    `attnrepro.uid` (a per-process id that keeps two sweeps started in the same second apart)."""
    uid = f"{os.getpid()}-{secrets.token_hex(2)}"
    resolvers = {"attnrepro.uid": lambda: uid}
    papers = config_modules()
    for paper in papers:
        resolvers.update(paper.RESOLVERS)
    for name, fn in resolvers.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    cs.store(name="theory_schema", node=theory_config())
    for schemas in [SCHEMAS, *(paper.SCHEMAS for paper in papers)]:
        for group, entries in schemas.items():
            for name, node in entries.items():
                cs.store(group=group, name=name, node=node)


class ConfigError(CompactHydraException, ValueError):
    """A config value outside its allowed range; the message names the field (Hydra prints it without a traceback)."""


def _non_finite(node: Any, prefix: str) -> List[str]:
    """'field: ...' for every NaN or infinite float of a dataclass config, nested ones included."""
    out = []
    for f in dataclasses.fields(node) if dataclasses.is_dataclass(node) else ():
        v, key = getattr(node, f.name), f"{prefix}.{f.name}"
        if isinstance(v, float) and not math.isfinite(v):
            out.append(f"{key}: must be a finite number, got {v}")
        out += _non_finite(v, key)
    return out


def _train_checks(train: TrainConfig, need) -> None:
    """Range checks of a trained job's train section."""
    need(train.steps >= 1, "train.steps", f"must be >= 1, got {train.steps}")
    need(math.isfinite(train.lr) and train.lr > 0, "train.lr", f"step size must be > 0, got {train.lr}")
    need(train.log_every >= 1, "train.log_every", f"must be >= 1, got {train.log_every}")
    need(train.chunk >= 1, "train.chunk", f"must be >= 1, got {train.chunk}")
    need(all(math.isfinite(v) and v >= 0 for v in (train.tol, train.tol_grad, train.tol_move)), "train.tol",
         f"tolerances must be finite and >= 0, got tol={train.tol}, tol_grad={train.tol_grad}, "
         f"tol_move={train.tol_move}")
    need(train.fixed_steps != (train.tol_grad > 0), "train.tol_grad",
         f"a trained run needs a stopping test, tol_grad > 0, or train.fixed_steps=true where a fixed number "
         f"of steps is the protocol (not both); got tol_grad={train.tol_grad}, fixed_steps={train.fixed_steps}")
    if train.coarse_dtype is not None:
        need(train.optimizer is Optimizer.lbfgs and train.coarse_dtype is not train.dtype, "train.coarse_dtype",
             f"a first stage in another precision is for L-BFGS, in a dtype other than train.dtype; got "
             f"optimizer={train.optimizer.value}, coarse_dtype={train.coarse_dtype.value}, dtype={train.dtype.value}")
        need(train.coarse_tol_grad > 0 or train.coarse_tol > 0, "train.coarse_tol_grad",
             f"the first stage needs a test to end it, coarse_tol_grad > 0 or coarse_tol > 0; got "
             f"coarse_tol_grad={train.coarse_tol_grad}, coarse_tol={train.coarse_tol}")
    need(all(math.isfinite(v) and v >= 0 for v in (train.coarse_tol, train.coarse_tol_grad)), "train.coarse_tol",
         f"tolerances must be finite and >= 0, got coarse_tol={train.coarse_tol}, "
         f"coarse_tol_grad={train.coarse_tol_grad}")


def _checks(cfg: Any) -> List[str]:
    """Range checks, as 'field: problem' strings. cfg is the object form of Config. A NaN or infinite
    value is reported alone (the range checks of the papers compute with the values)."""
    errs = [e for part in ("task", "model", "train") for e in _non_finite(getattr(cfg, part), part)]
    if errs:
        return errs

    def need(cond: bool, key: str, msg: str) -> None:
        if not cond:
            errs.append(f"{key}: {msg}")

    need(cfg.n_seeds >= 1, "n_seeds", f"must be >= 1, got {cfg.n_seeds}")
    need(cfg.seed >= 0, "seed", f"must be >= 0, got {cfg.seed}")
    solved = solver_module(cfg.model.family) is not None
    need(solved == isinstance(cfg.train, SolvedConfig), "train",
         f"model.family={cfg.model.family} is solved, not trained: it needs train=solved (its settings are the model's)"
         if solved else f"train=solved is for a model its paper solves; model.family={cfg.model.family} is trained")
    if isinstance(cfg.train, TrainConfig):
        _train_checks(cfg.train, need)
    for paper in config_modules():
        paper.checks(cfg, need)
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
