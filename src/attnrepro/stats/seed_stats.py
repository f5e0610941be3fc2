"""Summaries over seeds, and claims on per-seed values, for figures whose rows are (grid point, seed).

Uncertainties: the standard error of the mean over seeds, s.e. = std / sqrt(n) (std with
ddof = 1; 0 for a single seed), or the inter-quartile range for medians. A difference of two
independent means has s.e. sqrt(se_a^2 + se_b^2).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from attnrepro.report.claims import Claim, fmt, interval, judge
from attnrepro.stats.fits import NAN, quantiles

STATS = ("n", "mean", "se", "median", "q1", "q3")


def finite(values) -> np.ndarray:
    """The finite values as floats (a value that is not a number counts as NaN and is left out)."""
    v = np.asarray(values) if not isinstance(values, pd.Series) else values.to_numpy()
    if v.dtype.kind not in "fiub":  # objects, strings, nullable dtypes: numbers where pandas reads them
        v = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce")
    v = np.asarray(v, dtype=float)
    return v[np.isfinite(v)]


def mean_se(values) -> tuple[float, float, int]:
    """(mean, standard error, n) of the finite values; NaN, NaN, 0 when there are none."""
    return _mean_se(finite(values))


def _mean_se(v: np.ndarray) -> tuple[float, float, int]:
    if v.size == 0:
        return NAN, NAN, 0
    se = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0
    return float(v.mean()), se, int(v.size)


def summary(df: pd.DataFrame, by: Sequence[str], value: str) -> pd.DataFrame:
    """Per group of ``by``: n, mean, se, median, q1, q3 of ``value`` over the group's rows (seeds)."""
    by = list(by)
    if df.empty or value not in df:
        return pd.DataFrame(columns=[*by, *STATS])
    rows = []
    for key, g in df.groupby(by, sort=True, dropna=False)[value]:
        v = finite(g)
        mean, se, n = _mean_se(v)
        q1, med, q3 = quantiles(v)
        rows.append({**dict(zip(by, key if isinstance(key, tuple) else (key,), strict=True)),
                     "n": n, "mean": mean, "se": se, "median": med, "q1": q1, "q3": q3})
    return pd.DataFrame(rows, columns=[*by, *STATS])


def mean_claim(figure: str, text: str, values, passes: Callable[[float], bool], detail: str = "", *,
               key: str = "") -> Claim:
    """A claim (id <figure>/<key>) on the mean over seeds, with its standard error as the uncertainty."""
    mean, se, n = mean_se(values)
    return judge(figure, text, mean, passes, f"± {fmt(se)} (s.e., {n} seeds)", detail, key=key)


def median_claim(figure: str, text: str, values, passes: Callable[[float], bool], detail: str = "", *,
                 key: str = "") -> Claim:
    """A claim (id <figure>/<key>) on the median over seeds, with the inter-quartile range as the
    uncertainty."""
    v = finite(values)
    q1, med, q3 = quantiles(v)
    return judge(figure, text, med, passes, interval(q1, q3, f"IQR, {v.size} seeds"), detail, key=key)


def difference(a, b) -> tuple[float, float]:
    """(mean(a) - mean(b), its s.e.) for independent samples a and b."""
    ma, sa, _ = mean_se(a)
    mb, sb, _ = mean_se(b)
    return ma - mb, math.hypot(sa, sb)
