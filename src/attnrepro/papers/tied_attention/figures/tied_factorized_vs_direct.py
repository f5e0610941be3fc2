"""Figure tied_factorized_vs_direct: factorized S = WᵀW/√(pd) against direct S = sym(A)/√(pd), each at its
seeds' cross-validated weight decay, beside each student's state evolution at its optimal λ. Cross-validation
chooses among a seed's converged runs only (a run that missed its gradient tolerance is not the ERM at its λ),
of seeds with a run at every λ; the claims say how many were left out. Claims and estimates:
tied_factorized_vs_direct_claims.

Table rows (column ``source``):
  simulation  (key, replica) of the direct sweep and of the factorized sweep (tied_error_vs_alpha) at the same
              (d, Delta, alpha), with ``selected`` = the row is its seed's cross-validated lambda;
  theory      curve optimal_lambda: each student's state evolution at the lambda* minimising its test error
              (model.param, lam_star, validity_bound, ...); curve direct_state_evolution: the direct student's at
              every lambda > 0 of its sweep; curve erm_state_evolution: the factorized student's at its runs'
              (kappa, Delta, lambda > 0, alpha) (tied_error_vs_alpha's theory);
  spectrum    one row per learned eigenvalue (records' arrays) of the selected runs at the spectrum's alpha
              (the grid's alpha nearest SPECTRUM_ALPHA).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from attnrepro.papers.tied_attention.figures.common import (
    CONFIG,
    ERROR_VS_ALPHA,
    ID,
    METRICS,
    SE_CURVE,
    at,
    finish,
    grid,
    rows,
    theory_rows,
)
from attnrepro.papers.tied_attention.figures.tied_factorized_vs_direct_claims import (
    ATOM,
    CV_GROUPS,
    DIRECT_SE,
    FIGURE,
    OPTIMAL,
    SAME,
    SPECTRUM,
    at_param,
    claims,
    estimates,
    optimal,
    spectrum_alpha,
)
from attnrepro.report import series
from attnrepro.report.figure_spec import FigureSpec, register
from attnrepro.report.plotting import palette
from attnrepro.report.tables import ExperimentData
from attnrepro.stats import cross_validation
from attnrepro.stats import estimates as est
from attnrepro.stats.seed_stats import summary

SE_PLACE = ["model.kappa", "task.Delta", "task.alpha"]  # where a factorized run meets its state evolution


def table(data: Mapping[str, ExperimentData]) -> pd.DataFrame:
    """The simulation, theory and spectrum rows (module docstring)."""
    sims = _simulations(data)
    parts = [p for p in (sims, _theory(data, sims), _spectra(data, sims)) if not p.empty]
    if not parts:
        return sims
    out = pd.concat(parts, ignore_index=True)
    out["selected"] = series.flag(out, "selected")  # a simulation row only
    return out


def _simulations(data: Mapping[str, ExperimentData]) -> pd.DataFrame:
    """Rows: (key, replica) of the direct sweep and of the factorized sweep at the same (d, Delta, alpha), with
    ``selected`` = the row is its seed's cross-validated lambda (argmin val_error over the seed's converged rows)."""
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


def _theory(data: Mapping[str, ExperimentData], sims: pd.DataFrame) -> pd.DataFrame:
    """Both students at their optimal lambda, the direct state evolution at each lambda, and the factorized one at
    the factorized runs' (kappa, Delta, alpha) and lambda > 0, each row with its model.param."""
    direct = theory_rows(data, FIGURE, DIRECT_SE).assign(**{"model.param": "direct"})
    fact = theory_rows(data, ERROR_VS_ALPHA, SE_CURVE)
    runs = at_param(sims, "factorized")
    if fact.empty or runs.empty:
        fact = fact.iloc[0:0]
    else:
        fact = fact[fact["model.lam"] > 0].merge(runs[SE_PLACE].drop_duplicates(), on=SE_PLACE, how="inner")
        fact = fact.assign(**{"model.param": "factorized"})
    parts = [p for p in (theory_rows(data, FIGURE, OPTIMAL), direct, fact) if not p.empty]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _spectra(data: Mapping[str, ExperimentData], sims: pd.DataFrame) -> pd.DataFrame:
    """The learned eigenvalues of the selected runs at the spectrum's alpha, one row each, source = "spectrum"."""
    alpha = spectrum_alpha(sims)
    if not np.isfinite(alpha):
        return pd.DataFrame()
    chosen = at(sims[sims["selected"].astype(bool)], task_alpha=alpha)[["key", "replica"]]
    cols = [*ID, "task.alpha", "model.param", "model.lam", "position", "eigenvalues"]
    arrays = pd.concat([rows(data, e, cols, "arrays") for e in (FIGURE, ERROR_VS_ALPHA)], ignore_index=True)
    arrays = arrays.merge(chosen, on=["key", "replica"], how="inner")
    return arrays.assign(**{series.SOURCE: SPECTRUM, "selected": False})


