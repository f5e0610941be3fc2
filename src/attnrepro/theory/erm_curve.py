"""Paper B's ERM state evolution as one call, in the papers' parameters.

    from attnrepro.theory.erm_curve import erm_state_evolution
    rows = erm_state_evolution([0.1, 0.15, 0.2], lam=1e-3, kappa=1.0, kappa0=0.5, T=2, Delta=0.5)

One row per alpha (ascending): test_error, train_loss, estimation_error, the learned-spectrum
parameters (eta, delta, eps), converged and its reason (state_evolution.state_evolution_curve);
lam = 0 gives the lambda -> 0+ limit: below alpha_interp the minimum-nuclear-norm interpolator in closed
form (method "interpolating_limit", training loss 0), above it (Delta > 0) the fixed point at lambda = 0
(method "lambda_zero", eps = 0, finite Sigma), the two meeting at alpha_interp, where the test error peaks.
The branch above is solved from the largest alpha down; close to alpha_interp its Sigma grows without
bound, and a point the solver cannot reach is a row with converged = False and the reason.

    rows = erm_state_evolution([0.1, 0.15, 0.2, 0.3, 0.5], lam=0, kappa=1.0, kappa0=0.5, T=2, Delta=0.5)
"""

from __future__ import annotations

from typing import Callable, Sequence


def softmax_channel(law, T: int, Delta: float, beta: float = 1.0, beta0: float = 1.0, rule: str = "sobol",
                    points: int = 14, seed: int = 0):
    """The square-loss softmax output channel with a Gaussian rule of 2^points nodes (gaussian_rules)."""
    from attnrepro.theory.gaussian_rules import make_rule
    from attnrepro.theory.output_channel import SoftmaxChannel

    return SoftmaxChannel(T, law.Q0, Delta, make_rule(rule, T * (T + 1) - 2, points, seed), beta, beta0)


def erm_state_evolution(alphas: Sequence[float], lam: float, *, kappa: float = 1.0, T: int = 2, Delta: float = 0.5,
                        target: str = "wishart", kappa0: float = 0.5, d: int | None = None, gamma: float = 1.0,
                        beta: float = 1.0, beta0: float = 1.0, rule: str = "sobol", points: int = 14, seed: int = 0,
                        tol: float = 1e-6, max_evals: int = 40, nodes: int = 200, resolution: float = 0.0,
                        descending: bool = False, log: Callable[[str], None] | None = None) -> list[dict]:
    """The fixed point at every alpha of the student of width p = kappa d, weight decay lam, for the
    target's spectral law (wishart: Marchenko-Pastur of ratio kappa0; power_law: d eigenvalues
    sqrt(d) i^-gamma, merged within `resolution` when > 0: spectral_laws.coarsened), T tokens, label
    noise Delta, inverse temperatures beta (student) and beta0; descending: solve from the largest alpha
    down (state_evolution_curve)."""
    from attnrepro.theory.spectral_laws import target_law
    from attnrepro.theory.state_evolution import state_evolution_curve

    law = target_law(target, d, kappa0, gamma, resolution=resolution)
    channel = softmax_channel(law, T, Delta, beta, beta0, rule, points, seed)
    return state_evolution_curve(law, channel, alphas, float(lam), float(kappa), int(T), float(Delta),
                                 float(beta0) / float(beta), log=log, descending=descending, tol=tol,
                                 max_evals=max_evals, nodes=nodes)
