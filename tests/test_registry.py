"""The registries agree with conf/experiment/: every figure's sources and every theory curve's
experiments are real experiments, and every experiment is read by some figure (a sweep no
figure reads is wasted compute; a source with no sweep is a figure that can never be drawn)."""

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