def _cv_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The selected runs and both students' converged optimal-lambda rows (the lines)."""
    sim = series.simulation(table)
    return pd.concat([sim[sim["selected"].astype(bool)], optimal(table)], ignore_index=True)


def plot(table: pd.DataFrame, estimates: pd.DataFrame):
    fig, (row,) = grid(1, 4, "factorized vs direct: runs at their cross-validated λ (per seed), theory at its "
                             "optimal λ")
    a, b, c, e = row
    cv, params = _cv_rows(table), ["direct", "factorized"]
    series.draw(a, cv, "task.alpha", "test_error", "model.param", str, params)
    series.draw(b, cv, "task.alpha", "estimation_error", "model.param", str, params)
    _edge_marks(a, b, optimal(table))
    finish(a, "α = n / d²", "test error at CV λ (theory: at λ*)", logy=True)
    finish(b, "α = n / d²", "||S - S0||² / d at CV λ (theory: at λ*)", logy=True)
    _selected_lambda(c, table, params)
    _spectra_panel(e, table, estimates, params)
    return fig


def _edge_marks(a, b, opt: pd.DataFrame) -> None:
    """Squares on the factorized lines where lambda* is the edge of the valid region (validity_bound)."""
    edge = at_param(opt, "factorized")
    edge = edge[series.flag(edge, "validity_bound")]
    for ax, y in ((a, "test_error"), (b, "estimation_error")):
        if len(edge):
            ax.plot(edge["task.alpha"], edge[y], "s", ms=5, mfc="none", color="0.3", lw=0,
                    label="factorized λ* at the width's edge (rank = κ)")


def _selected_lambda(ax, table: pd.DataFrame, params: list[str]) -> None:
    sim, opt = series.simulation(table), optimal(table)
    for p, color in zip(params, palette(len(params)), strict=True):
        s = summary(at_param(sim[sim["selected"].astype(bool)], p), ["task.alpha"], "model.lam")
        ax.plot(s["task.alpha"], s["median"].clip(lower=1e-4), "o", ms=3, color=color, label=f"{p}: CV λ (median)")
        th = at_param(opt, p).sort_values("task.alpha")
        if len(th):
            ax.plot(th["task.alpha"], th["lam_star"], "-", lw=1.4, color=color, label=f"{p}: theory λ*")
    finish(ax, "α = n / d²", "λ (CV: 0 drawn at 1e-4)", logy=True)


