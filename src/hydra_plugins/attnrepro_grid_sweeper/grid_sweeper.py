"""Hydra sweeper `hydra/sweeper=grid`: Hydra's basic sweeper, plus the experiment's grid.

An experiment file declares `grid: {smoke: {...}, quick: {...}, paper: {...}}`,
each a map from an override key to a list of values, or a list of such maps (the
union of their products). With `-m`, the grid of the active profile is swept;
command-line sweeps of the same key replace it (jobs.grid.replace: with
parts, a value goes to the parts that list it, or to all when none does). Every
job's config is composed and validated before the first job starts, so a bad
value anywhere in the grid costs no work.
"""


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


ConfigStore.instance().store(group="hydra/sweeper", name="grid", node=GridSweeperConf, provider="attnrepro")


class GridSweeper(BasicSweeper):
    def job_overrides(self, arguments: List[str]) -> List[List[str]]:
        """The override list of every job: the profile's grid, then hydra.sweeper.params, then the
        command line, each replacing the same key of the one before, expanded by jobs.grid.product."""
        from attnrepro.jobs.grid import override, product, profile_grid, replace

        grid = profile_grid(self.config, self.config.profile.name) if self.config.get("grid") else {}
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        given = [f"{k}={v}" for k, v in (self.params or {}).items()] + list(arguments)
        replaced = {}
        for ov in parser.parse_overrides(given):
            key = ov.get_key_element()
            if ov.is_sweep_override():
                values = list(ov.sweep_string_iterator())
                if not values:  # e.g. task.d=range(5,5): name the key, not just "no jobs"
                    raise ValueError(f"sweep of '{key}' is empty: an empty grid has no jobs")
            else:
                values = [ov.get_value_element_as_str()]
            replaced[key] = values  # a grid key keeps its place (as BasicSweeper's ordered arguments did)
        return [[override(k, v) for k, v in point.items()] for point in product(replace(grid, replaced))]

    def sweep(self, arguments: List[str]) -> Any:
        """Compose and validate every job, set aside those whose record is complete (and made by this
        code), launch the rest."""
        from attnrepro.config import ConfigError, validate
        from attnrepro.jobs.training import training_job

        jobs = self.job_overrides(arguments)
        self.params = {}
        if not jobs:
            raise ValueError("the sweep has no jobs")
        errors, pending, done = [], [], []
        for job in jobs:
            try:
                cfg = self.hydra_context.config_loader.load_sweep_config(self.config, job)
                with open_dict(cfg):
                    del cfg["hydra"]
                validate(cfg)
            except ConfigError as e:
                errors.append(f"{' '.join(job)}: {e}")
                continue
            spec = training_job(cfg)
            (done if spec.state().done else pending).append((job, spec.key, cfg))
        if errors:
            raise ConfigError(f"{len(errors)} of {len(jobs)} jobs have invalid configs; none was run:\n"
                              + "\n".join(errors))
        self._store_expected(arguments, [*done, *pending])
        name = self.config.experiment
        for job, key, _ in done:
            print(f"[{name}] {' '.join(job)}: done before, skipped ({key})", flush=True)
        print(f"[{name}] sweep of {len(jobs)} jobs, profile {self.config.profile.name}: "
              f"{len(done)} done before, {len(pending)} to run", flush=True)
        return self.launch(pending)

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

        by_point = {point(job): (key, cfg) for job, key, cfg in composed}
        out = []
        for job in self.job_overrides(base):
            key, cfg = by_point[point(job)]
            out.append(([*base, *point(job)], key, cfg.task.name, cfg.model.name))
        store_expected(name, profile, str(self.config.paths.outputs), out)

    def launch(self, pending: List[tuple]) -> Any:
        """Run the pending (overrides, key, composed config) jobs. With Hydra's basic launcher, in this
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
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        if isinstance(self.launcher, BasicLauncher):
            HydraConfig.instance().set_config(self.config)  # the sweep's (for the tracker's W&B group)
            out = []
            for i, (job, _, cfg) in enumerate(pending):
                job_dir = sweep_dir / str(i) / ".hydra"  # as the basic launcher leaves it: the job's config
                job_dir.mkdir(parents=True, exist_ok=True)
                OmegaConf.save(cfg, job_dir / "config.yaml")
                OmegaConf.save(OmegaConf.create(list(job)), job_dir / "overrides.yaml")
                out.append(run_job(cfg, overrides=job, label=f"job {i + 1}/{len(pending)}"))
            return out
        jobs = [job for job, _, _ in pending]
        size = self.max_batch_size or len(jobs)
        return [self.launcher.launch(jobs[start:start + size], initial_job_idx=start)
                for start in range(0, len(jobs), size)]
