"""Paper A (sparse XOR, Han & Ghoshdastidar): its five figures as figure specs.

Success of a transformer seed: exact population loss < SUCCESS_LOSS after training.
Success of an FFNN seed: 0/1 test error <= FFNN_SUCCESS_ERROR on fresh samples.
Uncertainties: IQR over seeds for medians, binomial standard errors for rates, and
95% percentile intervals of the seed bootstrap (N_BOOT resamples of the seeds within
every job) for crossings and fitted exponents.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from attnrepro.report.claims import Claim, fmt, interval, judge
from attnrepro.report.figure_spec import FigureSpec, register
from attnrepro.report.plotting import (
    column_heatmap,
    crossing_points,
    fit_label,
    fit_line,
    loglog,
    no_data,
    palette,
    panels,
)
from attnrepro.report.tables import ExperimentData, select
from attnrepro.stats.fits import percentile_ci, polylog_fit, power_law_fit, quantiles
from attnrepro.stats.seed_stats import median_claim
from attnrepro.stats.summaries import Crossings, crossings, rate_table

SUCCESS_LOSS = 0.01
FFNN_SUCCESS_ERROR = 0.01
N_BOOT = 200
ONE_STEP, PHASE, VARIANTS = "xor_one_step_attention", "xor_phase_dm", "xor_attention_variants"
SAMPLES, FFNN = "xor_sample_complexity", "xor_params_vs_ffnn"
HEADS = {"gamma": "γ", "gamma_tilde": "γ̃"}
ATTENTIONS = ["softmax", "linear", "erf"]
LOSS_FLOOR = 1e-10  # losses below are drawn at the floor on log axes (exact zeros included)


# ---------------------------------------------------------------- shared helpers

def _with_success(df: pd.DataFrame, metric: str = "loss", threshold: float = SUCCESS_LOSS,
                  strict: bool = True) -> pd.DataFrame:
    """success = metric < threshold (strict) or <= threshold; a missing metric is a failure."""
    v = pd.to_numeric(df[metric], errors="coerce")
    df["success"] = (v < threshold) if strict else (v <= threshold)
    return df


def _by(table: pd.DataFrame, column: str) -> list:
    return sorted(table[column].dropna().unique()) if column in table and not table.empty else []


def _crossing_detail(c: Crossings) -> str:
    ok = np.isfinite(c.point)
    pts = ", ".join(f"{g:g}: {fmt(v)}" for g, v in zip(c.groups[ok], c.point[ok], strict=True))
    undefined = [f"{g:g}" for g in c.groups[~ok]]
    out = f"{c.x}* at {c.level:.0%} success by {c.group}: {pts or 'none'}"
    if undefined:
        out += f"; never reached for {c.group} = {', '.join(undefined)}"
    if c.censored.any():
        out += f"; {int(c.censored.sum())} reached at the grid's smallest {c.x} (upper bounds)"
    return out


def _slope_claim(figure: str, text: str, c: Crossings, fitter, passes, use_upper: bool = False,
                 symbol: str = "exponent") -> Claim:
    """A claim on the slope of a fit of the crossings, with its bootstrap CI; tested on the
    point estimate, or on the CI's upper end when use_upper. The fit uses the measured crossings
    only, and the claim holds only when every group's crossing is measured inside the grid: a
    crossing never reached, or reached at the grid's first point (an upper bound), leaves the
    slope undetermined, so the claim is not confirmed."""
    fit, lo, hi = c.fit(fitter)
    measured_inside = bool(len(c.point)) and bool(np.isfinite(c.point).all()) and not c.censored.any()
    detail = f"{fit.n_points} points; {_crossing_detail(c)}"
    if not measured_inside:
        detail = "not confirmed: some crossings lie outside the grid (extend it); " + detail
    return judge(figure, text, fit.slope, lambda v: measured_inside and passes(v),
                 interval(lo, hi, f"95% bootstrap CI of the {symbol}"), detail,
                 tested=hi if use_upper else None)


def _crossing_panel(ax, items: Sequence[tuple[str, Crossings, Sequence[tuple[str, object, str]]]],
                    xlabel: str, ylabel: str) -> None:
    """Crossings vs group on log-log axes with fitted laws: items = (label, crossings,
    [(fit name, fitter, linestyle), ...]); polylog fits are evaluated at log2 of the group."""
    colors = palette(len(items))
    for (label, c, fitters), color in zip(items, colors, strict=True):
        crossing_points(ax, c, label, color)
        for name, fitter, ls in fitters:
            fit, lo, hi = c.fit(fitter)
            transform = np.log2 if fitter is polylog_fit else (lambda x: x)
            symbol = "b" if fitter is polylog_fit else "slope"
            measured = c.groups[np.isfinite(c.point) & ~c.censored]
            fit_line(ax, measured, fit, fit_label(name, fit, lo, hi, symbol), color, ls, transform=transform)
    loglog(ax, xlabel, ylabel)
    if ax.lines:
        ax.legend(fontsize=6)
    else:
        no_data(ax)


# ---------------------------------------------------------------- 1. one step

def one_step_table(data: Mapping[str, ExperimentData]) -> pd.DataFrame:
    """Rows: (key, replica, position) with both heads' attention before (``*_init``) and after
    the step, the support p, q, on_support = position in {p, q}, and the seed's final loss."""
    cols = ["key", "replica", "seed", "task.d", "m", "p", "q", "loss", "position",
            "gamma_init", "gamma_tilde_init", "gamma", "gamma_tilde", "on_support"]
    arrays = select(data, ONE_STEP, ["key", "replica", "seed", "task.d", "position", "gamma_init",
                                      "gamma_tilde_init", "gamma", "gamma_tilde"], "arrays")
    final = select(data, ONE_STEP, ["key", "replica", "m", "p", "q", "loss"])
    if arrays.empty or final.empty:
        return pd.DataFrame(columns=cols)
    df = arrays.merge(final, on=["key", "replica"], how="inner")
    df["on_support"] = (df["position"] == df["p"]) | (df["position"] == df["q"])
    return df[cols]


