"""Pooling the seeds of an experiment's records taken outside its grid (all_records): the points that mix
training protocols, and the seeds a record repeats from an earlier one (left out, not counted twice).
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any, Sequence

import pandas as pd

from attnrepro.report.tables import flatten, n_replicas


def _axes(grid_spec: Any) -> set[str]:
    """The keys a grid varies within one of its parts (a figure tells their values apart)."""
    from attnrepro.jobs.grid import parts

    try:
        return {k for part in parts(grid_spec or {}) for k, v in part.items()
                if isinstance(v, (list, tuple)) and len(v) > 1}
    except ValueError:
        return set()


def pooled(records: Sequence[dict], grid_spec: Any) -> tuple[list[dict], set[tuple[str, int]]]:
    """What pooling records of one experiment outside its grid (all_records) would get wrong.

    A point is a record's config without seed, n_seeds and train; its protocol is its train keys,
    except those the grid varies within a part (train itself an axis: every train key). Returns
    (mixed, repeats):
    - mixed: [{overrides, keys, train: {key: values}}], the points more than one protocol reached
      (Adam beside L-BFGS, say): their seeds are averaged together, so they are listed;
    - repeats: the (key, replica) of each seed a point's protocol already has from an earlier record
      (seed=0 n_seeds=4 beside seed=2 n_seeds=2): a seed draws the same numbers alone or beside
      others (seeding.replica_generators), so the copy is left out rather than counted twice.
    """
    axes = _axes(grid_spec)
    free = (lambda k: True) if "train" in axes else (lambda k: k not in axes)
    points: dict[str, list[tuple[dict, dict]]] = defaultdict(list)
    for rec in sorted(records, key=lambda r: r["key"]):
        cfg = {k: v for k, v in flatten(rec["config"]).items() if k not in ("seed", "n_seeds")}
        protocol = {k: v for k, v in cfg.items() if k.startswith("train.") and free(k)}
        point = json.dumps({k: v for k, v in cfg.items() if k not in protocol}, sort_keys=True, default=str)
        points[point].append((rec, protocol))
    mixed, repeats = [], set()
    for members in points.values():
        seen: set[tuple[str, int]] = set()
        for rec, protocol in members:
            how, base = json.dumps(protocol, sort_keys=True, default=str), rec["config"].get("seed", 0)
            for r in range(n_replicas(rec)):
                if (how, base + r) in seen:
                    repeats.add((rec["key"], r))
                seen.add((how, base + r))
        values = {k: sorted({json.dumps(p.get(k), default=str) for _, p in members})
                  for k in sorted({k for _, p in members for k in p})}
        differ = {k: v for k, v in values.items() if len(v) > 1}
        if differ:
            mixed.append({"overrides": [" ".join(rec.get("overrides", [])) for rec, _ in members],
                          "keys": [rec["key"] for rec, _ in members], "train": differ})
    return mixed, repeats


def without(df: pd.DataFrame, rows: set[tuple[str, int]]) -> pd.DataFrame:
    """df less its rows of the given (key, replica)."""
    if df.empty or not rows:
        return df
    drop = pd.MultiIndex.from_frame(df[["key", "replica"]]).isin(list(rows))
    return df[~drop].reset_index(drop=True)
