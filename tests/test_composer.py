"""jobs.composer: a job's config composed once per choice of config groups, then its values set, is the config
Hydra composes in full, for every job of every experiment's smoke grid and a random sample of its quick and paper
grids; a value Hydra refuses fails with Hydra's own error."""

import random

import pytest
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from attnrepro.config import register_configs
from attnrepro.jobs.composer import Composer
from attnrepro.jobs.grid import CONF_DIR, experiments, grid_points
from attnrepro.jobs.training import job_key


@pytest.fixture(scope="module")
def points() -> list[list[str]]:
    """Two random jobs of each experiment: one of its smoke grid, one of its quick or paper grid."""
    rng = random.Random(0)
    return [rng.choice(grid_points(exp, profile)) for exp in experiments()
            for profile in ("smoke", rng.choice(["quick", "paper"]))]


@pytest.fixture(scope="module")
def quick_grid() -> list[list[str]]:
    return grid_points("tied_interpolation_peak", "quick")


@pytest.fixture(scope="module")
def hydra(points, quick_grid):
    """(the full composition, the composer), both from conf/ (after `points`, which composes with Hydra too)."""
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        full = lambda ov: hydra_compose(config_name="config", overrides=list(ov))  # noqa: E731
        yield full, Composer(full, GlobalHydra.instance().config_loader().repository.group_exists)
    GlobalHydra.instance().clear()


def _shape(cfg) -> tuple:
    """Everything that tells two configs apart: the YAML (interpolations unresolved), the structured types
    and flags of every node."""
    nodes = []

    def walk(node, path):
        nodes.append((path, OmegaConf.get_type(node), OmegaConf.is_struct(node), OmegaConf.is_readonly(node)))
        if node._is_none() or node._is_missing() or node._is_interpolation():
            return
        for k in (node if OmegaConf.is_dict(node) else range(len(node))):
            child = node._get_node(k)
            if OmegaConf.is_dict(child) or OmegaConf.is_list(child):
                walk(child, f"{path}.{k}")

    walk(cfg, "")
    return OmegaConf.to_yaml(cfg), nodes


def test_the_composer_gives_hydras_config_for_every_kind_of_job(hydra, points):
    full, composer = hydra
    assert len(points) == 2 * len(experiments())
    for ov in points:
        fast, slow = composer(ov), full(ov)
        assert _shape(fast) == _shape(slow), ov
        assert job_key(fast) == job_key(slow), ov


def test_a_grid_is_composed_in_full_once_per_choice_of_config_groups(hydra, quick_grid):
    full, _ = hydra
    calls = []
    composer = Composer(lambda ov: calls.append(ov) or full(ov),
                        GlobalHydra.instance().config_loader().repository.group_exists)
    for ov in quick_grid:
        composer(ov)
    choices = {tuple(o for o in ov if (CONF_DIR / o.split("=")[0]).is_dir()) for ov in quick_grid}
    assert 1 < len(choices) < len(quick_grid)  # the grid chooses an optimiser (train=) for some points
    assert sorted(map(tuple, calls)) == sorted(choices)


def test_a_copy_is_its_own(hydra, points):
    full, composer = hydra
    ov = points[0]
    assert not any(o.startswith("seed=") for o in ov)  # a value the job does not set again
    a = composer(ov)
    a.seed = a.seed + 12345
    assert composer(ov).seed == full(ov).seed


@pytest.mark.parametrize("bad", ["task.d=abc", "task.no_such_key=1", "model=no_such_model"])
def test_a_bad_override_fails_with_hydras_error(hydra, points, bad):
    full, composer = hydra
    ov = [*points[0], bad]
    with pytest.raises(ConfigCompositionException) as hydra_error:
        full(ov)
    with pytest.raises(ConfigCompositionException) as composer_error:
        composer(ov)
    assert str(composer_error.value) == str(hydra_error.value)
