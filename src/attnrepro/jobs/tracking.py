"""Experiment tracking beside the record: a CSV of curves always, W&B with logger=wandb.

W&B is optional and never needed to reproduce a figure. With ``logger=wandb``
each job becomes one W&B run (``job_type="train"``, named by the job's key)
in one group per sweep, holding the job's resolved config, its curves (mean
and per seed), and a summary (status, reason, final metrics, derived and
fit scalars); the run is finished after the job, so a multirun gives one W&B run
per job. The figures stage logs its figures and claims table to one more run
(``job_type="report"``) with :func:`log_report`.

Mode (``logger.mode``, default ``auto``): WANDB_MODE when set, else online when
logged in (WANDB_API_KEY, or a netrc entry for api.wandb.ai), else offline.
Offline runs land in ``<outputs>/wandb/offline-run-*``; ``make sync-wandb``
uploads them later. A run's files there (its ``run-<id>.wandb`` transaction log above all)
are complete only once W&B's service has closed the run, which ``run.finish()`` does not wait
for: a job's runs are complete when its process exits, the report run when :func:`log_report`
returns. When W&B is not installed, cannot start, or fails while logging, a warning is printed
and the job goes on with its record and CSV.
No environment value (API key or other) is logged: the run's config is the
job's resolved config, and W&B's own console capture is off.
"""

from __future__ import annotations

import csv
import functools
import logging
import math
import os
import subprocess
from pathlib import Path
from typing import Any, Iterable, Mapping

from omegaconf import DictConfig, OmegaConf

from attnrepro.jobs.records import atomic_write
from attnrepro.locations import CHECKOUT

log = logging.getLogger(__name__)

WANDB_HOST = "api.wandb.ai"


def _csv_rows(record: dict):
    """Long format: (step, seed, metric, value)."""
    curves = record.get("curves") or {}
    steps = curves.get("step", [])
    for name, series in curves.items():
        if name == "step":
            continue
        for step, values in zip(steps, series, strict=False):
            for seed, v in enumerate(values):
                yield step, seed, name, v


class CsvTracker:
    """Writes <record folder>/curves.csv (step, seed, metric, value) after the job."""

    def __init__(self, folder: Path):
        self.folder = folder

    def finish(self, record: dict) -> None:
        def write(f) -> None:
            w = csv.writer(f)
            w.writerow(["step", "seed", "metric", "value"])
            w.writerows(_csv_rows(record))

        atomic_write(self.folder / "curves.csv", write, newline="")


# --- W&B: mode, group, config ------------------------------------------------------------------


def _netrc_has_wandb() -> bool:
    """True when the netrc file (NETRC or ~/.netrc) has an entry for the W&B host."""
    path = Path(os.environ.get("NETRC") or Path.home() / ".netrc")
    try:
        return WANDB_HOST in path.read_text(errors="ignore")
    except OSError:
        return False


def wandb_mode(requested: str) -> str:
    """The W&B mode for ``logger.mode``: 'auto' -> WANDB_MODE if set, else online when
    logged in (WANDB_API_KEY or netrc), else offline. Other values are returned as given."""
    if requested != "auto":
        return requested
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    if os.environ.get("WANDB_API_KEY") or _netrc_has_wandb():
        return "online"
    return "offline"


def sweep_group(cfg: DictConfig) -> str:
    """One W&B group per sweep: '<experiment>-<hydra sweep folder name>' (run folder without -m)."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
        folder = hc.sweep.dir if hc.mode == RunMode.MULTIRUN else hc.run.dir
        return f"{cfg.experiment}-{Path(folder).name}"
    except Exception:  # no Hydra (tests, notebooks): group by experiment
        return str(cfg.experiment)


@functools.lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The commit of the code that runs (None outside a git checkout, and in an installed wheel)."""
    if CHECKOUT is None:
        return None
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def run_config(cfg: DictConfig, key: str) -> dict:
    """The job's resolved config as a plain dict (without the experiment's grid), its key and commit."""
    plain = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    plain.pop("grid", None)
    plain.pop("hydra", None)
    return {**plain, "key": key, "git_commit": git_commit()}


