"""What paper A's figures share: success criteria, the seed bootstrap's size, and crossing panels,
estimates and claims.

Success of a transformer seed: exact population loss < SUCCESS_LOSS after training.
Success of an FFNN seed: 0/1 test error <= FFNN_SUCCESS_ERROR on fresh samples.
Uncertainties: IQR over seeds for medians, binomial standard errors for rates, and
95% percentile intervals of the seed bootstrap (N_BOOT resamples of the seeds within
every job) for crossings and fitted exponents.

A figure with crossings keeps them in its estimates frame (stats.estimates) under a ``curve`` key,
one CrossingSummary per curve: columns name, curve, fit, task.d, value, lo, hi.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from attnrepro.report.claims import Claim, fmt, interval, judge
from attnrepro.report.plotting import crossing_points, fit_label, fit_line, loglog, no_data, palette
from attnrepro.stats import estimates as est
from attnrepro.stats.summaries import CrossingSummary

SUCCESS_LOSS = 0.01
FINISHED = ("converged", "objective stalled")  # a trained seed's stop reasons that count (jobs.fit.convergence)
MAX_LEFT_OUT = 0.1  # a claim on trained seeds is not confirmed when more than this share of a cell did not finish
FFNN_SUCCESS_ERROR = 0.01
N_BOOT = 200
PHASE = "xor_phase_dm"  # the one-step (d, m) sweep: its own figure and the transformer of xor_params_vs_ffnn
GROUP = "task.d"        # every crossing family of paper A is indexed by d
ESTIMATE_KEYS = ["curve", "fit", GROUP]


def with_success(df: pd.DataFrame, metric: str = "loss", threshold: float = SUCCESS_LOSS,
                 strict: bool = True) -> pd.DataFrame:
    """success = metric < threshold (strict) or <= threshold; a missing metric is a failure."""
    v = pd.to_numeric(df[metric], errors="coerce")
    df["success"] = (v < threshold) if strict else (v <= threshold)
    return df


SHARES = ["share_p", "share_q", "share_tilde_p", "share_tilde_q"]


def split_one_to_one(df: pd.DataFrame) -> pd.Series:
    """Whether the two heads split one-to-one onto the support: one head's attention share
    (|gamma_i| / sum_j |gamma_j|, problem.attention_share) is above 1/2 on p and the other's on q.
    Rows without the shares count as not split."""
    share = {c: pd.to_numeric(df[c], errors="coerce") if c in df else pd.Series(float("nan"), df.index)
             for c in SHARES}
    return (((share["share_p"] > 0.5) & (share["share_tilde_q"] > 0.5))
            | ((share["share_q"] > 0.5) & (share["share_tilde_p"] > 0.5)))


def rate_claim(figure: str, text: str, flags: pd.Series, passes, detail: str = "", *, key: str) -> Claim:
    """A claim on the fraction of seeds (rows) with the flag set, with its binomial standard error."""
    n = int(len(flags))
    rate = float(flags.mean()) if n else float("nan")
    se = float(np.sqrt(rate * (1 - rate) / n)) if n else float("nan")
    return judge(figure, text, rate, passes, f"binomial s.e. {fmt(se)}, {n} seeds", detail, key=key)


def by(table: pd.DataFrame, column: str) -> list:
    return sorted(table[column].dropna().unique()) if column in table and not table.empty else []


def crossing_estimates(families: dict[str, CrossingSummary]) -> pd.DataFrame:
    """The estimates frame of crossing families, by curve name."""
    return est.frame([r for curve, c in families.items() for r in c.rows(curve=curve)], ESTIMATE_KEYS)


def read_crossings(est: pd.DataFrame, curve: str, x: str, level: float) -> CrossingSummary:
    """The crossing family ``curve`` (x* of ``x`` at ``level`` success, by d) from the estimates."""
    return CrossingSummary.read(est, GROUP, x, level, curve=curve)


def crossing_detail(c: CrossingSummary) -> str:
    ok = np.isfinite(c.point)
    pts = ", ".join(f"{g:g}: {fmt(v)}" for g, v in zip(c.groups[ok], c.point[ok], strict=True))
    undefined = [f"{g:g}" for g in c.groups[~ok]]
    out = f"{c.x}* at {c.level:.0%} success by {c.group}: {pts or 'none'}"
    if undefined:
        out += f"; never reached for {c.group} = {', '.join(undefined)}"
    if c.censored.any():
        out += f"; {int(c.censored.sum())} reached at the grid's smallest {c.x} (upper bounds)"
    return out


def slope_claim(figure: str, key: str, text: str, c: CrossingSummary, fit: str, passes, use_upper: bool = False,
                symbol: str = "exponent") -> Claim:
    """A claim on the slope of the named fit of the crossings, with its bootstrap CI; tested on the
    point estimate, or on the CI's upper end when use_upper. The fit uses the measured crossings
    only, and the claim holds only when every group's crossing is measured inside the grid: a
    crossing never reached, or reached at the grid's first point (an upper bound), leaves the
    slope undetermined, so the claim is not confirmed."""
    law, lo, hi = c.fits[fit]
    measured_inside = bool(len(c.point)) and bool(np.isfinite(c.point).all()) and not c.censored.any()
    detail = f"{law.n_points} points; {crossing_detail(c)}"
    if not measured_inside:
        detail = "not confirmed: some crossings lie outside the grid (extend it); " + detail
    return judge(figure, text, law.slope, lambda v: measured_inside and passes(v),
                 interval(lo, hi, f"95% bootstrap CI of the {symbol}"), detail,
                 tested=hi if use_upper else None, key=key)


def crossing_panel(ax, items: Sequence[tuple[str, CrossingSummary, Sequence[tuple[str, str, str]]]],
                   xlabel: str, ylabel: str) -> None:
    """Crossings vs d on log-log axes with fitted laws: items = (label, crossings,
    [(legend name, fit name, linestyle), ...]); polylog fits are evaluated at log2 d."""
    colors = palette(len(items))
    for (label, c, fits), color in zip(items, colors, strict=True):
        crossing_points(ax, c, label, color)
        for name, fit, ls in fits:
            law, lo, hi = c.fits[fit]
            transform = np.log2 if fit == "polylog" else (lambda x: x)
            symbol = "b" if fit == "polylog" else "slope"
            measured = c.groups[np.isfinite(c.point) & ~c.censored]
            fit_line(ax, measured, law, fit_label(name, law, lo, hi, symbol), color, ls, transform=transform)
    loglog(ax, xlabel, ylabel)
    if ax.lines:
        ax.legend(fontsize=6)
    else:
        no_data(ax)
