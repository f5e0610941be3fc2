"""The claims of figure tied_error_vs_alpha: ridgeless recovery, the ERM state evolution against the
simulations, and the interpolation peak.

State evolution: per grid point with a converged, valid theory value and at least two converged
seeds, the relative deviation (sim - theory)/theory of the seed mean (:func:`se_deviations`); a
point holds within SE_LEVEL + 2 s.e. of the seeds. Peak: the alpha of the interior maximum of the
simulated test error against the state evolution's (its bootstrap interval is an estimate of the
figure, "peak").
"""

from __future__ import annotations

import math

import pandas as pd

from attnrepro.papers.tied_attention.figures.common import (
    ERROR_VS_ALPHA,
    RECOVERY_LEVEL,
    SE_CURVE,
    at,
    interior_peak,
    listing,
    seed_means,
)
from attnrepro.report import series
from attnrepro.report.claims import Claim, claim_key, fmt, interval, judge
from attnrepro.stats import cross_validation
from attnrepro.stats import estimates as est
from attnrepro.stats.fits import NAN
from attnrepro.stats.seed_stats import difference, mean_claim, summary

FIGURE = ERROR_VS_ALPHA
SE_METRICS = {"test_error": "test error", "train_loss": "training loss"}
SE_LEVEL = 0.10  # target of the state evolution: relative deviation at most 10% (+ 2 s.e. of the seeds)
PEAK_LAMBDA = 0.01  # the interpolation peak is compared with the theory's at every lambda up to this
KEYS = ["model.kappa", "task.Delta", "model.lam", "task.alpha"]


def ridgeless(table: pd.DataFrame) -> pd.DataFrame:
    """The simulation rows at Delta = 0, lambda = 0 (the AIM-2025 ridgeless recovery curve)."""
    return at(series.simulation(table), task_Delta=0.0, model_lam=0.0)


def theory_se(table: pd.DataFrame) -> pd.DataFrame:
    """The converged, valid rows of the ERM state evolution at lambda > 0."""
    th = series.theory(table)
    if th.empty or "curve" not in th:
        return th
    th = th[(th["curve"] == SE_CURVE) & th["converged"].astype(bool)]
    return th[th["valid"].astype("boolean").fillna(False).astype(bool) & (th["model.lam"] > 0)]


def _init_error(table: pd.DataFrame) -> float:
    """E ||S(0) - S0||² / d = (1 + κ0) + (1 + κ) - 2 sqrt(κ κ0) for W(0) ~ N(0, 1), the α -> 0 value."""
    k, k0 = table["model.kappa"].median(), table["task.kappa0"].median()
    return 2 + k + k0 - 2 * math.sqrt(k * k0)


def claims(table: pd.DataFrame, estimates: pd.DataFrame) -> list[Claim]:
    out = []
    r0 = ridgeless(table)
    alphas = series.levels(r0, "task.alpha")
    lo_a, hi_a = (alphas[0], alphas[-1]) if alphas else (NAN, NAN)
    ref = _init_error(r0) if len(r0) else NAN
    out.append(mean_claim(FIGURE, f"ridgeless (Δ = 0, λ = 0): estimation error at the smallest α = {lo_a:g} is "
                                  f"within 15% of its α → 0 value {fmt(ref)} (the N(0, 1) init's error; "
                                  "AIM-2025: about 2)",
                          at(r0, task_alpha=lo_a)["estimation_error"] if alphas else [],
                          lambda v: abs(v - ref) <= 0.15 * ref, key="ridgeless_init_error"))
    out.append(mean_claim(FIGURE, "ridgeless: estimation error near 0 (< 0.01) at α = 0.3",
                          at(r0, task_alpha=0.3)["estimation_error"], lambda v: v < 0.01,
                          f"largest α of the grid: {hi_a:g}", key="ridgeless_recovered"))
    star, lo, hi = est.get(estimates, "ridgeless_crossing")
    x, y = seed_means(r0, "task.alpha", "estimation_error")
    out.append(judge(FIGURE, f"ridgeless: the estimation error first drops below {RECOVERY_LEVEL:g} at α* in "
                             "[0.15, 0.25] (AIM-2025, d = 200: near 0 at α ≈ 0.25; Bayes-optimal perfect recovery "
                             "at (2κ0 - κ0²)/(T² + T - 2) = 0.1875)", star, lambda v: 0.15 <= v <= 0.25,
                     interval(lo, hi, "95% seed-bootstrap CI"),
                     f"log-error interpolated linearly in α; seed means: {listing(x, y)}", key="ridgeless_crossing"))
    return out + state_evolution_claims(table) + peak_claims(table, estimates)


