"""Schema of pipelines/theory.py (conf/theory.yaml): which experiments get theory curves, and
the numerical settings of the curves (a curve's record key hashes the settings it uses)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


@dataclass
class BayesSettings:
    """tied_bayes_gap's Bayes-optimal MMSE curves: these T and kappa0 besides the experiment's own,
    `points` values of alpha on [0, alpha_max]."""

    T: List[int] = field(default_factory=lambda: [2, 3, 4])
    kappa0: List[float] = field(default_factory=lambda: [0.25, 0.5, 0.75])
    alpha_max: float = 0.4
    points: int = 100


@dataclass
class StateEvolutionSettings:
    """The ERM fixed point (theory.state_evolution): Monte Carlo draws of the output channel per
    profile (common random numbers, `seed`), damping, relative tolerance, iteration cap per solve,
    free-convolution nodes, and the smallest lambda solved (below it, in the nearly interpolating
    phase, the iteration does not converge: those points are left out, not failed)."""

    samples: Dict[str, int] = field(default_factory=lambda: {"smoke": 2000, "quick": 10000, "paper": 40000})
    seed: int = 0
    damping: float = 0.3
    tol: float = 1e-5
    max_iter: int = 200
    nodes: int = 200
    min_lambda: float = 0.03


@dataclass
class TheoryConfig:
    profile: Any = None
    paths: Any = None
    experiments: Optional[List[str]] = None  # null: every experiment that has theory curves
    nodes: int = 400                         # free-convolution nodes per piece of the support
    bayes: BayesSettings = field(default_factory=BayesSettings)
    state_evolution: StateEvolutionSettings = field(default_factory=StateEvolutionSettings)