def _masses(table: pd.DataFrame) -> pd.DataFrame:
    """Per seed: each head's mass on {p, q}, before (gamma_init_p + gamma_init_q) and after."""
    heads = ["gamma_init", "gamma_tilde_init", "gamma", "gamma_tilde"]
    if table.empty:
        return pd.DataFrame(columns=["key", "task.d", "replica", "loss", *heads])
    sup = table[table["on_support"].astype(bool)]
    return sup.groupby(["key", "task.d", "replica", "loss"], dropna=False)[heads].sum().reset_index()


def _largest_d(df: pd.DataFrame) -> tuple[float, pd.DataFrame]:
    if df.empty:
        return float("nan"), df
    d = df["task.d"].max()
    return d, df[df["task.d"] == d]


def one_step_plot(table: pd.DataFrame):
    d, at_d = _largest_d(table)
    one = at_d[at_d["replica"] == at_d["replica"].min()].sort_values("position")
    first = one.iloc[0]
    fig, (a, b, c) = panels(3, f"one population step, softmax, d = {d:g}, m = {first['m']:g}, "
                               f"seed {first['seed']:g}")
    colors = palette(2)
    for ax, suffix, title in ((a, "_init", "before the step"), (b, "", "after the step")):
        for (col, head), color in zip(HEADS.items(), colors, strict=True):
            ax.plot(one["position"], one[col + suffix], color=color, lw=0.7, label=head)
            sup = one[one["on_support"].astype(bool)]
            ax.plot(sup["position"], sup[col + suffix], "o", color=color, ms=4)
        for name in ("p", "q"):
            ax.axvline(first[name], color="0.3", ls=":", lw=0.8)
            ax.annotate(f" {name}", (first[name], 0.97), xycoords=("data", "axes fraction"), va="top")
        ax.set(title=title, xlabel="position i", ylabel="attention weight")
    a.axhline(1 / d, color="0.5", ls="--", lw=0.8, label="1/d")
    a.legend(fontsize=7)
    b.legend(fontsize=7)
    masses = _masses(at_d)
    long = pd.concat([pd.DataFrame({"stage": stage, "head": head, "mass": masses[col + suffix]})
                      for stage, suffix in (("before", "_init"), ("after", ""))
                      for col, head in HEADS.items()], ignore_index=True)
    import seaborn as sns

    sns.stripplot(long, x="stage", y="mass", hue="head", dodge=True, ax=c, palette=colors, size=3)
    c.axhline(2 / d, color="0.5", ls="--", lw=0.8, label="2/d")
    c.set(yscale="log", ylabel="mass on {p, q}", title=f"all {len(masses)} seeds")
    c.legend(fontsize=7)
    return fig