def _settings(wandb) -> Any:
    """Quiet W&B: no console banner, no capture of the job's stdout, and no git probe (a remote
    URL can carry a token; the commit is in the config instead)."""
    return wandb.Settings(silent=True, console="off", disable_git=True)


_online_failed = False  # set once an online start failed in this process


def start_run(outputs: str | Path, *, project: str, group: str, job_type: str, name: str,
              config: dict, mode: str = "auto"):
    """wandb.init with run files under <outputs>/wandb; None when W&B is unavailable.

    An online start that fails (no network, bad key) is retried offline, and later runs of the
    same process start offline at once (a sweep does not wait for the network at every job).
    """
    global _online_failed
    resolved = wandb_mode(mode)
    if resolved == "online" and _online_failed:
        resolved = "offline"
    if resolved == "disabled":
        return None
    try:
        import wandb
    except ImportError:
        log.warning("logger=wandb but wandb is not installed: logging to the record and CSV only")
        return None
    outputs = Path(outputs)
    outputs.mkdir(parents=True, exist_ok=True)
    for attempt in [resolved, "offline"] if resolved == "online" else [resolved]:
        try:
            return wandb.init(project=project, group=group, job_type=job_type, name=name, config=config,
                              dir=str(outputs), mode=attempt, reinit="finish_previous",
                              settings=_settings(wandb))
        except Exception as e:  # W&B is never required
            log.warning("W&B %s start failed (%s: %s)", attempt, type(e).__name__, e)
            if attempt == "online":
                _online_failed = True
    return None


def _finish(run) -> None:
    """run.finish(), warning instead of raising."""
    try:
        run.finish()
    except Exception as e:
        log.warning("W&B finish failed (%s: %s)", type(e).__name__, e)


def _owns_service() -> bool:
    """True when this process started the W&B service (wandb-core) its runs went through, so that
    wandb.teardown() shuts it down and waits for it; False when it is another process's
    (WANDB_SERVICE inherited) or when that cannot be told."""
    try:
        from wandb.sdk import wandb_setup

        return bool(wandb_setup.singleton().assert_service().owns_service)
    except Exception:
        return False


def _close_run_files() -> bool:
    """Return once W&B has written and closed the files of every run this process finished (True),
    or warn and return False when that cannot be guaranteed.

    ``run.finish()`` returns when wandb-core answers the run's exit record, but wandb-core keeps the
    run's transaction log (run-<id>.wandb) in a 32 KiB write buffer until it closes the run's
    stream, on the inform_finish message that finish() sends last without waiting for an answer.
    ``wandb.teardown()`` sends its message after that one, on the same connection, whose messages
    wandb-core handles one after the other, and waits for the service process to exit: when it
    returns, every finished run's files are complete. The next wandb.init starts a new service.
    """
    import wandb

    owned = _owns_service()
    try:
        wandb.teardown()
    except (Exception, SystemExit) as e:  # teardown calls sys.exit(code) when the service failed
        log.warning("W&B teardown failed (%s: %s): run files may be incomplete", type(e).__name__, e)
        return False
    if not owned:
        log.warning("W&B service of another process (WANDB_SERVICE): run files are complete only "
                    "once that process ends")
    return owned


# --- W&B: what a job logs ------------------------------------------------------------------


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def per_seed(name: str, values: Any) -> dict:
    """{name/mean, name/seed<i>} for a list of per-seed numbers; {name: v} for one number; else {}."""
    if _is_number(values):
        return {name: values}
    if isinstance(values, (list, tuple)) and values and all(_is_number(v) for v in values):
        out = {f"{name}/mean": math.fsum(values) / len(values)}
        out.update({f"{name}/seed{s}": v for s, v in enumerate(values)})
        return out
    return {}


def history_rows(record: dict) -> Iterable[tuple[int, dict]]:
    """(step, {metric/mean, metric/seed<i>, ...}) for every logged step of the record's curves."""
    curves = record.get("curves") or {}
    for i, step in enumerate(curves.get("step", [])):
        row: dict = {}
        for name, series in curves.items():
            if name != "step" and i < len(series):
                row.update(per_seed(name, series[i]))
        yield step, row


