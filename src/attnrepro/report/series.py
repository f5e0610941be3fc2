"""Simulation and theory rows in one tidy table, drawn the same way on every paper-B figure.

A table's ``source`` column says where a row comes from: "simulation" (one row per
job and seed) or "theory" (one row per point of a theory curve, same columns, no seed).
:func:`draw` plots simulation rows as the mean over seeds with standard-error bars and
theory rows as plain lines of the same colour, so a theory module only has to append
rows to the table for its curve to appear.
"""

from __future__ import annotations

from typing import Callable, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from attnrepro.report.plotting import palette
from attnrepro.stats.seed_stats import summary

SOURCE, SIMULATION, THEORY = "source", "simulation", "theory"
CONVERGED = "converged"  # per seed: met its gradient tolerance (jobs.fit); absent or NaN = no criterion


def part(table: pd.DataFrame, source: str) -> pd.DataFrame:
    """The rows of one source (a table without a source column is all simulation)."""
    if SOURCE not in table:
        return table if source == SIMULATION else table.iloc[0:0]
    return table[table[SOURCE] == source]


def simulation(table: pd.DataFrame) -> pd.DataFrame:
    return part(table, SIMULATION)


def theory(table: pd.DataFrame) -> pd.DataFrame:
    return part(table, THEORY)


def flag(df: pd.DataFrame, column: str) -> pd.Series:
    """A boolean column as bools, a missing value False (all False when the table has no such column)."""
    if column not in df:
        return pd.Series(False, index=df.index)
    return df[column].astype("boolean").fillna(False).astype(bool)


def converged(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of seeds that converged (all rows when the table records no convergence)."""
    if CONVERGED not in df:
        return df
    return df[df[CONVERGED].astype("boolean").fillna(True).astype(bool)]


def levels(table: pd.DataFrame, column: str) -> list:
    """The sorted distinct values of a column (none when absent or the table is empty)."""
    if table.empty or column not in table:
        return []
    return sorted(table[column].dropna().unique())


def draw(ax: plt.Axes, table: pd.DataFrame, x: str, y: str, hue: str | None = None,
         label: Callable[[object], str] = str, hues: Sequence | None = None, floor: float | None = None,
         marker: str = "o") -> None:
    """Mean ± s.e. over seeds of y vs x for every value of ``hue`` (simulation), and the theory
    rows of the same hue as lines. ``floor``: values below it are drawn at it (log axes). A point
    where some seed did not converge (column ``converged``) is drawn hollow."""
    hues = list(hues) if hues is not None else (levels(table, hue) if hue else [None])
    for h, color in zip(hues, palette(len(hues)), strict=True):
        rows = table if h is None else table[table[hue] == h]
        sims = simulation(rows)
        sim = summary(sims, [x], y)
        if not sim.empty:
            mean = sim["mean"].to_numpy(dtype=float)
            se = np.nan_to_num(sim["se"].to_numpy(dtype=float))
            lo = mean - se
            if floor is not None:
                mean, lo = np.maximum(mean, floor), np.maximum(lo, floor)
            ax.errorbar(sim[x], mean, yerr=[mean - lo, se], marker=marker, ms=3, lw=0.8, capsize=2,
                        color=color, label=None if h is None else label(h))
            full = {v for v, g in sims.groupby(x) if len(converged(g)) == len(g)}
            hollow = np.array([v not in full for v in sim[x]])
            if hollow.any():
                ax.plot(sim[x][hollow], mean[hollow], marker, ms=5, mfc="white", color=color, lw=0)
        th = theory(rows).sort_values(x)
        if not th.empty:
            ax.plot(th[x], th[y], "-", lw=1.4, color=color,
                    label=None if h is None else f"{label(h)} (theory)")
