"""Job records -> tidy pandas frames, held per experiment in ExperimentData and read by figures with select.

Frames (one per experiment, built from the complete records of the profile's grid):

- final:  one row per (key, replica) with columns experiment, key, replica (seed
  index r in the job), seed (= config.seed + r), n_seeds, the flattened config
  (``task.d``, ``model.m_c``, ``model.attention``, ``train.steps`` ...), the derived
  quantities (``m``, ``n_params``; ``p``, ``q`` per replica), how they were fitted (``lr``,
  ``stop``, ``converged``, ``grad_rel`` ...) and one column per final metric;
- curves: one row per (key, replica, step): the same identity columns, ``step`` and
  one column per logged curve;
- arrays: one row per (key, replica, position): identity columns, ``position`` and
  one column per saved array (e.g. ``gamma_init``, ``gamma``).

A record whose lists do not have one entry per replica is returned as bad (:func:`frames`), listed as
corrupt in the sweep's status; it never stops the others. Which records make the frames, and the
sweep's status: report.sweep_status; seeds pooled from outside the grid: report.pooling.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from attnrepro.jobs.records import CorruptRecord


@dataclass
class ExperimentData:
    """The frames of one experiment plus its sweep status (see report.sweep_status.load_experiment), and the
    rows of its theory curves (jobs.theory.load; empty for experiments without theory)."""

    experiment: str
    final: pd.DataFrame
    curves: pd.DataFrame
    arrays: pd.DataFrame
    status: dict = field(default_factory=dict)
    theory: pd.DataFrame = field(default_factory=pd.DataFrame)
    outputs: Path | None = None  # where derived analyses of these records are cached (jobs.derived)


def flatten(tree: dict, prefix: str = "") -> dict:
    """{'task': {'d': 8}} -> {'task.d': 8}; lists are kept as values."""
    out = {}
    for k, v in tree.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, name + "."))
        else:
            out[name] = v
    return out


def identity(record: dict) -> dict:
    """Columns shared by every row of a job: experiment, key, n_seeds and the flattened config
    (config.seed becomes ``base_seed``; the per-row ``seed`` is base_seed + replica)."""
    cfg = dict(record["config"])
    base = cfg.pop("seed", 0)
    n_seeds = cfg.pop("n_seeds", None)
    return {"experiment": record["experiment"], "key": record["key"], "n_seeds": n_seeds,
            "base_seed": base, **flatten(cfg)}


def _per_replica(values: Any, n: int, what: str) -> list:
    """A list with one entry per replica (a scalar is broadcast); else CorruptRecord."""
    if isinstance(values, list):
        if len(values) != n:
            raise CorruptRecord(f"{what}: {len(values)} values for {n} replicas")
        return values
    return [values] * n


def n_replicas(record: dict) -> int:
    """The number of replicas (seeds) of a record: its n_seeds, else the common length of its metric lists."""
    n = record["config"].get("n_seeds")
    if isinstance(n, int) and n >= 1:
        return n
    lengths = {len(v) for v in record.get("metrics", {}).values() if isinstance(v, list)}
    if len(lengths) != 1:
        raise CorruptRecord("cannot tell the number of replicas")
    return lengths.pop()


def final_rows(record: dict) -> pd.DataFrame:
    """One row per replica: identity, derived quantities, how they were fitted, final metrics."""
    n = n_replicas(record)
    cols = {k: [v] * n for k, v in identity(record).items()}
    cols["replica"] = list(range(n))
    cols["seed"] = [cols["base_seed"][0] + r for r in range(n)]
    for part in ("derived", "fit"):
        for k, v in record.get(part, {}).items():
            cols[k] = _per_replica(v, n, f"{part}.{k}")
    for k, v in record["metrics"].items():
        cols[k] = _per_replica(v, n, f"metrics.{k}")
    return pd.DataFrame(cols)


def curve_rows(record: dict) -> pd.DataFrame:
    """One row per (replica, logged step): identity, step, curve values."""
    curves = record.get("curves") or {}
    steps = curves.get("step", [])
    if not steps:
        return pd.DataFrame()
    n = n_replicas(record)
    rows = {"replica": [r for _ in steps for r in range(n)], "step": [s for s in steps for _ in range(n)]}
    for name, per_step in curves.items():
        if name == "step":
            continue
        if len(per_step) != len(steps):
            raise CorruptRecord(f"curves.{name}: {len(per_step)} steps, expected {len(steps)}")
        rows[name] = [v for vals in per_step for v in _per_replica(vals, n, f"curves.{name}")]
    return _with_identity(pd.DataFrame(rows), record)


def array_rows(record: dict) -> pd.DataFrame:
    """One row per (replica, position): identity, position, one column per array."""
    arrays = record.get("arrays") or {}
    if not arrays:
        return pd.DataFrame()
    n = n_replicas(record)
    parts = []
    for r in range(n):
        cols = {name: pd.Series(_per_replica(v, n, f"arrays.{name}")[r], dtype=float)
                for name, v in arrays.items()}
        part = pd.concat(cols, axis=1)
        part.insert(0, "position", range(len(part)))
        part.insert(0, "replica", r)
        parts.append(part)
    return _with_identity(pd.concat(parts, ignore_index=True), record)


def _with_identity(df: pd.DataFrame, record: dict) -> pd.DataFrame:
    """The record's identity columns, then df's columns, with seed = base_seed + replica after replica."""
    ident = identity(record)
    clash = sorted(set(ident) & set(df.columns))
    if clash:
        raise ValueError(f"identity columns {clash} are also the record's own columns")
    out = pd.concat([pd.DataFrame({k: [v] * len(df) for k, v in ident.items()}, index=df.index), df], axis=1)
    out.insert(out.columns.get_loc("replica") + 1, "seed", out["base_seed"] + out["replica"])
    return out


def frames(records: Iterable[dict]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, list[dict]]:
    """(final, curves, arrays, bad): the three frames of these records and, as bad, the
    records whose content does not fit the format ({'key', 'error'})."""
    finals, curves, arrays, bad = [], [], [], []
    for rec in records:
        try:
            parts = final_rows(rec), curve_rows(rec), array_rows(rec)
        except (CorruptRecord, KeyError, TypeError, ValueError) as e:
            bad.append({"key": rec.get("key"), "error": f"{type(e).__name__}: {e}"})
            continue
        finals.append(parts[0])
        curves.append(parts[1])
        arrays.append(parts[2])
    return _concat(finals), _concat(curves), _concat(arrays), bad


def _concat(dfs: list[pd.DataFrame]) -> pd.DataFrame:
    dfs = [d for d in dfs if not d.empty]
    return pd.concat(dfs, ignore_index=True) if dfs else pd.DataFrame()


def select(data: Mapping[str, ExperimentData], experiment: str, columns: Sequence[str],
           frame: str = "final") -> pd.DataFrame:
    """The experiment's frame ('final', 'curves' or 'arrays') restricted to columns (missing ones NaN;
    an experiment without records gives an empty frame)."""
    df = getattr(data[experiment], frame) if experiment in data else pd.DataFrame()
    return df.reindex(columns=list(columns)).copy()
