"""Hydra sweeper `hydra/sweeper=grid`: Hydra's basic sweeper, plus the experiment's grid.

An experiment file declares `grid: {smoke: {...}, quick: {...}, paper: {...}}`,
each a map from an override key to a list of values, or a list of such maps (the
union of their products). With `-m`, the grid of the active profile is swept;
command-line sweeps of the same key replace it (jobs.grid.replace: with
parts, a value goes to the parts that list it, or to all when none does). Every
job's config is composed and validated before the first job starts, so a bad
value anywhere in the grid costs no work.
"""


import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf, open_dict


@dataclass
class GridSweeperConf:
    _target_: str = "hydra_plugins.attnrepro_grid_sweeper.grid_sweeper.GridSweeper"
    max_batch_size: Optional[int] = None
    params: Optional[Dict[str, str]] = None
    max_jobs: int = 10000  # a larger sweep is refused before anything is composed (raise it to run one)
    # SLURM (hydra/launcher=slurm, slurm_gpu): packed job arrays (jobs.slurm)
    task_minutes: float = 20.0          # an array task runs jobs for about this long (at most half its time limit)
    job_seconds: Optional[float] = None  # seconds per job to pack by (null: measured, reference/sweep_seconds.csv)
    on_hopeless: str = "cancel"         # a task that can never start: cancel the arrays, or leave them queued
    wait: bool = True                   # wait for the array (false: submit and return; a rerun attaches)


ConfigStore.instance().store(group="hydra/sweeper", name="grid", node=GridSweeperConf, provider="attnrepro")

KEEP_CONFIGS = 2000  # up to this many jobs keep their composed config for the run; a larger sweep composes again
PROGRESS_S = 10.0    # composing a large sweep says how far it got every this many seconds


