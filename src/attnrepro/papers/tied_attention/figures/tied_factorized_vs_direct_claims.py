"""The claims and estimates of figure tied_factorized_vs_direct (its table: tied_factorized_vs_direct).

Claims:
- factorized_beats_direct (per alpha, and everywhere): simulations, each seed at its cross-validated lambda;
  differences of seed means with their s.e.;
- theory_factorized_below_direct: each student's state evolution at its optimal lambda (the lambda that
  minimises its test error, which cross-validation estimates), factorized below direct at every alpha
  computed; a theory-internal check of paper B's claim;
- state_evolution_every_alpha (per student and lambda > 0): the simulated test error against the student's
  own state evolution at the same lambda, converged seeds only, within SE_LEVEL + 2 s.e. at every alpha
  (tied_error_vs_alpha_claims.se_deviations);
- spectrum_theory, spectrum_simulation: at one alpha, the factorized student's learned spectrum has an atom
  at 0 (rank collapse), the direct student's has none: from the learned-spectrum laws at lambda*, and from
  the selected runs' eigenvalues.

Estimates (estimates(table)): spectrum_alpha; per student sim_atom (mean over the selected seeds of the fraction
of eigenvalues with |s| <= ATOM max|s|, with its s.e. and count), theory_atom (the law's mass at 0 at lambda*)
and law_density (the law's continuous density on a grid x, for the plot).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnrepro.papers.tied_attention.figures.common import SE_CURVE, at, listing
from attnrepro.papers.tied_attention.figures.tied_error_vs_alpha_claims import SE_LEVEL, se_deviations
from attnrepro.report import series
from attnrepro.report.claims import Claim, claim_key, fmt, judge
from attnrepro.stats import cross_validation
from attnrepro.stats import estimates as est
from attnrepro.stats.fits import NAN
from attnrepro.stats.seed_stats import difference, mean_se

FIGURE = "tied_factorized_vs_direct"
OPTIMAL, DIRECT_SE = "optimal_lambda", "direct_state_evolution"  # theory curves
SPECTRUM = "spectrum"          # the source of the table's eigenvalue rows
SPECTRUM_ALPHA = 0.2           # the learned spectra are compared at the grid's alpha nearest this
ATOM = 1e-3                    # an eigenvalue is in the atom at 0 when |s| <= ATOM max|s| (the records' rank_collapse)
FACTORIZED_ATOM = 0.1          # "an atom at 0": at least this fraction of eigenvalues at 0 ...
DIRECT_ATOM = 0.01             # ... "none": at most this fraction (one eigenvalue in a hundred)
SAME = ["task.d", "task.Delta", "task.alpha"]  # the factorized runs compared are those at the direct runs' points
CV_GROUPS = ["model.param", *SAME]             # each seed cross-validates lambda within its group
STUDENT_CURVES = {"factorized": SE_CURVE, "direct": DIRECT_SE}  # each student's state evolution at each lambda


def at_param(df: pd.DataFrame, param: str) -> pd.DataFrame:
    return df[df["model.param"] == param] if "model.param" in df else df.iloc[0:0]


def optimal(table: pd.DataFrame, found_only: bool = True) -> pd.DataFrame:
    """The optimal-lambda theory rows: those whose lambda* was found (converged, and not at a bound of the search,
    where the minimum may lie beyond: found()), unless asked for all."""
    th = series.theory(table)
    th = th[th["curve"] == OPTIMAL] if "curve" in th else th.iloc[0:0]
    return th[found(th)] if found_only else th


def found(opt: pd.DataFrame) -> pd.Series:
    """Optimal-lambda rows whose lambda* is a minimum found: converged and not at_bound."""
    return series.flag(opt, "converged") & ~series.flag(opt, "at_bound")


def spectrum_alpha(sims: pd.DataFrame) -> float:
    """The alpha of the simulations' grid nearest SPECTRUM_ALPHA (the smaller on a tie); NaN without runs."""
    alphas = series.levels(series.simulation(sims), "task.alpha")
    return float(min(alphas, key=lambda a: (abs(a - SPECTRUM_ALPHA), a))) if alphas else NAN


# ---------------------------------------------------------------- estimates: the learned spectra

def estimates(table: pd.DataFrame) -> pd.DataFrame:
    """spectrum_alpha, and per student sim_atom, theory_atom and law_density (module docstring)."""
    alpha = spectrum_alpha(table)
    out = [est.row("spectrum_alpha", alpha)]
    spec = series.part(table, SPECTRUM)
    for p in ("factorized", "direct"):
        atoms = _seed_atoms(at_param(spec, p))
        mean, se, n = mean_se(atoms)
        out.append({**est.row("sim_atom", mean, **{"model.param": p}), "se": se, "n": n})
        out += _law_rows(table, p, alpha)
    return est.frame(out, ["model.param"], ["x", "se", "n"])