def one_step_claims(table: pd.DataFrame) -> list[Claim]:
    d, at_d = _largest_d(table)
    ms = _masses(at_d)
    out = [median_claim(ONE_STEP, f"after one step, head {head}'s mass on {{p, q}} >= 0.9 "
                                   f"(median over seeds, d = {d:g})", ms[col], lambda v: v >= 0.9)
           for col, head in HEADS.items()]
    out.append(median_claim(ONE_STEP, f"population loss after one step < {SUCCESS_LOSS} (median, d = {d:g})",
                             ms["loss"], lambda v: v < SUCCESS_LOSS))
    ratio = pd.concat([ms["gamma_init"], ms["gamma_tilde_init"]]) / (2 / d)
    out.append(median_claim(ONE_STEP, f"before the step each head's mass on {{p, q}} is about 2/d: "
                                       f"median ratio to 2/d in [0.5, 2] (d = {d:g})",
                             ratio, lambda v: 0.5 <= v <= 2, f"both heads pooled; 2/d = {fmt(2 / d)}"))
    return out


register(FigureSpec(
    name=ONE_STEP, sources=(ONE_STEP,), table=one_step_table, plot=one_step_plot, claims=one_step_claims,
    caption="Both heads' softmax attention over the d positions before and after one population gradient "
            "step (first seed of the largest d), support positions p and q marked; right: each seed's "
            "attention mass on {p, q} before and after the step, with 2/d for reference. Claims: median "
            "over seeds with IQR.",
))


# ---------------------------------------------------------------- 2. phase diagram (d, m)

def phase_table(data: Mapping[str, ExperimentData]) -> pd.DataFrame:
    """Rows: (key, replica) of the one-step sweep on (d, m): m = ceil(m_c log2(d)^2), loss, success."""
    df = select(data, PHASE, ["key", "replica", "seed", "task.d", "model.m_c", "m", "loss"])
    return _with_success(df)


def _phase_crossings(table: pd.DataFrame) -> dict[float, Crossings]:
    return {lv: crossings(table, "task.d", "m", lv, n_boot=N_BOOT) for lv in (0.5, 0.9)}


def phase_plot(table: pd.DataFrame):
    fig, (a, b) = panels(2, "success after one population step (loss < 0.01)")
    rates = rate_table(table, ["task.d", "m"])
    mappable = column_heatmap(a, rates, "task.d", "m", "rate")
    ds = np.geomspace(rates["task.d"].min(), rates["task.d"].max(), 64)
    a.plot(ds, np.log2(ds) ** 2, color="red", lw=1.2, label="m = log2(d)^2")
    a.set(xlabel="d", ylabel="m")
    a.legend(fontsize=7, loc="upper left")
    fig.colorbar(mappable, ax=a, label="success rate")
    fits = [("power d^c", power_law_fit, "-"), ("polylog a(log2 d)^b", polylog_fit, "--")]
    _crossing_panel(b, [(f"m at {lv:.0%} success", c, fits) for lv, c in _phase_crossings(table).items()],
                    "d", "m needed")
    return fig


def phase_claims(table: pd.DataFrame) -> list[Claim]:
    out = []
    at_one = rate_table(table[table["model.m_c"] == 1.0], ["task.d", "m"])
    for r in at_one.itertuples():
        out.append(judge(PHASE, f"d = {r[1]:g}: success after one step at m = ceil(log2(d)^2) = {r.m:g} "
                                "is >= 0.85", r.rate, lambda v: v >= 0.85,
                         f"± {fmt(r.se)} (binomial s.e., n = {r.n})", f"{r.successes}/{r.n} seeds"))
    if at_one.empty:
        out.append(judge(PHASE, "success after one step at m = ceil(log2(d)^2) is >= 0.85", float("nan"),
                         lambda v: v >= 0.85, detail="no job with model.m_c = 1"))
    c90 = _phase_crossings(table)[0.9]
    out.append(_slope_claim(PHASE, "m needed for 90% success grows sublinearly: m_90 ~ d^c with c < 0.5",
                            c90, power_law_fit, lambda v: v < 0.5))
    out.append(_slope_claim(PHASE, "m needed for 90% success is polylogarithmic: m_90 = a (log2 d)^b, b <= 2",
                            c90, polylog_fit, lambda v: v <= 2, symbol="polylog exponent b"))
    return out


