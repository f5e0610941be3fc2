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
    """The ERM fixed point (theory.state_evolution): the output channel's Gaussian rule (`rule`:
    sobol | gauss_hermite | monte_carlo; `points`: log2 of its size per profile for sobol, nodes per
    coordinate for gauss_hermite, draws for monte_carlo; `seed`), the root finder's tolerance on the
    residual and its budget of map evaluations per point, and the free-convolution nodes. The
    accuracy of the rules is measured in docs/state_evolution.md."""

    rule: str = "sobol"
    points: Dict[str, int] = field(default_factory=lambda: {"smoke": 10, "quick": 12, "paper": 16})
    seed: int = 0
    tol: float = 1e-6
    max_evals: int = 40
    nodes: int = 200
    # alphas beyond the experiment's grid for its curves at lambda <= 0.01 (the peak of the test error)
    extra_alpha: Dict[str, List[float]] = field(
        default_factory=lambda: {"tied_interpolation_peak": [0.22, 0.26, 0.28, 0.3, 0.34]})


@dataclass
class ScalingLawSettings:
    """tied_scaling_laws' theory: the ERM state evolution of the experiment's power-law targets at
    these d per profile (larger than any simulation here), at `points` values of n/d log-spaced on
    [n_over_d_min, alpha_max d] (the window d << n << d^2, below the interpolation threshold), the
    target's atoms merged within `resolution` (spectral_laws.coarsened), the output channel's Sobol'
    rule of 2^`rule_points` nodes (the quick profile's: an exponent over a decade of n/d needs the
    errors to ~1e-3, not the 2^16 rule's accuracy)."""

    d: Dict[str, List[int]] = field(default_factory=lambda: {"smoke": [], "quick": [],
                                                             "paper": [400, 1000, 4000, 10000]})
    n_over_d_min: float = 4.0
    alpha_max: float = 0.05
    points: int = 8
    resolution: float = 1e-3
    rule_points: int = 12


@dataclass
class TheoryConfig:
    profile: Any = None
    paths: Any = None
    experiments: Optional[List[str]] = None  # null: every experiment that has theory curves
    workers: int = 2                         # theory jobs computed at once (processes, one thread each)
    nodes: int = 400                         # free-convolution nodes per piece of the support
    bayes: BayesSettings = field(default_factory=BayesSettings)
    state_evolution: StateEvolutionSettings = field(default_factory=StateEvolutionSettings)
    scaling_laws: ScalingLawSettings = field(default_factory=ScalingLawSettings)
