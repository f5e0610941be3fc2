"""Figure tied_spectra: the eigenvalues of the learned S against the law eta ReLU(S0 + delta Z - eps I)
of paper B's Claim 4.1, fitted and from the ERM state evolution. The laws and their goodness of fit
are theory rows of the table (computed once, by the aggregate stage); claims compare seed means
(no shared estimates)."""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from attnrepro.jobs.derived import cached, frame_digest
from attnrepro.papers.tied_attention.figures.common import ID, SE_CURVE, at, finish, grid, listing, rows, theory_rows
from attnrepro.report import series
from attnrepro.report.claims import Claim, claim_key, fmt, judge
from attnrepro.report.figure_spec import FigureSpec, register
from attnrepro.report.plotting import palette
from attnrepro.report.tables import ExperimentData
from attnrepro.stats.fits import NAN
from attnrepro.stats.seed_stats import mean_claim, mean_se, summary
from attnrepro.theory import learned_spectrum
from attnrepro.theory.spectral_laws import Atomic

FIGURE = "tied_spectra"
SPECTRUM = ["eigenvalues", "target_eigenvalues", "overlap_quadratic", "column_error"]
ATOM = 1e-3     # an eigenvalue belongs to the atom at 0 when |s| <= ATOM max_j |s_j|
KS_LEVEL = 0.1  # goodness of fit of the learned-spectrum law: sup |F_sim - F_fit| at most this


def table(data: Mapping[str, ExperimentData]) -> pd.DataFrame:
    """Rows: (key, replica, position) of the learned and target eigenvalues (decreasing), with the
    overlaps of the target's modes, alpha, and per-seed rank collapse and recovered modes; and the
    theory rows of the learned-spectrum law at every alpha from the converged seeds (spectrum_theory_rows).
    Seeds that did not converge keep their rows (converged = False): drawn and counted apart, left out."""
    arrays = rows(data, FIGURE, [*ID, "task.d", "task.alpha", "task.gamma", "model.lam", "position", *SPECTRUM],
                  "arrays")
    final = rows(data, FIGURE, ["key", "replica", "rank_collapse", "n_recovered", "test_error", series.CONVERGED])
    if arrays.empty or final.empty:
        return arrays.assign(rank_collapse=np.nan, n_recovered=np.nan, test_error=np.nan)
    sim = arrays.merge(final.drop(columns=[series.SOURCE]), on=["key", "replica"], how="left")
    se = theory_rows(data, FIGURE, SE_CURVE)
    inputs = {"sim": frame_digest(sim), "se": frame_digest(se) if se is not None else None}
    fitted = cached(data[FIGURE].outputs, "learned_spectrum_fit", inputs,
                    lambda: spectrum_theory_rows(series.converged(sim), se), (__name__,))
    return pd.concat([sim, fitted], ignore_index=True)