register(FigureSpec(
    name=PHASE, sources=(PHASE,), table=phase_table, plot=phase_plot, claims=phase_claims,
    caption="Left: fraction of seeds with population loss < 0.01 after one population step (softmax, "
            "antisymmetric init, eta = eta0 d^2 sqrt(m)) on the (d, m) grid, m = ceil(m_c log2(d)^2), with "
            "the curve m = log2(d)^2. Right: m needed for 50% and 90% success (log-linear interpolation in m "
            "between grid points; hollow = reached at the smallest m of the grid, an upper bound left out of "
            "the fits), 95% seed-bootstrap intervals, with a power-law fit m ~ d^c and a polylog fit "
            "m = a (log2 d)^b (exponents with bootstrap CIs in the legend).",
))


# ---------------------------------------------------------------- 3. attention variants

def variants_table(data: Mapping[str, ExperimentData]) -> pd.DataFrame:
    """Rows: (key, replica, step) of population GD: attention map, init, loss, xor_correlation."""
    return select(data, VARIANTS, ["key", "replica", "seed", "task.d", "model.attention", "model.init",
                                    "train.steps", "step", "loss", "xor_correlation"], "curves")


def variants_plot(table: pd.DataFrame):
    import seaborn as sns

    ds = _by(table, "task.d")
    fig, axes = panels(2 * len(ds), "population gradient descent: median over seeds, IQR band")
    present = set(table["model.attention"].dropna())
    maps = [a for a in ATTENTIONS if a in present] + sorted(present - set(ATTENTIONS))
    style = dict(x="step", hue="model.attention", style="model.init", estimator="median",
                 errorbar=("pi", 50), hue_order=maps)
    for i, d in enumerate(ds):
        at_d = table[table["task.d"] == d].assign(loss=lambda t: t["loss"].clip(lower=LOSS_FLOOR))
        a, b = axes[2 * i], axes[2 * i + 1]
        sns.lineplot(at_d, y="loss", ax=a, **style)
        a.axhline(0.25, color="0.3", ls=":", lw=1, label="1/4")
        a.set(yscale="log", title=f"population loss, d = {d:g}", xlabel="GD step")
        sns.lineplot(at_d, y="xor_correlation", ax=b, legend=False, **style)
        b.set(title=f"head specialisation, d = {d:g}", xlabel="GD step",
              ylabel="g_p g~_q + g_q g~_p")
        a.legend(fontsize=6)
    return fig


def variants_claims(table: pd.DataFrame) -> list[Claim]:
    out = []
    for d in _by(table, "task.d") or [float("nan")]:
        at_d = table[table["task.d"] == d]
        last = at_d[at_d["step"] == at_d.groupby("key")["step"].transform("max")]
        sel = lambda df, att, init: df[(df["model.attention"] == att) & (df["model.init"] == init)]  # noqa: E731
        for att in ("linear", "erf"):
            per_seed_min = sel(at_d, att, "antisymmetric").groupby("replica")["loss"].min()
            q1, _, q3 = quantiles(per_seed_min)
            out.append(judge(VARIANTS, f"{att} attention, antisymmetric init: population loss stays >= 1/4 "
                                       f"(min over steps and seeds, d = {d:g})",
                             per_seed_min.min() if len(per_seed_min) else float("nan"),
                             lambda v: v >= 0.25 - 1e-9, interval(q1, q3, "IQR of per-seed minima"),
                             f"{len(per_seed_min)} seeds; tolerance 1e-9 for rounding"))
        out.append(median_claim(VARIANTS, f"softmax attention, antisymmetric init: final population loss < "
                                           f"{SUCCESS_LOSS} (median, d = {d:g})",
                                 sel(last, "softmax", "antisymmetric")["loss"], lambda v: v < SUCCESS_LOSS))
        for att in ("linear", "erf"):
            anti = quantiles(sel(last, att, "antisymmetric")["loss"])[1]
            out.append(median_claim(VARIANTS, f"{att} attention: independent init ends below antisymmetric "
                                               f"init (final median loss, d = {d:g})",
                                     sel(last, att, "independent")["loss"], lambda v, a=anti: v < a,
                                     f"antisymmetric final median {fmt(anti)}"))
    return out


