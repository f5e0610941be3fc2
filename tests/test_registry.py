"""The registries agree with conf/experiment/: every figure's sources and every theory curve's
experiments are real experiments, and every experiment is read by some figure (a sweep no
figure reads is wasted compute; a source with no sweep is a figure that can never be drawn)."""

import pytest

from attnrepro.jobs.grid import experiments, grid_points, grid_size
from attnrepro.jobs.theory import curves
from attnrepro.report.figure_spec import specs


def test_figure_sources_are_experiments():
    known = set(experiments())
    assert known, "no experiment in conf/experiment/"
    unknown = {spec.name: sorted(set(spec.sources) - known) for spec in specs() if set(spec.sources) - known}
    assert not unknown, f"figures read experiments that conf/experiment/ lacks: {unknown}"
    assert all(spec.sources for spec in specs()), [spec.name for spec in specs() if not spec.sources]


def test_theory_curve_experiments_are_experiments():
    known = set(experiments())
    assert curves(), "no theory curve registered"
    unknown = {c.name: sorted(set(c.experiments) - known) for c in curves() if set(c.experiments) - known}
    assert not unknown, f"theory curves name experiments that conf/experiment/ lacks: {unknown}"
    assert all(c.experiments for c in curves()), [c.name for c in curves() if not c.experiments]


def test_every_experiment_is_read_by_a_figure():
    read = {source for spec in specs() for source in spec.sources}
    unread = sorted(set(experiments()) - read)
    assert not unread, f"experiments no figure reads: {unread}"


def test_theory_curves_feed_a_figure_of_their_experiment():
    """A curve computed for an experiment lands in that experiment's figures' tables: some figure
    reads each of the curve's experiments."""
    read = {source for spec in specs() for source in spec.sources}
    for c in curves():
        assert set(c.experiments) <= read, (c.name, sorted(set(c.experiments) - read))


def test_names_are_unique():
    names = [spec.name for spec in specs()]
    assert len(names) == len(set(names))
    curve_names = [c.name for c in curves()]
    assert len(curve_names) == len(set(curve_names))


def test_grid_size_read_from_the_file_matches_the_expansion():
    """reproduce orders the first sweeps by grid_size (nothing composed): it counts what the sweep runs."""
    for e in experiments():
        assert grid_size(e, "smoke") == len(grid_points(e, "smoke")), e


def test_base_config_is_composed_once_and_handed_out_as_copies():
    """grid.base_config caches the composition per process: equal to a fresh compose, and a caller
    that changes its copy changes no one else's."""
    from attnrepro.jobs.grid import base_config, compose

    first = base_config("xor_phase_dm", "smoke")
    assert first == compose(["experiment=xor_phase_dm", "profile=smoke"])
    first.task.d = -1
    assert base_config("xor_phase_dm", "smoke").task.d != -1


def test_a_grid_of_parts_is_the_union_of_their_products_each_point_once():
    from attnrepro.jobs.grid import product, replace

    grid = [{"a": [1, 2], "b": [0]}, {"a": [2, 3], "b": 0}, {"c": ["x"]}]
    assert product(grid) == [{"a": 1, "b": 0}, {"a": 2, "b": 0}, {"a": 3, "b": 0}, {"c": "x"}]
    assert product(grid[0]) == product([grid[0]])
    assert product(replace(grid, {"b": [5]})) == [{"a": a, "b": 5} for a in (1, 2, 3)] + [{"c": "x", "b": 5}]
    # a command-line value goes to the parts that list it, or to every part when none does
    by_lam = [{"lam": [0.0], "opt": "adam"}, {"lam": [0.001, 0.01], "opt": "lbfgs"}]
    assert product(replace(by_lam, {"lam": ["0.01"]})) == [{"lam": "0.01", "opt": "lbfgs"}]
    assert product(replace(by_lam, {"lam": ["1e-3", "0", "0.5"]})) == [
        {"lam": "0", "opt": "adam"}, {"lam": "0.5", "opt": "adam"}, {"lam": "1e-3", "opt": "lbfgs"},
        {"lam": "0.5", "opt": "lbfgs"}]
    bad_grids = (([], "empty list of parts"), ([{"a": [1]}, 3], "part 1 is not a map"), ([{"a": []}], "'a' is empty"))
    for bad, match in bad_grids:
        with pytest.raises(ValueError, match=match):
            product(bad)


def test_error_vs_alpha_trains_lambda_zero_by_adam_and_lambda_above_zero_to_the_minimiser():
    """conf/experiment/tied_error_vs_alpha.yaml: one grid part per optimiser (quick and paper alike); a
    command-line value goes to the parts that list it."""
    from attnrepro.jobs.grid import compose_many

    (one,) = compose_many(grid_points("tied_error_vs_alpha", "quick", ["model.lam=0.01", "task.alpha=0.2",
                                                                       "task.Delta=0"]))
    assert (one.model.lam, one.train.optimizer) == (0.01, "lbfgs")

    for profile, d in (("quick", 50), ("paper", 200)):
        points = grid_points("tied_error_vs_alpha", profile, ["task.alpha=0.2", "task.Delta=0.5"])
        cfgs = compose_many(points)
        assert sorted(c.model.lam for c in cfgs) == [0.0, 0.001, 0.01, 0.1, 0.3]
        for c in cfgs:
            assert (c.task.d, c.task.alpha, c.task.Delta) == (d, 0.2, 0.5)
            want = ("adam", 1e-4, 1e-5) if c.model.lam == 0 else ("lbfgs", 2e-5, 0.0)
            assert (c.train.optimizer, c.train.tol_grad, c.train.tol) == want, (profile, c.model.lam)
