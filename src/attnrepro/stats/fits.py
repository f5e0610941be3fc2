"""Fits behind the figures: power laws, polylog laws, finite-size extrapolation, threshold crossings,
binomial errors, bootstrap.

Every function takes plain arrays (or a tidy frame for the bootstrap) and
returns NaN, never raises, when the data cannot support the estimate (too few
points, a level never reached): a figure built from a partial sweep still
renders and its claims say "not enough data".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import pandas as pd

NAN = float("nan")


@dataclass(frozen=True)
class PowerLaw:
    """y = exp(intercept) * x**slope, i.e. log y = slope * log x + intercept (natural log)."""

    slope: float
    intercept: float
    n_points: int

    @property
    def prefactor(self) -> float:
        return float(np.exp(self.intercept))

    def __call__(self, x) -> np.ndarray:
        return np.exp(self.intercept) * np.asarray(x, dtype=float) ** self.slope


def power_law_fit(x: Sequence[float], y: Sequence[float]) -> PowerLaw:
    """Least squares of log y on log x over the points with finite, positive x and y.

    Returns slope c and intercept log a of y = a x^c; NaN for both when fewer than
    two points (or fewer than two distinct x) remain.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    lx, ly = np.log(x[ok]), np.log(y[ok])
    if lx.size < 2 or np.ptp(lx) == 0:
        return PowerLaw(NAN, NAN, int(lx.size))
    slope, intercept = np.polyfit(lx, ly, 1)
    return PowerLaw(float(slope), float(intercept), int(lx.size))


def polylog_fit(d: Sequence[float], m: Sequence[float]) -> PowerLaw:
    """m = a (log2 d)^b: a power law in L = log2 d (the returned slope is b, prefactor a).

    Call the result with log2 d: ``fit(np.log2(d))``.
    """
    return power_law_fit(np.log2(np.asarray(d, dtype=float)), m)


