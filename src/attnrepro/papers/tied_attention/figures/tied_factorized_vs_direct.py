"""Figure tied_factorized_vs_direct: factorized S = WᵀW/√(pd) against direct S = sym(A)/√(pd), each at
its seeds' cross-validated weight decay. Cross-validation chooses among a seed's converged runs only
(a run that missed its gradient tolerance is not the ERM at its λ), of seeds with a run at every λ;
the claims say how many were left out. Claims: differences of seed means with their s.e. (no shared
estimates)."""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from attnrepro.papers.tied_attention.figures.common import CONFIG, ERROR_VS_ALPHA, ID, METRICS, at, finish, grid, rows
from attnrepro.report import series
from attnrepro.report.claims import Claim, claim_key, fmt, judge
from attnrepro.report.figure_spec import FigureSpec, register
from attnrepro.report.plotting import palette
from attnrepro.report.tables import ExperimentData
from attnrepro.stats import cross_validation
from attnrepro.stats.fits import NAN
from attnrepro.stats.seed_stats import difference, mean_se, summary

FIGURE = "tied_factorized_vs_direct"
SAME = ["task.d", "task.Delta", "task.alpha"]  # the factorized runs compared are those at the direct runs' points
CV_GROUPS = ["model.param", *SAME]             # each seed cross-validates lambda within its group


def table(data: Mapping[str, ExperimentData]) -> pd.DataFrame:
    """Rows: (key, replica) of the direct sweep and of the factorized sweep at the same (d, Delta,
    alpha), with ``selected`` = the row is its seed's cross-validated lambda (argmin val_error over
    the seed's converged rows)."""
    cols = [*ID, *CONFIG, *METRICS]
    direct = rows(data, FIGURE, cols)
    fact = rows(data, ERROR_VS_ALPHA, cols)
    if not direct.empty and not fact.empty:
        fact = fact.merge(direct[SAME].drop_duplicates(), on=SAME, how="inner")
    parts = [p for p in (fact, direct) if not p.empty]
    if not parts:
        return pd.DataFrame(columns=[*cols, "selected"])
    both = pd.concat(parts, ignore_index=True)
    chosen = cross_validation.select(series.converged(cross_validation.complete_seeds(both, CV_GROUPS)), CV_GROUPS)
    chosen = chosen[["key", "replica"]].assign(selected=True)
    both = both.merge(chosen, on=["key", "replica"], how="left")
    both["selected"] = both["selected"].astype("boolean").fillna(False).astype(bool)
    return both


def _cv_rows(table: pd.DataFrame) -> pd.DataFrame:
    sim = series.simulation(table)
    return pd.concat([sim[sim["selected"].astype(bool)], series.theory(table)], ignore_index=True)


def at_param(df: pd.DataFrame, param: str) -> pd.DataFrame:
    return df[df["model.param"] == param]


def plot(table: pd.DataFrame, estimates: None):
    fig, (row,) = grid(1, 3, "factorized vs direct, each at its cross-validated λ (per seed)")
    a, b, c = row
    cv = _cv_rows(table)
    params = series.levels(table, "model.param")
    series.draw(a, cv, "task.alpha", "test_error", "model.param", str, params)
    finish(a, "α = n / d²", "test error at CV λ", logy=True)
    series.draw(b, cv, "task.alpha", "estimation_error", "model.param", str, params)
    finish(b, "α = n / d²", "||S - S0||² / d at CV λ", logy=True)
    sim = series.simulation(table)
    for p, color in zip(params, palette(len(params)), strict=True):
        s = summary(at_param(sim[sim["selected"].astype(bool)], p), ["task.alpha"], "model.lam")
        c.plot(s["task.alpha"], s["median"].clip(lower=1e-4), "o-", ms=3, color=color, label=f"{p} (median)")
    finish(c, "α = n / d²", "selected λ (0 drawn at 1e-4)", logy=True)
    return fig