def _spectra_panel(ax, table: pd.DataFrame, estimates: pd.DataFrame, params: list[str]) -> None:
    """The selected runs' non-zero eigenvalues at the spectrum's alpha as a fraction of all per bin (pooled over
    seeds; the atom at 0 is given as its mass), with each student's learned-spectrum law at lambda* (its density
    times the bin width)."""
    spec, alpha = series.part(table, SPECTRUM), est.value(estimates, "spectrum_alpha")
    values = {p: at_param(spec, p)["eigenvalues"].dropna().to_numpy(dtype=float) for p in params}
    laws = {p: _law_density(estimates, p) for p in params}
    pooled = np.concatenate([*values.values(), *(x for x, _ in laws.values())])
    if pooled.size:
        edges = np.linspace(pooled.min(), pooled.max(), 41)
        for p, color in zip(params, palette(len(params)), strict=True):
            _spectrum_lines(ax, p, color, values[p], laws[p], edges, estimates)
    finish(ax, "eigenvalue of S", "fraction per bin (atom at 0 not drawn)",
           title=f"learned spectra at α = {alpha:g}" if np.isfinite(alpha) else "learned spectra")


def _spectrum_lines(ax, param: str, color, y: np.ndarray, law: tuple[np.ndarray, np.ndarray], edges: np.ndarray,
                    estimates: pd.DataFrame) -> None:
    keys = {"model.param": param}
    if y.size:
        bulk = y[np.abs(y) > ATOM * np.abs(y).max()]
        ax.stairs(np.histogram(bulk, edges)[0] / y.size, edges, color=color,
                  label=f"{param}: learned (atom {est.value(estimates, 'sim_atom', **keys):.2f})")
    if law[0].size:
        ax.plot(law[0], law[1] * (edges[1] - edges[0]), "-", lw=1.2, color=color,
                label=f"{param}: law at λ* (atom {est.value(estimates, 'theory_atom', **keys):.2f})")


def _law_density(estimates: pd.DataFrame, param: str) -> tuple[np.ndarray, np.ndarray]:
    """The learned-spectrum law's density (continuous part) at lambda*, from the estimates' density rows."""
    d = est.select(estimates, "law_density", **{"model.param": param})
    if d.empty:
        return np.array([]), np.array([])
    return d["x"].to_numpy(dtype=float), d["value"].to_numpy(dtype=float)


SPEC = register(FigureSpec(
    name=FIGURE, sources=(ERROR_VS_ALPHA, FIGURE), table=table, plot=plot, claims=claims, estimates=estimates,
    caption="Factorized S = WᵀW/√(pd) (penalty (λ/2)‖W‖² = (λ/2)√(pd) Tr S) against direct S = sym(A)/√(pd) "
            "(penalty (λ/2)√(pd)‖S‖²_F: the same prefactor per unit of S), Wishart target, κ = κ0 = 0.5, noisy "
            "labels (Δ of the direct sweep), each at its cross-validated λ: every seed picks the λ of the grid "
            "with the smallest error on its held-out noisy validation set (never the test set), among its runs "
            "that converged (the direct model is trained by L-BFGS to its minimiser at every λ; the factorized "
            "runs at λ = 0 are Adam's 1000 steps, left out where they miss the gradient tolerance; a seed takes part "
            "only with a run at every λ of its side). Test error and estimation error, mean ± s.e. over seeds; lines: "
            "each student's state evolution (d → ∞) at the λ* that minimises its test error (the oracle λ that "
            "cross-validation estimates; factorized: only where valid, κ ≥ the learned rank; squares: λ* at the "
            "edge of that region, rank = κ, where the unconstrained optimum wants a rank above the width; the "
            "output channel's Sobol' rule of 2^10 nodes in the quick profile, 2^12 in the paper profile). Third "
            "panel: the selected λ (median over seeds) and λ*. Right: the learned eigenvalues of the selected runs "
            "at one α, pooled over seeds (the atom at 0, |s| ≤ 1e-3 max|s|, given as a mass), against each student's "
            "learned-spectrum law at λ*: η·ReLU(S0 + δZ − εI) (an atom F_δ(ε) at 0) and η·(S0 + δZ) (no atom). The "
            "factorized runs are those of tied_error_vs_alpha at the same (d, Δ, α).",
))
