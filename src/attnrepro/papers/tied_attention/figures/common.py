"""What paper B's figures share: experiment and curve names, the columns of the simulation tables,
selection, seed means, crossings and the seed bootstrap, and panel layout.

Every table has one row per (job, seed) with ``source`` = "simulation" (report.series); a theory
module adds rows with ``source`` = "theory" and the plots draw them as lines. Uncertainties:
standard errors of seed means, and 95% percentile intervals of the seed bootstrap (N_BOOT resamples
of the seeds within every job) for crossings, peaks and exponents.

Metric definitions (papers.tied_attention.problem): test error E||A_hat(X) - A0(X)||_F^2 on fresh
noiseless samples, training loss (1/n) sum 1/2 ||A_hat - y||_F^2, estimation error
||S - S0||_F^2 / d; a target direction u_i counts as recovered when
||(S - S0) u_i|| <= |lambda_i(S0)| / 2 (theory.error_decomposition).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from attnrepro.report import series
from attnrepro.report.claims import fmt
from attnrepro.report.plotting import PANEL, no_data
from attnrepro.report.tables import ExperimentData, select
from attnrepro.stats.fits import NAN, bootstrap_ci, threshold_crossing
from attnrepro.stats.seed_stats import summary

ERROR_VS_ALPHA, INTERP_PEAK = "tied_error_vs_alpha", "tied_interpolation_peak"  # experiments
SE_CURVE, INTERP_CURVE = "erm_state_evolution", "interpolation_threshold"       # theory curves
N_BOOT = 200
FLOOR = 1e-8            # values below are drawn at the floor on log axes (exact zeros included)
RECOVERY_LEVEL = 0.1    # the ridgeless estimation error "first drops below" this
TERMS = {"e_approx": "E_approx (recovered outliers)", "e_under": "E_under (directions not recovered)",
         "e_over": "E_over (noise bulk outside S0's range)", "e_coupling": "E_coupling (between the spaces)"}

ID = ["source", "key", "replica", "seed"]
CONFIG = ["task.d", "task.T", "task.alpha", "task.Delta", "task.target", "task.gamma", "task.kappa0",
          "task.beta0", "model.param", "model.kappa", "model.beta", "model.lam", "n", "p"]
METRICS = ["train_loss", "objective", "val_error", "test_error", "estimation_error", "rank_collapse",
           "n_recovered", *TERMS, "converged", "grad_rel"]


def rows(data: Mapping[str, ExperimentData], experiment: str, columns: Sequence[str],
         frame: str = "final") -> pd.DataFrame:
    """The experiment's frame restricted to ``columns`` (missing ones NaN), as simulation rows."""
    out = select(data, experiment, columns, frame)
    out[series.SOURCE] = series.SIMULATION
    return out


def theory_rows(data: Mapping[str, ExperimentData], experiment: str, curve: str) -> pd.DataFrame:
    """The rows of one theory curve of an experiment (empty when it has none)."""
    th = data[experiment].theory if experiment in data else pd.DataFrame()
    return th[th["curve"] == curve].copy() if "curve" in th else pd.DataFrame()


def grid(nrows: int, ncols: int, title: str = ""):
    fig, axes = plt.subplots(nrows, ncols, figsize=(PANEL[0] * ncols, PANEL[1] * nrows), squeeze=False,
                             layout="constrained")
    if title:
        fig.suptitle(title)
    return fig, axes


def lam_label(lam) -> str:
    return f"λ = {lam:g}"


def at(df: pd.DataFrame, **where) -> pd.DataFrame:
    """Rows whose columns equal the given values (``task_Delta=0.5`` means column task.Delta)."""
    mask = np.ones(len(df), dtype=bool)
    for k, v in where.items():
        mask &= np.isclose(pd.to_numeric(df[k.replace("_", ".", 1)], errors="coerce"), v)
    return df[mask]


def seed_means(df: pd.DataFrame, x: str, y: str) -> tuple[np.ndarray, np.ndarray]:
    s = summary(df, [x], y)
    return s[x].to_numpy(dtype=float), s["mean"].to_numpy(dtype=float)


def log_crossing_below(x: np.ndarray, y: np.ndarray, level: float) -> float:
    """First x where y falls below level, interpolating log y linearly in x (NaN if never)."""
    with np.errstate(divide="ignore"):
        return threshold_crossing(x, -np.log(np.maximum(y, 1e-300)), -math.log(level), log_x=False)


def recovery_crossing(df: pd.DataFrame) -> float:
    """alpha*: where the seed-mean estimation error first drops below RECOVERY_LEVEL (log-linear in alpha)."""
    return log_crossing_below(*seed_means(df, "task.alpha", "estimation_error"), RECOVERY_LEVEL)


def interior_peak(x: np.ndarray, y: np.ndarray) -> tuple[float, int]:
    """(x, index) of the highest interior local maximum of y(x) (NaN, -1 when none)."""
    idx = [i for i in range(1, len(y) - 1) if y[i] > y[i - 1] and y[i] > y[i + 1]]
    if not idx:
        return NAN, -1
    i = max(idx, key=lambda j: y[j])
    return float(x[i]), i


def boot_ci(df: pd.DataFrame, statistic) -> tuple[float, float]:
    """95% seed-bootstrap interval of statistic(df) (seeds resampled within each job)."""
    return bootstrap_ci(df, ["key"], statistic, N_BOOT)[1:]


def listing(xs, ys, name: str = "α") -> str:
    return ", ".join(f"{name} {x:g}: {fmt(y)}" for x, y in zip(xs, ys, strict=True))


def finish(ax, xlabel: str, ylabel: str, logy: bool = False, logx: bool = False, title: str = "") -> None:
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    if logy:
        ax.set_yscale("log")
    if logx:
        ax.set_xscale("log")
    if ax.lines or ax.collections or ax.patches:
        if ax.get_legend_handles_labels()[1]:
            ax.legend(fontsize=6)
    else:
        no_data(ax)
