"""The registries agree with conf/experiment/: every figure's sources and every theory curve's
experiments are real experiments, and every experiment is read by some figure (a sweep no
figure reads is wasted compute; a source with no sweep is a figure that can never be drawn).
Every paper package meets the contract of docs/adding_a_paper.md (papers.packages() refuses one that
does not, naming it and what it lacks), its numerical tests included."""

import dataclasses
import importlib.util
import sys
import types
from pathlib import Path

import pytest

from attnrepro import papers
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


# ---------------------------------------------------------------- the paper package contract

FAKE = "fake_ridge"


@dataclasses.dataclass
class RidgeTask:
    name: str = "ridge"


@dataclasses.dataclass
class RidgeModel:
    family: str = "ridge_linear"


REAL = papers.PACKAGES
DOC = Path(__file__).resolve().parents[1] / "docs" / "adding_a_paper.md"


def fake_paper(monkeypatch, drop=(), config_drop=(), packages=None, schemas=None, **attrs):
    """A paper package built here (and its config module), registered after the real ones (or alone:
    packages=(FAKE,)) for this test: the worked example of docs/adding_a_paper.md, less `drop`."""
    declared = {"PROBLEMS": {"ridge": "problem"}, "CONFIG": "config", "FIGURES": ("figures.ridge_error_vs_alpha",),
                "THEORY": None, "TESTS": ("test_registry.py",), **attrs}
    package = types.ModuleType(f"attnrepro.papers.{FAKE}")
    for name, value in declared.items():
        if name not in drop:
            setattr(package, name, value)
    config = types.ModuleType(f"{package.__name__}.config")
    parts = {"SCHEMAS": schemas or {"task": {"ridge_schema": RidgeTask}, "model": {"ridge_model_schema": RidgeModel}},
             "checks": lambda cfg, need: None, "RESOLVERS": {}}
    for name, value in parts.items():
        if name not in config_drop:
            setattr(config, name, value)
    monkeypatch.setitem(sys.modules, package.__name__, package)
    monkeypatch.setitem(sys.modules, config.__name__, config)
    monkeypatch.setattr(papers, "PACKAGES", packages or (*REAL, FAKE))
    return package


def refused(call=papers.packages) -> str:
    with pytest.raises(papers.PaperContractError) as e:
        call()
    message = str(e.value)
    assert "\n" not in message, message
    return message


def test_the_fake_paper_as_written_is_accepted(monkeypatch):
    """The baseline of the tests below: the full fake paper registers (so each refusal is its one change)."""
    fake_paper(monkeypatch)
    assert [p.__name__ for p in papers.packages()][-1] == f"attnrepro.papers.{FAKE}"
    assert papers.config_modules()[-1].__name__ == f"attnrepro.papers.{FAKE}.config"
    papers.check_registry()


@pytest.mark.parametrize("attr", ["PROBLEMS", "CONFIG", "FIGURES", "THEORY", "TESTS"])
def test_a_paper_lacking_a_required_attribute_is_refused_in_one_line_naming_it(monkeypatch, attr):
    fake_paper(monkeypatch, drop=(attr,))
    message = refused()
    assert f"paper package attnrepro.papers.{FAKE}: missing {attr} (" in message, message
    assert "sparse_xor" not in message and "tied_attention" not in message, message  # only the one at fault
    fake_paper(monkeypatch, drop=("SOLVERS",))  # SOLVERS may be absent (paper A has none)
    papers.packages()


@pytest.mark.parametrize("attr, value", [("CONFIG", "schemas"), ("FIGURES", "figures.ridge_error_vs_alpha"),
                                         ("PROBLEMS", ["ridge"]), ("SOLVERS", {"ridge_exact": None}), ("THEORY", ""),
                                         ("TESTS", ()), ("TESTS", ("../elsewhere/test_x.py",))])
def test_a_paper_declaring_the_wrong_kind_of_value_is_refused(monkeypatch, attr, value):
    """CONFIG other than "config" escapes the grid cache's hash; FIGURES as one string would be read letter
    by letter; TESTS empty or outside tests/ is no declared numerical test."""
    fake_paper(monkeypatch, **{attr: value})
    assert f"{attr} must be " in refused()


def test_declared_test_files_must_exist_and_define_a_test(monkeypatch, tmp_path):
    (tmp_path / "test_ridge.py").write_text("def test_closed_form():\n    assert True\n")
    (tmp_path / "test_ridge_helpers.py").write_text('"""no test here: def test_ in a docstring is none"""\n'
                                                    "def helper():\n    return 1\n")
    fake_paper(monkeypatch, packages=(FAKE,), TESTS=("test_ridge.py",))
    papers.check_registry(tmp_path)
    fake_paper(monkeypatch, packages=(FAKE,), TESTS=("test_ridge.py", "test_ridge_missing.py", "test_ridge_helpers.py"))
    papers.packages()  # declared: registration passes; the registry check reads the files
    message = refused(lambda: papers.check_registry(tmp_path))
    assert f"attnrepro.papers.{FAKE}" in message
    assert "test_ridge_missing.py does not exist" in message and "test_ridge_helpers.py has no `def test_`" in message
    assert "test_ridge.py " not in message
    # against the real tests/ folder as well
    fake_paper(monkeypatch, TESTS=("test_no_such_file.py",))
    assert "test_no_such_file.py does not exist" in refused(papers.check_registry)


