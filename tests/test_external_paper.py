"""A paper from outside attnrepro (issue 29): a package named in the entry point group `attnrepro.papers`
registers with no edit of attnrepro (its conf/ joins Hydra's search path, its experiments reproduce's list,
its config.py the grid cache's fingerprint, its source the provenance closure, its reference claims the
comparison); a broken one is refused in one line naming it; `attnrepro new-paper` writes a working one.

The first tests register the scaffold through a hand-made distribution (a dist-info folder with
entry_points.txt beside the package, on sys.path: importlib.metadata reads it as pip's would); the last one
pip-installs the scaffold into a temporary --target folder (.venv is left as it is), reproduces its smoke
experiment and runs its own tests, in subprocesses with that folder on PYTHONPATH (about 18 s: not marked slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from attnrepro import papers
from attnrepro.commands import new_paper
from attnrepro.commands.args import UsageError
from attnrepro.jobs import grid, provenance
from sweep_tools import wandb_dirs

ROOT = Path(__file__).resolve().parents[1]
NAME = "zz_scaffold_ridge"  # no module of this name exists: the fake distribution's paper
EXPERIMENT = f"{NAME}_error_vs_alpha"


def fake_distribution(site: Path, module: str, dist: str = "fake-paper", value: str | None = None) -> None:
    """A distribution `dist` in site/ whose entry point in attnrepro.papers names `value` (default: module)."""
    info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[attnrepro.papers]\n{module} = {value or module}\n")


@pytest.fixture
def registered(monkeypatch, tmp_path):
    """register(site): put site/ on sys.path and forget the papers found so far; undone after the test."""
    added = []

    def register(site: Path) -> None:
        monkeypatch.syspath_prepend(str(site))
        added.append(site)
        reset()

    def reset() -> None:
        papers.refresh()
        provenance._external.cache_clear()
        provenance._parsed.cache_clear()
        provenance.fingerprint.cache_clear()

    yield register
    for name in [m for m in sys.modules if m.split(".")[0] == NAME or m.startswith("broken_paper")]:
        del sys.modules[name]
    from attnrepro.report.figure_spec import REGISTRY

    for figure in [f for f, spec in REGISTRY.items() if spec.plot.__module__.split(".")[0] == NAME]:
        del REGISTRY[figure]  # its figures leave with it (the registry is process-wide)
    monkeypatch.undo()
    reset()
    papers.packages()  # the in-tree papers alone again


@pytest.fixture
def scaffold(tmp_path, registered, monkeypatch) -> Path:
    """The scaffold of NAME written to tmp_path and registered through a fake distribution."""
    target = new_paper.write(NAME, tmp_path / "papers")
    site = target / "src"
    fake_distribution(site, NAME, dist=NAME.replace("_", "-"))
    registered(site)
    return target


def refused(call=papers.packages) -> str:
    with pytest.raises(papers.PaperContractError) as e:
        call()
    assert "\n" not in str(e.value), str(e.value)
    return str(e.value)


def test_an_entry_point_registers_the_paper_with_no_edit_of_attnrepro(scaffold):
    fingerprint_before = None
    names = [p.__name__ for p in papers.packages()]
    assert names == [*(f"attnrepro.papers.{p}" for p in papers.PACKAGES), NAME]
    package = papers.packages()[-1]
    papers.check_registry()  # its declared test exists in its own folder and defines tests
    assert papers.tests_of(package) == (f"tests/test_{NAME}.py",)
    assert papers.conf_dirs()[-1] == scaffold / "src" / NAME / "conf"
    assert EXPERIMENT in grid.experiments()
    assert grid.grid_size(EXPERIMENT, "smoke") == 2 == len(grid.grid_points(EXPERIMENT, "smoke"))
    # Hydra's search path holds its conf/: the experiment composes with its own task, model and train options
    cfg = grid.compose([f"experiment={EXPERIMENT}", "profile=smoke"])
    assert (cfg.task.name, cfg.model.family, cfg.train.name) == (NAME, f"{NAME}_linear", f"{NAME}_lbfgs")
    from attnrepro.config import validate

    validate(cfg)
    # its config module is in the grid cache's fingerprint, its source in the provenance closure
    fingerprint_before = grid._fingerprint()
    config = scaffold / "src" / NAME / "config.py"
    config.write_text(config.read_text() + "\n# edited\n")
    assert grid._fingerprint() != fingerprint_before
    from attnrepro.jobs.training import roots

    assert roots(NAME, f"{NAME}_linear")[-2:] == (f"{NAME}.problem", f"{NAME}.config")
    assert f"{NAME}.problem" in provenance.closure([f"{NAME}.problem"])
    assert not provenance._is_registry(f"{NAME}.problem") and provenance._is_registry(NAME)
    assert provenance._is_figure_module(f"{NAME}.figures.{EXPERIMENT}")
    from attnrepro.report.figure_spec import specs

    assert EXPERIMENT in {s.name for s in specs()}
    from attnrepro.jobs.theory import theory_experiments

    assert EXPERIMENT in theory_experiments()


def test_its_reference_claims_are_read_beside_attnrepros(scaffold):
    from attnrepro.report.claims_diff import against_reference

    reference = scaffold / "src" / NAME / "reference" / "claims_smoke.csv"
    reference.parent.mkdir()
    row = {"id": f"{EXPERIMENT}/matches_closed_form", "figure": EXPERIMENT, "claim": "c", "measured": 1e-6,
           "uncertainty": "", "holds": True, "detail": ""}
    pd.DataFrame([row]).to_csv(reference, index=False)
    assert papers.reference_files("smoke") == [reference]
    diff, note = against_reference(pd.DataFrame([{**row, "holds": False}]), "smoke", figures=[EXPERIMENT])
    assert list(diff["change"]) == ["verdict"] and str(reference) in note


def test_a_broken_external_paper_is_refused_in_one_line_naming_it(tmp_path, registered):
    site = tmp_path / "site"
    package = site / "broken_paper_a"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('PROBLEMS = {"broken_a": "problem"}\nCONFIG = "config"\nTHEORY = None\n')
    fake_distribution(site, "broken_paper_a", dist="broken-a")
    registered(site)
    message = refused()
    assert message.startswith("paper package broken_paper_a: missing FIGURES (a tuple of figure module names), "
                              "TESTS ("), message
    assert "missing conf/experiment/*.yaml in" in message and "sparse_xor" not in message


@pytest.mark.parametrize("value, expected", [
    ("broken_paper_nowhere", "cannot be imported: ModuleNotFoundError: No module named 'broken_paper_nowhere'"),
    ("broken_paper_nowhere:main", "the entry point's value must be a package's module name"),
    ("attnrepro.papers.sparse_xor", "an in-tree paper is named in attnrepro.papers.PACKAGES"),
])
def test_an_entry_point_that_names_no_paper_package_is_refused(tmp_path, registered, value, expected):
    site = tmp_path / "site"
    fake_distribution(site, "broken", dist="broken-dist", value=value)
    registered(site)
    message = refused()
    assert "entry point 'broken' of distribution broken-dist" in message and expected in message, message


def test_an_external_config_file_attnrepro_has_is_refused(scaffold):
    """Hydra would read the first of two files of one name on its search path and ignore the other."""
    (scaffold / "src" / NAME / "conf" / "train" / "adam.yaml").write_text("defaults: [train_schema, _self_]\n")
    papers.refresh()
    papers._checked = ()
    assert f"paper package {NAME}: conf/train/adam.yaml is also in attnrepro" in refused()


def test_new_paper_refuses_an_existing_folder_and_a_bad_name(tmp_path, capsys):
    from attnrepro import cli

    (tmp_path / "taken").mkdir()
    for argv, expected in ((["new-paper", "taken", "--dir", str(tmp_path)], "exists"),
                           (["new-paper", "Bad-Name", "--dir", str(tmp_path)], "bad paper name 'Bad-Name'"),
                           (["new-paper", "torch", "--dir", str(tmp_path)], "already importable"),
                           (["new-paper", "sparse_xor", "--dir", str(tmp_path)], "bad paper name"),
                           (["new-paper", "a", "b"], "expected one NAME")):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and expected in err, err
    with pytest.raises(UsageError):
        new_paper.write("for", tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def run(cmd: list, cwd: Path, env: dict, timeout: float = 600) -> str:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow  # 16 s; the default suite registers the same scaffold through a fake distribution (above)
def test_new_paper_installs_reproduces_and_passes_its_own_tests(tmp_path):
    """attnrepro new-paper toy_ridge; pip install (into a --target folder, not .venv); reproduce its smoke
    experiment from another folder; its figure and its claim (holds); its own tests pass."""
    t0 = time.monotonic()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "ATTNREPRO_")) and k != "PYTHONPATH"}
    env.update(WANDB_MODE="disabled", PYTHONUNBUFFERED="1", **wandb_dirs(tmp_path))
    cli = [sys.executable, "-m", "attnrepro"]
    run([*cli, "new-paper", "toy_ridge", "--dir", tmp_path], cwd=tmp_path, env=env)
    site = tmp_path / "site"
    run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--quiet", "--target", site,
         tmp_path / "toy_ridge"], cwd=tmp_path, env=env)
    assert list(site.glob("toy_ridge-*.dist-info/entry_points.txt"))
    env["PYTHONPATH"] = str(site)
    out = tmp_path / "out"
    experiment = "toy_ridge_error_vs_alpha"
    run([*cli, "reproduce", "profile=smoke", f"experiments={experiment}", f"outputs={out}"], cwd=tmp_path, env=env)
    records = sorted((out / "runs" / experiment).glob("*/record.json"))
    assert len(records) == 2
    for path in records:
        record = json.loads(path.read_text())
        assert record["status"] == "complete", record.get("error")
        assert "toy_ridge.problem" in record["provenance"]["roots"]
        assert all(s == "converged" for s in record["fit"]["stop"]), record["fit"]["stop"]
    assert (out / "figures" / f"{experiment}.png").is_file()
    claims = pd.read_csv(out / "report" / "claims.csv")
    mine = claims[claims["figure"] == experiment]
    assert list(mine["id"]) == [f"{experiment}/matches_closed_form"] and mine["holds"].all(), mine
    theory = list((out / "theory" / "toy_ridge_asymptotic_error").glob("*/record.json"))
    assert len(theory) == 1
    tests = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", site / "toy_ridge" / "tests"],
                cwd=tmp_path, env=env)
    assert "4 passed" in tests, tests
    print(f"scaffold to reproduced and tested in {time.monotonic() - t0:.1f} s")