def se_deviations(table: pd.DataFrame) -> pd.DataFrame:
    """Per (kappa, Delta, lambda, alpha, metric) with a converged, valid theory point and at least two
    converged seeds: theory, simulation mean and s.e. over the converged seeds, relative deviation
    (sim - theory)/theory, d, and the seeds left out as unconverged."""
    sim, th = series.simulation(table), theory_se(table)
    cols = [*KEYS, "metric", "theory", "sim", "se", "dev", "d", "left_out"]
    if th.empty or sim.empty:
        return pd.DataFrame(columns=cols)
    ok = series.converged(sim)
    left = sim.groupby(KEYS).size().sub(ok.groupby(KEYS).size(), fill_value=0).rename("left_out").reset_index()
    out = []
    for metric in SE_METRICS:
        s = summary(ok, KEYS, metric)
        s = s[s["n"] >= 2]  # a point with fewer than two converged seeds is left out: see left_out_points
        s["d"] = summary(ok, KEYS, "task.d")["mean"]
        merged = s.merge(th[[*KEYS, metric]].rename(columns={metric: "theory"}), on=KEYS, how="inner")
        merged = merged.rename(columns={"mean": "sim"}).merge(left, on=KEYS, how="left")
        merged["metric"], merged["dev"] = metric, (merged["sim"] - merged["theory"]) / merged["theory"]
        out.append(merged[cols])
    return pd.concat(out, ignore_index=True)


def state_evolution_claims(table: pd.DataFrame) -> list[Claim]:
    """Theory (ERM state evolution) against simulation, converged seeds only: one claim per point of the
    wide-student sweep (kappa = 1), one per (Delta, lambda) of the others, and the median deviation per d."""
    out = []
    dev = se_deviations(table)
    if dev.empty:
        return [judge(FIGURE, "ERM state evolution against simulation: median relative deviation of the test error "
                              f"and training loss at most {SE_LEVEL:.0%}", NAN, lambda v: True,
                      key="state_evolution_median")]
    rule = lambda r: abs(r["dev"]) <= SE_LEVEL + 2 * abs(r["se"] / r["theory"])  # noqa: E731
    for (kappa, delta, lam), g in dev.groupby(["model.kappa", "task.Delta", "model.lam"], sort=True):
        where = f"κ = {kappa:g}, Δ = {delta:g}, λ = {lam:g}, d = {g['d'].iloc[0]:g}"
        for metric, name in SE_METRICS.items():
            m = g[g["metric"] == metric].sort_values("task.alpha")
            if kappa == 1:
                out += [judge(FIGURE, f"{where}, α = {r['task.alpha']:g}: {name}, state evolution against simulation "
                                      f"(measured: relative deviation (sim - theory)/theory over converged seeds; "
                                      f"holds within {SE_LEVEL:.0%} + 2 s.e.)", r["dev"], lambda v, r=r: rule(r),
                              f"± {fmt(abs(r['se'] / r['theory']))} (seed s.e., relative)",
                              f"theory {fmt(r['theory'])}, simulation {fmt(r['sim'])}; unconverged seeds left out: "
                              f"{int(r['left_out'])}",
                              key=claim_key("state_evolution_point", metric=metric, kappa=kappa, Delta=delta,
                                            lam=lam, alpha=r["task.alpha"])) for _, r in m.iterrows()]
            else:
                worst = float(m["dev"].abs().max())
                out.append(judge(FIGURE, f"{where}: {name}, state evolution against simulation at every α (measured: "
                                         f"largest |relative deviation| over converged seeds; holds when every point "
                                         f"is within {SE_LEVEL:.0%} + 2 s.e.)", worst,
                                 lambda v, m=m: bool(all(rule(r) for _, r in m.iterrows())), "",
                                 "deviations: " + listing(m["task.alpha"], m["dev"])
                                 + f"; unconverged seeds left out: {int(m['left_out'].sum())}",
                                 key=claim_key("state_evolution_every_alpha", metric=metric, kappa=kappa,
                                               Delta=delta, lam=lam)))
    return out + _median_claims(table, dev)


def left_out_points(table: pd.DataFrame) -> tuple[int, int]:
    """(grid points with a valid, converged theory value but fewer than two converged seeds, their
    unconverged seeds): what the state-evolution claims leave out entirely."""
    sim, th = series.simulation(table), theory_se(table)
    if sim.empty or th.empty:
        return 0, 0
    pts = sim.merge(th[KEYS].drop_duplicates(), on=KEYS)
    conv = pts[series.CONVERGED].astype("boolean").fillna(True).astype(bool) if series.CONVERGED in pts else True
    g = pts.assign(ok=conv).groupby(KEYS)["ok"].agg(["sum", "count"])
    dropped = g[g["sum"] < 2]
    return len(dropped), int((dropped["count"] - dropped["sum"]).sum())