def _edge_note(table: pd.DataFrame, selected: pd.DataFrame) -> str:
    """'; <param>: k/n seeds chose the grid's largest λ' for each model where that happened (the
    optimum may then lie beyond the grid)."""
    notes = []
    for p in series.levels(selected, "model.param"):
        top = series.simulation(at_param(table, p))["model.lam"].max()
        chosen = at_param(selected, p)["model.lam"]
        if (chosen == top).any():
            notes.append(f"{p}: {int((chosen == top).sum())}/{len(chosen)} seeds chose the grid's largest λ = {top:g}")
    return "".join(f"; {n}" for n in notes)


def _left_out_note(table: pd.DataFrame) -> str:
    """'; left out of the cross-validation: <param> k/n (seed, λ) runs unconverged, <param> k/n runs of
    seeds without a run at every λ', for each that happened."""
    sim = series.simulation(table)
    full = cross_validation.complete_seeds(sim, CV_GROUPS)
    kept = series.converged(full)
    notes = []
    for a, b, what in ((full, kept, "(seed, λ) runs unconverged"),
                       (sim, full, "runs of seeds without a run at every λ")):
        notes += [f"{p} {len(at_param(a, p)) - len(at_param(b, p))}/{len(at_param(a, p))} {what}"
                  for p in series.levels(a, "model.param") if len(at_param(b, p)) < len(at_param(a, p))]
    return f"; left out of the cross-validation: {', '.join(notes)}" if notes else ""


def claims(table: pd.DataFrame, estimates: None) -> list[Claim]:
    out = []
    cv = series.simulation(_cv_rows(table))
    diffs = []
    for alpha in series.levels(cv, "task.alpha"):
        t = at(cv, task_alpha=alpha)
        f, d = at_param(t, "factorized")["test_error"], at_param(t, "direct")["test_error"]
        gap, se = difference(d, f)
        mf, md = mean_se(f)[0], mean_se(d)[0]
        diffs.append(gap)
        out.append(judge(FIGURE, f"α = {alpha:g}: factorized beats direct at cross-validated λ (direct minus "
                                 "factorized test error > 0)", gap, lambda v: v > 0, f"± {fmt(se)} (s.e.)",
                         f"factorized {fmt(mf)}, direct {fmt(md)}: factorized "
                         f"{fmt(100 * gap / md if md else NAN)}% lower; gap/s.e. = {fmt(gap / se if se else NAN)}"
                         + _edge_note(table, t) + _left_out_note(at(table, task_alpha=alpha)),
                         key=claim_key("factorized_beats_direct", alpha=alpha)))
    worst = float(np.min(diffs)) if diffs else NAN
    out.append(judge(FIGURE, "factorized beats direct at every α of the grid (smallest gap > 0)", worst,
                     lambda v: v > 0, "", f"{len(diffs)} values of α; CV per seed on the validation error",
                     key="factorized_beats_direct_everywhere"))
    return out


SPEC = register(FigureSpec(
    name=FIGURE, sources=(ERROR_VS_ALPHA, FIGURE), table=table, plot=plot, claims=claims,
    caption="Factorized S = WᵀW/√(pd) (penalty (λ/2)‖W‖² = (λ/2)√(pd) Tr S) against direct S = sym(A)/√(pd) "
            "(penalty (λ/2)√(pd)‖S‖²_F: the same prefactor per unit of S), Wishart target, κ = κ0 = 0.5, noisy "
            "labels (Δ of the direct sweep), each at its cross-validated λ: every seed picks the λ of the grid "
            "with the smallest error on its held-out noisy validation set (never the test set), among its runs "
            "that converged (the direct model is trained by L-BFGS to its minimiser at every λ; the factorized "
            "runs at λ = 0 are Adam's 1000 steps, left out where they miss the gradient tolerance; a seed takes part "
            "only with a run at every λ of its side). Test error and "
            "estimation error, mean ± s.e. over seeds; right: the selected λ (median over seeds). The factorized "
            "runs are those of tied_error_vs_alpha at the same (d, Δ, α).",
))
