"""One job: validate, skip if its record is complete, else train and write the record."""

from __future__ import annotations

import os
import platform
import time
import traceback

from omegaconf import DictConfig

from attnrepro.config import validate
from attnrepro.jobs.keys import job_key, semantic_config
from attnrepro.jobs.records import SCHEMA, is_complete, record_path, write_record


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("attnrepro", "torch", "pytorch-lightning", "hydra-core", "omegaconf", "numpy"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def _hydra_overrides() -> list[str]:
    try:
        from hydra.core.hydra_config import HydraConfig

        return list(HydraConfig.get().overrides.task)
    except Exception:
        return []


def _job_label() -> str:
    try:
        from hydra.core.hydra_config import HydraConfig

        num = HydraConfig.get().job.num
    except Exception:
        return "job"
    total = os.environ.get("ATTNREPRO_SWEEP_SIZE", "?")
    return f"job {num + 1}/{total}"


def run_job(cfg: DictConfig) -> dict:
    """Run one grid point (all its seeds as replicas) and write its record.

    Raises ConfigError on a bad config (before any work). Any failure during
    training (exception, non-finite loss) is caught and recorded as status
    'failed' with its reason; the caller's sweep goes on.
    """
    obj = validate(cfg)
    key = job_key(cfg)
    path = record_path(cfg.paths.outputs, cfg.experiment, key)
    overrides = _hydra_overrides()
    label = f"[{cfg.experiment}] {_job_label()} {' '.join(overrides) or '(defaults)'}"
    if is_complete(path):
        print(f"{label}: done before, skipped ({key})", flush=True)
        return {"key": key, "status": "skipped"}

    from attnrepro.jobs.fit import fit
    from attnrepro.jobs.tracking import make_tracker

    tracker = make_tracker(cfg, key, path.parent)
    record = {"schema": SCHEMA, "key": key, "experiment": cfg.experiment, "status": "running",
              "config": semantic_config(cfg), "overrides": overrides, "versions": versions(),
              "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    t0 = time.perf_counter()
    try:
        record.update(fit(obj, obj.trainer))
        record["status"] = "complete"
    except Exception as e:  # recorded, never lost: the sweep goes on
        record["status"] = "failed"
        record["reason"] = f"{type(e).__name__}: {e}"
        record["traceback"] = traceback.format_exc(limit=8)
    record.setdefault("timings", {})["total_s"] = time.perf_counter() - t0
    tracker.finish(record)  # the record, written last, marks the job done
    write_record(path, record)
    status = record["status"] if record["status"] == "complete" else f"FAILED ({record['reason']})"
    print(f"{label}: {status} in {record['timings']['total_s']:.1f}s ({key})", flush=True)
    return {"key": key, "status": record["status"]}
