"""The theory stage: run the theory curves (theory.curves) of an experiment's grid, cached as records.

A theory job is one (curve, parameter point): its key hashes the curve's name, its parameters,
the settings it uses and THEORY_VERSION; its record, in the format of training records with the
curve's columns as ``metrics``, lies at <outputs>/theory/<experiment>/<key>/record.json. A
complete record is never recomputed; a failure is recorded with its reason and the other
curves go on. The aggregate stage reads the records of the jobs that conf/theory.yaml (with the
profile) expects, as rows with source = "theory".
"""

from __future__ import annotations

import hashlib
import itertools
import json
import time
import traceback
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Mapping

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from attnrepro.jobs.records import SCHEMA, CorruptRecord, is_complete, read_record, write_record

Columns = dict[str, list]

@dataclass(frozen=True)
class TheoryCurve:
    name: str
    experiments: tuple[str, ...]
    keys: tuple[str, ...]
    params: Callable[[Mapping], dict | None]
    compute: Callable[[dict, object], Columns]
    settings: Callable[[object], dict] = lambda s: {"nodes": s.nodes}
    extra: Callable[[object], list[dict]] = lambda s: []
    sweep: str | None = None  # a key whose values along the grid are gathered into one job (a list)
    # more parameter points derived from each one: also(params, experiment, settings)
    also: Callable[[dict, str, object], list[dict]] = lambda params, experiment, settings: []


def curves() -> list[TheoryCurve]:
    from attnrepro.papers import theory_curves

    return theory_curves()


def curves_of(experiment: str) -> list[TheoryCurve]:
    return [c for c in curves() if experiment in c.experiments]


def theory_experiments() -> list[str]:
    return sorted({e for c in curves() for e in c.experiments})


THEORY_VERSION = 3  # bump when a theory module changes its numbers: every curve is computed again


@dataclass(frozen=True)
class TheoryJob:
    experiment: str
    curve: TheoryCurve
    params: dict
    key: str

    def path(self, outputs: str | Path) -> Path:
        return Path(outputs) / "theory" / self.experiment / self.key / "record.json"

    @property
    def label(self) -> str:
        return f"{self.curve.name} " + " ".join(f"{k}={v}" for k, v in self.params.items())


def _plain(v: Any) -> Any:
    return v.value if isinstance(v, Enum) else v


def grid_points(experiment: str, profile: str, keys: tuple[str, ...]) -> list[dict]:
    """The distinct values of ``keys`` over the experiment's grid for the profile (composed once)."""
    from attnrepro.jobs.grid import compose

    cfg = compose([f"experiment={experiment}", f"profile={profile}"])
    spec = OmegaConf.to_container(cfg.grid, resolve=False).get(profile) or {}
    base = {k: _plain(OmegaConf.select(cfg, k, default=None)) for k in keys}
    swept = {k: (v if isinstance(v, list) else [v]) for k, v in spec.items() if k in keys}
    points = []
    for combo in itertools.product(*swept.values()):
        point = {**base, **dict(zip(swept, combo, strict=True))}
        if point not in points:
            points.append(point)
    return points


def theory_settings(profile: str, overrides: list[str] = ()) -> DictConfig:
    """conf/theory.yaml composed for the profile (what the aggregate stage expects)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from attnrepro.config import register_configs
    from attnrepro.jobs.grid import CONF_DIR

    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="theory", overrides=[f"profile={profile}", *overrides])


def jobs(experiment: str, settings: DictConfig) -> list[TheoryJob]:
    """Every theory job of the experiment: its curves at the distinct points of its grid, plus the
    curves' own extra points."""
    out = []
    for curve in curves_of(experiment):
        wanted = [curve.params(p) for p in grid_points(experiment, settings.profile.name, curve.keys)]
        wanted += [q for p in wanted if p is not None for q in curve.also(p, experiment, settings)]
        if curve.sweep:
            wanted = _gather(wanted, curve.sweep)
        wanted += curve.extra(settings)
        seen = []
        for params in wanted:
            if params is None or params in seen:
                continue
            seen.append(params)
            out.append(make_job(experiment, curve, params, settings))
    return out


def _curve_settings(curve: TheoryCurve, settings: DictConfig) -> dict:
    """The settings a curve uses, as plain JSON-able values."""
    return {k: OmegaConf.to_container(v) if OmegaConf.is_config(v) else v for k, v in curve.settings(settings).items()}


def make_job(experiment: str, curve: TheoryCurve, params: dict, settings: DictConfig) -> TheoryJob:
    """The job of one curve at one parameter point, its key a hash of the curve, the parameters, the
    settings the curve uses and THEORY_VERSION."""
    blob = json.dumps({"curve": curve.name, "params": params, "settings": _curve_settings(curve, settings),
                       "version": THEORY_VERSION}, sort_keys=True, default=str)
    return TheoryJob(experiment, curve, params, hashlib.sha256(blob.encode()).hexdigest()[:16])


def _gather(points: list[dict | None], key: str) -> list[dict]:
    """Points equal but for ``key`` merged into one, ``key`` then the sorted list of their values."""
    groups: list[dict] = []
    for p in points:
        if p is None:
            continue
        rest = {k: v for k, v in p.items() if k != key}
        for g in groups:
            if {k: v for k, v in g.items() if k != key} == rest:
                if p[key] not in g[key]:
                    g[key] = sorted([*g[key], p[key]])
                break
        else:
            groups.append({**rest, key: [p[key]]})
    return groups


