"""Figure xor_one_step_attention: both heads' softmax attention before and after one population
gradient step, and each seed's attention mass on the support {p, q}. Claims: medians over seeds
with the IQR (no shared estimates). The figure and those claims use the simplified form
(model.form = simplified; records without the column count as simplified); where the sweep also ran
the standard CLS-token transformer (model.form = standard), one more claim: its after-step masses
equal the simplified form's, seed by seed, to 1e-10."""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from attnrepro.papers.sparse_xor.figures.common import SHARES, SUCCESS_LOSS, rate_claim, split_one_to_one
from attnrepro.report.claims import Claim, claim_key, fmt, judge
from attnrepro.report.figure_spec import FigureSpec, register
from attnrepro.report.plotting import palette, panels
from attnrepro.report.tables import ExperimentData, select
from attnrepro.stats.seed_stats import median_claim

FIGURE = "xor_one_step_attention"
HEADS = {"gamma": "γ", "gamma_tilde": "γ̃"}
FORM, SIMPLIFIED, STANDARD = "model.form", "simplified", "standard"
EQUAL_TOL = 1e-10


def table(data: Mapping[str, ExperimentData]) -> pd.DataFrame:
    """Rows: (key, replica, position) with both heads' attention before (``*_init``) and after
    the step, the support p, q, on_support = position in {p, q}, the seed's final loss, whether its
    heads split one-to-one onto {p, q} after the step, and the model form (simplified or standard)."""
    cols = ["key", "replica", "seed", "task.d", FORM, "m", "p", "q", "loss", "split", "position",
            "gamma_init", "gamma_tilde_init", "gamma", "gamma_tilde", "on_support"]
    arrays = select(data, FIGURE, ["key", "replica", "seed", "task.d", FORM, "position", "gamma_init",
                                    "gamma_tilde_init", "gamma", "gamma_tilde"], "arrays")
    final = select(data, FIGURE, ["key", "replica", "m", "p", "q", "loss", *SHARES])
    if arrays.empty or final.empty:
        return pd.DataFrame(columns=cols)
    final["split"] = split_one_to_one(final)
    df = arrays.merge(final, on=["key", "replica"], how="inner")
    df["on_support"] = (df["position"] == df["p"]) | (df["position"] == df["q"])
    df[FORM] = df[FORM].fillna(SIMPLIFIED)
    return df[cols]


def masses(table: pd.DataFrame) -> pd.DataFrame:
    """Per seed: each head's mass on {p, q}, before (gamma_init_p + gamma_init_q) and after."""
    heads = ["gamma_init", "gamma_tilde_init", "gamma", "gamma_tilde"]
    ids = ["key", "task.d", FORM, "seed", "replica", "loss", "split"]
    if table.empty:
        return pd.DataFrame(columns=[*ids, *heads])
    sup = table[table["on_support"].astype(bool)]
    return sup.groupby(ids, dropna=False)[heads].sum().reset_index()


def largest_d(df: pd.DataFrame, form: str = SIMPLIFIED) -> tuple[float, pd.DataFrame]:
    """The largest d of one form's rows (of all rows when that form has none), and those rows."""
    if FORM in df and (df[FORM] == form).any():
        df = df[df[FORM] == form]
    if df.empty:
        return float("nan"), df
    d = df["task.d"].max()
    return d, df[df["task.d"] == d]


def standard_form_claim(table: pd.DataFrame) -> list[Claim]:
    """Where both forms ran: max over seeds and heads of |mass after (standard) - mass after
    (simplified)| at the largest d both have; none when the standard form did not run."""
    ms = masses(table)
    both = set(ms.loc[ms[FORM] == SIMPLIFIED, "task.d"]) & set(ms.loc[ms[FORM] == STANDARD, "task.d"])
    if not both:
        return []
    d = max(both)
    ms = ms[ms["task.d"] == d]
    pair = ms[ms[FORM] == SIMPLIFIED].merge(ms[ms[FORM] == STANDARD], on=["task.d", "seed"],
                                            suffixes=("_simplified", "_standard"))
    diff = max(float((pair[f"{h}_standard"] - pair[f"{h}_simplified"]).abs().max()) for h in HEADS)
    return [judge(FIGURE, f"the standard CLS-token transformer's after-step masses on {{p, q}} equal the "
                          f"simplified form's to {EQUAL_TOL:g} (max |difference| over seeds and heads, d = {d:g})",
                  diff if len(pair) else float("nan"), lambda v: v <= EQUAL_TOL, f"max over {len(pair)} seeds",
                  key=claim_key("standard_form_masses_equal"))]


def plot(table: pd.DataFrame, estimates: None):
    d, at_d = largest_d(table)
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
    ms = masses(at_d)
    long = pd.concat([pd.DataFrame({"stage": stage, "head": head, "mass": ms[col + suffix]})
                      for stage, suffix in (("before", "_init"), ("after", ""))
                      for col, head in HEADS.items()], ignore_index=True)
    import seaborn as sns

    sns.stripplot(long, x="stage", y="mass", hue="head", dodge=True, ax=c, palette=colors, size=3)
    c.axhline(2 / d, color="0.5", ls="--", lw=0.8, label="2/d")
    c.set(yscale="log", ylabel="mass on {p, q}", title=f"all {len(ms)} seeds")
    c.legend(fontsize=7)
    return fig


def claims(table: pd.DataFrame, estimates: None) -> list[Claim]:
    d, at_d = largest_d(table)
    ms = masses(at_d)
    out = [median_claim(FIGURE, f"after one step, head {head}'s mass on {{p, q}} >= 0.9 "
                                f"(median over seeds, d = {d:g})", ms[col], lambda v: v >= 0.9,
                        key=claim_key("support_mass_after", head=col))
           for col, head in HEADS.items()]
    out.append(median_claim(FIGURE, f"population loss after one step < {SUCCESS_LOSS} (median, d = {d:g})",
                            ms["loss"], lambda v: v < SUCCESS_LOSS, key="loss_after"))
    out.append(rate_claim(FIGURE, f"after one step the heads split one-to-one onto {{p, q}} (one head's share "
                                  f"> 1/2 on p, the other's on q) in >= 90% of seeds (d = {d:g})",
                          ms["split"].astype(bool), lambda v: v >= 0.9, key="heads_split_after"))
    ratio = pd.concat([ms["gamma_init"], ms["gamma_tilde_init"]]) / (2 / d)
    out.append(median_claim(FIGURE, f"before the step each head's mass on {{p, q}} is about 2/d: "
                                    f"median ratio to 2/d in [0.5, 2] (d = {d:g})",
                            ratio, lambda v: 0.5 <= v <= 2, f"both heads pooled; 2/d = {fmt(2 / d)}",
                            key="support_mass_before"))
    return out + standard_form_claim(table)


SPEC = register(FigureSpec(
    name=FIGURE, sources=(FIGURE,), table=table, plot=plot, claims=claims,
    caption="Both heads' softmax attention over the d positions before and after one population gradient "
            "step (first seed of the largest d), support positions p and q marked; right: each seed's "
            "attention mass on {p, q} before and after the step, with 2/d for reference. Claims: median "
            "over seeds with IQR.",
))
