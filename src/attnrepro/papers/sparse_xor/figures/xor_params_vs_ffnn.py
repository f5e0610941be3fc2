"""Figure xor_params_vs_ffnn: the parameters needed for 50% success against d, transformer (2m,
from the one-step sweep) against a ReLU FFNN (k(d+2)+1).

Estimates: curves "transformer" and "ffnn" (common.crossing_estimates: the parameters needed per d
with 95% seed-bootstrap intervals, the fit ~ d^c with the slope's interval), and "ratio", the
transformer's over the FFNN's need where they are compared (:func:`compare_at`) with its bootstrap
interval, beside "ratio_d", the d of each curve it compares.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

import numpy as np
import pandas as pd

from attnrepro.papers.sparse_xor.figures.common import (
    ESTIMATE_KEYS,
    FFNN_SUCCESS_ERROR,
    FINISHED,
    MAX_LEFT_OUT,
    N_BOOT,
    PHASE,
    crossing_panel,
    read_crossings,
    slope_claim,
    with_success,
)
from attnrepro.report.claims import Claim, fmt, interval, judge
from attnrepro.report.figure_spec import FigureSpec, register
from attnrepro.report.plotting import panels
from attnrepro.report.tables import ExperimentData, select
from attnrepro.stats import estimates as est
from attnrepro.stats.fits import percentile_ci
from attnrepro.stats.summaries import Crossings, crossings

FIGURE = "xor_params_vs_ffnn"
LEVEL = 0.5
# architecture -> (legend label, interpolate the crossing between grid sizes)
ARCHITECTURES = {"transformer": ("transformer, 2m", True), "ffnn": ("ReLU FFNN, k(d+2)+1", False)}


def table(data: Mapping[str, ExperimentData]) -> pd.DataFrame:
    """Rows: (architecture, key, replica): d, width (m or k), n_params (2m or k(d+2)+1), success
    (transformer: population loss < 0.01 after one step; FFNN: test error <= 0.01), finished (the
    transformer's one step always; an FFNN seed that converged or stalled before the step cap)."""
    cols = ["architecture", "key", "replica", "seed", "task.d", "width", "n_params", "loss", "test_error",
            "success", "finished"]
    tr = select(data, PHASE, ["key", "replica", "seed", "task.d", "m", "n_params", "loss"])
    tr = with_success(tr.rename(columns={"m": "width"}).assign(architecture="transformer", finished=True))
    ff = select(data, FIGURE, ["key", "replica", "seed", "task.d", "model.k", "n_params", "test_error", "stop"])
    ff = with_success(ff.rename(columns={"model.k": "width"}).assign(architecture="ffnn"), "test_error",
                      FFNN_SUCCESS_ERROR, strict=False)
    ff["finished"] = ff["stop"].isin(FINISHED)
    parts = [p.reindex(columns=cols) for p in (tr, ff) if not p.empty]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=cols)


def compare_at(tr: Crossings, ff: Crossings) -> tuple[float, float, float, float, float] | None:
    """(transformer's d, FFNN's d, ratio transformer / FFNN of the parameters needed there, its 95%
    bootstrap interval) at the largest d where both reach the level, else at each architecture's
    largest such d; None when one never reaches it."""
    fin = lambda c: {g: j for j, g in enumerate(c.groups) if np.isfinite(c.point[j])}  # noqa: E731
    ftr, fff = fin(tr), fin(ff)
    common = sorted(set(ftr) & set(fff))
    if common:
        dt = dfn = common[-1]
    elif ftr and fff:
        dt, dfn = max(ftr), max(fff)
    else:
        return None
    i, j = ftr[dt], fff[dfn]
    return (dt, dfn, tr.point[i] / ff.point[j], *percentile_ci(tr.boot[:, i] / ff.boot[:, j]))


def estimates(table: pd.DataFrame) -> pd.DataFrame:
    """Each architecture's crossings with a power-law fit (seed bootstrap) over the finished seeds, and the
    compared ratio."""
    table = table[table["finished"].astype(bool)]
    cs = {arch: crossings(table[table["architecture"] == arch], "task.d", "n_params", LEVEL,
                          interpolate=interp, n_boot=N_BOOT)
          for arch, (_, interp) in ARCHITECTURES.items()}
    rows = [r for arch, c in cs.items() for r in c.summary(("power",)).rows(curve=arch)]
    compared = compare_at(cs["transformer"], cs["ffnn"])
    if compared is not None:
        dt, dfn, ratio, lo, hi = compared
        rows += [est.row("ratio", ratio, lo, hi), est.row("ratio_d", dt, curve="transformer"),
                 est.row("ratio_d", dfn, curve="ffnn")]
    return est.frame(rows, ESTIMATE_KEYS)


