"""An experiment's grid for a profile, expanded to jobs, composed without running Hydra's CLI.

``product`` is the one grid expansion: the grid sweeper (hydra_plugins), the aggregate stage
(which jobs should exist?) and the theory stage (which parameter points?) all expand a grid
with it: the product of the grid's value lists in the grid's order, where an override of the
same key replaces the grid's entry. A grid may also be a list of such maps (its parts, e.g. one
optimiser at lambda = 0 and another at lambda > 0): their points in turn, each point once.

Composing a grid costs Hydra's defaults-list composition (0.1-0.4 s on a 2-core machine) per choice of config
groups (jobs.composer), so expected_jobs caches its answer on disk under
<outputs>/cache/grid/, keyed by the experiment, profile, extra overrides and the
content of every file that decides a key (conf/ and the config schemas).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import itertools
import json
import math
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from omegaconf import DictConfig, OmegaConf

from attnrepro.locations import CONF_DIR  # the repository's conf/, or the wheel's copy

PACKAGE_DIR = Path(__file__).resolve().parents[1]


def experiments() -> list[str]:
    """Every experiment in conf/experiment/ (attnrepro's and each installed paper's), i.e. every figure's sweep."""
    from attnrepro.papers import experiment_files

    return sorted(experiment_files())


_COMPOSED: dict[tuple[str, tuple[str, ...]], DictConfig] = {}  # (conf fingerprint, overrides) -> config


def compose_many(overrides_list: list[list[str]]) -> list[DictConfig]:
    """The job configs Hydra would build for these override lists (no hydra node; jobs.composer). Each distinct
    list is composed once per process and content of conf/; the caller gets a copy."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from attnrepro.config import register_configs

    fingerprint = _fingerprint()
    todo = [ov for ov in dict.fromkeys(tuple(ov) for ov in overrides_list) if (fingerprint, ov) not in _COMPOSED]
    if todo:
        from attnrepro.jobs.composer import Composer

        register_configs()
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            composer = Composer(lambda ov: hydra_compose(config_name="config", overrides=ov),
                                GlobalHydra.instance().config_loader().repository.group_exists)
            for ov in todo:
                _COMPOSED[fingerprint, ov] = composer(list(ov))
    return [copy.deepcopy(_COMPOSED[fingerprint, tuple(ov)]) for ov in overrides_list]


def compose(overrides: list[str]) -> DictConfig:
    """The job config Hydra would build for these overrides (no hydra node)."""
    return compose_many([overrides])[0]


def parts(grid: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> list[dict]:
    """A grid's parts: the grid itself when it is one map, else its list of maps."""
    if isinstance(grid, Mapping):
        return [dict(grid)]
    if not grid:
        raise ValueError("the grid is an empty list of parts: an empty grid has no jobs")
    bad = [i for i, part in enumerate(grid) if not isinstance(part, Mapping)]
    if bad:
        raise ValueError(f"grid part {bad[0]} is not a map of override key to values: {grid[bad[0]]!r}")
    return [dict(part) for part in grid]


def _as_list(value: Any) -> list:
    """A grid entry's values: the list itself, or the one value."""
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _same(a: Any, b: Any) -> bool:
    """Whether a command-line value (a string) names a grid value: 0.001 is '0.001' and '1e-3'."""
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b) or {str(a), str(b)} == {"None", "null"}


def replace(grid: Mapping[str, Any] | Sequence[Mapping[str, Any]], values: Mapping[str, Any]) -> list[dict]:
    """The grid's parts with ``values`` (key -> list, e.g. from the command line) in place of their own:
    a value goes to the parts whose list of that key has it, and to every part when none has it (so
    with one part, values simply replace the grid's); a part left without any value of a key is dropped.
    A key no part has goes last in each."""
    out = parts(grid)
    for key, vals in values.items():
        vals = _as_list(vals)
        owners = {}  # value index -> the parts that list it (all parts when none does)
        for j, v in enumerate(vals):
            listed = [i for i, part in enumerate(out) if key in part and any(_same(v, w) for w in _as_list(part[key]))]
            owners[j] = listed or range(len(out))
        mine = [[v for j, v in enumerate(vals) if i in owners[j]] for i in range(len(out))]
        out = [{**part, key: m} for part, m in zip(out, mine, strict=True) if m]
    return out