def _seed_atoms(spec: pd.DataFrame) -> np.ndarray:
    """Per selected seed (key, replica): the fraction of its eigenvalues with |s| <= ATOM max|s|."""
    if spec.empty:
        return np.array([])
    out = []
    for _, g in spec.groupby(["key", "replica"]):
        s = np.abs(g["eigenvalues"].dropna().to_numpy(dtype=float))
        out.append(float(np.mean(s <= ATOM * s.max())) if s.size else NAN)
    return np.array(out)


def learned_law(row: pd.Series):
    """The learned-spectrum law of an optimal-lambda row: eta ReLU(S0 + delta Z - eps I) (factorized,
    theory.learned_spectrum) or eta (S0 + delta Z) (direct), S0's law the Wishart target's."""
    from attnrepro.theory.direct_state_evolution import DirectLearnedSpectrum
    from attnrepro.theory.learned_spectrum import LearnedSpectrum
    from attnrepro.theory.spectral_laws import target_law

    law = target_law("wishart", None, float(row["task.kappa0"]))
    if row["model.param"] == "direct":
        return DirectLearnedSpectrum(law, float(row["eta"]), float(row["delta"]))
    return LearnedSpectrum(law, float(row["eta"]), float(row["delta"]), float(row["eps"]))


def law_atom(law) -> float:
    """The law's mass at 0: F(0) - F(0-) (F(h) - F(-h), h = 1e-9 times the law's scale, for a law with a density)."""
    h = 1e-9 * max(abs(float(law.quantile(0.99))), 1e-12)
    return float(law.cdf(h) - law.cdf(-h))


def _law_rows(table: pd.DataFrame, param: str, alpha: float) -> list[dict]:
    """theory_atom and law_density of the student's law at lambda* at alpha (none without a converged row)."""
    row = at(at_param(optimal(table), param), task_alpha=alpha) if np.isfinite(alpha) else pd.DataFrame()
    if row.empty:
        return []
    law, keys = learned_law(row.iloc[0]), {"model.param": param}
    lo, hi = (float(v) for v in law.quantile(np.array([1e-3, 1 - 1e-3])))
    x = np.linspace(lo, hi, 200)
    density = np.nan_to_num(law.density(x))
    return [est.row("theory_atom", law_atom(law), **keys),
            *({**est.row("law_density", v, **keys), "x": xi} for xi, v in zip(x, density, strict=True))]


# ---------------------------------------------------------------- claims

def claims(table: pd.DataFrame, frame: pd.DataFrame | None) -> list[Claim]:
    """Every claim of the figure (module docstring); frame: the figure's estimates (computed here when None)."""
    frame = estimates(table) if frame is None else frame
    return [*cv_claims(table), theory_claim(table), *state_evolution_claims(table), *spectrum_claims(frame)]


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


def cv_claims(table: pd.DataFrame) -> list[Claim]:
    """Per alpha, and at every alpha: the simulations, each seed at its cross-validated lambda."""
    out, diffs = [], []
    sim = series.simulation(table)
    cv = sim[sim["selected"].astype(bool)] if "selected" in sim else sim
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


def theory_claim(table: pd.DataFrame) -> Claim:
    """Both students' state evolution at their optimal lambda: direct minus factorized test error at every
    alpha where both converged (the smallest is measured)."""
    opt = optimal(table)
    f = at_param(opt, "factorized").set_index("task.alpha")
    d = at_param(opt, "direct").set_index("task.alpha")
    both = sorted(set(f.index) & set(d.index))
    gap = np.array([float(d.loc[a, "test_error"] - f.loc[a, "test_error"]) for a in both])
    ratios = [float(d.loc[a, "test_error"] / f.loc[a, "test_error"]) for a in both]
    edge = [a for a in both if bool(f.loc[a, "validity_bound"])]
    return judge(FIGURE, "theory (each student's state evolution, d → ∞, at the λ* that minimises its test error; "
                         "a theory-internal check of paper B's claim that factorized beats direct at every α, each "
                         "at its cross-validated λ): factorized below direct at every α computed (measured: smallest "
                         "direct minus factorized test error)", float(gap.min()) if gap.size else NAN,
                 lambda v: v > 0, f"{len(both)} values of α",
                 "direct/factorized: " + listing(both, ratios)
                 + f"; factorized λ* at the width's edge (rank = κ: the unconstrained optimum wants a rank above "
                   f"the width) at α = {', '.join(f'{a:g}' for a in edge) or 'none'}" + _theory_left_out(table),
                 key="theory_factorized_below_direct")


def _theory_left_out(table: pd.DataFrame) -> str:
    """'; optimal λ not found (left out): <student> α = a (reason), ...' where a row did not converge or its
    lambda* lies at a bound of the search."""
    opt = optimal(table, found_only=False)
    bad = opt[~found(opt)]
    solved = series.flag(bad, "converged")
    items = [f"{r['model.param']} α = {r['task.alpha']:g} ("
             + (f"λ* = {r['lam_star']:.3g} at a bound of the search: the minimum may lie beyond" if solved[i]
                else str(r.get("reason", ""))[:160]) + ")"
             for i, r in bad.iterrows()]
    return f"; optimal λ not found (left out): {'; '.join(items)}" if items else ""