class GridSweeper(BasicSweeper):
    def __init__(self, max_batch_size: Optional[int] = None, params: Optional[Dict[str, str]] = None,
                 max_jobs: int = 10000, task_minutes: float = 20.0, job_seconds: Optional[float] = None,
                 on_hopeless: str = "cancel", wait: bool = True):
        super().__init__(max_batch_size=max_batch_size, params=params)
        if on_hopeless not in ("cancel", "leave"):
            raise ValueError(f"hydra.sweeper.on_hopeless must be cancel or leave, got {on_hopeless!r}")
        self.max_jobs, self.task_minutes, self.job_seconds = max_jobs, task_minutes, job_seconds
        self.on_hopeless, self.wait = on_hopeless, wait
        self._composer = None

    def job_overrides(self, arguments: List[str]) -> List[List[str]]:
        """The override list of every job: the profile's grid, then hydra.sweeper.params, then the
        command line, each replacing the same key of the one before, expanded by jobs.grid.product.
        More than max_jobs (counted before any is listed) is refused."""
        from attnrepro.config import ConfigError
        from attnrepro.jobs.grid import override, product, profile_grid, replace, size

        for arg in arguments:
            key, _, value = arg.partition("=")
            if key.lstrip("+~").split(".")[0] == "grid" and value.strip() in ("{}", "[]", ""):
                raise ConfigError(f"{arg}: Hydra merges a map into the experiment's grid, so this does not empty it; "
                                 "to run fewer jobs, give the values to sweep (e.g. task.d=16)")
        grid = profile_grid(self.config, self.config.profile.name) if self.config.get("grid") else {}
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        given = [f"{k}={v}" for k, v in (self.params or {}).items()] + list(arguments)
        replaced = {}
        for ov in parser.parse_overrides(given):
            key = ov.get_key_element()
            if ov.is_sweep_override():
                values = list(ov.sweep_string_iterator())
                if not values:  # e.g. task.d=range(5,5): name the key, not just "no jobs"
                    raise ConfigError(f"sweep of '{key}' is empty: an empty grid has no jobs")
            else:
                values = [ov.get_value_element_as_str()]
            replaced[key] = values  # a grid key keeps its place (as BasicSweeper's ordered arguments did)
        grid = replace(grid, replaced)
        if size(grid) > self.max_jobs:
            raise ConfigError(f"the sweep has {size(grid)} jobs, more than hydra.sweeper.max_jobs={self.max_jobs}; "
                             "narrow the grid, or raise the limit (hydra.sweeper.max_jobs=N) to run it")
        return [[override(k, v) for k, v in point.items()] for point in product(grid)]

    def sweep(self, arguments: List[str]) -> Any:
        """Compose and validate every job, set aside those whose record is complete (and made by this
        code), launch the rest; the train command exits 1 when a job failed, unless accept_failed=true."""
        from attnrepro.commands.hydra_apps import FAILED
        from attnrepro.config import ConfigError

        arguments = [a for a in arguments if a.split("=", 1)[0] != "accept_failed"]  # the sweep's, not a job's
        jobs = self.job_overrides(arguments)
        self.params = {}
        if not jobs:
            raise ConfigError("the sweep has no jobs")
        name = self.config.experiment
        print(f"[{name}] sweep of {len(jobs)} jobs, profile {self.config.profile.name}: composing and validating "
              "them", flush=True)
        errors, pending, done = self._compose(jobs, keep=len(jobs) <= KEEP_CONFIGS)
        if errors:
            raise ConfigError(f"{len(errors)} of {len(jobs)} jobs have invalid configs; none was run:\n"
                              + "\n".join(errors))
        self._store_expected(arguments, [*done, *pending])
        for job, key, *_ in done:
            print(f"[{name}] {' '.join(job)}: done before, skipped ({key})", flush=True)
        print(f"[{name}] sweep of {len(jobs)} jobs, profile {self.config.profile.name}: "
              f"{len(done)} done before, {len(pending)} to run", flush=True)
        start = time.monotonic()
        results = self.launch(pending)
        statuses = _statuses(results)
        failed = [job for (job, *_), status in zip(pending, statuses, strict=True) if status in ("failed", "missing")]
        if failed:
            line = (f"[{name}] {len(failed)} of {len(pending)} jobs failed or are missing (a failure's record says "
                    "why; a missing job runs on the next sweep): "
                    + "; ".join(" ".join(job) for job in failed))
            if not self.config.get("accept_failed"):
                FAILED.append(line)
                line += " (accept_failed=true accepts them)"
            print(line, flush=True)
        elif pending and "submitted" not in statuses:
            print(f"[{name}] sweep complete: the {len(pending)} jobs to run have their records "
                  f"({time.monotonic() - start:.0f} s)", flush=True)
        return results

    def _compose(self, jobs: List[List[str]], keep: bool) -> tuple[list, list, list]:
        """(config errors, pending, done): every job composed and validated, as (overrides, key, config,
        (task name, model family)); the config is kept when `keep`, else None (launch composes it again)."""
        from attnrepro.config import ConfigError, validate
        from attnrepro.jobs.training import training_job

        errors, pending, done = [], [], []
        last = time.monotonic()
        for i, job in enumerate(jobs):
            try:
                cfg = self._load(job)
                validate(cfg)
            except ConfigError as e:
                errors.append(f"{' '.join(job)}: {e}")
                continue
            spec = training_job(cfg)
            names = (cfg.task.name, cfg.model.family)
            (done if spec.state().done else pending).append((job, spec.key, cfg if keep else None, names))
            if time.monotonic() - last > PROGRESS_S:
                last = time.monotonic()
                print(f"[{self.config.experiment}] composed {i + 1} of {len(jobs)} jobs", flush=True)
        return errors, pending, done

    def _load(self, job: List[str]):
        """The job's config as Hydra composes it for a sweep, without its hydra node (jobs.composer: the
        config group choices composed once per sweep, then each job's values set on a copy)."""
        from attnrepro.jobs.composer import Composer

        if self._composer is None:
            self._composer = Composer(self._compose_in_full, self.hydra_context.config_loader.repository.group_exists)
        return self._composer(job)

    def _compose_in_full(self, job: List[str]):
        """The job's config as Hydra composes it for a sweep, without its hydra node."""
        cfg = self.hydra_context.config_loader.load_sweep_config(self.config, job)
        with open_dict(cfg):
            del cfg["hydra"]
        return cfg

    def _store_expected(self, arguments: List[str], composed: List[tuple]) -> None:
        """The profile's expected jobs (jobs.grid.expected_jobs) from the configs composed here, when the
        command line adds nothing to the grid (as `attnrepro reproduce` calls it), so that no later
        stage composes them again."""
        from attnrepro.jobs.grid import store_expected

        own = {"experiment", "profile", "paths.outputs"}
        if any(a.split("=", 1)[0] not in own for a in arguments):
            return
        name, profile = self.config.experiment, self.config.profile.name
        base = [f"experiment={name}", f"profile={profile}"]

        def point(job: List[str]) -> tuple:
            return tuple(o for o in job if o.split("=", 1)[0] not in own)

        by_point = {point(job): (key, names) for job, key, _, names in composed}
        out = []
        for job in self.job_overrides(base):
            key, names = by_point[point(job)]
            out.append(([*base, *point(job)], key, *names))
        store_expected(name, profile, str(self.config.paths.outputs), out)

    def launch(self, pending: List[tuple]) -> Any:
        """Run the pending (overrides, key, composed config or None, names) jobs. With Hydra's basic launcher, in this
        process, in order, with the configs composed above: the basic launcher would compose every job
        a second time (about half a second each, more than a small job's training); each job's folder
        gets its config and overrides, as the basic launcher writes them. Any other launcher (submitit:
        local, SLURM) gets the jobs' overrides in batches of max_batch_size. The sweep's own config is
        saved to its folder (multirun.yaml)."""
        from hydra._internal.core_plugins.basic_launcher import BasicLauncher
        from hydra.core.hydra_config import HydraConfig

        from attnrepro.jobs.training import run_job

        if not pending:
            return []
        if type(self.launcher).__name__ == "SlurmLauncher":  # hydra-submitit-launcher's: packed arrays
            return self._launch_slurm(pending)
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        if isinstance(self.launcher, BasicLauncher):
            HydraConfig.instance().set_config(self.config)  # the sweep's (for the tracker's W&B group)
            out = []
            for i, (job, _, cfg, _) in enumerate(pending):
                job_dir = sweep_dir / str(i) / ".hydra"  # as the basic launcher leaves it: the job's config
                job_dir.mkdir(parents=True, exist_ok=True)
                cfg = cfg if cfg is not None else self._load(job)
                OmegaConf.save(cfg, job_dir / "config.yaml")
                OmegaConf.save(OmegaConf.create(list(job)), job_dir / "overrides.yaml")
                out.append(run_job(cfg, overrides=job, label=f"job {i + 1}/{len(pending)}"))
            return out
        jobs = [job for job, *_ in pending]
        size = self.max_batch_size or len(jobs)
        return [self.launcher.launch(jobs[start:start + size], initial_job_idx=start)
                for start in range(0, len(jobs), size)]


    def _launch_slurm(self, pending: List[tuple]) -> List[dict]:
        """The pending jobs as one packed SLURM array (jobs.slurm), less those a live array of this outputs
        folder already computes (waited for, not submitted again); each job's status once every task
        ended: complete, failed, or missing (its task ended without its record)."""
        from attnrepro.jobs import slurm
        from attnrepro.jobs.grid import grid_size
        from attnrepro.jobs.job import state_of
        from attnrepro.jobs.records import record_path
        from attnrepro.jobs.sweep_seconds import job_seconds
        from attnrepro.jobs.training import roots

        name, profile, outputs = self.config.experiment, self.config.profile.name, str(self.config.paths.outputs)
        names = {key: n for _, key, _, n in pending}

        def state(key: str):
            return state_of(record_path(outputs, name, key), key, roots(*names[key]))

        flying = slurm.in_flight(outputs, list(names))
        attached = [s for s in slurm.submissions(outputs) if any(s.task_of(k) for k in flying)]
        if flying:
            print(f"[{name}] {len(flying)} jobs are already in live arrays ({', '.join(s.array for s in attached)}): "
                  "waiting for them, not submitting them again", flush=True)
        units = [slurm.Unit(key, list(job)) for job, key, *_ in pending if key not in flying]
        subs = list(attached)
        if units:
            seconds = self.job_seconds or job_seconds(name, profile, grid_size(name, profile)) or 60.0
            subs.append(slurm.submit(slurm.TRAIN, name, units, self.launcher.params, outputs, seconds,
                                     self.task_minutes, {}, log=lambda line: print(line, flush=True)))
        if not self.wait:
            print(f"[{name}] not waiting (hydra.sweeper.wait=false): the same sweep again waits for these arrays "
                  "and submits only what they miss", flush=True)
            return [{"status": "submitted"} for _ in pending]
        outcome = slurm.wait(subs, lambda key: record_path(outputs, name, key), self.on_hopeless,
                             log=lambda line: print(f"[{name}] {line}", flush=True))
        for line in outcome["ended"]:
            print(f"[{name}] {line}: those jobs are missing and run on the next sweep", flush=True)
        out = []
        for _, key, *_ in pending:
            st = state(key)
            out.append({"status": "complete" if st.done else "failed" if st.status.value == "failed" else "missing"})
        return out


def _statuses(results: Any) -> List[str]:
    """Each launched job's status ("complete", "failed", "skipped"), in launch order: run_job's dicts (the
    in-process path), or the JobReturns of a Hydra launcher, a batch at a time (a job that raised: "failed")."""
    from hydra.core.utils import JobStatus

    out = []
    for r in results:
        if isinstance(r, dict):
            out.append(r["status"])
        elif isinstance(r, list):
            out += _statuses(r)
        else:
            out.append(r.return_value if r.status is JobStatus.COMPLETED else "failed")
    return out
