"""Job records -> tidy pandas frames, and the status of an experiment's sweep.

Frames (one per experiment, built from the complete records of the profile's grid):

- final:  one row per (key, replica) with columns experiment, key, replica (seed
  index r in the job), seed (= config.seed + r), n_seeds, the flattened config
  (``task.d``, ``model.m_c``, ``model.attention``, ``train.steps`` ...), the derived
  quantities (``m``, ``eta``, ``n_params``; ``p``, ``q`` per replica) and one column
  per final metric;
- curves: one row per (key, replica, step): the same identity columns, ``step`` and
  one column per logged curve;
- arrays: one row per (key, replica, position): identity columns, ``position`` and
  one column per saved array (e.g. ``gamma_init``, ``gamma``).

A record that cannot be read, or whose lists do not have one entry per replica, is
listed as corrupt in the status; it never stops the others.
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from attnrepro.jobs.job import State, Status
from attnrepro.jobs.records import CorruptRecord, scan
from attnrepro.jobs.training import record_state


@dataclass
class ExperimentData:
    """The frames of one experiment plus its sweep status (see :func:`load_experiment`), and the
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


def _n_replicas(record: dict) -> int:
    n = record["config"].get("n_seeds")
    if isinstance(n, int) and n >= 1:
        return n
    lengths = {len(v) for v in record.get("metrics", {}).values() if isinstance(v, list)}
    if len(lengths) != 1:
        raise CorruptRecord("cannot tell the number of replicas")
    return lengths.pop()


def final_rows(record: dict) -> pd.DataFrame:
    """One row per replica: identity, derived quantities, final metrics."""
    n = _n_replicas(record)
    cols = {k: [v] * n for k, v in identity(record).items()}
    cols["replica"] = list(range(n))
    cols["seed"] = [cols["base_seed"][0] + r for r in range(n)]
    for k, v in record.get("derived", {}).items():
        cols[k] = _per_replica(v, n, f"derived.{k}")
    for k, v in record["metrics"].items():
        cols[k] = _per_replica(v, n, f"metrics.{k}")
    return pd.DataFrame(cols)


def curve_rows(record: dict) -> pd.DataFrame:
    """One row per (replica, logged step): identity, step, curve values."""
    curves = record.get("curves") or {}
    steps = curves.get("step", [])
    if not steps:
        return pd.DataFrame()
    n = _n_replicas(record)
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
    n = _n_replicas(record)
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
    ident = identity(record)
    for k, v in reversed(list(ident.items())):
        df.insert(0, k, [v] * len(df))
    df.insert(df.columns.get_loc("replica") + 1, "seed", df["base_seed"] + df["replica"])
    return df


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
            for r in range(_n_replicas(rec)):
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


def _without(df: pd.DataFrame, rows: set[tuple[str, int]]) -> pd.DataFrame:
    """df less its rows of the given (key, replica)."""
    if df.empty or not rows:
        return df
    drop = pd.MultiIndex.from_frame(df[["key", "replica"]]).isin(list(rows))
    return df[~drop].reset_index(drop=True)


@functools.lru_cache(maxsize=None)
def expected(experiment: str, profile: str, outputs: str) -> tuple[list[tuple[list[str], str]] | None, dict, str]:
    """(expected jobs or None, the profile's grid, error message): what the sweep should have run."""
    from omegaconf import OmegaConf

    from attnrepro.jobs import grid

    try:
        jobs = grid.expected_jobs(experiment, profile, outputs=outputs)
        cfg = grid.base_config(experiment, profile)
        spec = OmegaConf.to_container(cfg.grid, resolve=False).get(profile, {})
        return jobs, spec, ""
    except Exception as e:  # a broken conf must not hide the records we have
        return None, {}, f"{type(e).__name__}: {e}"


def _state(path: Path, rec: dict | CorruptRecord) -> State:
    """The typed status of a scanned record (jobs.job.state_of: corrupt, failed, stale, complete)."""
    if isinstance(rec, CorruptRecord):
        return State(Status.corrupt, reason=str(rec))
    try:
        return record_state(path, rec)
    except (KeyError, TypeError, ValueError) as e:  # a config that names no known task or model
        return State(Status.corrupt, rec, f"{path}: {type(e).__name__}: {e}")


