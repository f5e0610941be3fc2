"""Hydra sweeper `hydra/sweeper=grid`: Hydra's basic sweeper, plus the experiment's grid.

An experiment file declares `grid: {smoke: {...}, quick: {...}, paper: {...}}`,
each a map from an override key to a list of values. With `-m`, the grid of the
active profile is swept; command-line sweeps of the same key replace it. Every
job's config is composed and validated before the first job starts, so a bad
value anywhere in the grid costs no work.
"""


import os
from dataclasses import dataclass
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
        from attnrepro.config import ConfigError, validate

        params = {**self.grid_params(), **(self.params or {})}
        arguments = [*(f"{k}={v}" for k, v in params.items()), *arguments]
        self.params = {}
        jobs = self.job_overrides(arguments)
        if not jobs:
            raise ValueError("the sweep has no jobs")
        errors = []
        for job in jobs:
            try:
                cfg = self.hydra_context.config_loader.load_sweep_config(self.config, job)
                with open_dict(cfg):
                    del cfg["hydra"]
                validate(cfg)
            except ConfigError as e:
                errors.append(f"{' '.join(job)}: {e}")
        if errors:
            raise ConfigError(f"{len(errors)} of {len(jobs)} jobs have invalid configs; none was run:\n"
                              + "\n".join(errors))
        os.environ["ATTNREPRO_SWEEP_SIZE"] = str(len(jobs))
        print(f"[{self.config.experiment}] sweep of {len(jobs)} jobs, profile {self.config.profile.name}",
              flush=True)
        return super().sweep(arguments)
