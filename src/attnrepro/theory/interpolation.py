"""The interpolation threshold of ridgeless (lambda -> 0+) ERM, paper B Corollary 3.2.

    alpha_interp = dJ/ddelta(dbar, 0) / (2 dbar (T^2 + T - 2)),
    dbar solves   Q0 + Delta/2 = J(dbar, 0) - (dbar/2) dJ/ddelta(dbar, 0),

with J over the full spectrum of S0 (S0 is not centred: the trace subtraction in h does not
remove its mean direction). The learned S then has rank fraction 1 - F_dbar(0); the formula
holds for students of width kappa >= 1 - F_dbar(0). With S0 = 0 and Delta > 0 there is no
solution (alpha_interp -> 1/(2(T^2 + T - 2)) as Q0 -> 0). With Delta = 0, dbar -> 0+ (S0 itself is the
exact fit above the threshold) and alpha_interp is the limit of dJ/ddelta(delta, 0)/(2 delta (T^2 + T - 2)).
"""

from __future__ import annotations

from dataclasses import dataclass

from scipy.optimize import brentq

from attnrepro.theory.free_convolution import FreeConvolution
from attnrepro.theory.spectral_laws import SpectralLaw


@dataclass(frozen=True)
class InterpolationThreshold:
    alpha: float        # alpha_interp
    delta: float        # dbar
    rank: float         # 1 - F_dbar(0): the fraction of non-zero learned eigenvalues, the least kappa needed
    residual: float     # |Q0 + Delta/2 - J + (dbar/2) dJ/ddelta| at dbar


def _gap(law: SpectralLaw, delta: float, Delta: float) -> float:
    fc = FreeConvolution(law, delta)
    return fc.J(0.0) - 0.5 * delta * fc.dJ_ddelta(0.0) - law.Q0 - 0.5 * Delta


def interpolation_threshold(law: SpectralLaw, T: int, Delta: float, delta_max: float = 50.0,
                            xtol: float = 1e-10) -> InterpolationThreshold:
    """alpha_interp for target law mu0, T tokens and label noise Delta (ValueError if no dbar)."""
    if T < 2:
        raise ValueError("the threshold needs T >= 2 (T^2 + T - 2 > 0)")
    lo, hi = 1e-4, delta_max
    g_lo, g_hi = _gap(law, lo, Delta), _gap(law, hi, Delta)
    if Delta == 0 and g_hi > 0:
        # noiseless labels: the gap is positive for every delta > 0 and tends to 0 with it (up to the
        # quadrature's rounding), so dbar -> 0+: the threshold is the nuclear-norm recovery threshold
        # lim_{delta -> 0} D(delta, 0)/(T^2 + T - 2), taken at delta = 1e-4 (within 1e-5 of the limit)
        small = 1e-4
        fc = FreeConvolution(law, small)
        return InterpolationThreshold(alpha=float(fc.dJ_ddelta(0.0) / (2 * small * (T * T + T - 2))), delta=0.0,
                                      rank=float(1 - fc.cdf(0.0)), residual=abs(_gap(law, small, Delta)))
    if g_lo * g_hi > 0:
        raise ValueError(f"no dbar in [{lo:g}, {hi:g}] solves Q0 + Delta/2 = J - (dbar/2) dJ/ddelta "
                         f"(gaps {g_lo:.3g}, {g_hi:.3g}; S0 = 0 with Delta > 0 has none)")
    dbar = brentq(lambda s: _gap(law, s, Delta), lo, hi, xtol=xtol)
    fc = FreeConvolution(law, dbar)
    alpha = fc.dJ_ddelta(0.0) / (2 * dbar * (T * T + T - 2))
    return InterpolationThreshold(alpha=float(alpha), delta=float(dbar), rank=float(1 - fc.cdf(0.0)),
                                  residual=abs(_gap(law, dbar, Delta)))


def bayes_perfect_recovery(kappa0: float, T: int) -> float:
    """AIM-2025's perfect-recovery threshold for the noiseless Wishart target: (2 kappa0 - kappa0^2)/(T^2 + T - 2)
    (kappa0 < 1; for kappa0 >= 1 the full-rank count 1/(T^2 + T - 2))."""
    return (2 * kappa0 - kappa0 ** 2 if kappa0 < 1 else 1.0) / (T * T + T - 2)


