"""An experiment's grid for a profile, expanded to jobs, composed without running Hydra's CLI.

Used by the aggregate stage (which jobs should exist?) and by tests. The same
expansion as the grid sweeper: the product of the grid's value lists.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

CONF_DIR = Path(__file__).resolve().parents[3] / "conf"


def experiments() -> list[str]:
    """Every experiment in conf/experiment/, i.e. every figure's sweep."""
    return sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))


def compose(overrides: list[str]) -> DictConfig:
    """The job config Hydra would build for these overrides (no hydra node)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from ..config import register_configs

    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=overrides)


def grid_points(experiment: str, profile: str, extra: list[str] = ()) -> list[list[str]]:
    """Override lists of every job of the experiment's grid under the profile."""
    base = [f"experiment={experiment}", f"profile={profile}", *extra]
    cfg = compose(base)
    grid = OmegaConf.to_container(cfg.grid, resolve=False).get(profile)
    if grid is None:
        raise ValueError(f"experiment '{experiment}' has no grid for profile '{profile}'")
    keys = list(grid)
    values = [v if isinstance(v, list) else [v] for v in grid.values()]
    fmt = lambda v: "null" if v is None else str(v)  # noqa: E731
    return [base + [f"{k}={fmt(v)}" for k, v in zip(keys, combo)] for combo in itertools.product(*values)]


def expected_jobs(experiment: str, profile: str, extra: list[str] = ()) -> list[tuple[list[str], str]]:
    """(overrides, key) of every job the sweep would run."""
    from .keys import job_key

    return [(ov, job_key(compose(ov))) for ov in grid_points(experiment, profile, extra)]