def test_a_package_TESTS_takes_precedence_over_the_in_tree_declaration(monkeypatch):
    monkeypatch.setitem(papers.IN_TREE_TESTS, FAKE, ("test_registry.py",))
    package = fake_paper(monkeypatch, drop=("TESTS",))
    assert papers.tests_of(package) == ("test_registry.py",)
    papers.check_registry()
    package = fake_paper(monkeypatch, TESTS=("test_ridge_nowhere.py",))
    assert papers.tests_of(package) == ("test_ridge_nowhere.py",)
    assert "test_ridge_nowhere.py does not exist" in refused(papers.check_registry)


def test_a_task_or_solver_name_another_paper_declares_is_refused(monkeypatch):
    """problem_module and solver_module take the first package listing a name: a second is never reached."""
    fake_paper(monkeypatch, PROBLEMS={"sparse_xor": "problem"})
    message = refused()
    assert "task.name 'sparse_xor' is declared by attnrepro.papers.sparse_xor and attnrepro.papers.fake_ridge" \
        in message, message
    fake_paper(monkeypatch, SOLVERS={"psd_exact_fit": "exact"})
    assert "model.family 'psd_exact_fit' is declared by" in refused()


@pytest.mark.parametrize("attr", ["SCHEMAS", "checks", "RESOLVERS"])
def test_a_config_module_lacking_a_part_is_refused_naming_it(monkeypatch, attr):
    fake_paper(monkeypatch, config_drop=(attr,))
    message = refused(papers.config_modules)
    assert f"paper config module attnrepro.papers.{FAKE}.config: missing {attr} (" in message, message


def test_a_model_schema_without_a_family_is_refused_naming_it(monkeypatch):
    """A model schema of the older layout (its family in `name`) is refused at registration, in one line, not
    met later as an AttributeError inside a job."""
    @dataclasses.dataclass
    class OldRidgeModel:
        name: str = "ridge_linear"

    fake_paper(monkeypatch, schemas={"task": {"ridge_schema": RidgeTask},
                                     "model": {"ridge_model_schema": OldRidgeModel}})
    message = refused(papers.config_modules)
    assert f"paper config module attnrepro.papers.{FAKE}.config: model schema ridge_model_schema has no field " \
           "`family: str" in message, message


def test_a_schema_name_another_paper_declares_is_refused(monkeypatch):
    """Hydra's ConfigStore keeps the last schema stored under a name: the other paper's YAML would change type."""
    fake_paper(monkeypatch, schemas={"task": {"sparse_xor_schema": object}})
    assert "schema task/sparse_xor_schema is declared by attnrepro.papers.sparse_xor.config and" \
        in refused(papers.config_modules)


def test_the_real_papers_meet_the_contract():
    """Both in-tree papers pass the registry check (their declared tests exist and define tests), and what
    they name exists: each task module has build, each solver module fit, the theory module CURVES."""
    papers.check_registry()
    assert [p.__name__.rpartition(".")[2] for p in papers.packages()] == list(papers.PACKAGES)
    for package in papers.packages():
        assert papers.tests_of(package), package.__name__
        for module in package.PROBLEMS.values():
            assert callable(papers.submodule(package, module).build), (package.__name__, module)
        for module in getattr(package, "SOLVERS", {}).values():
            assert callable(papers.submodule(package, module).fit), (package.__name__, module)
        if package.THEORY:
            assert papers.submodule(package, package.THEORY).CURVES
        for name in package.FIGURES:
            assert importlib.util.find_spec(f"{package.__name__}.{name}") is not None, name


def test_the_doc_names_every_part_of_the_contract():
    text = DOC.read_text()
    for attr in [*papers.CONTRACT, *papers.CONFIG_CONTRACT]:
        assert f"`{attr}`" in text, attr
    for attr in ("build", "fit", "accumulate", "evaluate", "arrays", "CURVES", 'derived["lr"]'):
        assert attr in text, attr


def test_every_experiment_names_itself_as_its_file():
    """Records are written under outputs/runs/<cfg.experiment>/ and read under outputs/runs/<file name>/:
    an experiment whose `experiment:` differs from its file name never finds its records."""
    from omegaconf import OmegaConf

    from attnrepro.jobs.grid import CONF_DIR

    wrong = {e: OmegaConf.load(CONF_DIR / "experiment" / f"{e}.yaml").get("experiment") for e in experiments()}
    assert not {e: v for e, v in wrong.items() if v != e}
