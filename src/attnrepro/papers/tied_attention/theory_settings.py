"""Paper B's settings of `attnrepro theory` (conf/theory.yaml): the numerical settings of its theory curves
(papers.tied_attention.theory_curves; a curve's record key hashes the settings its ``settings`` returns).
TheorySettings' fields join the shared schema's top level (config/theory.py:theory_config; the package's
THEORY_SETTINGS names this module), so they are overridden as `nodes=...`, `state_evolution.points.quick=...`,
`scaling_laws.d.paper=[...]`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List


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
    # The lambda -> 0+ curves (Delta > 0) whose branch above alpha_interp is drawn (kappa >= the learned rank at
    # alpha_interp): the rule's log2 size per profile there (the lambda = 0 fixed point is ill-conditioned: at 2^12
    # it is qualitative between alpha_interp + 0.01 and 0.3, at 2^14 within 0.022 of 2^18, at 2^16 within ~3e-3;
    # docs/state_evolution.md), and alpha_interp (1 + c) for these c, which resolve the cusp at alpha_interp (none
    # at 1 + 1e-3: Sigma ~ 1e7 there, and at 2^14 the root finder stalls at |r| ~ 1e-5 after 100 s).
    lambda_zero_points: Dict[str, int] = field(default_factory=lambda: {"smoke": 10, "quick": 14, "paper": 16})
    cusp: List[float] = field(default_factory=lambda: [-0.01, -0.001, 0.0, 0.01, 0.03])


@dataclass
class OptimalLambdaSettings:
    """tied_factorized_vs_direct's theory: each student's state evolution at the lambda that minimises its test
    error (theory.direct_state_evolution.optimal_lambda_curve: log lambda searched on lam_bounds to xatol), at
    the experiment's alphas and at these, per profile (a finer grid for the lines), with the output channel's
    Sobol' rule of 2^points nodes per profile (at 2^10 the optimal test errors are within 0.003 of 2^12's at
    kappa = 0.5, alpha = 0.05 ... 0.4, and the direct/factorized ratio is >= 1.05 from alpha = 0.05 on; 2^12 costs
    about four times as much: 205 s for both students at 7 alphas on one core)."""

    alphas: Dict[str, List[float]] = field(default_factory=lambda: {
        "smoke": [], "quick": [0.025, 0.075, 0.125, 0.175, 0.225, 0.35, 0.5],
        "paper": [0.025, 0.075, 0.125, 0.175, 0.225, 0.35, 0.5, 0.8]})
    points: Dict[str, int] = field(default_factory=lambda: {"smoke": 8, "quick": 10, "paper": 12})
    lam_bounds: List[float] = field(default_factory=lambda: [1e-4, 30.0])
    xatol: float = 0.05


@dataclass
class ScalingLawSettings:
    """tied_scaling_laws' theory: the ERM state evolution of the experiment's power-law targets at
    these d per profile (larger than any simulation here), at `points` values of n/d log-spaced on
    [n_over_d_min, alpha_max d] (the window d << n << d^2, below the interpolation threshold), the
    target's atoms merged within `resolution` (spectral_laws.coarsened), the output channel's Sobol'
    rule of 2^`rule_points` nodes (the quick profile's: an exponent over a decade of n/d needs the
    errors to ~1e-3, not the 2^16 rule's accuracy). tuned_d: the d per profile of the same window at the
    lambda tuned per n (theory curve scaling_law_tuned_lambda: about 10 solves per alpha, each 5-20 s on
    one core at d = 400-1000 and 20-200 s at d = 4000, about 22 minutes per curve there; so fewer d than the
    fixed lambda's)."""

    d: Dict[str, List[int]] = field(default_factory=lambda: {"smoke": [], "quick": [],
                                                             "paper": [400, 1000, 4000, 10000]})
    tuned_d: Dict[str, List[int]] = field(default_factory=lambda: {"smoke": [], "quick": [],
                                                                   "paper": [400, 1000, 4000]})
    tuned_xatol: float = 0.1  # lambda* to +-10% (log lambda to 0.1): the test error is flat to ~1e-4 there
    n_over_d_min: float = 4.0
    alpha_max: float = 0.05
    points: int = 8
    resolution: float = 1e-3
    rule_points: int = 12


@dataclass
class TheorySettings:
    """Paper B's entries of conf/theory.yaml."""

    nodes: int = 400                         # free-convolution nodes per piece of the support
    bayes: BayesSettings = field(default_factory=BayesSettings)
    state_evolution: StateEvolutionSettings = field(default_factory=StateEvolutionSettings)
    scaling_laws: ScalingLawSettings = field(default_factory=ScalingLawSettings)
    optimal_lambda: OptimalLambdaSettings = field(default_factory=OptimalLambdaSettings)


SETTINGS = TheorySettings