def drop(grid: Mapping[str, Any] | Sequence[Mapping[str, Any]], keys) -> list[dict]:
    """The grid's parts without ``keys``."""
    return [{k: v for k, v in part.items() if k not in keys} for part in parts(grid)]


def product(grid: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> list[dict]:
    """Every point of a grid {key: value or list of values}: the product of the lists, in order. A
    list of such maps gives each part's points in turn, a point that two parts share once."""
    points, seen = [], set()
    for part in parts(grid):
        lists = {k: _as_list(v) for k, v in part.items()}
        empty = [k for k, v in lists.items() if not v]
        if empty:
            raise ValueError(f"grid entry '{empty[0]}' is empty: an empty grid has no jobs")
        for combo in itertools.product(*lists.values()):
            point = dict(zip(lists, combo))
            tag = json.dumps(sorted(point.items()), default=str)
            if tag not in seen:
                seen.add(tag)
                points.append(point)
    return points


def size(grid: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> int:
    """The number of points of a grid without listing them: the sum over its parts of the product of
    their lists' lengths (an upper bound when parts share points, exact otherwise)."""
    return sum(math.prod(len(_as_list(v)) for v in part.values()) for part in parts(grid))


def override(key: str, value: Any) -> str:
    return f"{key}={'null' if value is None else value}"


def profile_grid(cfg: DictConfig, profile: str) -> dict | list[dict]:
    """The experiment's grid for the profile, as written in its file (unresolved): a map, or a list
    of maps (see product)."""
    grid = OmegaConf.to_container(cfg.grid, resolve=False) if cfg.get("grid") else {}
    if profile not in grid:
        raise ValueError(f"experiment '{cfg.experiment}' has no grid for profile '{profile}'"
                         + (f" (it has: {', '.join(grid)})" if grid else ""))
    if not grid[profile]:
        raise ValueError(f"grid.{profile} of experiment '{cfg.experiment}' is empty: an empty grid has no jobs")
    return grid[profile]


@functools.lru_cache(maxsize=None)
def _base_config(experiment: str, profile: str, fingerprint: str) -> DictConfig:
    return compose([f"experiment={experiment}", f"profile={profile}"])


def base_config(experiment: str, profile: str) -> DictConfig:
    """The experiment's config under the profile, before any grid point (a copy: composed once per
    process and content of conf/, since a composition costs ~0.4 s on a 2-core machine)."""
    return copy.deepcopy(_base_config(experiment, profile, _fingerprint()))


def grid_points(experiment: str, profile: str, extra: list[str] = ()) -> list[list[str]]:
    """Override lists of every job of the experiment's grid under the profile (extra replaces grid keys)."""
    base = [f"experiment={experiment}", f"profile={profile}", *extra]
    given = {ov.split("=", 1)[0].lstrip("+~") for ov in extra}
    cfg = compose(base) if extra else base_config(experiment, profile)  # extras are checked by composing
    plain = dict(ov.split("=", 1) for ov in extra if "=" in ov and not ov.startswith(("+", "~")))
    grid = drop(replace(profile_grid(cfg, profile), {k: [v] for k, v in plain.items()}), given)
    return [base + [override(k, v) for k, v in point.items()] for point in product(grid)]


def _fingerprint() -> str:
    """Hash of every file that decides a job's config: conf/**/*.yaml and the schema modules, then those of
    each paper installed from outside (its conf/**/*.yaml and config.py, named by its package)."""
    from attnrepro.papers import external_packages, package_dir

    h = hashlib.sha256()
    schemas = [*(PACKAGE_DIR / "config").glob("*.py"), *(PACKAGE_DIR / "papers").glob("*/config.py")]
    for path in sorted([*CONF_DIR.rglob("*.yaml"), *schemas]):
        h.update(str(path.relative_to(path.parents[1])).encode())
        h.update(path.read_bytes())
    for package in external_packages():
        folder = package_dir(package)
        for path in sorted([*(folder / "conf").rglob("*.yaml"), folder / f"{package.CONFIG}.py"]):
            h.update(f"{package.__name__}:{path.relative_to(folder).as_posix()}".encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def _cache(experiment: str, profile: str, extra: tuple[str, ...], outputs: str) -> Path:
    tag = json.dumps([experiment, profile, list(extra), _fingerprint()])
    return Path(outputs) / "cache" / "grid" / f"{hashlib.sha256(tag.encode()).hexdigest()[:20]}.json"


def store_expected(experiment: str, profile: str, outputs: str, jobs: list[tuple[list[str], str, str, str]]) -> None:
    """Write what expected_jobs(experiment, profile) would compute, [(overrides, key, task name, model
    family)] in the grid's order, from a sweep that composed every job anyway (the grid sweeper)."""
    from attnrepro.jobs.records import atomic_write

    atomic_write(_cache(experiment, profile, (), outputs), lambda f: json.dump(jobs, f))


@functools.lru_cache(maxsize=None)
def _expected_jobs(experiment: str, profile: str, extra: tuple[str, ...], outputs: str):
    """[(overrides, key, task name, model family)] of the sweep, cached on disk (see the module docstring)."""
    from attnrepro.jobs.records import atomic_write
    from attnrepro.jobs.training import job_key

    cache = _cache(experiment, profile, extra, outputs)
    try:
        return [tuple(job) for job in json.loads(cache.read_text())]
    except (OSError, ValueError):
        pass
    points = grid_points(experiment, profile, list(extra))
    jobs = [(ov, job_key(cfg), cfg.task.name, cfg.model.family) for ov, cfg in zip(points, compose_many(points))]
    atomic_write(cache, lambda f: json.dump(jobs, f))
    return jobs


def is_cached(experiment: str, profile: str, extra: list[str] = (), outputs: str | None = None) -> bool:
    """Whether expected_jobs would read its answer from disk (else it composes every job)."""
    return _cache(experiment, profile, tuple(extra), _outputs(outputs)).exists()


def grid_size(experiment: str, profile: str) -> int:
    """The number of jobs of the experiment's grid for the profile, read from its file (nothing composed)."""
    from attnrepro.papers import experiment_files

    grid = OmegaConf.load(experiment_files()[experiment]).get("grid", {}).get(profile, {})
    return len(product(OmegaConf.to_container(grid, resolve=False))) if grid else 1


def _outputs(outputs: str | None) -> str:
    return str(outputs or os.environ.get("ATTNREPRO_OUTPUTS", "outputs"))


def expected_jobs(experiment: str, profile: str, extra: list[str] = (), outputs: str | None = None):
    """(overrides, key) of every job the sweep would run (cached; see the module docstring)."""
    return [(list(job[0]), job[1]) for job in _expected_jobs(experiment, profile, tuple(extra), _outputs(outputs))]


def expected_states(experiment: str, profile: str, extra: list[str] = (), outputs: str | None = None):
    """(overrides, key, State) of every job the sweep would run: which are done, which not."""
    from attnrepro.jobs.job import state_of
    from attnrepro.jobs.records import record_path
    from attnrepro.jobs.training import roots

    outputs = _outputs(outputs)
    return [(list(ov), key, state_of(record_path(outputs, experiment, key), key, roots(task, model)))
            for ov, key, task, model in _expected_jobs(experiment, profile, tuple(extra), outputs)]
