"""The theory stage: the theory curves of the experiments' grids, each (curve, parameter point) a job.

A paper's theory module (papers.<paper>.THEORY) lists TheoryCurves. For every distinct parameter
point of an experiment's grid (the config values at ``keys``) ``params`` says which parameters the
curve needs (None: no such curve there), ``also`` and ``extra`` add points of their own, and
``compute`` returns the curve's rows as columns. A theory job's key hashes the curve's name, its
parameters and the settings it uses (``settings``: from conf/theory.yaml, whose entries beyond the
shared ones each paper declares, config/theory.py); its record (jobs.job, the columns as
``metrics``) lies at <outputs>/theory/<curve>/<key>/record.json, shared by every experiment that
needs it, and is stale when the curve's modules changed. The aggregate stage reads the records of
the jobs that conf/theory.yaml (with the profile) expects, as rows with source = "theory".
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Mapping

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from attnrepro.jobs.job import Job, Status, digest

Columns = dict[str, list]


@dataclass(frozen=True)
class TheoryCurve:
    name: str
    experiments: tuple[str, ...]
    keys: tuple[str, ...]
    params: Callable[[Mapping], dict | None]
    compute: Callable[[dict, object], Columns]
    # the settings compute reads (from conf/theory.yaml: its paper's THEORY_SETTINGS), hashed into the key
    settings: Callable[[object], dict] = lambda s: {}
    extra: Callable[[object], list[dict]] = lambda s: []
    sweep: str | None = None  # a key whose values along the grid are gathered into one job (a list)
    # more parameter points derived from each one: also(params, experiment, settings)
    also: Callable[[dict, str, object], list[dict]] = lambda params, experiment, settings: []
    # each point replaced by these (e.g. at sizes of the settings, not of the grid): expand(params, settings)
    expand: Callable[[dict, object], list[dict]] | None = None

    @property
    def module(self) -> str:
        """The module that computes the curve: its records' provenance root."""
        return self.compute.__module__


def curves() -> list[TheoryCurve]:
    from attnrepro.papers import theory_curves

    return theory_curves()


def curve_named(name: str) -> TheoryCurve:
    return next(c for c in curves() if c.name == name)


def curves_of(experiment: str) -> list[TheoryCurve]:
    return [c for c in curves() if experiment in c.experiments]


def theory_experiments() -> list[str]:
    return sorted({e for c in curves() for e in c.experiments})


def _plain(v: Any) -> Any:
    return v.value if isinstance(v, Enum) else v


def grid_points(experiment: str, profile: str, keys: tuple[str, ...]) -> list[dict]:
    """The distinct values of ``keys`` over the experiment's grid for the profile."""
    from attnrepro.jobs.grid import base_config, parts, product, profile_grid

    cfg = base_config(experiment, profile)
    base = {k: _plain(OmegaConf.select(cfg, k, default=None)) for k in keys}
    grid = profile_grid(cfg, profile) if cfg.get("grid") else {}
    swept = [{k: v for k, v in part.items() if k in keys} for part in parts(grid)]
    points = []
    for point in product(swept):
        point = {**base, **point}
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


def curve_settings(curve: TheoryCurve, settings: DictConfig) -> dict:
    """The settings a curve uses, as plain JSON-able values."""
    return {k: OmegaConf.to_container(v) if OmegaConf.is_config(v) else v for k, v in curve.settings(settings).items()}


def theory_job(experiment: str, curve: TheoryCurve, params: dict, settings: DictConfig) -> Job:
    """The job of one curve at one parameter point: its key hashes the curve, the parameters and the
    settings the curve uses."""
    config = {"curve": curve.name, "params": params, "settings": curve_settings(curve, settings)}
    key = digest(config)
    label = f"{curve.name} " + " ".join(f"{k}={v}" for k, v in params.items())
    return Job("theory", experiment, key, Path(settings.paths.outputs) / "theory" / curve.name / key / "record.json",
               config, (curve.module,), label)


def jobs(experiment: str, settings: DictConfig) -> list[Job]:
    """Every theory job of the experiment: its curves at the distinct points of its grid, plus the
    curves' own extra points."""
    return [job for _, job in curve_jobs(experiment, settings)]