def finite_size_fit(size: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """(y_inf, c) of y(size) = y_inf + c / size by least squares in 1/size over the finite y
    (NaN, NaN with fewer than two)."""
    size, y = np.asarray(size, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(y)
    if ok.sum() < 2:
        return NAN, NAN
    c, y_inf = np.polyfit(1.0 / size[ok], y[ok], 1)
    return float(y_inf), float(c)


def threshold_crossing(x: Sequence[float], rate: Sequence[float], level: float,
                       interpolate: bool = True, log_x: bool = True) -> float:
    """Smallest x at which the curve rate(x) reaches ``level``.

    Points are sorted by x (non-finite rates dropped). If the first grid point
    already reaches the level, that x is returned (the true crossing lies at or
    below it). Otherwise, with i the first index with rate_i >= level, the crossing
    is interpolated linearly in log x (or in x when log_x is False) between
    x_{i-1} and x_i:  log x* = log x_{i-1} + t (log x_i - log x_{i-1}),
    t = (level - r_{i-1}) / (r_i - r_{i-1}). Without interpolation, x_i.
    NaN when the level is never reached.
    """
    x, r = np.asarray(x, dtype=float), np.asarray(rate, dtype=float)
    ok = np.isfinite(x) & np.isfinite(r) & ((x > 0) if log_x else True)
    x, r = x[ok], r[ok]
    order = np.argsort(x, kind="stable")
    x, r = x[order], r[order]
    hits = np.flatnonzero(r >= level)
    if hits.size == 0:
        return NAN
    i = int(hits[0])
    if i == 0 or not interpolate:
        return float(x[i])
    t = (level - r[i - 1]) / (r[i] - r[i - 1])
    if log_x:
        return float(np.exp(np.log(x[i - 1]) + t * (np.log(x[i]) - np.log(x[i - 1]))))
    return float(x[i - 1] + t * (x[i] - x[i - 1]))


def binomial_se(successes, n):
    """Standard error of a success rate: sqrt(p (1 - p) / n), p = successes / n (NaN for n = 0)."""
    k, n = np.asarray(successes, dtype=float), np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = k / n
        se = np.where(n > 0, np.sqrt(p * (1 - p) / n), NAN)
    return float(se) if se.ndim == 0 else se


def quantiles(values, qs=(0.25, 0.5, 0.75)) -> tuple[float, ...]:
    """Quantiles of the finite values (NaN each when there are none)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return tuple(np.quantile(v, qs).tolist()) if v.size else (NAN,) * len(qs)


def resamples(df: pd.DataFrame, by: Sequence[str], n_boot: int = 200, seed: int = 0) -> Iterator[np.ndarray]:
    """Row positions of ``n_boot`` seed-bootstrap resamples of df: within every group of ``by``
    (one group = one grid point) its rows are drawn with replacement, keeping the group's size.
    Deterministic for a given seed, and independent of the rows' order: groups are taken in sorted
    order and, where df has a ``seed`` column, a group's rows in seed order (records are read in the
    order of their keys, which change with the config schema)."""
    rng = np.random.default_rng(seed)
    groups = [np.asarray(ix) for ix in df.groupby(list(by), sort=True).indices.values()]
    if "seed" in df.columns:
        seeds = df["seed"].to_numpy()
        groups = [g[np.argsort(seeds[g], kind="stable")] for g in groups]
    for _ in range(n_boot):
        yield np.concatenate([g[rng.integers(0, g.size, g.size)] for g in groups])


def cluster_resamples(df: pd.DataFrame, stratum: str, cluster: str, n_boot: int = 200,
                      seed: int = 0) -> Iterator[pd.DataFrame]:
    """``n_boot`` resamples of df that draw, within every value of ``stratum``, its clusters (values
    of ``cluster``, e.g. seeds) with replacement, each with all its rows. Deterministic for a seed."""
    rng = np.random.default_rng(seed)
    groups = {v: {c: g.index.to_numpy() for c, g in h.groupby(cluster)} for v, h in df.groupby(stratum, sort=True)}
    for _ in range(n_boot):
        rows = [members[c] for members in groups.values() for c in rng.choice(list(members), len(members))]
        yield df.loc[np.concatenate(rows)]


def bootstrap(df: pd.DataFrame, by: Sequence[str], statistic: Callable[[pd.DataFrame], object],
              n_boot: int = 200, seed: int = 0) -> np.ndarray:
    """statistic(df*) on each seed-bootstrap resample df* (see :func:`resamples`). The statistic
    returns a float or a fixed-length vector; the result has shape (n_boot,) or (n_boot, k)."""
    if df.empty:
        return np.full(n_boot, NAN)
    return np.stack([np.asarray(statistic(df.iloc[idx]), dtype=float)
                     for idx in resamples(df, by, n_boot, seed)])


def percentile_ci(samples, level: float = 0.95, min_finite: float = 0.5) -> tuple[float, float]:
    """Percentile interval [q_{(1-level)/2}, q_{(1+level)/2}] of the finite bootstrap values;
    NaN when fewer than ``min_finite`` of them are finite (the statistic is then ill-defined
    on too many resamples to trust an interval)."""
    s = np.asarray(samples, dtype=float).ravel()
    fin = s[np.isfinite(s)]
    if s.size == 0 or fin.size < max(2, min_finite * s.size):
        return NAN, NAN
    a = (1 - level) / 2
    return float(np.quantile(fin, a)), float(np.quantile(fin, 1 - a))


def bootstrap_ci(df: pd.DataFrame, by: Sequence[str], statistic: Callable[[pd.DataFrame], float],
                 n_boot: int = 200, level: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """(statistic on the data, lower, upper): the percentile interval of the seed bootstrap."""
    if df.empty:
        return NAN, NAN, NAN
    return (float(statistic(df)), *percentile_ci(bootstrap(df, by, statistic, n_boot, seed), level))