register(FigureSpec(
    name=VARIANTS, sources=(VARIANTS,), table=variants_table, plot=variants_plot, claims=variants_claims,
    caption="Population loss (log scale) and head specialisation g_p g~_q + g_q g~_p (1 = the heads "
            "attend to p and q) along population gradient descent, for softmax, linear and erf attention "
            "with antisymmetric (theta~ = -theta) and independent initialisation; median over seeds with "
            "IQR band; losses below 1e-10 (exact zeros included) drawn at 1e-10. Dotted: 1/4, the floor of "
            "odd attention maps under antisymmetric init.",
))


# ---------------------------------------------------------------- 4. sample complexity

def samples_table(data: Mapping[str, ExperimentData]) -> pd.DataFrame:
    """Rows: (key, replica) of one step on n samples: d, n, m, population loss, train loss, success."""
    return _with_success(select(data, SAMPLES, ["key", "replica", "seed", "task.d", "task.n", "m", "loss",
                                                 "train_loss"]))


def samples_plot(table: pd.DataFrame):
    fig, (a, b) = panels(2, "one step on n samples: success = population loss < 0.01")
    rates = rate_table(table, ["task.d", "task.n"])
    for (d, t), color in zip(rates.groupby("task.d"), palette(rates["task.d"].nunique()), strict=True):
        a.errorbar(t["task.n"], t["rate"], yerr=t["se"], marker="o", ms=3, capsize=2, color=color,
                   label=f"d = {d:g}")
    a.axhline(0.5, color="0.5", ls=":", lw=0.8)
    a.set(xscale="log", xlabel="n (samples)", ylabel="success rate", ylim=(-0.03, 1.03))
    a.legend(fontsize=7)
    c = crossings(table, "task.d", "task.n", 0.5, n_boot=N_BOOT)
    _crossing_panel(b, [("n at 50% success", c, [("power n ~ d^c", power_law_fit, "-")])], "d", "n needed")
    return fig


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


def samples_claims(table: pd.DataFrame) -> list[Claim]:
    c = crossings(table, "task.d", "task.n", 0.5, n_boot=N_BOOT)
    snr = one_step_snr_exponent(table["task.d"].dropna()) if not table.empty else float("nan")
    _, lo, hi = c.fit(power_law_fit)
    return [_slope_claim(SAMPLES, f"samples for 50% success: n_50 ~ d^c with c consistent with the one-step "
                                  f"signal-to-noise estimate n ~ d^2 ln(d)/m (local exponent {fmt(snr)} on this "
                                  "grid; the 95% CI contains it)", c, power_law_fit,
                         lambda v: lo <= snr <= hi)]


register(FigureSpec(
    name=SAMPLES, sources=(SAMPLES,), table=samples_table, plot=samples_plot, claims=samples_claims,
    caption="Left: fraction of seeds with population loss < 0.01 after one gradient step on the empirical "
            "loss of n samples (m = ceil(log2(d)^2)), binomial s.e. bars. Right: n at 50% success "
            "(log-linear interpolation in n; hollow = reached at the smallest n of the grid, an upper bound "
            "left out of the fit), 95% seed-bootstrap intervals, with a power-law fit n ~ d^c.",
))


# ---------------------------------------------------------------- 5. parameters: transformer vs FFNN

PARAMS_LEVEL = 0.5
# architecture -> (legend label, interpolate the crossing between grid sizes)
ARCHITECTURES = {"transformer": ("transformer, 2m", True), "ffnn": ("ReLU FFNN, k(d+2)+1", False)}


def params_table(data: Mapping[str, ExperimentData]) -> pd.DataFrame:
    """Rows: (architecture, key, replica): d, width (m or k), n_params (2m or k(d+2)+1), success
    (transformer: population loss < 0.01 after one step; FFNN: test error <= 0.01)."""
    cols = ["architecture", "key", "replica", "seed", "task.d", "width", "n_params", "loss", "test_error",
            "success"]
    tr = select(data, PHASE, ["key", "replica", "seed", "task.d", "m", "n_params", "loss"])
    tr = _with_success(tr.rename(columns={"m": "width"}).assign(architecture="transformer"))
    ff = select(data, FFNN, ["key", "replica", "seed", "task.d", "model.k", "n_params", "test_error"])
    ff = _with_success(ff.rename(columns={"model.k": "width"}).assign(architecture="ffnn"), "test_error",
                       FFNN_SUCCESS_ERROR, strict=False)
    parts = [p.reindex(columns=cols) for p in (tr, ff) if not p.empty]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=cols)