def curve_jobs(experiment: str, settings: DictConfig) -> list[tuple[TheoryCurve, Job]]:
    """(curve, job) of every theory job of the experiment (see jobs)."""
    out = []
    for curve in curves_of(experiment):
        wanted = [curve.params(p) for p in grid_points(experiment, settings.profile.name, curve.keys)]
        wanted += [q for p in wanted if p is not None for q in curve.also(p, experiment, settings)]
        if curve.expand:
            wanted = [q for p in wanted if p is not None for q in curve.expand(p, settings)]
        if curve.sweep:
            wanted = gather(wanted, curve.sweep)
        wanted += curve.extra(settings)
        seen = []
        for params in wanted:
            if params is None or params in seen:
                continue
            seen.append(params)
            out.append((curve, theory_job(experiment, curve, params, settings)))
    return out


def gather(points: list[dict | None], key: str) -> list[dict]:
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


def compute(job: Job, settings: DictConfig, curve: TheoryCurve | None = None) -> dict:
    """Compute one curve (default: the one the job names) and write its record (a failure is
    recorded, not raised). At top level, so that a process pool can run it."""
    curve = curve or curve_named(job.config["curve"])

    def columns() -> dict:
        out = curve.compute(job.config["params"], settings)
        lengths = {len(v) for v in out.values()}
        if len(lengths) != 1:
            raise ValueError(f"columns of unequal lengths {sorted(lengths)}")
        return {"metrics": out}

    return job.execute(columns, {"curve": curve.name})


def _one_thread() -> None:
    """A theory worker: one torch thread, and it exits with the process that started it."""
    import torch

    from attnrepro.jobs.lifetime import die_with_parent

    die_with_parent()
    torch.set_num_threads(1)


def run(settings: DictConfig, log=print, launcher: dict | None = None, wait: bool = True) -> dict[str, int]:
    """Every theory job of the selected experiments that has no complete record by this code,
    `settings.workers` at a time (a job needed by several experiments is computed once); returns
    counts by status. launcher: a submitit SLURM launcher's options (hydra.launcher): the jobs run as one
    packed array instead (jobs.slurm), waited for unless wait is false (counts["submitted"])."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from attnrepro.config import ConfigError

    if not (isinstance(settings.workers, int) and settings.workers >= 1):
        raise ConfigError(f"workers: must be a whole number >= 1, got {settings.workers}")
    names = list(settings.experiments or theory_experiments())
    unknown = sorted(set(names) - set(theory_experiments()))
    if unknown:
        raise ValueError(f"no theory curves for {unknown}; experiments with theory: {theory_experiments()}")
    counts = {"complete": 0, "failed": 0, "skipped": 0}
    todo: dict[str, list[Job]] = {}
    curve_of: dict[str, TheoryCurve] = {}
    for name in names:
        for curve, job in curve_jobs(name, settings):
            curve_of[job.key] = curve
            state = job.state()
            if state.done:
                counts["skipped"] += 1
                log(f"[theory {name}] {job.label}: cached, skipped ({job.key})")
            else:  # keys are unique within an experiment (jobs() drops repeated points)
                if state.status is Status.stale and job.key not in todo:
                    log(f"[theory {name}] {job.label}: record is stale ({state.reason}), computed again")
                todo.setdefault(job.key, []).append(job)
    if launcher is not None:
        return _run_on_slurm(todo, settings, launcher, wait, counts, log)
    log(f"theory: {len(todo)} curves to compute, {settings.workers} at a time")
    done = 0

    def report(rec: dict, group: list[Job]) -> None:
        nonlocal done
        done += 1
        counts[rec["status"]] += 1
        status = "computed" if rec["status"] == "complete" else f"FAILED ({rec['reason']})"
        where = ", ".join(sorted({j.experiment for j in group}))
        log(f"[theory {where}] {done}/{len(todo)} {group[0].label}: {status} in {rec['timings']['total_s']:.1f}s "
            f"({group[0].key})")

    if settings.workers <= 1 or len(todo) <= 1:
        for group in todo.values():
            report(compute(group[0], settings, curve_of[group[0].key]), group)
        return counts
    with ProcessPoolExecutor(max_workers=settings.workers, initializer=_one_thread) as pool:
        futures = {pool.submit(compute, group[0], settings): group for group in todo.values()}
        for future in as_completed(futures):
            report(future.result(), futures[future])
    return counts


THEORY_JOB_SECONDS = 60.0  # packing estimate per curve on a cluster (curves take ~1 s to a few minutes here)
THEORY_TASK_MINUTES = 20.0


def _run_on_slurm(todo: dict[str, list[Job]], settings: DictConfig, launcher: dict, wait: bool, counts: dict,
                  log) -> dict[str, int]:
    """The curves to compute as one packed SLURM array (jobs.slurm), less those a live array computes."""
    from attnrepro.jobs import slurm

    outputs = str(settings.paths.outputs)
    flying = slurm.in_flight(outputs, list(todo))
    subs = [s for s in slurm.submissions(outputs) if any(s.task_of(k) for k in flying)]
    units = [slurm.Unit(key, [group[0].experiment, key]) for key, group in todo.items() if key not in flying]
    log(f"theory: {len(todo)} curves to compute on the cluster ({len(flying)} already in live arrays)")
    if units:
        subs.append(slurm.submit(slurm.THEORY, "theory", units, launcher, outputs, THEORY_JOB_SECONDS,
                                 THEORY_TASK_MINUTES, {"settings": settings}, log))
    if not wait:
        counts["submitted"] = len(units)
        return counts
    paths = {job.key: job.path for group in todo.values() for job in group}
    outcome = slurm.wait(subs, lambda key: paths.get(key, Path(outputs) / "theory" / "?" / key / "record.json"),
                         log=log)
    for line in outcome["ended"]:
        log(f"theory: {line}: those curves are missing and computed on the next run")
    for group in todo.values():
        status = group[0].state().status
        counts["complete" if status is Status.complete else "failed"] += 1
    return counts


def load(experiment: str, settings: DictConfig, all_records: bool = False) -> tuple[pd.DataFrame, dict]:
    """(rows of the expected theory jobs' complete records, status {expected, complete, failed,
    stale, missing, corrupt}). Rows: the curve's columns, its parameters, ``curve``, ``key``, ``source``.
    all_records: also the records of the experiment's curves at other parameters (recorded_jobs)."""
    todo = jobs(experiment, settings)
    if not all_records:
        return load_jobs(todo)
    keys = {job.key for job in todo}
    extra = [job for job in recorded_jobs(experiment, settings) if job.key not in keys]
    rows, status = load_jobs(todo + extra)
    return rows, {**status, "expected": len(todo), "other": len(extra)}