def _seed_spectra(t: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(eigenvalues per seed with the atom set to exactly 0, pooled target eigenvalues)."""
    learned, target = [], []
    for _, g in t.groupby(["key", "replica"], sort=True):
        s = g["eigenvalues"].dropna().to_numpy(dtype=float)
        s = np.where(np.abs(s) <= ATOM * np.abs(s).max(), 0.0, s)
        learned.append(s)
        target.append(g["target_eigenvalues"].dropna().to_numpy(dtype=float))
    return np.concatenate(learned), np.concatenate(target)


def spectrum_theory_rows(sim: pd.DataFrame, se: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per alpha, the law of eta ReLU(S0 + delta Z - eps I) (mu0 = the targets' eigenvalues) with
    (eta, delta, eps) fitted to the pooled learned eigenvalues (curve "fit",
    theory.learned_spectrum.fit) and, when ``se`` has the point, given by the ERM state evolution
    (curve "erm_state_evolution", no fitting). Rows (eigenvalue, density) on the solver's nodes,
    the density divided by 1 - atom as the histogram is, with the law's parameters and goodness
    (eta, delta, eps, ks, atom_fit, atom_sim, bulk_edge, outliers_fit = expected eigenvalues above
    the bulk per seed, outliers_sim)."""
    out = []
    for alpha in series.levels(sim, "task.alpha"):
        t = at(sim, task_alpha=alpha)
        learned, target = _seed_spectra(t)
        if not learned.size or not target.size:
            continue
        law0 = Atomic(tuple(target))
        res = learned_spectrum.fit(law0, learned)
        laws = {"fit": (res.spectrum, res.rms)}
        point = at(se, task_alpha=alpha) if se is not None and not se.empty else pd.DataFrame()
        if len(point):  # the state evolution at the simulations' lambda, converged
            point = point[point["converged"].astype(bool) & np.isin(point["model.lam"], t["model.lam"].unique())]
        if len(point):
            r = point.iloc[0]
            laws[SE_CURVE] = (learned_spectrum.LearnedSpectrum(law0, r["eta"], r["delta"], r["eps"]), NAN)
        n_seeds = t.groupby(["key", "replica"]).ngroups
        d = float(t["task.d"].iloc[0])
        for curve, (law, rms) in laws.items():
            mu = law.mu
            keep = mu.x > law.eps
            atom, edge = law.atom, law.bulk_edge()
            out.append(pd.DataFrame({
                "eigenvalue": law.eta * (mu.x[keep] - law.eps), "density": mu.p[keep] / law.eta / max(1 - atom, 1e-12),
                "task.alpha": alpha, "task.d": d, "curve": curve, "eta": law.eta, "delta": law.delta, "eps": law.eps,
                "ks": learned_spectrum.ks_distance(learned, law.cdf), "rms": rms, "atom_fit": atom,
                "atom_sim": float(np.mean(learned == 0)), "bulk_edge": edge,
                "outliers_fit": d * sum(m for _, m in law.outliers()),
                "top_outlier": max((y for y, _ in law.outliers()), default=NAN),
                "outliers_sim": float(np.sum(learned > edge)) / n_seeds if np.isfinite(edge) else NAN,
                series.SOURCE: series.THEORY}))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def spectrum_stats(seed_rows: pd.DataFrame) -> dict:
    """Per seed: atom at 0, outlier count k (recovered modes), top eigenvalue and its gap s1/s2,
    the target's top eigenvalue and gap."""
    s = np.sort(seed_rows["eigenvalues"].dropna().to_numpy(dtype=float))[::-1]
    t = np.sort(np.abs(seed_rows["target_eigenvalues"].dropna().to_numpy(dtype=float)))[::-1]
    ok = seed_rows["column_error"].dropna().to_numpy(dtype=float) <= 0.5
    top = np.abs(s).max() if s.size else NAN
    return {"atom": float(np.mean(np.abs(s) <= ATOM * top)) if s.size else NAN, "outliers": int(ok.sum()),
            "s1": s[0] if s.size else NAN, "gap": s[0] / s[1] if s.size > 1 and s[1] > 0 else NAN,
            "t1": t[0] if t.size else NAN, "target_gap": t[0] / t[1] if t.size > 1 and t[1] > 0 else NAN}


def per_seed_spectra(table: pd.DataFrame) -> pd.DataFrame:
    """spectrum_stats per seed, with its alpha and whether it converged."""
    sim = series.simulation(table)
    if sim.empty:
        return pd.DataFrame(columns=["key", "replica", "task.alpha", series.CONVERGED, "atom", "outliers", "s1",
                                     "gap", "t1", "target_gap"])
    conv = sim[series.CONVERGED] if series.CONVERGED in sim else pd.Series(True, sim.index)
    out = [{"key": k, "replica": r, "task.alpha": g["task.alpha"].iloc[0], series.CONVERGED: conv[g.index[0]],
            **spectrum_stats(g)} for (k, r), g in sim.groupby(["key", "replica"], sort=True)]
    return pd.DataFrame(out)


def plot(table: pd.DataFrame, estimates: None):
    sim = series.simulation(table)
    alphas = series.levels(sim, "task.alpha")
    ncols = min(3, max(len(alphas), 1))
    fig, axes = grid(-(-max(len(alphas), 1) // ncols), ncols, "learned eigenvalues of S, pooled over seeds")
    for ax in axes.flat[len(alphas):]:
        ax.set_axis_off()
    every = per_seed_spectra(table)
    stats = series.converged(every)
    sim = series.converged(sim)
    values = np.concatenate([sim[c].to_numpy(dtype=float) for c in ("eigenvalues", "target_eigenvalues")])
    values = values[np.isfinite(values)]
    bins = np.linspace(min(0.0, values.min()), 1.05 * values.max(), 60) if values.size else 10
    for ax, alpha in zip(axes.flat, alphas):
        t = at(sim, task_alpha=alpha)
        t = t[t["eigenvalues"].notna()]
        largest = t.groupby(["key", "replica"])["eigenvalues"].transform(lambda v: v.abs().max())
        atom = t["eigenvalues"].abs() <= ATOM * largest
        ax.hist(t.loc[~atom, "eigenvalues"], bins=bins, density=True, color=palette(1)[0], alpha=0.7,
                label="learned (atom excluded)")
        ax.hist(t["target_eigenvalues"].dropna().abs(), bins=bins, density=True, histtype="step", color="0.3",
                lw=0.8, label="target S0")
        s = stats[np.isclose(stats["task.alpha"], alpha)]
        mass = mean_se(s["atom"])[0]
        ax.annotate(f"atom at 0: {100 * mass:.0f}% of the eigenvalues", (0, 0), xycoords=("data", "axes fraction"),
                    xytext=(0.3, 0.55), textcoords="axes fraction", color="red", fontsize=7,
                    arrowprops={"arrowstyle": "->", "color": "red"})
        th = series.theory(table)
        if not th.empty and {"eigenvalue", "density"} <= set(th.columns):
            th = at(th, task_alpha=alpha)
            for curve, style, name in (("fit", "k--", "fitted law"), (SE_CURVE, "r-", "state evolution")):
                c = th[th["curve"] == curve].sort_values("eigenvalue")
                if len(c):
                    ax.plot(c["eigenvalue"], c["density"], style, lw=1.0, label=f"{name} (KS {c['ks'].iloc[0]:.2f})")
        ax.set_yscale("log")
        left = int(np.isclose(every["task.alpha"], alpha).sum()) - len(s)
        finish(ax, "eigenvalue of S", "density", title=f"α = {alpha:g}: {mean_se(s['outliers'])[0]:.1f} "
                                                        "modes recovered (mean)"
                                                        + (f"; {left} unconverged seeds left out" if left else ""))
    return fig


def _se_spectrum_claims(th: pd.DataFrame, st: pd.DataFrame) -> list[Claim]:
    """The state evolution's atom F_delta(eps) and top outlier against the simulated ones, within
    2 s.e. of the seeds plus the spectrum's resolution (1/d for the atom, 5% for a position)."""
    out = []
    se = th[th["curve"] == SE_CURVE] if "curve" in th else th.iloc[0:0]
    for alpha, g in se.groupby("task.alpha", sort=True):
        r, seeds = g.iloc[0], at(st, task_alpha=alpha)
        atom, atom_se, _ = mean_se(seeds["atom"])
        tol = 2 * np.nan_to_num(atom_se) + 1 / r["task.d"]
        out.append(judge(FIGURE, f"α = {alpha:g}: the atom at 0 of the state evolution, F_δ(ε), matches the "
                                 "simulated one within 2 s.e. + 1/d (measured: law - simulation)",
                         r["atom_fit"] - atom, lambda v, t=tol: abs(v) <= t, f"± {fmt(atom_se)} (s.e.)",
                         f"law {fmt(r['atom_fit'])}, simulated {fmt(atom)}",
                         key=claim_key("state_evolution_atom", alpha=alpha)))
        top = r["top_outlier"]  # the centre of the law's top piece, when it stands apart from the bulk
        if not np.isfinite(top):
            continue
        s1, s1_se, _ = mean_se(seeds["s1"])
        rel_tol = 2 * float(np.nan_to_num(s1_se)) / top + 0.05
        out.append(judge(FIGURE, f"α = {alpha:g}: the top outlier of the state-evolution law (the centre of its "
                                 "top isolated piece) matches the simulated top eigenvalue within 2 s.e. + 5% "
                                 "(measured: relative deviation)", (s1 - top) / top,
                         lambda v, t=rel_tol: abs(v) <= t, f"± {fmt(s1_se)} (s.e.)",
                         f"law {fmt(top)}, simulated mean {fmt(s1)}",
                         key=claim_key("state_evolution_top_outlier", alpha=alpha)))
    return out


def claims(table: pd.DataFrame, estimates: None) -> list[Claim]:
    out = []
    th = series.theory(table)
    for (curve, alpha), g in (th.groupby(["curve", "task.alpha"], sort=True) if not th.empty else []):
        r = g.iloc[0]
        how = "fitted (η, δ, ε)" if curve == "fit" else "(η, δ, ε) of the ERM state evolution, no fitting"
        out.append(judge(FIGURE, f"α = {alpha:g}: the learned eigenvalues follow η ReLU(S0 + δZ - εI) (paper B, "
                                 f"Claim 4.1) with {how}: Kolmogorov-Smirnov distance <= {KS_LEVEL:g}", r["ks"],
                         lambda v: v <= KS_LEVEL,
                         f"η = {fmt(r['eta'])}, δ = {fmt(r['delta'])}, ε = {fmt(r['eps'])}",
                         f"atom at 0: law F_δ(ε) = {fmt(r['atom_fit'])}, simulated {fmt(r['atom_sim'])}; "
                         f"eigenvalues above the bulk edge {fmt(r['bulk_edge'])} per seed: "
                         f"law {fmt(r['outliers_fit'])}, "
                         f"simulated {fmt(r['outliers_sim'])}; rms quantile residual {fmt(r['rms'])} of the rms "
                         "eigenvalue", key=claim_key("law_ks", curve=curve, alpha=alpha)))
    every = per_seed_spectra(table)
    st = series.converged(every)
    left = f"; unconverged seeds left out: {len(every) - len(st)} of {len(every)}"
    out += _se_spectrum_claims(th, st)
    alphas = series.levels(st, "task.alpha")
    by = summary(st, ["task.alpha"], "atom")
    atoms = by["mean"].to_numpy(dtype=float)
    first = at(st, task_alpha=alphas[0]) if alphas else st
    last = at(st, task_alpha=alphas[-1]) if alphas else st
    a_hi = alphas[-1] if alphas else NAN
    out.append(judge(FIGURE, "the atom at 0 (fraction of eigenvalues <= 1e-3 of the largest) shrinks as α grows "
                             "(seed means strictly decreasing)", atoms[-1] if atoms.size else NAN,
                     lambda v: atoms.size > 1 and bool(np.all(np.diff(atoms) < 0)),
                     f"at the largest α; ± {fmt(mean_se(last['atom'])[1])} (s.e.)",
                     f"atom seed means: {listing(by['task.alpha'], atoms)}{left}", key="atom_shrinks"))
    rec = summary(st, ["task.alpha"], "outliers")
    counts = rec["mean"].to_numpy(dtype=float)
    out.append(judge(FIGURE, "outliers leave the bulk as α grows: the number of recovered target modes "
                             "(||(S - S0)u_i|| <= |λ_i|/2) is non-decreasing in α and larger at the largest α than "
                             "at the smallest", counts[-1] if counts.size else NAN,
                     lambda v: counts.size > 1 and bool(np.all(np.diff(counts) >= 0)) and counts[-1] > counts[0],
                     f"at the largest α; ± {fmt(mean_se(last['outliers'])[1])} (s.e.)",
                     f"seed means: {listing(rec['task.alpha'], counts)}{left}", key="outliers_leave_bulk"))
    t1, tgap = mean_se(last["t1"])[0], mean_se(last["target_gap"])[0]
    out.append(mean_claim(FIGURE, f"at the largest α = {a_hi:g} the top learned eigenvalue (the first outlier) is "
                                  f"within 15% of the target's, {fmt(t1)}", last["s1"],
                          lambda v: abs(v - t1) <= 0.15 * t1,
                          f"at the smallest α: {fmt(mean_se(first['s1'])[0])}{left}", key="top_eigenvalue"))
    out.append(mean_claim(FIGURE, f"at the largest α the top eigenvalue stands apart from the rest: gap s1/s2 "
                                  f"within 20% of the target's λ1/λ2 = {fmt(tgap)}", last["gap"],
                          lambda v: abs(v - tgap) <= 0.2 * tgap,
                          f"gap at the smallest α: {fmt(mean_se(first['gap'])[0])}{left}", key="top_gap"))
    return out


SPEC = register(FigureSpec(
    name=FIGURE, sources=(FIGURE,), table=table, plot=plot, claims=claims,
    caption="Histograms (log density) of the eigenvalues of the learned S = WᵀW/√(pd), factorized with p = d "
            "(κ = 1), power-law target S0 = O diag(√d i^-γ) Oᵀ, noisy labels, weight decay λ, pooled over "
            "converged seeds (L-BFGS to its minimiser; unconverged seeds are counted in the panel titles and "
            "left out), one panel per α = n/d². The atom at 0 (eigenvalues <= 1e-3 of the largest; rank collapse) "
            "is left out of the histogram and its mass written in red; grey: the target's eigenvalues. A "
            "target mode counts as recovered (an outlier) when ‖(S - S0)u_i‖ <= |λ_i(S0)|/2. Black: the law of "
            "η ReLU(S0 + δZ - εI) (paper B, Claim 4.1; μ0 = the target's eigenvalues at this d) with (η, δ, ε) "
            "fitted to the pooled eigenvalues by quantile matching (dashed black) and given by the ERM state "
            "evolution without fitting (red), densities divided by 1 - F_δ(ε) as the histogram leaves the atom "
            "out; KS distances in the legend.",
))
