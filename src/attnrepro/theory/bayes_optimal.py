"""Bayes-optimal estimation of S0 from noiseless softmax labels: AIM-2025's state evolution.

With a linear output channel for the noiseless softmax (SPEC, "Bayes-optimal baseline"):

    qhat = (T^2 + T - 2) alpha / (Q0 - q),
    q    = Q0 - 1/qhat + (4 pi^2 / (3 qhat^2)) int mu_{1/qhat}(x)^3 dx,
    MMSE = Q0 - q,

mu_Delta the law of S0 + sqrt(Delta) Z (free_convolution, delta = qhat^-1/2). The prior side is
the MMSE of denoising S0 at signal-to-noise qhat,

    m(qhat) = 1/qhat - (4 pi^2 / (3 qhat^2)) int p_{1/qhat}^3,

so the fixed point reads alpha = qhat m(qhat) / (T^2 + T - 2): every qhat gives one point
(alpha, m(qhat)) of the curve, and no iteration is needed. Where alpha(qhat) is not monotone the
curve takes, at each alpha, the smallest qhat (the fixed point reached from the uninformed start).
As qhat -> infinity, qhat m(qhat) -> 2 kappa0 - kappa0^2 for the Wishart target (kappa0 < 1: the
atom at 0 of mass 1 - kappa0), hence perfect recovery (MMSE = 0) beyond
alpha_PR = (2 kappa0 - kappa0^2) / (T^2 + T - 2). As alpha -> 0 the MMSE tends to the variance of
mu0, Q0 - (mean of mu0)^2: Q0 minus the squared norm of the prior mean per d.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from attnrepro.theory.free_convolution import FreeConvolution
from attnrepro.theory.spectral_laws import SpectralLaw


def prior_mmse(law: SpectralLaw, qhat: float, nodes: int = 400) -> float:
    """m(qhat) = 1/qhat - (4 pi^2 / (3 qhat^2)) int p_{1/qhat}(x)^3 dx."""
    fc = FreeConvolution(law, 1.0 / math.sqrt(qhat), nodes)
    return 1.0 / qhat - 4 * math.pi ** 2 / (3 * qhat ** 2) * float(fc.integrate(fc.p ** 2))


@dataclass(frozen=True)
class PriorCurve:
    """m(qhat) tabulated on a log grid of qhat: the part shared by every T and alpha."""

    qhat: np.ndarray
    m: np.ndarray       # m(qhat)

    @classmethod
    def tabulate(cls, law: SpectralLaw, qhat_min: float = 1e-4, qhat_max: float = 1e7, points: int = 160,
                 nodes: int = 400) -> "PriorCurve":
        q = np.geomspace(qhat_min, qhat_max, points)
        return cls(q, np.array([prior_mmse(law, x, nodes) for x in q]))

    def mmse(self, alpha, T: int) -> np.ndarray:
        """MMSE(alpha) for T tokens: the fixed point alpha = qhat m(qhat) / (T^2 + T - 2) with the smallest
        qhat, interpolated in log qhat; 0 beyond the largest alpha the table reaches (perfect recovery)."""
        c = T * T + T - 2
        a_of_q = self.qhat * self.m / c
        alpha = np.atleast_1d(np.asarray(alpha, dtype=float))
        out = np.zeros_like(alpha)
        reach = np.maximum.accumulate(a_of_q)  # the smallest qhat with alpha(qhat) >= a
        for i, a in enumerate(alpha):
            if a <= a_of_q[0]:
                out[i] = self.m[0]
                continue
            k = int(np.searchsorted(reach, a))
            if k >= len(reach):
                continue  # beyond the table: perfect recovery
            lo, hi = a_of_q[k - 1], a_of_q[k]
            t = (a - lo) / (hi - lo) if hi > lo else 1.0
            out[i] = math.exp((1 - t) * math.log(self.m[k - 1]) + t * math.log(max(self.m[k], 1e-300)))
        return out

    def perfect_recovery(self, T: int) -> float:
        """lim_{qhat -> inf} qhat m(qhat) / (T^2 + T - 2), read off the largest qhat of the table."""
        return float(self.qhat[-1] * self.m[-1] / (T * T + T - 2))