def recorded_jobs(experiment: str, settings: DictConfig) -> list[Job]:
    """The jobs of the experiment's curves whose records lie in the outputs folder and were computed for it
    (the record's experiment; a curve several experiments share is not read into the others), at whatever
    parameters (e.g. at sizes of the user's own, set on `attnrepro theory`'s command line), each rebuilt
    from its record's parameters under `settings`: a record made under other settings (its key is not the
    rebuilt job's) or without readable parameters is not one of them."""
    from attnrepro.jobs.records import CorruptRecord, read_record

    out = []
    for curve in curves_of(experiment):
        for path in sorted((Path(settings.paths.outputs) / "theory" / curve.name).glob("*/record.json")):
            try:
                record = read_record(path)
                if record.get("experiment") != experiment:
                    continue
                job = theory_job(experiment, curve, dict(record["config"]["params"]), settings)
            except (CorruptRecord, KeyError, TypeError, AttributeError):
                continue
            if job.key == path.parent.name:
                out.append(job)
    return out


def load_jobs(todo: list[Job]) -> tuple[pd.DataFrame, dict]:
    """The rows and status of these jobs' records (see load)."""
    status = {"expected": len(todo), "complete": 0, "failed": [], "stale": [], "missing": [], "corrupt": []}
    parts = []
    for job in todo:
        state = job.state()
        if state.status is Status.missing:
            status["missing"].append(job.label)
            continue
        if state.status is Status.corrupt:
            status["corrupt"].append({"key": job.key, "error": state.reason})
            continue
        if state.status is not Status.complete:
            status[state.status.value].append({"key": job.key, "curve": job.label, "reason": state.reason})
            continue
        try:
            df = pd.DataFrame(state.record["metrics"])
        except (TypeError, ValueError) as e:
            status["corrupt"].append({"key": job.key, "error": f"{type(e).__name__}: {e}"})
            continue
        for k, v in job.config["params"].items():
            if k not in df:  # a swept key (a list) is already one of the curve's columns
                df[k] = [v] * len(df)
        df["curve"], df["key"], df["source"] = job.config["curve"], job.key, "theory"
        parts.append(df)
        status["complete"] += 1
    return (pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()), status