def summary(record: dict) -> dict:
    """Status, reason, timings, derived and fit scalars and final metrics (final/<metric>/mean, /seed<i>)."""
    out = {"status": record["status"], "key": record["key"]}
    if record.get("reason"):
        out["reason"] = record["reason"]
    for name, value in (record.get("timings") or {}).items():
        out.update(per_seed(f"timings/{name}", value))
    for part in ("derived", "fit"):
        for name, value in (record.get(part) or {}).items():
            out.update(per_seed(f"{part}/{name}", value))
    for name, values in (record.get("metrics") or {}).items():
        out.update(per_seed(f"final/{name}", values))
    return out


class WandbTracker(CsvTracker):
    """CSV as always, plus one W&B run per job (finished in :meth:`finish`)."""

    def __init__(self, cfg: DictConfig, key: str, folder: Path):
        super().__init__(folder)
        self.run = start_run(cfg.paths.outputs, project=cfg.logger.project, group=sweep_group(cfg),
                             job_type="train", name=key, config=run_config(cfg, key), mode=cfg.logger.mode)

    def finish(self, record: dict) -> None:
        super().finish(record)
        if self.run is None:
            return
        try:
            for step, row in history_rows(record):
                self.run.log(row, step=step)
            self.run.summary.update(summary(record))
        except Exception as e:  # the record is written already; W&B must not fail the job
            log.warning("W&B logging failed (%s: %s)", type(e).__name__, e)
        finally:
            _finish(self.run)
            self.run = None


def make_tracker(cfg: DictConfig, key: str, folder: Path):
    if cfg.logger.name == "wandb":
        return WandbTracker(cfg, key, folder)
    if cfg.logger.name == "csv":
        return CsvTracker(folder)
    raise ValueError(f"logger.name must be csv or wandb, got {cfg.logger.name!r}")


# --- W&B: the report run of the figures stage ------------------------------------------------


def claims_frame(claims: Any):
    """The claims as a pandas DataFrame that W&B can type: mixed-type object columns become text."""
    import pandas as pd

    df = claims.copy() if isinstance(claims, pd.DataFrame) else pd.DataFrame(list(claims))
    for col in df.columns:
        if df[col].dtype == object and len({type(v) for v in df[col] if v is not None}) > 1:
            df[col] = df[col].map(lambda v: None if v is None else str(v))
    return df


def log_report(outputs: str | Path, figures: Mapping[str, str | Path], claims: Any, group: str | None = None,
               project: str = "attnrepro", mode: str = "auto") -> str | None:
    """Log every figure (name -> PNG path) and the claims table (DataFrame or list of dicts)
    to one W&B run with job_type 'report'. Returns the run's local folder, None without W&B.

    The run is finished and its files are complete (written and closed, readable offline) when
    this returns: see :func:`_close_run_files`, which also shuts down W&B's service of this process.
    A missing figure file is skipped with a warning; no failure here stops the figures stage.
    """
    df = claims_frame(claims)
    run = start_run(outputs, project=project, group=group or "report", job_type="report",
                    name=f"report-{group}" if group else "report",
                    config={"figures": sorted(figures), "n_claims": len(df)}, mode=mode)
    if run is None:
        return None
    try:
        folder = _log_report_row(run, figures, df)
    finally:
        _finish(run)
    _close_run_files()
    return folder


def _log_report_row(run, figures: Mapping[str, str | Path], df) -> str | None:
    """Log the figures and claims table as one row, and the claims counts to the summary.
    Returns the run's local folder; None (with a warning) when W&B failed."""
    try:
        import wandb

        row: dict = {"claims": wandb.Table(dataframe=df)}
        for name, path in figures.items():
            if Path(path).is_file():
                row[f"figures/{name}"] = wandb.Image(str(path), caption=name)
            else:
                log.warning("figure %s: no file at %s, not logged", name, path)
        run.log(row)
        if "holds" in df.columns:
            holding = int(df["holds"].astype(bool).sum())
            run.summary.update({"claims/total": len(df), "claims/holding": holding})
        return str(Path(run.dir).parent)
    except Exception as e:
        log.warning("W&B report failed (%s: %s)", type(e).__name__, e)
        return None
