"""Paper B's scaling laws of the excess test error for power-law targets (eigenvalues sqrt(d) i^-gamma).

In the regime d << n << d^2 at small lambda, e_test - e0 ~ (n/d)^(-1 + 1/(2 gamma)), the target's
modes being recovered one by one as n grows (SPEC). The other regimes named by paper B: d^2/n (beyond the
interpolation threshold), (lambda d^(3/2)/n)^(2 - 1/gamma) and (lambda d^2/n)^2 (weight decay
dominated); only the first is swept here (tied_scaling_laws).
"""

from __future__ import annotations


def excess_error_exponent(gamma: float) -> float:
    """The exponent c of e_test - e0 ~ (n/d)^c for d << n << d^2, small lambda: -1 + 1/(2 gamma)."""
    if not gamma > 0.5:
        raise ValueError(f"the power-law target needs gamma > 1/2, got {gamma}")
    return -1 + 1 / (2 * gamma)
