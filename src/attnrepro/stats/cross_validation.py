"""Cross-validation of a hyper-parameter (the weight decay lambda) from a sweep's per-seed table.

For every group (e.g. alpha and the parametrisation), the hyper-parameter is chosen
by the validation error only -- never by the test error:

- per="seed" (the default of the figures): every seed picks its own value,
  argmin_lambda val_error(lambda, seed). A seed is one data set (target, held-out
  and training samples, init), and replica r of every job of the sweep uses the same
  seed, so this is what one would do with that data set alone; the spread over seeds
  of the selected rows then includes the selection's own variability.
- per="mean": one value per group, argmin_lambda of the seed-mean val_error; all the
  seeds' rows at that value are returned.

Ties go to the larger lambda (the simpler model). Rows with a missing validation
error are ignored; a group (or seed) without any is dropped. ``complete_seeds`` keeps the
seeds that have a row at every lambda of their group (a seed run at some lambdas only, e.g.
extra seeds read with all_records=true, would otherwise choose among those alone).
"""

from __future__ import annotations

from typing import Sequence

import pandas as pd

PARAM, VAL = "model.lam", "val_error"


def complete_seeds(df: pd.DataFrame, groups: Sequence[str], param: str = PARAM, seed: str = "seed") -> pd.DataFrame:
    """The rows of the seeds that have a row at every value of ``param`` that their group has."""
    if df.empty:
        return df
    groups = list(groups)
    values = df.groupby(groups, dropna=False)[param].transform("nunique")
    mine = df.groupby([*groups, seed], dropna=False)[param].transform("nunique")
    return df[mine == values]


def select(df: pd.DataFrame, groups: Sequence[str], param: str = PARAM, val: str = VAL, per: str = "seed",
           seed: str = "seed") -> pd.DataFrame:
    """The rows at the cross-validated value of ``param`` for every group of ``groups``.

    Returns a copy of the selected rows with a column ``cv`` = per; per="seed" gives one row
    per (group, seed), per="mean" every seed's row at the group's selected value.
    """
    if per not in ("seed", "mean"):
        raise ValueError(f"per must be 'seed' or 'mean', got {per!r}")
    groups = list(groups)
    out_cols = list(df.columns) + (["cv"] if "cv" not in df.columns else [])
    ok = df[pd.to_numeric(df[val], errors="coerce").notna()] if len(df) else df
    if ok.empty:
        return pd.DataFrame(columns=out_cols)
    if per == "seed":
        chosen = _argmin(ok, [*groups, seed], param, val)
    else:
        means = ok.groupby([*groups, param], dropna=False)[val].mean().reset_index()
        best = _argmin(means, groups, param, val)[[*groups, param]]
        chosen = ok.merge(best, on=[*groups, param], how="inner")
    return chosen.assign(cv=per).reset_index(drop=True)


def _argmin(df: pd.DataFrame, by: list[str], param: str, val: str) -> pd.DataFrame:
    """Per group of ``by``, the row with the smallest ``val`` (ties: the largest ``param``)."""
    ordered = df.sort_values([val, param], ascending=[True, False], kind="stable")
    return ordered.groupby(by, dropna=False, sort=True).head(1).sort_values(by, kind="stable")
