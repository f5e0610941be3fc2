"""Hydra sweeper `hydra/sweeper=grid`: Hydra's basic sweeper, plus the experiment's grid.

An experiment file declares `grid: {smoke: {...}, quick: {...}, paper: {...}}`,
each a map from an override key to a list of values. With `-m`, the grid of the
active profile is swept; command-line sweeps of the same key replace it. Every
job's config is composed and validated before the first job starts, so a bad
value anywhere in the grid costs no work.
"""


import os
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
        from attnrepro.jobs.grid import product, profile_grid

        grid = dict(profile_grid(self.config, self.config.profile.name)) if self.config.get("grid") else {}
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        given = [f"{k}={v}" for k, v in (self.params or {}).items()] + list(arguments)
        for ov in parser.parse_overrides(given):
            key = ov.get_key_element()
            if ov.is_sweep_override():
                values = list(ov.sweep_string_iterator())
                if not values:  # e.g. task.d=range(5,5): name the key, not just "no jobs"
                    raise ValueError(f"sweep of '{key}' is empty: an empty grid has no jobs")
            else:
                values = [ov.get_value_element_as_str()]
            grid[key] = values  # a grid key keeps its place (as BasicSweeper's ordered arguments did)
        return [[f"{k}={'null' if v is None else v}" for k, v in point.items()] for point in product(grid)]

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
            (done if spec.state().done else pending).append((job, spec.key))
        if errors:
            raise ConfigError(f"{len(errors)} of {len(jobs)} jobs have invalid configs; none was run:\n"
                              + "\n".join(errors))
        name = self.config.experiment
        for job, key in done:
            print(f"[{name}] {' '.join(job)}: done before, skipped ({key})", flush=True)
        print(f"[{name}] sweep of {len(jobs)} jobs, profile {self.config.profile.name}: "
              f"{len(done)} done before, {len(pending)} to run", flush=True)
        os.environ["ATTNREPRO_SWEEP_SIZE"] = str(len(pending))
        return self.launch([job for job, _ in pending])

    def launch(self, jobs: List[List[str]]) -> Any:
        """BasicSweeper's launch loop over the given jobs, in batches of max_batch_size.
        (Hydra's per-batch legality check is skipped: every job was composed above.)"""
        if not jobs:
            return []
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        size = self.max_batch_size or len(jobs)
        returns = []
        for start in range(0, len(jobs), size):
            returns.append(self.launcher.launch(jobs[start:start + size], initial_job_idx=start))
        return returns
