"""Figure tied_scaling_laws: power-law targets, the excess test error against n/d with power-law fits
over its falling branch, against paper B's exponent -1 + 1/(2 gamma), and the recovered modes; with
the ERM state evolution at larger d (theory curve scaling_law_state_evolution, paper profile).

Estimates, per gamma (key task.gamma; task.d the simulation's d): "slope" c of the least-squares fit
log y = c log(n/d) + b of the converged seeds' mean test error over the falling branch
(:func:`decreasing_branch`) with its 95% seed-bootstrap CI, "left_out" (seeds that did not converge,
drawn hollow and left out of the fits), "intercept" b, "n_points" of the fit, and the branch's n/d:
"branch_min", "branch_max" and "branch_centre" = exp(mean log(n/d)). Per (gamma, d) of the theory:
"theory_slope" (the same fit over the converged points of the state evolution's falling branch; its
interval: the smallest and largest slope between neighbouring points), "theory_intercept",
"theory_n_points", "theory_branch_min", "theory_branch_max", "theory_left_out" (points that did not
converge: left out of the fit).
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np
import pandas as pd

from attnrepro.papers.tied_attention.figures.common import (
    CONFIG,
    FLOOR,
    ID,
    METRICS,
    at,
    boot_ci,
    finish,
    grid,
    listing,
    rows,
    seed_means,
    theory_rows,
)
from attnrepro.report import series
from attnrepro.report.claims import Claim, claim_key, fmt, interval, judge
from attnrepro.report.figure_spec import FigureSpec, register
from attnrepro.report.plotting import fit_line, palette
from attnrepro.report.tables import ExperimentData
from attnrepro.stats import estimates as est
from attnrepro.stats.fits import NAN, PowerLaw, power_law_fit
from attnrepro.stats.seed_stats import summary
from attnrepro.theory.scaling_laws import excess_error_exponent

FIGURE = "tied_scaling_laws"
THEORY = "scaling_law_state_evolution"


def table(data: Mapping[str, ExperimentData]) -> pd.DataFrame:
    """Rows: (key, replica) of the power-law sweep: gamma, alpha, n, n/d, errors, recovered modes; and
    the rows of the state evolution at larger d (source = theory: gamma, d, alpha, n/d = alpha d,
    test_error, converged)."""
    df = rows(data, FIGURE, [*ID, *CONFIG, *METRICS])
    df["n_over_d"] = pd.to_numeric(df["n"], errors="coerce") / pd.to_numeric(df["task.d"], errors="coerce")
    th = theory_rows(data, FIGURE, THEORY)
    if th.empty:
        return df
    th["n_over_d"] = pd.to_numeric(th["task.alpha"]) * pd.to_numeric(th["task.d"])
    th[series.SOURCE] = series.THEORY
    return pd.concat([df, th], ignore_index=True)


def decreasing_branch(x: np.ndarray, y: np.ndarray, se: np.ndarray) -> int:
    """Number of points (sorted by x) of the falling branch of y(x): up to the minimum of y before its
    first significant rise (y[i+1] - y[i] > 2 sqrt(se[i]^2 + se[i+1]^2)). At small lambda the test error
    falls until n nears the interpolation threshold alpha_interp d^2, then rises towards the
    interpolation peak, outside the regime d << n << d^2 of the scaling law."""
    if not len(y):
        return 0
    rise = np.flatnonzero(np.diff(y) > 2 * np.hypot(se[:-1], se[1:]))
    stop = int(rise[0]) + 1 if rise.size else len(y)
    return int(np.nanargmin(y[:stop])) + 1 if np.isfinite(y[:stop]).any() else 0


def _fit(df: pd.DataFrame) -> tuple[PowerLaw, np.ndarray]:
    """(power-law fit of the seed-mean test error vs n/d on its falling branch, the branch's x)."""
    s = summary(df, ["n_over_d"], "test_error")
    x, y = s["n_over_d"].to_numpy(dtype=float), s["mean"].to_numpy(dtype=float)
    k = decreasing_branch(x, y, np.nan_to_num(s["se"].to_numpy(dtype=float)))
    return power_law_fit(x[:k], y[:k]), x[:k]


def _slope(df: pd.DataFrame) -> float:
    return _fit(df)[0].slope


def _converged(th: pd.DataFrame) -> pd.DataFrame:
    return th[th["converged"].astype("boolean").fillna(False).astype(bool)] if "converged" in th else th


def _theory_fit(th: pd.DataFrame) -> tuple[PowerLaw, np.ndarray, np.ndarray]:
    """(fit of the converged state-evolution points over their falling branch, its x, its local slopes)."""
    ok = _converged(th).sort_values("n_over_d")
    x, y = ok["n_over_d"].to_numpy(dtype=float), ok["test_error"].to_numpy(dtype=float)
    k = decreasing_branch(x, y, np.zeros_like(y))
    x, y = x[:k], y[:k]
    local = np.diff(np.log(y)) / np.diff(np.log(x)) if k > 1 else np.array([])
    return power_law_fit(x, y), x, local


def estimates(table: pd.DataFrame) -> pd.DataFrame:
    """Per gamma: the falling branch's fit with the slope's seed-bootstrap CI; per (gamma, d) of the
    theory: its fit (module docstring)."""
    sim, out = series.simulation(table), []
    for g in series.levels(sim, "task.gamma"):
        every = at(sim, task_gamma=g)
        t = series.converged(every)
        fit, x = _fit(t)
        centre = math.exp(np.mean(np.log(x))) if len(x) else NAN
        at_g = {"task.gamma": g}
        out += [est.row("slope", fit.slope, *boot_ci(t, _slope), **at_g),
                est.row("left_out", len(every) - len(t), **at_g),
                est.row("intercept", fit.intercept, **at_g), est.row("n_points", fit.n_points, **at_g),
                est.row("branch_min", min(x, default=NAN), **at_g), est.row("branch_max", max(x, default=NAN), **at_g),
                est.row("branch_centre", centre, **at_g)]
    th = series.theory(table)
    for g in series.levels(th, "task.gamma"):
        for d in series.levels(at(th, task_gamma=g), "task.d"):
            curve = at(th, task_gamma=g, task_d=d)
            fit, x, local = _theory_fit(curve)
            keys = {"task.gamma": g, "task.d": d}
            span = (local.min(), local.max()) if local.size else (NAN, NAN)
            out += [est.row("theory_slope", fit.slope, *span, **keys),
                    est.row("theory_intercept", fit.intercept, **keys),
                    est.row("theory_n_points", fit.n_points, **keys),
                    est.row("theory_branch_min", min(x, default=NAN), **keys),
                    est.row("theory_branch_max", max(x, default=NAN), **keys),
                    est.row("theory_left_out", len(curve) - len(_converged(curve)), **keys)]
    return est.frame(out, ["task.gamma", "task.d"])


def _read(estimates: pd.DataFrame, g: float) -> tuple[PowerLaw, float, float, np.ndarray]:
    """(the fit at gamma g, its slope's CI, the branch's [min, max] n/d) from the estimates."""
    at_g = {"task.gamma": g}
    slope, lo, hi = est.get(estimates, "slope", **at_g)
    law = PowerLaw(slope, est.value(estimates, "intercept", **at_g), int(est.value(estimates, "n_points", **at_g)))
    span = np.array([est.value(estimates, name, **at_g) for name in ("branch_min", "branch_max")])
    return law, lo, hi, span


def plot(table: pd.DataFrame, estimates: pd.DataFrame):
    fig, (row,) = grid(1, 2, "power-law targets: excess test error and recovered modes vs n/d")
    a, b = row
    gammas = series.levels(series.simulation(table), "task.gamma")
    label = lambda g: f"γ = {g:g}"  # noqa: E731
    sim = series.simulation(table)  # the theory lines are drawn per d below
    series.draw(a, sim, "n_over_d", "test_error", "task.gamma", label, gammas, floor=FLOOR)
    for g, color in zip(gammas, palette(len(gammas)), strict=True):
        if est.select(estimates, "slope", **{"task.gamma": g}).empty:
            continue
        fit, lo, hi, span = _read(estimates, g)
        fit_line(a, span, fit, f"fit {fmt(fit.slope)} [{fmt(lo)}, {fmt(hi)}]", color)
        if np.isfinite(fit.slope):
            xm, pred = est.value(estimates, "branch_centre", **{"task.gamma": g}), excess_error_exponent(g)
            ref = np.geomspace(span[0], span[1], 16)
            a.plot(ref, fit(xm) * (ref / xm) ** pred, ":", color=color, lw=1.2, label=f"-1 + 1/(2γ) = {fmt(pred)}")
    th = series.theory(table)
    for g, color in zip(gammas, palette(len(gammas)), strict=True):
        ds = series.levels(at(th, task_gamma=g), "task.d") if not th.empty else []
        for d in ds:
            t = at(th, task_gamma=g, task_d=d).sort_values("n_over_d")
            slope = est.value(estimates, "theory_slope", **{"task.gamma": g, "task.d": d})
            smaller = f" (thin: d = {', '.join(f'{v:g}' for v in ds[:-1])})" if len(ds) > 1 else ""
            a.plot(t["n_over_d"], t["test_error"], "-", color=color, lw=1.6 if d == ds[-1] else 0.8,
                   alpha=1.0 if d == ds[-1] else 0.45,
                   label=f"state evolution d = {d:g}{smaller}: {fmt(slope)}" if d == ds[-1] else "_nolegend_")
    finish(a, "n / d", "test error - e0 (e0 = 0)", logy=True, logx=True)
    if not th.empty:  # beside the panel: the theory lines double the legend
        a.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    series.draw(b, sim, "n_over_d", "n_recovered", "task.gamma", label, gammas)
    finish(b, "n / d", "target modes recovered", logx=True)
    return fig


def claims(table: pd.DataFrame, estimates: pd.DataFrame) -> list[Claim]:
    out = []
    sim = series.simulation(table)
    slopes = []
    for g in series.levels(sim, "task.gamma"):
        t = series.converged(at(sim, task_gamma=g))
        pred, (fit, lo, hi, (x_lo, x_hi)) = excess_error_exponent(g), _read(estimates, g)
        left_out = int(est.value(estimates, "left_out", **{"task.gamma": g}))
        x, y = seed_means(t, "n_over_d", "test_error")
        slopes.append(fit.slope)
        d = "/".join(f"{v:g}" for v in series.levels(t, "task.d"))
        out.append(judge(FIGURE, f"γ = {g:g}, simulation at d = {d}: test error ~ (n/d)^c with c within 0.1 of "
                                 f"-1 + 1/(2γ) = {fmt(pred)}",
                         fit.slope, lambda v, p=pred: abs(v - p) <= 0.1, interval(lo, hi, "95% seed-bootstrap CI"),
                         f"fit over the falling branch, {fit.n_points} points, n/d in "
                         f"[{fmt(x_lo)}, {fmt(x_hi)}]; seed means: {listing(x, y, 'n/d')}; unconverged seeds "
                         f"left out: {left_out}",
                         key=claim_key("error_exponent", gamma=g)))
        xs, modes = seed_means(t, "n_over_d", "n_recovered")
        out.append(judge(FIGURE, f"γ = {g:g}: target modes are recovered one by one as n grows (mean count "
                                 "non-decreasing, larger at the largest n)", modes[-1] if modes.size else NAN,
                         lambda v, m=modes: m.size > 1 and bool(np.all(np.diff(m) >= 0)) and m[-1] > m[0],
                         "", f"recovered modes: {listing(xs, modes, 'n/d')}",
                         key=claim_key("modes_recovered", gamma=g)))
    out.append(judge(FIGURE, "the exponent steepens with γ, as -1 + 1/(2γ) does (fitted slopes decreasing in γ)",
                     slopes[-1] if slopes else NAN,
                     lambda v: len(slopes) > 1 and bool(np.all(np.diff(slopes) < 0)), "",
                     "slopes: " + ", ".join(fmt(s) for s in slopes), key="exponent_steepens"))
    return out + _theory_claims(estimates)


def _theory_claims(estimates: pd.DataFrame) -> list[Claim]:
    """Per gamma, at the largest d of the state evolution: its exponent within 0.1 of -1 + 1/(2 gamma)
    (none without theory rows: the quick profile has none)."""
    th = est.select(estimates, "theory_slope")
    out = []
    for g in sorted(th["task.gamma"].unique()) if not th.empty else []:
        pred = excess_error_exponent(g)
        at_g = th[th["task.gamma"] == g].sort_values("task.d")
        d = float(at_g["task.d"].iloc[-1])
        slope, lo, hi = est.get(estimates, "theory_slope", **{"task.gamma": g, "task.d": d})
        span = [est.value(estimates, n, **{"task.gamma": g, "task.d": d}) for n in ("theory_branch_min",
                                                                                   "theory_branch_max")]
        n_pts = int(est.value(estimates, "theory_n_points", **{"task.gamma": g, "task.d": d}))
        left_out = int(est.value(estimates, "theory_left_out", **{"task.gamma": g, "task.d": d}))
        every_d = ", ".join(f"d = {r['task.d']:g}: {fmt(r['value'])}" for _, r in at_g.iterrows())
        out.append(judge(FIGURE, f"γ = {g:g}, state evolution at d = {d:g}: test error ~ (n/d)^c with c within 0.1 "
                                 f"of -1 + 1/(2γ) = {fmt(pred)}", slope, lambda v, p=pred: abs(v - p) <= 0.1,
                         interval(lo, hi, "range of local slopes"),
                         f"fit over the falling branch, {n_pts} converged points, n/d in [{fmt(span[0])}, "
                         f"{fmt(span[1])}]; {left_out} points that did not converge left out; the fitted "
                         f"exponent at every d: {every_d}",
                         key=claim_key("theory_exponent", gamma=g)))
    return out


SPEC = register(FigureSpec(
    name=FIGURE, sources=(FIGURE,), table=table, plot=plot, claims=claims, estimates=estimates,
    caption="Power-law targets S0 = O diag(√d i^-γ) Oᵀ, factorized student with p = d, noisy training labels, "
            "small λ, d << n << d². Left: test error on fresh noiseless samples (e0 = 0: β = β0 and the "
            "target itself has no test error; the small large-n floor that ERM on noisy labels keeps is not "
            "subtracted) vs n/d, log-log, mean ± s.e. over seeds (hollow: some seed did not converge; the fits and "
            "claims use the converged seeds), with power-law fits "
            "(exponent and 95% seed-bootstrap CI in the legend) over the falling branch (up to the minimum "
            "of the seed-mean error before its first rise by more than 2 s.e.: beyond it n nears the "
            "interpolation threshold and the error rises to the interpolation peak) and, dotted, the slope "
            "-1 + 1/(2γ) predicted by paper B through the fits' centre. Right: target modes recovered "
            "(‖(S - S0)u_i‖ <= |λ_i|/2) vs n/d. Lines (paper profile): the ERM state evolution at larger d "
            "(thin: smaller d, thick: the largest), same λ, κ, Δ, with its fitted exponent.",
))