def state_evolution_claims(table: pd.DataFrame) -> list[Claim]:
    """Per student and lambda > 0: the simulated test error against the student's own state evolution at the
    same lambda at every alpha, converged seeds only (se_deviations: points with a converged, valid theory value
    and at least two converged seeds)."""
    out = []
    sim = series.simulation(table)
    for param, curve in STUDENT_CURVES.items():
        th = series.theory(table)
        th = th[th["curve"] == curve] if "curve" in th else th.iloc[0:0]
        dev = se_deviations(pd.concat([at_param(sim, param), at_param(th, param)], ignore_index=True), curve)
        dev = dev[dev["metric"] == "test_error"]
        for (kappa, delta, lam), g in dev.groupby(["model.kappa", "task.Delta", "model.lam"], sort=True):
            out.append(_se_claim(param, kappa, delta, lam, g.sort_values("task.alpha"), at_param(th, param)))
    return out


def _se_claim(param: str, kappa: float, delta: float, lam: float, g: pd.DataFrame, th: pd.DataFrame) -> Claim:
    ok = [abs(r["dev"]) <= SE_LEVEL + 2 * abs(r["se"] / r["theory"]) for _, r in g.iterrows()]
    text = (f"{param}, κ = {kappa:g}, Δ = {delta:g}, λ = {lam:g}, d = {g['d'].iloc[0]:g}: test error, the {param} "
            "student's state evolution at the same λ against simulation at every α (measured: largest |relative "
            "deviation| (sim - theory)/theory over converged seeds; holds when every point is within "
            f"{SE_LEVEL:.0%} + 2 s.e. of the seeds)")
    return judge(FIGURE, text, float(g["dev"].abs().max()), lambda v: all(ok), f"{len(g)} values of α",
                 "deviations: " + listing(g["task.alpha"], g["dev"])
                 + f"; unconverged seeds left out: {int(g['left_out'].sum())}; " + _theory_points_left_out(th, lam),
                 key=claim_key("state_evolution_every_alpha", model=param, lam=lam))


def _theory_points_left_out(th: pd.DataFrame, lam: float) -> str:
    """'theory points left out: k not converged, j outside its validity (kappa < rank)' at this lambda."""
    here = at(th, model_lam=lam)
    conv = series.flag(here, "converged")
    valid = series.flag(here, "valid") if "valid" in here else conv
    return f"theory points left out: {int((~conv).sum())} not converged, {int((conv & ~valid).sum())} outside " \
           "its validity (κ < rank)"


def spectrum_claims(estimates: pd.DataFrame) -> list[Claim]:
    """At the spectrum's alpha: the factorized learned spectrum has an atom at 0, the direct one none, in theory
    (the laws at lambda*) and in the simulations (the selected runs' eigenvalues)."""
    alpha = est.value(estimates, "spectrum_alpha")
    f_th, d_th = (est.value(estimates, "theory_atom", **{"model.param": p}) for p in ("factorized", "direct"))
    f_sim, d_sim = (est.select(estimates, "sim_atom", **{"model.param": p}) for p in ("factorized", "direct"))
    f_mean, d_mean = (float(x["value"].iloc[0]) if len(x) else NAN for x in (f_sim, d_sim))
    f_se = float(f_sim["se"].iloc[0]) if len(f_sim) else NAN
    width = ("the width κd also caps the factorized rank at κ: at κ = 0.5 half its eigenvalues are 0 whatever it "
             "learns")
    return [
        judge(FIGURE, f"theory at α = {alpha:g}, each at its λ*: the factorized learned spectrum "
                      "η·ReLU(S0 + δZ − εI) has an atom at 0 (rank collapse, mass F_δ(ε) ≥ "
                      f"{FACTORIZED_ATOM:g}) and the direct one η·(S0 + δZ) none (mass ≤ 1e-6) (measured: the "
                      "factorized atom)", f_th, lambda v: v >= FACTORIZED_ATOM and d_th <= 1e-6, "",
              f"direct atom {fmt(d_th)}; masses at 0 of the learned-spectrum laws (theory.learned_spectrum, "
              f"theory.direct_state_evolution.DirectLearnedSpectrum)", key="spectrum_theory"),
        judge(FIGURE, f"simulation at α = {alpha:g}, each seed at its cross-validated λ: the factorized learned S has "
                      f"an atom at 0 (a fraction ≥ {FACTORIZED_ATOM:g} of its eigenvalues with |s| ≤ {ATOM:g} "
                      f"max|s|) and the direct one none (≤ {DIRECT_ATOM:g}) (measured: the factorized fraction, "
                      "mean over seeds)", f_mean, lambda v: v >= FACTORIZED_ATOM and d_mean <= DIRECT_ATOM,
              f"± {fmt(f_se)} (s.e.)", f"direct {fmt(d_mean)}; theory at λ*: factorized {fmt(f_th)}, direct "
                                        f"{fmt(d_th)}; {width}", key="spectrum_simulation"),
    ]