def _median_claims(table: pd.DataFrame, dev: pd.DataFrame) -> list[Claim]:
    """The median deviation per d, saying what was left out (theory points, unconverged seeds, points
    without two converged seeds)."""
    th = series.theory(table)
    th = th[(th["curve"] == SE_CURVE) & (th["model.lam"] > 0)] if "curve" in th else th
    conv = th["converged"].astype(bool) if len(th) else th
    left_out = (f"theory points left out: {int((~conv).sum())} not converged (reasons in the records), "
                f"{int((conv & ~th['valid'].astype('boolean').fillna(False).astype(bool)).sum())} outside "
                "κ >= 1 - F_δ(ε)") if len(th) else "no theory"
    n_pts, n_seeds = left_out_points(table)
    left_out += f"; points without two converged seeds left out: {n_pts} ({n_seeds} unconverged seeds)"
    out = []
    for d, g in dev.groupby("d", sort=True):
        for metric, name in SE_METRICS.items():
            m = g[g["metric"] == metric]["dev"].abs()
            out.append(judge(FIGURE, f"d = {d:g}: median |relative deviation| of the {name}, state evolution "
                                     f"against simulation (converged seeds), at most {SE_LEVEL:.0%} (paper B's "
                                     "target at d = 200)", float(m.median()), lambda v: v <= SE_LEVEL,
                             f"{len(m)} points", f"largest {fmt(float(m.max()))}; {left_out}; unconverged seeds "
                                                 f"left out: {int(g[g['metric'] == metric]['left_out'].sum())}",
                             key=claim_key("state_evolution_median", metric=metric, d=d)))
    return out


def peak_claims(table: pd.DataFrame, estimates: pd.DataFrame) -> list[Claim]:
    """At every (Delta, lambda) with a "peak" estimate (kappa = 1, lambda <= PEAK_LAMBDA, the state
    evolution with an interior maximum): the simulated peak within one step of the simulations' alpha
    grid of the theory's. And the cross-validated lambda lowering the test error at the peak of the
    smallest lambda (seeds with a run at every lambda)."""
    out, sim, th = [], series.converged(series.simulation(table)), theory_se(table)
    wide = at(sim, model_kappa=1.0)
    for (delta, lam), t in wide[wide["model.lam"] <= PEAK_LAMBDA].groupby(["task.Delta", "model.lam"], sort=True):
        keys = {"model.kappa": 1.0, "task.Delta": delta, "model.lam": lam}
        if est.select(estimates, "peak", **keys).empty:
            continue
        peak, lo, hi = est.get(estimates, "peak", **keys)
        t_peak, step = est.value(estimates, "peak_theory", **keys), est.value(estimates, "peak_step", **keys)
        ct = at(th, model_kappa=1.0, task_Delta=delta, model_lam=lam).sort_values("task.alpha")
        x, y = seed_means(t, "task.alpha", "test_error")
        d = ", ".join(f"{v:g}" for v in series.levels(t, "task.d"))
        out.append(judge(FIGURE, f"κ = 1, Δ = {delta:g}, λ = {lam:g}, d = {d}: the test error peaks (interior "
                                 "maximum over α) where the state evolution at the same λ peaks, within one step of "
                                 "the simulations' α grid (measured: α of the simulated peak)", peak,
                         lambda v, s=step, tp=t_peak: abs(v - tp) <= s,
                         f"{interval(lo, hi, '95% seed-bootstrap CI')}; grid step {fmt(step)}",
                         f"theory peak at α = {fmt(t_peak)}; test error seed means: {listing(x, y)}; theory: "
                         f"{listing(ct['task.alpha'].to_numpy(float), ct['test_error'].to_numpy(float))}",
                         key=claim_key("peak_location", kappa=1, Delta=delta, lam=lam)))
    for delta, w in wide.groupby("task.Delta", sort=True):
        w = cross_validation.complete_seeds(w, ["task.alpha"])
        smallest = float(w["model.lam"].min())
        x, y = seed_means(at(w, model_lam=smallest), "task.alpha", "test_error")
        peak, i = interior_peak(x, y)
        if i < 0:
            continue
        cv = cross_validation.select(w, ["task.alpha"])
        at_peak = at(cv, task_alpha=peak)
        gain, se = difference(at(w, model_lam=smallest, task_alpha=peak)["test_error"], at_peak["test_error"])
        out.append(judge(FIGURE, f"κ = 1, Δ = {delta:g}: at the peak α = {peak:g} of the smallest λ = "
                                 f"{smallest:g} the cross-validated λ lowers the test error (converged seeds)",
                         gain, lambda v: v > 0, f"± {fmt(se)} (s.e.); λ = {smallest:g} minus CV λ",
                         "selected λ per seed: " + ", ".join(f"{v:g}" for v in at_peak["model.lam"]),
                         key=claim_key("cv_lowers_peak", kappa=1, Delta=delta)))
    return out
