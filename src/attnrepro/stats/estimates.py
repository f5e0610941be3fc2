"""Estimates as data: the numbers a figure's plot and claims both quote, in one tidy frame.

One row per estimate: ``name``, the keys that place it (a panel's parameters, a curve, a fit),
``value`` and, for an interval estimate, its 95% bounds ``lo`` and ``hi`` (NaN otherwise). A
figure's ``estimates(table)`` computes them once (each bootstrap runs once); the figure stage
saves them as results/<figure>.estimates.parquet and hands them to the plot and the claims,
which read them back with :func:`get` and :func:`select`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from attnrepro.stats.fits import NAN

VALUES = ("value", "lo", "hi")


def row(name: str, value: float, lo: float = NAN, hi: float = NAN, **keys) -> dict:
    """One estimate: its name, keys (and extra numbers), value and interval."""
    return {"name": name, **keys, "value": float(value), "lo": float(lo), "hi": float(hi)}


def frame(rows: Sequence[dict], keys: Sequence[str] = (), extra: Sequence[str] = ()) -> pd.DataFrame:
    """The rows as one frame with columns name, *keys, value, lo, hi, *extra (further numbers of an
    estimate, e.g. its standard error); what a row lacks is missing."""
    return pd.DataFrame(list(rows), columns=["name", *keys, *VALUES, *extra])


def select(est: pd.DataFrame, name: str, **keys) -> pd.DataFrame:
    """The rows of estimate ``name`` whose keys equal the given values (``**{"task.d": 50}`` for
    a key with a dot), in the order they were computed."""
    mask = (est["name"] == name).to_numpy()
    for k, v in keys.items():
        mask = mask & (est[k] == v).to_numpy()
    return est[mask]


def get(est: pd.DataFrame, name: str, **keys) -> tuple[float, float, float]:
    """(value, lo, hi) of the one row of an estimate; NaN each when there is none."""
    rows = select(est, name, **keys)
    if len(rows) > 1:
        raise ValueError(f"estimate {name!r} at {keys} has {len(rows)} rows")
    if rows.empty:
        return NAN, NAN, NAN
    r = rows.iloc[0]
    return float(r["value"]), float(r["lo"]), float(r["hi"])


def value(est: pd.DataFrame, name: str, **keys) -> float:
    """The value of the one row of an estimate (NaN when there is none)."""
    return get(est, name, **keys)[0]


def values(est: pd.DataFrame, name: str, **keys) -> np.ndarray:
    """The values of every row of an estimate at the given keys, as floats."""
    return select(est, name, **keys)["value"].to_numpy(dtype=float)