def run_job(job: TheoryJob, settings: DictConfig, outputs: str | Path) -> dict:
    """Compute one curve and write its record (failures recorded, not raised)."""
    return _compute(job.curve, job.params, job.key, settings, [job.experiment], str(outputs))


def _compute(curve: TheoryCurve | str, params: dict, key: str, settings: DictConfig, experiments: list[str],
             outputs: str) -> dict:
    """One curve's record, written under every experiment that expects it. At top level, so that a
    process pool can run it (a pool passes the curve by name: its functions do not pickle)."""
    if isinstance(curve, str):
        curve = next(c for c in curves() if c.name == curve)
    record = {"schema": SCHEMA, "key": key, "curve": curve.name, "status": "running", "config": params,
              "settings": _curve_settings(curve, settings), "version": THEORY_VERSION}
    t0 = time.perf_counter()
    try:
        columns = curve.compute(params, settings)
        lengths = {len(v) for v in columns.values()}
        if len(lengths) != 1:
            raise ValueError(f"columns of unequal lengths {sorted(lengths)}")
        record.update(status="complete", metrics=columns)
    except Exception as e:  # recorded, never lost: the other curves go on
        record.update(status="failed", reason=f"{type(e).__name__}: {e}", traceback=traceback.format_exc(limit=6))
    record["timings"] = {"total_s": time.perf_counter() - t0}
    for name in experiments:
        write_record(Path(outputs) / "theory" / name / key / "record.json", {**record, "experiment": name})
    return record


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def run(settings: DictConfig, log=print) -> dict[str, int]:
    """Every missing theory job of the selected experiments, `settings.workers` at a time (a job needed
    by several experiments is computed once); returns counts by status."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    outputs = settings.paths.outputs
    names = list(settings.experiments or theory_experiments())
    unknown = sorted(set(names) - set(theory_experiments()))
    if unknown:
        raise ValueError(f"no theory curves for {unknown}; experiments with theory: {theory_experiments()}")
    counts = {"complete": 0, "failed": 0, "skipped": 0}
    todo: dict[str, list[TheoryJob]] = {}
    for name in names:
        for job in jobs(name, settings):
            if is_complete(job.path(outputs)):
                counts["skipped"] += 1
                log(f"[theory {name}] {job.label}: cached, skipped ({job.key})")
            else:
                todo.setdefault(job.key, []).append(job)
    log(f"theory: {len(todo)} curves to compute, {settings.workers} at a time")
    done = 0

    def report(rec, group):
        nonlocal done
        done += 1
        counts[rec["status"]] += 1
        status = "computed" if rec["status"] == "complete" else f"FAILED ({rec['reason']})"
        where = ", ".join(sorted({j.experiment for j in group}))
        log(f"[theory {where}] {done}/{len(todo)} {group[0].label}: {status} in {rec['timings']['total_s']:.1f}s "
            f"({group[0].key})")

    args = lambda g, c: (c, g[0].params, g[0].key, settings, [j.experiment for j in g], str(outputs))  # noqa: E731
    if settings.workers <= 1 or len(todo) <= 1:
        for group in todo.values():
            report(_compute(*args(group, group[0].curve)), group)
        return counts
    with ProcessPoolExecutor(max_workers=settings.workers, initializer=_one_thread) as pool:
        futures = {pool.submit(_compute, *args(group, group[0].curve.name)): group for group in todo.values()}
        for future in as_completed(futures):
            report(future.result(), futures[future])
    return counts


def load(outputs: str | Path, experiment: str, settings: DictConfig) -> tuple[pd.DataFrame, dict]:
    """(rows of the expected theory jobs' complete records, status {expected, complete, failed,
    missing, corrupt}). Rows: the curve's columns, its parameters, ``curve``, ``key``, ``source``."""
    return load_jobs(outputs, jobs(experiment, settings))


def load_jobs(outputs: str | Path, todo: list[TheoryJob]) -> tuple[pd.DataFrame, dict]:
    """The rows and status of these jobs' records (see load)."""
    status = {"expected": len(todo), "complete": 0, "failed": [], "missing": [], "corrupt": []}
    parts = []
    for job in todo:
        path = job.path(outputs)
        try:
            rec = read_record(path)
        except FileNotFoundError:
            status["missing"].append(job.label)
            continue
        except CorruptRecord as e:
            status["corrupt"].append({"key": job.key, "error": str(e)})
            continue
        if rec["status"] != "complete":
            status["failed"].append({"key": job.key, "curve": job.label, "reason": rec.get("reason", "")})
            continue
        try:
            df = pd.DataFrame(rec["metrics"])
        except (TypeError, ValueError) as e:
            status["corrupt"].append({"key": job.key, "error": f"{type(e).__name__}: {e}"})
            continue
        for k, v in job.params.items():
            if k not in df:  # a swept key (a list) is already one of the curve's columns
                df[k] = [v] * len(df)
        df["curve"], df["key"], df["source"] = job.curve.name, job.key, "theory"
        parts.append(df)
        status["complete"] += 1
    return (pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()), status
