"""Figure xor_attention_variants: population gradient descent with softmax, linear and erf attention
under antisymmetric and independent initialisation, and head specialisation along training: each
head's attention share on p and on q (problem.attention_share) and the fraction of seeds whose heads
split one-to-one onto the support (common.split_one_to_one). Claims: minima, medians and fractions
over seeds (no shared estimates)."""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from attnrepro.papers.sparse_xor.figures.common import SHARES, SUCCESS_LOSS, by, rate_claim, split_one_to_one
from attnrepro.report.claims import Claim, claim_key, fmt, interval, judge
from attnrepro.report.figure_spec import FigureSpec, register
from attnrepro.report.plotting import panels
from attnrepro.report.tables import ExperimentData, select
from attnrepro.stats.fits import quantiles
from attnrepro.stats.seed_stats import median_claim

FIGURE = "xor_attention_variants"
ATTENTIONS = ["softmax", "linear", "erf"]
LOSS_FLOOR = 1e-10  # losses below are drawn at the floor on log axes (exact zeros included)


def table(data: Mapping[str, ExperimentData]) -> pd.DataFrame:
    """Rows: (key, replica, step) of population GD: attention map, init, loss, xor_correlation, the
    heads' attention shares on p and q, and split (the heads split one-to-one onto the support)."""
    df = select(data, FIGURE, ["key", "replica", "seed", "task.d", "model.attention", "model.init",
                                "train.steps", "step", "loss", "xor_correlation", *SHARES], "curves")
    df["split"] = split_one_to_one(df)
    df["on_support"] = df[["share_p", "share_q"]].max(axis=1, skipna=False)   # head gamma's larger share
    df["on_support_tilde"] = df[["share_tilde_p", "share_tilde_q"]].max(axis=1, skipna=False)
    return df


def plot(table: pd.DataFrame, estimates: None):
    import seaborn as sns

    ds = by(table, "task.d")
    fig, axes = panels(3 * len(ds), "population gradient descent: median over seeds, IQR band")
    present = set(table["model.attention"].dropna())
    maps = [a for a in ATTENTIONS if a in present] + sorted(present - set(ATTENTIONS))
    style = dict(x="step", hue="model.attention", style="model.init", estimator="median",
                 errorbar=("pi", 50), hue_order=maps)
    for i, d in enumerate(ds):
        at_d = table[table["task.d"] == d].assign(loss=lambda t: t["loss"].clip(lower=LOSS_FLOOR))
        a, b, c = axes[3 * i], axes[3 * i + 1], axes[3 * i + 2]
        sns.lineplot(at_d, y="loss", ax=a, **style)
        a.axhline(0.25, color="0.3", ls=":", lw=1, label="1/4")
        a.set(yscale="log", title=f"population loss, d = {d:g}", xlabel="GD step")
        sns.lineplot(at_d, y="xor_correlation", ax=b, legend=False, **style)
        b.set(title=f"head specialisation, d = {d:g}", xlabel="GD step",
              ylabel="g_p g~_q + g_q g~_p")
        split = at_d.groupby(["model.attention", "model.init", "step"], as_index=False)["split"].mean()
        sns.lineplot(split, x="step", y="split", hue="model.attention", style="model.init", hue_order=maps,
                     ax=c, legend=False)
        c.set(title=f"heads split one-to-one onto {{p, q}}, d = {d:g}", xlabel="GD step",
              ylabel="fraction of seeds", ylim=(-0.03, 1.03))
        a.legend(fontsize=6)
    return fig