def load_experiment(outputs: str | Path, experiment: str, profile: str, all_records: bool = False) -> ExperimentData:
    """Frames of the experiment's complete records in the profile's grid, and its status:

    status = {experiment, profile, grid, expected, complete, failed: [{key, overrides, reason}],
    stale: [{key, overrides, reason}] (complete records made by other code: left out until the
    sweep runs them again), corrupt: [{key, path, error}], missing: [{key, overrides}], other
    (records of the experiment not in this profile's grid: ignored), mixed, repeated_seeds: [[key,
    replica]] (both from pooled, with all_records only), grid_error, example_config}.
    When the grid cannot be expanded (grid_error), or with all_records (runs made with your own
    overrides), every complete record is used, less the seeds that repeat an earlier record's; the
    points reached by more than one training protocol are listed in status["mixed"] (see pooled).
    """
    jobs, grid_spec, grid_error = expected(experiment, profile, str(outputs))
    if all_records:
        jobs = None
    want = None if jobs is None else {key: ov for ov, key in jobs}
    scanned = {path.parent.name: (path, _state(path, rec)) for path, rec in scan(outputs, experiment)}
    order = list(want) if want is not None else sorted(scanned)  # lists follow the grid's order
    found: dict[str, tuple[Path, State]] = {k: scanned[k] for k in order if k in scanned}
    other = len(scanned) - len(found)
    complete = [s.record for _, s in found.values() if s.status is Status.complete]
    final, curves, arrays, bad = frames(complete)
    bad_keys = {b["key"] for b in bad}
    mixed, repeats = [], set()
    if want is None:
        mixed, repeats = pooled([r for r in complete if r["key"] not in bad_keys], grid_spec)
        final, curves, arrays = (_without(df, repeats) for df in (final, curves, arrays))

    def overrides(key: str, state: State) -> list[str]:
        return (want or {}).get(key) or (state.record or {}).get("overrides", [])

    def listed(status: Status) -> list[dict]:
        return [{"key": k, "overrides": overrides(k, s), "reason": s.reason} for k, (_, s) in found.items()
                if s.status is status]

    status = {
        "experiment": experiment, "profile": profile, "grid": grid_spec, "grid_error": grid_error,
        "expected": len(want) if want is not None else None,
        "complete": len(complete) - len(bad),
        "failed": listed(Status.failed),
        "stale": listed(Status.stale),
        "corrupt": [{"key": k, "path": str(p), "error": s.reason} for k, (p, s) in found.items()
                    if s.status is Status.corrupt]
        + [{"key": b["key"], "path": str(found[b["key"]][0]), "error": b["error"]} for b in bad],
        "missing": [{"key": k, "overrides": ov} for k, ov in (want or {}).items()
                    if k not in found],
        "other": other,
        "mixed": mixed,
        "repeated_seeds": sorted([k, r] for k, r in repeats),
        "example_config": next(({"overrides": r.get("overrides", []), "config": r["config"]}
                                for r in complete if r["key"] not in bad_keys), None),
    }
    return ExperimentData(experiment, final, curves, arrays, status, outputs=Path(outputs))


def status_line(status: dict) -> str:
    """'xor_phase_dm: 34/36 complete, 1 failed, 0 corrupt, 1 missing' (+ records of other grids)."""
    exp = status.get("expected")
    line = (f"{status['experiment']}: {status['complete']}/{exp if exp is not None else '?'} complete, "
            f"{len(status['failed'])} failed, {len(status.get('stale', []))} stale, {len(status['corrupt'])} corrupt, "
            f"{len(status['missing'])} missing")
    if status.get("other"):
        line += f", {status['other']} records not in this profile's grid (other profile or config) ignored"
    if status.get("repeated_seeds"):
        line += f", {len(status['repeated_seeds'])} seeds already in another record left out"
    if status.get("mixed"):
        line += (f"; WARNING: {len(status['mixed'])} points pool records of different training protocols "
                 f"(status.json: experiments.{status['experiment']}.mixed)")
    th = status.get("theory")
    if th:
        line += (f"; theory {th['complete']}/{th['expected']} curves, {len(th['failed'])} failed, "
                 f"{len(th.get('stale', []))} stale, {len(th['missing'])} missing")
    return line


def select(data: Mapping[str, ExperimentData], experiment: str, columns: Sequence[str],
           frame: str = "final") -> pd.DataFrame:
    """The experiment's frame ('final', 'curves' or 'arrays') restricted to columns (missing ones NaN;
    an experiment without records gives an empty frame)."""
    df = getattr(data[experiment], frame) if experiment in data else pd.DataFrame()
    return df.reindex(columns=list(columns)).copy()
