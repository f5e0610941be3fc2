"""An experiment's grid for a profile, expanded to jobs, composed without running Hydra's CLI.

Used by the aggregate stage (which jobs should exist?) and by tests. The same
expansion as the grid sweeper: the product of the grid's value lists, where an
override given in `extra` replaces the grid's entry for that key.

Composing a job costs ~0.1 s, so expected_jobs caches its answer on disk under
<outputs>/cache/grid/, keyed by the experiment, profile, extra overrides and the
content of every file that decides a key (conf/ and the config schemas).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

CONF_DIR = Path(__file__).resolve().parents[3] / "conf"
SCHEMA_DIR = Path(__file__).resolve().parents[1] / "config"


def experiments() -> list[str]:
    """Every experiment in conf/experiment/, i.e. every figure's sweep."""
    return sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))


def compose_many(overrides_list: list[list[str]]) -> list[DictConfig]:
    """The job configs Hydra would build for these override lists (no hydra node)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from attnrepro.config import register_configs

    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return [hydra_compose(config_name="config", overrides=list(ov)) for ov in overrides_list]


def compose(overrides: list[str]) -> DictConfig:
    """The job config Hydra would build for these overrides (no hydra node)."""
    return compose_many([overrides])[0]


def grid_points(experiment: str, profile: str, extra: list[str] = ()) -> list[list[str]]:
    """Override lists of every job of the experiment's grid under the profile."""
    base = [f"experiment={experiment}", f"profile={profile}", *extra]
    cfg = compose(base)
    grid = OmegaConf.to_container(cfg.grid, resolve=False).get(profile)
    if grid is None:
        raise ValueError(f"experiment '{experiment}' has no grid for profile '{profile}'")
    given = {ov.split("=", 1)[0].lstrip("+~") for ov in extra}
    grid = {k: v for k, v in grid.items() if k not in given}
    values = [v if isinstance(v, list) else [v] for v in grid.values()]
    fmt = lambda v: "null" if v is None else str(v)  # noqa: E731
    return [base + [f"{k}={fmt(v)}" for k, v in zip(grid, combo)] for combo in itertools.product(*values)]


def _fingerprint() -> str:
    """Hash of every file that decides a job's config: conf/**/*.yaml and the schema modules."""
    h = hashlib.sha256()
    for path in sorted([*CONF_DIR.rglob("*.yaml"), *SCHEMA_DIR.glob("*.py")]):
        h.update(str(path.relative_to(path.parents[1])).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def _expected_jobs(experiment: str, profile: str, extra: tuple[str, ...], outputs: str):
    from attnrepro.jobs.keys import job_key

    tag = json.dumps([experiment, profile, extra, _fingerprint()])
    cache = Path(outputs) / "cache" / "grid" / f"{hashlib.sha256(tag.encode()).hexdigest()[:20]}.json"
    try:
        return [(ov, key) for ov, key in json.loads(cache.read_text())]
    except (OSError, ValueError):
        pass
    points = grid_points(experiment, profile, list(extra))
    jobs = [(ov, job_key(cfg)) for ov, cfg in zip(points, compose_many(points))]
    from attnrepro.jobs.records import atomic_write

    atomic_write(cache, lambda f: json.dump(jobs, f))
    return jobs


def expected_jobs(experiment: str, profile: str, extra: list[str] = (), outputs: str | None = None):
    """(overrides, key) of every job the sweep would run (cached; see the module docstring)."""
    outputs = outputs or os.environ.get("ATTNREPRO_OUTPUTS", "outputs")
    return [(list(ov), key) for ov, key in _expected_jobs(experiment, profile, tuple(extra), str(outputs))]
