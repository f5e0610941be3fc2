"""Figure xor_phase_dm: success after one population step on the (d, m) grid, and the m needed
for 50% and 90% success against d with power-law and polylog fits.

Estimates (common.crossing_estimates): curves "m_50" and "m_90", the crossings m*(d) with their
95% seed-bootstrap intervals and the fits m* ~ d^c ("power") and m* = a (log2 d)^b ("polylog")
with the slopes' bootstrap intervals.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from attnrepro.papers.sparse_xor.figures.common import (
    N_BOOT,
    PHASE,
    crossing_estimates,
    crossing_panel,
    read_crossings,
    slope_claim,
    with_success,
)
from attnrepro.report.claims import Claim, claim_key, fmt, judge
from attnrepro.report.figure_spec import FigureSpec, register
from attnrepro.report.plotting import column_heatmap, panels
from attnrepro.report.tables import ExperimentData, select
from attnrepro.stats.summaries import crossings, rate_table

FIGURE = PHASE
LEVELS = {"m_50": 0.5, "m_90": 0.9}  # curve -> success level of the crossing


def table(data: Mapping[str, ExperimentData]) -> pd.DataFrame:
    """Rows: (key, replica) of the one-step sweep on (d, m): m = ceil(m_c log2(d)^2), loss, success."""
    df = select(data, FIGURE, ["key", "replica", "seed", "task.d", "model.m_c", "m", "loss"])
    return with_success(df)


def estimates(table: pd.DataFrame) -> pd.DataFrame:
    """m*(d) at every level of LEVELS with both fits (seed bootstrap, N_BOOT resamples)."""
    return crossing_estimates({curve: crossings(table, "task.d", "m", level, n_boot=N_BOOT)
                               .summary(("power", "polylog")) for curve, level in LEVELS.items()})


def plot(table: pd.DataFrame, estimates: pd.DataFrame):
    fig, (a, b) = panels(2, "success after one population step (loss < 0.01)")
    rates = rate_table(table, ["task.d", "m"])
    mappable = column_heatmap(a, rates, "task.d", "m", "rate")
    ds = np.geomspace(rates["task.d"].min(), rates["task.d"].max(), 64)
    a.plot(ds, np.log2(ds) ** 2, color="red", lw=1.2, label="m = log2(d)^2")
    a.set(xlabel="d", ylabel="m")
    a.legend(fontsize=7, loc="upper left")
    fig.colorbar(mappable, ax=a, label="success rate")
    fits = [("power d^c", "power", "-"), ("polylog a(log2 d)^b", "polylog", "--")]
    crossing_panel(b, [(f"m at {level:.0%} success", read_crossings(estimates, curve, "m", level), fits)
                       for curve, level in LEVELS.items()], "d", "m needed")
    return fig


def claims(table: pd.DataFrame, estimates: pd.DataFrame) -> list[Claim]:
    out = []
    at_one = rate_table(table[table["model.m_c"] == 1.0], ["task.d", "m"])
    for r in at_one.itertuples():
        out.append(judge(FIGURE, f"d = {r[1]:g}: success after one step at m = ceil(log2(d)^2) = {r.m:g} "
                                 "is >= 0.85", r.rate, lambda v: v >= 0.85,
                         f"± {fmt(r.se)} (binomial s.e., n = {r.n})", f"{r.successes}/{r.n} seeds",
                         key=claim_key("success_at_log2d_squared", d=r[1])))
    if at_one.empty:
        out.append(judge(FIGURE, "success after one step at m = ceil(log2(d)^2) is >= 0.85", float("nan"),
                         lambda v: v >= 0.85, detail="no job with model.m_c = 1", key="success_at_log2d_squared"))
    c90 = read_crossings(estimates, "m_90", "m", LEVELS["m_90"])
    out.append(slope_claim(FIGURE, "m90_power_exponent",
                           "m needed for 90% success grows sublinearly: m_90 ~ d^c with c < 0.5",
                           c90, "power", lambda v: v < 0.5))
    out.append(slope_claim(FIGURE, "m90_polylog_exponent",
                           "m needed for 90% success is polylogarithmic: m_90 = a (log2 d)^b, b <= 2",
                           c90, "polylog", lambda v: v <= 2, symbol="polylog exponent b"))
    return out


SPEC = register(FigureSpec(
    name=FIGURE, sources=(FIGURE,), table=table, plot=plot, claims=claims, estimates=estimates,
    caption="Left: fraction of seeds with population loss < 0.01 after one population step (softmax, "
            "antisymmetric init, eta = lr d^2 sqrt(m)) on the (d, m) grid, m = ceil(m_c log2(d)^2), with "
            "the curve m = log2(d)^2. Right: m needed for 50% and 90% success (log-linear interpolation in m "
            "between grid points; hollow = reached at the smallest m of the grid, an upper bound left out of "
            "the fits), 95% seed-bootstrap intervals, with a power-law fit m ~ d^c and a polylog fit "
            "m = a (log2 d)^b (exponents with bootstrap CIs in the legend).",
))