def read(estimates: pd.DataFrame) -> dict:
    return {arch: read_crossings(estimates, arch, "n_params", LEVEL) for arch in ARCHITECTURES}


def plot(table: pd.DataFrame, estimates: pd.DataFrame):
    fig, (a,) = panels(1, f"parameters needed for {LEVEL:.0%} success")
    crossing_panel(a, [(ARCHITECTURES[k][0], c, [("fit", "power", "-")]) for k, c in read(estimates).items()],
                   "d", "parameters needed")
    return fig


def claims(table: pd.DataFrame, estimates: pd.DataFrame) -> list[Claim]:
    cs = read(estimates)
    tr, ff = cs["transformer"], cs["ffnn"]
    seeds = table[table["architecture"] == "ffnn"]
    left = seeds.groupby(["task.d", "width"])["finished"].agg(lambda f: 1 - f.astype(bool).mean())
    few = not len(left) or left.max() <= MAX_LEFT_OUT
    ffnn = slope_claim(FIGURE, "ffnn_exponent", "FFNN parameters needed grow at least linearly in d (Omega(d)): "
                       "slope >= 0.8", ff, "power", lambda v: v >= 0.8 and few, symbol="slope")
    ffnn = replace(ffnn, detail=ffnn.detail + f"; FFNN seeds left out (neither converged nor stalled by the step "
                   f"cap): {int((~seeds['finished'].astype(bool)).sum())} of {len(seeds)}"
                   + ("" if few else f"; not confirmed: more than {MAX_LEFT_OUT:.0%} of a (d, k) cell left out"))
    out = [
        ffnn,
        slope_claim(FIGURE, "transformer_exponent",
                    "transformer parameters needed grow slowly: slope <= 0.5 (log-log in d)",
                    tr, "power", lambda v: v <= 0.5, symbol="slope"),
    ]
    ratio, lo, hi = est.get(estimates, "ratio")
    if est.select(estimates, "ratio").empty:
        where, detail = "", "no d where both reach the level"
    else:
        dt, dfn = (est.value(estimates, "ratio_d", curve=arch) for arch in ("transformer", "ffnn"))
        where = (f"at the largest common d = {dt:g}" if dt == dfn
                 else f"at the largest d of each (transformer d = {dt:g}, FFNN d = {dfn:g})")
        i, j = int(np.flatnonzero(tr.groups == dt)[0]), int(np.flatnonzero(ff.groups == dfn)[0])
        bound = lambda c, k: " (an upper bound)" if c.censored[k] else ""  # noqa: E731
        detail = (f"parameters needed: transformer {fmt(tr.point[i])}{bound(tr, i)}, "
                  f"FFNN {fmt(ff.point[j])}{bound(ff, j)}")
    out.append(judge(FIGURE, " ".join(filter(None, ["the transformer needs fewer parameters than the FFNN",
                                                    where, "(ratio transformer / FFNN < 1)"])),
                     ratio, lambda v: v < 1, interval(lo, hi, "95% bootstrap CI"), detail, key="fewer_parameters"))
    return out


SPEC = register(FigureSpec(
    name=FIGURE, sources=(PHASE, FIGURE), table=table, plot=plot, claims=claims, estimates=estimates,
    caption=f"Parameters needed for {LEVEL:.0%} success vs d, log-log. Transformer: 2m at the m "
            "where the success rate after one population step (loss < 0.01) reaches the level, interpolated "
            "in log m (from the xor_phase_dm sweep). ReLU FFNN: k(d+2)+1 at the smallest width k of the grid "
            "whose success rate (test error <= 0.01 on fresh samples, trained with Adam on n = 8 d log2 d "
            "samples until its relative gradient is <= 1e-3, seeds still training at the 1000-step cap left out) "
            "reaches the level. Hollow: reached at the grid's smallest size (an upper bound, left "
            "out of the fits). 95% seed-bootstrap intervals; fitted slopes with CIs in the legend.",
))