def _params_crossings(table: pd.DataFrame) -> dict[str, Crossings]:
    return {arch: crossings(table[table["architecture"] == arch], "task.d", "n_params", PARAMS_LEVEL,
                            interpolate=interp, n_boot=N_BOOT)
            for arch, (_, interp) in ARCHITECTURES.items()}


def params_plot(table: pd.DataFrame):
    fig, (a,) = panels(1, f"parameters needed for {PARAMS_LEVEL:.0%} success")
    cs = _params_crossings(table)
    _crossing_panel(a, [(ARCHITECTURES[k][0], c, [("fit", power_law_fit, "-")]) for k, c in cs.items()],
                    "d", "parameters needed")
    return fig


def _compare_at(cs: dict[str, Crossings]) -> tuple[str, float, np.ndarray, tuple[int, int]]:
    """(where, ratio transformer / FFNN of the parameters needed, its bootstrap replicates, the
    two crossing indices) at the largest common d, else at each architecture's largest d."""
    tr, ff = cs["transformer"], cs["ffnn"]
    fin = lambda c: {g: j for j, g in enumerate(c.groups) if np.isfinite(c.point[j])}  # noqa: E731
    ftr, fff = fin(tr), fin(ff)
    common = sorted(set(ftr) & set(fff))
    if common:
        d = common[-1]
        where, i, j = f"at the largest common d = {d:g}", ftr[d], fff[d]
    elif ftr and fff:
        dt, dfn = max(ftr), max(fff)
        where = f"at the largest d of each (transformer d = {dt:g}, FFNN d = {dfn:g})"
        i, j = ftr[dt], fff[dfn]
    else:
        return "", float("nan"), np.array([]), (-1, -1)
    ratio = tr.point[i] / ff.point[j]
    boot = tr.boot[:, i] / ff.boot[:, j]
    return where, ratio, boot, (i, j)


def params_claims(table: pd.DataFrame) -> list[Claim]:
    cs = _params_crossings(table)
    out = [
        _slope_claim(FFNN, "FFNN parameters needed grow at least linearly in d (Omega(d)): slope >= 0.8",
                     cs["ffnn"], power_law_fit, lambda v: v >= 0.8, symbol="slope"),
        _slope_claim(FFNN, "transformer parameters needed grow slowly: slope <= 0.5 (log-log in d)",
                     cs["transformer"], power_law_fit, lambda v: v <= 0.5, symbol="slope"),
    ]
    where, ratio, boot, (i, j) = _compare_at(cs)
    if where:
        lo, hi = percentile_ci(boot)
        bound = lambda c, k: " (an upper bound)" if c.censored[k] else ""  # noqa: E731
        tr, ff = cs["transformer"], cs["ffnn"]
        detail = (f"parameters needed: transformer {fmt(tr.point[i])}{bound(tr, i)}, "
                  f"FFNN {fmt(ff.point[j])}{bound(ff, j)}")
    else:
        lo = hi = float("nan")
        detail = "no d where both reach the level"
    out.append(judge(FFNN, " ".join(filter(None, ["the transformer needs fewer parameters than the FFNN",
                                                  where, "(ratio transformer / FFNN < 1)"])),
                     ratio, lambda v: v < 1, interval(lo, hi, "95% bootstrap CI"), detail))
    return out


register(FigureSpec(
    name=FFNN, sources=(PHASE, FFNN), table=params_table, plot=params_plot, claims=params_claims,
    caption=f"Parameters needed for {PARAMS_LEVEL:.0%} success vs d, log-log. Transformer: 2m at the m "
            "where the success rate after one population step (loss < 0.01) reaches the level, interpolated "
            "in log m (from the xor_phase_dm sweep). ReLU FFNN: k(d+2)+1 at the smallest width k of the grid "
            "whose success rate (test error <= 0.01 on fresh samples, trained with Adam on n = 8 d log2 d "
            "samples) reaches the level. Hollow: reached at the grid's smallest size (an upper bound, left "
            "out of the fits). 95% seed-bootstrap intervals; fitted slopes with CIs in the legend.",
))