def claims(table: pd.DataFrame, estimates: None) -> list[Claim]:
    out = []
    for d in by(table, "task.d") or [float("nan")]:
        at_d = table[table["task.d"] == d]
        last = at_d[at_d["step"] == at_d.groupby("key")["step"].transform("max")]
        steps = f"{last['step'].max():g}" if len(last) else "?"  # the protocol's fixed step count (train=gd)
        sel = lambda df, att, init: df[(df["model.attention"] == att) & (df["model.init"] == init)]  # noqa: E731
        for att in ("linear", "erf"):
            per_seed_min = sel(at_d, att, "antisymmetric").groupby("replica")["loss"].min()
            q1, _, q3 = quantiles(per_seed_min)
            out.append(judge(FIGURE, f"{att} attention, antisymmetric init: population loss stays >= 1/4 "
                                     f"(min over steps and seeds, d = {d:g})",
                             per_seed_min.min() if len(per_seed_min) else float("nan"),
                             lambda v: v >= 0.25 - 1e-9, interval(q1, q3, "IQR of per-seed minima"),
                             f"{len(per_seed_min)} seeds; tolerance 1e-9 for rounding",
                             key=claim_key("loss_stays_above_quarter", attention=att, d=d)))
        out.append(median_claim(FIGURE, f"softmax attention, antisymmetric init: population loss after {steps} GD "
                                        f"steps < {SUCCESS_LOSS} (median, d = {d:g})",
                                sel(last, "softmax", "antisymmetric")["loss"], lambda v: v < SUCCESS_LOSS,
                                key=claim_key("softmax_learns", d=d)))
        for att in ("linear", "erf"):
            anti = quantiles(sel(last, att, "antisymmetric")["loss"])[1]
            out.append(median_claim(FIGURE, f"{att} attention: independent init ends below antisymmetric "
                                            f"init (median loss after {steps} GD steps, d = {d:g})",
                                    sel(last, att, "independent")["loss"], lambda v, a=anti: v < a,
                                    f"antisymmetric final median {fmt(anti)}",
                                    key=claim_key("independent_below_antisymmetric", attention=att, d=d)))
        out += split_claims(last, d, steps)
    return out


def split_claims(last: pd.DataFrame, d: float, steps: str) -> list[Claim]:
    """The paper's specialisation statements after the protocol's `steps` GD steps: softmax with antisymmetric
    init splits the heads one-to-one onto {p, q} (>= 90% of seeds); linear and erf attention do not (<= 10% of
    seeds, under either init). Softmax with independent init is this project's ablation."""
    out = []
    for att in ATTENTIONS:
        for init in ("antisymmetric", "independent"):
            rows = last[(last["model.attention"] == att) & (last["model.init"] == init)]
            flags = rows["split"]
            detail = (f"median larger share of head gamma on {{p, q}}: {fmt(rows['on_support'].median())}, "
                      f"of head gamma~: {fmt(rows['on_support_tilde'].median())}")
            key = claim_key("heads_split", attention=att, init=init, d=d)
            if att == "softmax" and init == "antisymmetric":
                out.append(rate_claim(FIGURE, f"softmax attention, antisymmetric init: the heads split one-to-one "
                                              f"onto {{p, q}} in >= 90% of seeds (after {steps} GD steps, d = {d:g})",
                                      flags, lambda v: v >= 0.9, detail, key=key))
            elif att == "softmax":
                out.append(rate_claim(FIGURE, f"softmax attention, independent init (ablation; the paper's argument "
                                              f"uses antisymmetric init): the heads still split one-to-one onto "
                                              f"{{p, q}} in >= 90% of seeds after {steps} GD steps ("
                                              f"d = {d:g}; this project's measurement, threshold set after a "
                                              "first run)",
                                      flags, lambda v: v >= 0.9, detail, key=key))
            else:
                why = ("by symmetry gamma~ = -gamma, so both heads have the same shares" if init == "antisymmetric"
                       else "a share is at most about sqrt(m)/d when m < d")
                out.append(rate_claim(FIGURE, f"{att} attention, {init} init: the heads do not split one-to-one "
                                              f"onto {{p, q}}: <= 10% of seeds (after {steps} GD steps, d = {d:g}; "
                                              f"a structural check: {why})",
                                      flags, lambda v: v <= 0.1, detail, key=key))
    return out


SPEC = register(FigureSpec(
    name=FIGURE, sources=(FIGURE,), table=table, plot=plot, claims=claims,
    caption="Population loss (log scale) and head specialisation g_p g~_q + g_q g~_p (1 = the heads "
            "attend to p and q) along population gradient descent, for softmax, linear and erf attention "
            "with antisymmetric (theta~ = -theta) and independent initialisation; median over seeds with "
            "IQR band; losses below 1e-10 (exact zeros included) drawn at 1e-10. Dotted: 1/4, the floor of "
            "odd attention maps under antisymmetric init. Right: fraction of seeds whose heads split one-to-one "
            "onto the support (one head's share |g_i| / sum_j |g_j| above 1/2 on p, the other's on q).",
))
