"""The lambda -> 0+ limit of paper B's ERM state evolution below the interpolation threshold, in closed form.

At large Sigma the output channel's exact fit wins at almost every node, M -> (n_u/2)(r^2 (Q0 + Delta/2)
- 2 r m + q)/Sigma (n_u = (T^2 + T - 2)/2, r = beta0/beta), so eta -> r, and with eps the finite limit of
lambda~ Sigma / (2 alpha n_u r) the fixed point becomes (docs/state_evolution.md derives it)

    D(delta, eps) = (T^2 + T - 2) alpha,      Q0 + Delta/2 = 2 K(delta, eps) - J(delta, eps) - delta^2 D(delta, eps),
    m = r (K - delta^2 D),   q = r^2 J,   training loss 0.

At eps = 0 these are Corollary 3.2's equations for alpha_interp and delta_bar: the minimum-nuclear-norm
interpolator's branch ends at alpha_interp.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy.optimize import brentq

from attnrepro.theory.free_convolution import FreeConvolution
from attnrepro.theory.spectral_laws import SpectralLaw


@dataclass
class InterpolatingLimit:
    delta: float
    eps: float      # the limit of lambda~ Sigma / (2 alpha n_u r)
    m: float
    q: float
    rank: float
    residual: float


def interpolating_limit(law: SpectralLaw, T: int, Delta: float, alpha: float, ratio: float = 1.0,
                        nodes: int = 400) -> InterpolatingLimit:
    """The lambda -> 0+ fixed point below alpha_interp (module docstring): (delta, eps) solving
    D(delta, eps) = (T^2 + T - 2) alpha and h(delta, eps) := 2K - J - delta^2 D - (Q0 + Delta/2) = 0, then
    m = r (K - delta^2 D), q = r^2 J (r = beta0/beta). The branch is parametrised by eps >= 0: h is
    increasing in delta (negative as delta -> 0), so delta(eps) is its root (Brent in log delta), and
    alpha(eps) = D(delta(eps), eps)/(T^2 + T - 2) falls from alpha_interp at eps = 0; eps solves
    alpha(eps) = alpha (Brent). Raises ValueError at or above alpha_interp."""
    n_meas, var0 = T * T + T - 2, law.Q0 + Delta / 2

    def parts(s: float, eps: float):
        fc = FreeConvolution(law, s, nodes)
        J, K, D = fc.J(eps), fc.K(eps), fc.dJ_ddelta(eps) / (2 * s)
        return fc, J, K, D, 2 * K - J - s * s * D - var0

    def delta_of(eps: float) -> float:
        h = lambda t: parts(math.exp(t), eps)[4]  # noqa: E731
        lo, hi = math.log(1e-4), math.log(1e3)
        if h(lo) * h(hi) > 0:
            raise ValueError(f"interpolating limit: no delta solves h(delta, {eps:g}) = 0 in [1e-4, 1e3]")
        return math.exp(brentq(h, lo, hi, xtol=1e-13, rtol=1e-13))

    def alpha_gap(eps: float) -> float:
        return parts(delta_of(eps), eps)[3] / n_meas - alpha

    top = alpha_gap(0.0) + alpha
    if alpha >= top:
        raise ValueError(f"alpha = {alpha:g} is at or above the interpolation threshold {top:.6g}: no interpolating "
                         "lambda -> 0+ limit")
    hi = 1.0
    while alpha_gap(hi) > 0:
        hi *= 2
        if hi > 1e4:
            raise ValueError("interpolating limit: no eps bracket found")
    eps = brentq(alpha_gap, 0.0, hi, xtol=1e-12, rtol=1e-12)
    s = delta_of(eps)
    fc, J, K, D, h = parts(s, eps)
    return InterpolatingLimit(delta=s, eps=eps, m=ratio * (K - s * s * D), q=ratio * ratio * J,
                              rank=float(1 - fc.cdf(eps)), residual=max(abs(h), abs(D / n_meas - alpha)))
