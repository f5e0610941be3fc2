"""Summaries of per-seed tables: success rates, threshold crossings and their scaling fits.

A per-seed table has one row per (job key, replica) and a boolean success column.
The success rate of a grid point is the fraction of its seeds that succeed; the
crossing x*(g) of a family of curves rate(x | g) is where the curve of g first
reaches a level (fits.threshold_crossing); its uncertainty comes from the seed
bootstrap (fits.bootstrap, resampling seeds within each job). A :class:`CrossingSummary` holds
the numbers of a family of crossings (no replicates) and moves them to and from a figure's
estimates frame (stats.estimates).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from attnrepro.stats import estimates
from attnrepro.stats.fits import (
    NAN,
    PowerLaw,
    binomial_se,
    percentile_ci,
    polylog_fit,
    power_law_fit,
    resamples,
    threshold_crossing,
)

FITS = {"power": power_law_fit, "polylog": polylog_fit}  # the laws x*(g) is fitted with, by name


def rate_table(df: pd.DataFrame, by: Sequence[str], success: str = "success") -> pd.DataFrame:
    """Per group of ``by``: n (seeds), successes, rate = successes / n, se = sqrt(rate (1 - rate) / n)."""
    by = list(by)
    if df.empty:
        return pd.DataFrame(columns=[*by, "n", "successes", "rate", "se"])
    out = df.groupby(by, sort=True)[success].agg(n="size", successes="sum").reset_index()
    out["successes"] = out["successes"].astype(int)
    out["rate"] = out["successes"] / out["n"]
    out["se"] = binomial_se(out["successes"].to_numpy(), out["n"].to_numpy())
    return out


def _cell_crossings(cell_group: np.ndarray, cell_x: np.ndarray, rate: np.ndarray, groups: np.ndarray,
                    level: float, interpolate: bool) -> np.ndarray:
    """Crossing per group from per-cell (group, x) success rates."""
    return np.array([threshold_crossing(cell_x[cell_group == g], rate[cell_group == g], level, interpolate)
                     for g in groups], dtype=float)


@dataclass
class Crossings:
    """x*(g) for each g: the crossing on the data (point), its bootstrap replicates (boot,
    shape (n_boot, n_groups)) and whether it sits at the grid's first x (censored: the true
    crossing is at or below it)."""

    group: str
    x: str
    level: float
    groups: np.ndarray
    point: np.ndarray
    boot: np.ndarray
    censored: np.ndarray

    def ci(self, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        bounds = [percentile_ci(self.boot[:, j], level) for j in range(len(self.groups))]
        return np.array([b[0] for b in bounds]), np.array([b[1] for b in bounds])

    def fit(self, fitter: Callable[[Sequence[float], Sequence[float]], PowerLaw] = power_law_fit,
            level: float = 0.95) -> tuple[PowerLaw, float, float]:
        """(fit of x* vs g, slope CI): the fit over the measured crossings (finite and not
        censored: an upper bound is not a measurement), and the percentile interval of the slope
        refitted on every bootstrap replicate over the same g (a replicate in which one of those
        crossings is undefined gives an undefined slope)."""
        use = np.isfinite(self.point) & ~self.censored
        fit = fitter(self.groups[use], self.point[use])
        slopes = [fitter(self.groups[use], row[use]).slope if np.isfinite(row[use]).all() else NAN
                  for row in self.boot]
        return (fit, *percentile_ci(slopes, level))

    def summary(self, fits: Sequence[str] = ("power",)) -> CrossingSummary:
        """The crossings' numbers: x*(g) with its 95% CI, censoring, and each named fit (FITS)
        of x* vs g with its slope CI."""
        lo, hi = self.ci()
        return CrossingSummary(self.group, self.x, self.level, self.groups, self.point, lo, hi, self.censored,
                               {name: self.fit(FITS[name]) for name in fits})


@dataclass
class CrossingSummary:
    """A family of crossings as numbers: x*(g) per g (point), its 95% bootstrap CI (lo, hi), whether
    it is an upper bound (censored), and fits[name] = (law of x* vs g, lower, upper end of the
    slope's 95% bootstrap CI), as :meth:`Crossings.fit` gives them."""

    group: str
    x: str
    level: float
    groups: np.ndarray
    point: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    censored: np.ndarray
    fits: Mapping[str, tuple[PowerLaw, float, float]]

    def rows(self, **keys) -> list[dict]:
        """Estimate rows under ``keys``: per g, "crossing" (x*, lo, hi) and "censored" (1 or 0) with
        the group's column set to g; per fit, "slope" (with its CI), "intercept" and "n_points"."""
        out = []
        for g, v, lo, hi, cens in zip(self.groups, self.point, self.lo, self.hi, self.censored, strict=True):
            at = {**keys, self.group: g}
            out += [estimates.row("crossing", v, lo, hi, **at), estimates.row("censored", float(cens), **at)]
        for name, (law, lo, hi) in self.fits.items():
            out += [estimates.row("slope", law.slope, lo, hi, **keys, fit=name),
                    estimates.row("intercept", law.intercept, **keys, fit=name),
                    estimates.row("n_points", law.n_points, **keys, fit=name)]
        return out

    @classmethod
    def read(cls, est: pd.DataFrame, group: str, x: str, level: float, **keys) -> CrossingSummary:
        """The summary whose :meth:`rows` were saved under ``keys`` in an estimates frame."""
        pts = estimates.select(est, "crossing", **keys)
        cens = estimates.values(est, "censored", **keys).astype(bool)
        fits = {}
        for name in estimates.select(est, "slope", **keys)["fit"]:
            slope, lo, hi = estimates.get(est, "slope", **keys, fit=name)
            law = PowerLaw(slope, estimates.value(est, "intercept", **keys, fit=name),
                           int(estimates.value(est, "n_points", **keys, fit=name)))
            fits[name] = (law, lo, hi)
        return cls(group, x, level, pts[group].to_numpy(dtype=float), pts["value"].to_numpy(dtype=float),
                   pts["lo"].to_numpy(dtype=float), pts["hi"].to_numpy(dtype=float), cens, fits)


def crossings(df: pd.DataFrame, group: str, x: str, level: float, success: str = "success",
              by: Sequence[str] = ("key",), interpolate: bool = True, n_boot: int = 200,
              seed: int = 0) -> Crossings:
    """Crossing of the success rate vs x at ``level`` for every value of ``group``, with the seed
    bootstrap (rows resampled within each group of ``by``; rates of a (group, x) cell pool its rows)."""
    df = df[df[group].notna() & df[x].notna()]
    if df.empty:
        empty = np.array([], dtype=float)
        return Crossings(group, x, level, empty, empty, np.empty((n_boot, 0)), np.array([], dtype=bool))
    cells = df.groupby([group, x], sort=True).ngroup().to_numpy()
    first = df.groupby([group, x], sort=True)[[group, x]].first()
    cell_group, cell_x = first[group].to_numpy(dtype=float), first[x].to_numpy(dtype=float)
    groups = np.unique(cell_group)
    ok = df[success].to_numpy(dtype=float)
    size = np.bincount(cells, minlength=len(first))

    def rates(idx: np.ndarray) -> np.ndarray:
        return np.bincount(cells[idx], weights=ok[idx], minlength=len(first)) / size

    point = _cell_crossings(cell_group, cell_x, rates(np.arange(len(df))), groups, level, interpolate)
    boot = np.array([_cell_crossings(cell_group, cell_x, rates(idx), groups, level, interpolate)
                     for idx in resamples(df, by, n_boot, seed)]).reshape(n_boot, len(groups))
    lowest = np.array([cell_x[cell_group == g].min() for g in groups])
    censored = np.isfinite(point) & (point <= lowest)
    return Crossings(group, x, level, groups, point, boot, censored)
