"""Training jobs: one grid point (all its seeds as replicas), its key the hash of its semantic config.

Record: <outputs>/runs/<experiment>/<key>/record.json (jobs.job), with the derived quantities, how they
were fitted (fit), final metrics, curves and arrays of jobs.fit (or of the model's solver, papers.SOLVERS).
"""

from __future__ import annotations

import importlib
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from attnrepro.config import SEMANTIC_KEYS, validate
from attnrepro.jobs.environment import full_fp32_matmuls, versions
from attnrepro.jobs.heartbeat import still_running
from attnrepro.jobs.job import Job, State, Status, digest, state_of
from attnrepro.jobs.records import SCHEMA, record_path
from attnrepro.papers import problem_module, solver_module

FIT = ("attnrepro.jobs.fit", "attnrepro.lit.replica")  # the trainer, for every trained model


def semantic_config(cfg: DictConfig) -> dict:
    """task, model, train, seed, n_seeds, resolved, as plain JSON-able data."""
    return {k: OmegaConf.to_container(cfg[k], resolve=True, enum_to_str=True)
            if OmegaConf.is_config(cfg[k]) else cfg[k] for k in SEMANTIC_KEYS}


def job_key(cfg: DictConfig) -> str:
    return digest(semantic_config(cfg))


def roots(task_name: str, model_family: str) -> tuple[str, ...]:
    """The modules a training record's numbers come from: the solver, or the trainer and the problem, and
    the paper's config schemas (their methods give n, p, m from the parameters)."""
    solver = solver_module(model_family)
    module = solver or problem_module(task_name)
    package = importlib.import_module(module.rsplit(".", 1)[0])
    config = f"{package.__name__}.{package.CONFIG}"
    return (module, config) if solver else (*FIT, module, config)


def training_job(cfg: DictConfig) -> Job:
    config = semantic_config(cfg)
    key = digest(config)
    return Job("train", cfg.experiment, key, record_path(cfg.paths.outputs, cfg.experiment, key), config,
               roots(cfg.task.name, cfg.model.family))


def record_state(path: Path, record: dict) -> State:
    """The state of a training record read from disk, its roots named by its own config; a complete record of
    an older layout (jobs.records.SCHEMA) is stale."""
    if record.get("status") == "complete" and record.get("schema", 1) < SCHEMA:
        return State(Status.stale, record, f"record layout {record.get('schema', 1)}, older than {SCHEMA}")
    names = record["config"]["task"]["name"], record["config"]["model"]["family"]
    return state_of(path, path.parent.name, roots(*names), record)


def _hydra_overrides() -> list[str]:
    try:
        from hydra.core.hydra_config import HydraConfig

        return list(HydraConfig.get().overrides.task)
    except Exception:
        return []


def _compute(obj, trainer_cfg):
    solver = solver_module(obj.model.family)
    if solver:
        return lambda: importlib.import_module(solver).fit(obj)
    from attnrepro.jobs.fit import fit

    return lambda: fit(obj, trainer_cfg)


def _job_label() -> str:
    """'job <n>' of a job started by a Hydra launcher (submitit), else 'job'."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return f"job {HydraConfig.get().job.num + 1}"
    except Exception:
        return "job"


def run_job(cfg: DictConfig, overrides: list[str] | None = None, label: str | None = None) -> dict:
    """Run one grid point (all its seeds as replicas) and write its record, unless a complete
    record made by this code exists. overrides: the job's command-line overrides, for the record and
    the progress line (default: Hydra's, for a single run); label: its place in the sweep.

    Raises ConfigError on a bad config (before any work). Any failure during training (exception,
    non-finite loss) is recorded as status 'failed' with its reason; the caller's sweep goes on.
    """
    obj = validate(cfg)
    job = training_job(cfg)
    overrides = _hydra_overrides() if overrides is None else list(overrides)
    label = f"[{cfg.experiment}] {label or _job_label()} {' '.join(overrides) or '(defaults)'}"
    before = job.state()
    if before.done:
        print(f"{label}: done before, skipped ({job.key})", flush=True)
        return {"key": job.key, "status": "skipped"}
    if before.status.value == "stale":
        print(f"{label}: record is stale ({before.reason}), run again", flush=True)

    from attnrepro.jobs.tracking import make_tracker

    full_fp32_matmuls()
    tracker = make_tracker(cfg, job.key, job.path.parent)
    with still_running(label):
        record = job.execute(_compute(obj, obj.trainer), {"overrides": overrides, "versions": versions()},
                             before_write=tracker.finish)
    status = record["status"] if record["status"] == "complete" else f"FAILED ({record['reason']})"
    print(f"{label}: {status} in {record['timings']['total_s']:.1f}s ({job.key})", flush=True)
    return {"key": job.key, "status": record["status"]}
