"""Figure xor_sample_complexity: success of one gradient step on n samples against n, and the n
needed for 50% success against d with a power-law fit.

Estimates: curve "n_50" (common.crossing_estimates: n*(d) with 95% seed-bootstrap intervals, the fit
n* ~ d^c with the slope's bootstrap interval) and "snr_exponent", the local exponent of this
project's one-step signal-to-noise estimate on the grid (:func:`one_step_snr_exponent`).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from attnrepro.papers.sparse_xor.figures.common import (
    ESTIMATE_KEYS,
    N_BOOT,
    crossing_panel,
    read_crossings,
    slope_claim,
    with_success,
)
from attnrepro.report.claims import Claim, fmt
from attnrepro.report.figure_spec import FigureSpec, register
from attnrepro.report.plotting import palette, panels
from attnrepro.report.tables import ExperimentData, select
from attnrepro.stats import estimates as est
from attnrepro.stats.fits import power_law_fit
from attnrepro.stats.summaries import crossings, rate_table

FIGURE = "xor_sample_complexity"
CURVE, LEVEL = "n_50", 0.5


def table(data: Mapping[str, ExperimentData]) -> pd.DataFrame:
    """Rows: (key, replica) of one step on n samples: d, n, m, population loss, train loss, success."""
    return with_success(select(data, FIGURE, ["key", "replica", "seed", "task.d", "task.n", "m", "loss",
                                               "train_loss"]))


def one_step_snr_exponent(ds) -> float:
    """Local exponent over the grid of n* = d^2 ln(d) / m, m = log2(d)^2: this project's one-step
    signal-to-noise estimate (not a claim of the paper).

    At init the step moves the score s_p by eta O(1/d^2) more than the others, while the
    sampling noise moves every score s_j by eta O(1/(d sqrt(m n))) (noise per gradient
    coordinate 1/sqrt(d n), through the softmax Jacobian 1/d and V's Gram matrix); p stands out
    of d positions once sqrt(m n)/d >~ sqrt(2 ln d), i.e. n >~ d^2 ln(d) / m.
    """
    ds = np.asarray(sorted(set(ds)), dtype=float)
    return power_law_fit(ds, ds**2 * np.log(ds) / np.log2(ds) ** 2).slope if ds.size >= 2 else float("nan")


def estimates(table: pd.DataFrame) -> pd.DataFrame:
    """n*(d) at 50% success with its power-law fit (seed bootstrap), and the signal-to-noise exponent."""
    c = crossings(table, "task.d", "task.n", LEVEL, n_boot=N_BOOT).summary(("power",))
    snr = one_step_snr_exponent(table["task.d"].dropna()) if not table.empty else float("nan")
    return est.frame([*c.rows(curve=CURVE), est.row("snr_exponent", snr)], ESTIMATE_KEYS)


def plot(table: pd.DataFrame, estimates: pd.DataFrame):
    fig, (a, b) = panels(2, "one step on n samples: success = population loss < 0.01")
    rates = rate_table(table, ["task.d", "task.n"])
    for (d, t), color in zip(rates.groupby("task.d"), palette(rates["task.d"].nunique()), strict=True):
        a.errorbar(t["task.n"], t["rate"], yerr=t["se"], marker="o", ms=3, capsize=2, color=color,
                   label=f"d = {d:g}")
    a.axhline(0.5, color="0.5", ls=":", lw=0.8)
    a.set(xscale="log", xlabel="n (samples)", ylabel="success rate", ylim=(-0.03, 1.03))
    a.legend(fontsize=7)
    c = read_crossings(estimates, CURVE, "task.n", LEVEL)
    crossing_panel(b, [("n at 50% success", c, [("power n ~ d^c", "power", "-")])], "d", "n needed")
    return fig


def claims(table: pd.DataFrame, estimates: pd.DataFrame) -> list[Claim]:
    c = read_crossings(estimates, CURVE, "task.n", LEVEL)
    snr = est.value(estimates, "snr_exponent")
    _, lo, hi = c.fits["power"]
    return [slope_claim(FIGURE, "n50_exponent",
                        f"samples for 50% success: n_50 ~ d^c with c consistent with the one-step "
                        f"signal-to-noise estimate n ~ d^2 ln(d)/m (local exponent {fmt(snr)} on this "
                        "grid; the 95% CI contains it)", c, "power", lambda v: lo <= snr <= hi)]


SPEC = register(FigureSpec(
    name=FIGURE, sources=(FIGURE,), table=table, plot=plot, claims=claims, estimates=estimates,
    caption="Left: fraction of seeds with population loss < 0.01 after one gradient step on the empirical "
            "loss of n samples (m = ceil(log2(d)^2)), binomial s.e. bars. Right: n at 50% success "
            "(log-linear interpolation in n; hollow = reached at the smallest n of the grid, an upper bound "
            "left out of the fit), 95% seed-bootstrap intervals, with a power-law fit n ~ d^c.",
))
