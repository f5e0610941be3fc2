"""Figure xor_k_parity (beyond paper A, its stated open point): k-sparse parity y = -prod_{i in S} x_i,
|S| = k in {3, 4}, learned by k softmax heads f = -prod_h (gamma_h . x) on the exact population loss
(papers.sparse_xor.kparity), m = ceil(m_c log2(d)^2).

Protocols: one gradient step (eta = 100 d^k sqrt(m)/(k-1)!, kheads.step_unit_k) and population GD to
convergence (train=k_gd). Inits: simplex (paper A's antisymmetric init for k = 2) and independent,
at unit query norm (paper A's) and at |theta_h(0)| = 0.7 sqrt(m). Success: population loss < 0.01;
split: the heads sit one-to-one on S (kparity_problem.split_onto_support). GD seeds that neither
converged nor stalled are left out and counted; a GD claim is not confirmed when more than 10% of a d's
seeds are. The claims use m_c = 1 (the paper profile adds m_c = 2 to the plot). They are this
project's statements, with thresholds set from an exploration before this sweep (on the same seeds):
what works, and what does not.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from attnrepro.papers.sparse_xor.figures.common import FINISHED, MAX_LEFT_OUT, SUCCESS_LOSS, by, rate_claim
from attnrepro.report.claims import Claim, claim_key, fmt, judge
from attnrepro.report.figure_spec import FigureSpec, register
from attnrepro.report.plotting import no_data, palette, panels
from attnrepro.report.tables import ExperimentData, select
from attnrepro.stats.summaries import rate_table

FIGURE = "xor_k_parity"
GD, ONE_STEP = "k_gd", "one_step"
UNIT, SPREAD = "unit", "0.7 sqrt(m)"


def table(data: Mapping[str, ExperimentData]) -> pd.DataFrame:
    """Rows: (key, replica): k, d, m, protocol (train.name), init, query norm (unit or 0.7 sqrt(m)),
    population loss, split, stop reason; success (loss < 0.01) and finished (every one-step seed; a GD
    seed that converged or stalled)."""
    df = select(data, FIGURE, ["key", "replica", "seed", "task.k", "task.d", "m", "train.name", "model.init",
                                "model.norm_c", "model.m_c", "loss", "split", "stop"])
    df["protocol"] = df["train.name"]
    df["norm"] = np.where(pd.to_numeric(df["model.norm_c"], errors="coerce").notna(), SPREAD, UNIT)
    df["success"] = pd.to_numeric(df["loss"], errors="coerce") < SUCCESS_LOSS
    df["split"] = pd.to_numeric(df["split"], errors="coerce") > 0.5
    df["finished"] = (df["protocol"] == ONE_STEP) | df["stop"].isin(FINISHED)
    df["model.m_c"] = pd.to_numeric(df["model.m_c"], errors="coerce").fillna(1.0)
    return df


def _sel(table: pd.DataFrame, k, protocol: str, init: str | None = None, norm: str | None = None,
         finished: bool = True) -> pd.DataFrame:
    """The seeds of one k and protocol (optionally one init and norm) at m = ceil(log2(d)^2) (m_c = 1, the
    width the claims are about); only the finished ones unless finished=False."""
    t = table[(table["task.k"] == k) & (table["protocol"] == protocol) & (table["model.m_c"] == 1.0)]
    if finished:
        t = t[t["finished"]]
    if init is not None:
        t = t[t["model.init"] == init]
    return t if norm is None else t[t["norm"] == norm]


def plot(table: pd.DataFrame, estimates: None):
    ks = by(table, "task.k")
    fig, axes = panels(max(1, len(ks)), "k-sparse parity, k heads: success vs d")
    for ax, k in zip(axes, ks, strict=False):
        t = table[(table["task.k"] == k) & table["finished"] & (table["model.m_c"] == 1.0)]
        rates = rate_table(t, ["protocol", "model.init", "norm", "task.d"])
        groups = list(rates.groupby(["protocol", "model.init", "norm"]))
        for ((protocol, init, norm), r), color in zip(groups, palette(max(1, len(groups))), strict=False):
            ax.errorbar(r["task.d"], r["rate"], yerr=r["se"], marker="o" if protocol == GD else "s", ms=3,
                        capsize=2, color=color, ls="-" if protocol == GD else "--",
                        label=f"{'GD' if protocol == GD else 'one step'}, {init}, |θ| {norm}")
        ax.set_xscale("log", base=2)
        ax.set(xlabel="d", ylabel="success rate", ylim=(-0.03, 1.03), title=f"k = {k:g}")
        ax.legend(fontsize=5)
    if not ks:
        no_data(axes[0])
    return fig


def _per_d(t: pd.DataFrame) -> pd.Series:
    return t.groupby("task.d")["success"].mean() if not t.empty else pd.Series(dtype=float)


def _at_d(rates: pd.Series) -> str:
    return ", ".join(f"d = {d:g}: {fmt(v)}" for d, v in rates.items())


def claims(table: pd.DataFrame, estimates: None) -> list[Claim]:
    out = []
    for k in by(table, "task.k"):
        for init in ("simplex", "independent"):
            every = _sel(table, k, GD, init, UNIT, finished=False)
            rates = _per_d(every[every["finished"]])
            left = every[~every["finished"]]
            worst = float((~every["finished"]).groupby(every["task.d"]).mean().max()) if len(every) else 0.0
            reasons = ", ".join(sorted({str(v) for v in left["stop"]}))
            note = f"; {len(left)} seeds left out ({reasons})" if len(left) else ""
            if worst > MAX_LEFT_OUT:
                note = f"; not confirmed: up to {worst:.0%} of a d's seeds did not finish" + note
            out.append(judge(FIGURE, f"k = {k:g}: population GD from the {init} init (unit norm) learns k-sparse "
                                     f"parity: success >= 0.9 at every d, m = ceil(log2(d)^2) (smallest rate over d)",
                             rates.min() if len(rates) else float("nan"),
                             lambda v, ok=worst <= MAX_LEFT_OUT: ok and v >= 0.9,
                             detail=_at_d(rates) + note, key=claim_key("gd_learns", k=k, init=init)))
        gd = _sel(table, k, GD)
        out.append(rate_claim(FIGURE, f"k = {k:g}: every GD success has its heads one-to-one on S (fraction of "
                                      "successful seeds that split, all inits and norms)",
                              gd.loc[gd["success"], "split"], lambda v: v >= 1.0, key=claim_key("gd_splits", k=k)))
        one = _sel(table, k, ONE_STEP, norm=UNIT)
        rates = one.groupby(["model.init", "task.d"])["success"].mean() if not one.empty else pd.Series(dtype=float)
        out.append(judge(FIGURE, f"k = {k:g}: paper A's one-step result does not carry over at unit query norm: "
                                 "one step succeeds in <= 50% of seeds at every d and init (largest rate)",
                         rates.max() if len(rates) else float("nan"), lambda v: v <= 0.5,
                         detail=", ".join(f"{i}, d = {d:g}: {fmt(v)}" for (i, d), v in rates.items()),
                         key=claim_key("one_step_unit_norm_fails", k=k)))
        spread = _per_d(_sel(table, k, ONE_STEP, "simplex", SPREAD))
        unit = _per_d(_sel(table, k, ONE_STEP, "simplex", UNIT))
        both = spread.index.intersection(unit.index)
        out.append(judge(FIGURE, f"k = {k:g}: one step from the simplex init at |theta_h(0)| = 0.7 sqrt(m) beats unit "
                                 "norm at every d (smallest difference in success rate)",
                         float((spread[both] - unit[both]).min()) if len(both) else float("nan"), lambda v: v > 0,
                         detail=f"0.7 sqrt(m): {_at_d(spread)}; unit: {_at_d(unit)}",
                         key=claim_key("one_step_spread_beats_unit", k=k)))
        cells = _sel(table, k, ONE_STEP).groupby(["model.init", "norm", "task.d"])["success"].mean()
        best = ""
        if len(cells):
            init, norm, d = cells.idxmax()
            best = f"largest at {init} init, |theta| {norm}, d = {d:g}"
        out.append(judge(FIGURE, f"k = {k:g}: no one-step protocol tried is reliable: success < 0.9 at every d, "
                                 "init and norm (largest rate)",
                         float(cells.max()) if len(cells) else float("nan"), lambda v: v < 0.9, detail=best,
                         key=claim_key("one_step_not_reliable", k=k)))
    return out


SPEC = register(FigureSpec(
    name=FIGURE, sources=(FIGURE,), table=table, plot=plot, claims=claims,
    caption="Beyond paper A: k-sparse parity (k = 3, 4) with k softmax heads, f = -prod_h (gamma_h . x), on "
            "the exact population loss (checked against enumeration of all 2^d inputs at d <= 12). Success rate "
            "(population loss < 0.01, binomial s.e.) against d at m = ceil(log2(d)^2): population GD "
            "(eta = 1e-4 d^k sqrt(m)/(k-1)!, to convergence; solid) and one step (eta = 100 d^k sqrt(m)/(k-1)!; "
            "dashed), from the simplex and independent inits, at unit query norm and at |theta_h(0)| = 0.7 sqrt(m).",
))
