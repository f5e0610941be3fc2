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


def _sweep_string(key: str, values: Any) -> str:
    if OmegaConf.is_list(values) or isinstance(values, (list, tuple)):
        values = list(values)
        if not values:
            raise ValueError(f"grid entry '{key}' is empty: an empty grid has no jobs")
        return ",".join("null" if v is None else str(v) for v in values)
    return "null" if values is None else str(values)


class GridSweeper(BasicSweeper):
    def grid_params(self) -> Dict[str, str]:
        grid = self.config.get("grid") or {}
        if not grid:
            return {}
        profile = self.config.profile.name
        if profile not in grid:
            raise ValueError(f"experiment '{self.config.experiment}' has no grid for profile "
                             f"'{profile}' (it has: {', '.join(grid)})")
        return {k: _sweep_string(k, v) for k, v in grid[profile].items()}

    def job_overrides(self, arguments: List[str]) -> List[List[str]]:
        """The override list of every job: grid, then hydra.sweeper.params, then the command line."""
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        overrides = parser.parse_overrides(arguments)
        for ov in overrides:  # e.g. task.d=range(5,5): name the key, not just "no jobs"
            if ov.is_sweep_override() and not list(ov.sweep_string_iterator()):
                raise ValueError(f"sweep of '{ov.get_key_element()}' is empty: an empty grid has no jobs")
        batches = self.split_arguments(overrides, None)
        return [list(job) for batch in batches for job in batch]

    def sweep(self, arguments: List[str]) -> Any:
        """Compose and validate every job, set aside those whose record is complete, launch the rest."""
        from attnrepro.config import ConfigError, validate
        from attnrepro.jobs.keys import job_key
        from attnrepro.jobs.records import is_complete, record_path

        params = {**self.grid_params(), **(self.params or {})}
        arguments = [*(f"{k}={v}" for k, v in params.items()), *arguments]
        self.params = {}
        jobs = self.job_overrides(arguments)
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
            key = job_key(cfg)
            (done if is_complete(record_path(cfg.paths.outputs, cfg.experiment, key)) else pending).append((job, key))
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
