"""What a paper adds beyond its figures and curves, declared in its package (docs/adding_a_paper.md): its entries
of conf/theory.yaml (THEORY_SETTINGS: the module's SETTINGS dataclass joins the shared schema's top level) and its
commands (COMMANDS: `attnrepro <command>`, listed in the help). The shared layer names no paper's settings."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

from attnrepro import cli, papers
from attnrepro.jobs.theory import theory_settings

FAKE = "fake_extras"
REAL = papers.PACKAGES
SRC = Path(__file__).resolve().parents[1] / "src" / "attnrepro"
DOC = Path(__file__).resolve().parents[1] / "docs" / "adding_a_paper.md"


@dataclass
class FakeSettings:
    ridge_points: int = 5


def fake_paper(monkeypatch, settings=FakeSettings, **attrs) -> types.ModuleType:
    """A paper registered after the real ones for this test, with a theory settings module (SETTINGS = settings)
    and a command module (main returns 7 and echoes its arguments)."""
    package = types.ModuleType(f"attnrepro.papers.{FAKE}")
    declared = {"PROBLEMS": {"fake_extras_task": "problem"}, "CONFIG": "config", "FIGURES": (), "THEORY": None,
                "TESTS": ("test_paper_extensions.py",), "THEORY_SETTINGS": "theory_settings",
                "COMMANDS": {"fake-hello": "hello"}, **attrs}
    for name, value in declared.items():
        setattr(package, name, value)
    config = types.ModuleType(f"{package.__name__}.config")
    config.SCHEMAS, config.checks, config.RESOLVERS = {}, lambda cfg, need: None, {}
    extras = types.ModuleType(f"{package.__name__}.theory_settings")
    extras.SETTINGS = settings
    hello = types.ModuleType(f"{package.__name__}.hello", "Says hello (a fake paper's command).\n\nMore here.")
    hello.main = lambda argv: print("hello", *argv) or 7
    for module in (package, config, extras, hello):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(papers, "PACKAGES", (*REAL, FAKE))
    return package


def refused(call) -> str:
    with pytest.raises(papers.PaperContractError) as e:
        call()
    assert "\n" not in str(e.value), str(e.value)
    return str(e.value)


# ---------------------------------------------------------------- theory settings

def test_theory_settings_keep_paper_bs_override_paths():
    """The user-facing paths of conf/theory.yaml, as README and docs/state_evolution.md write them."""
    s = theory_settings("quick", ["paths.outputs=/tmp/unused", "nodes=300", "bayes.points=7", "workers=1",
                                  "state_evolution.points.quick=11", "scaling_laws.d.paper=[400,1000]",
                                  "experiments=[tied_error_vs_alpha]"])
    assert (s.nodes, s.bayes.points, s.workers, s.state_evolution.points.quick) == (300, 7, 1, 11)
    assert list(s.scaling_laws.d.paper) == [400, 1000] and list(s.experiments) == ["tied_error_vs_alpha"]
    assert list(s)[:4] == ["profile", "paths", "experiments", "workers"]  # the shared fields, then the papers'
    with pytest.raises(Exception, match="state_evolution.bogus"):
        theory_settings("quick", ["state_evolution.bogus=1"])


def test_a_papers_theory_settings_join_the_schema(monkeypatch):
    fake_paper(monkeypatch)
    s = theory_settings("smoke", ["ridge_points=9"])
    assert (s.ridge_points, s.nodes) == (9, 400)
    assert theory_settings("smoke").ridge_points == 5


def test_a_theory_setting_declared_twice_or_no_dataclass_is_refused(monkeypatch):
    from attnrepro.config.theory import theory_config

    for name in ("nodes", "workers"):  # paper B's, and a shared one
        fake_paper(monkeypatch, settings=dataclass(type("Clash", (), {"__annotations__": {name: int}, name: 1})))
        message = refused(theory_config)
        assert f"paper theory settings module attnrepro.papers.{FAKE}.theory_settings: conf/theory.yaml's " \
               f"{name!r} is also declared by" in message, message
    fake_paper(monkeypatch, settings={"ridge_points": 5})
    assert "SETTINGS must be a dataclass" in refused(theory_config)
    fake_paper(monkeypatch, THEORY_SETTINGS=3)
    assert "THEORY_SETTINGS must be a module name" in refused(papers.packages)


def test_the_shared_layer_names_no_papers_settings():
    for path in (SRC / "config" / "theory.py", SRC / "jobs" / "theory.py", SRC / "cli.py"):
        text = path.read_text()
        for word in ("nodes", "state_evolution", "scaling_laws", "optimal_lambda", "bayes", "compare_theory"):
            assert word not in text, (path.name, word)


def test_the_doc_names_the_optional_entries():
    text = DOC.read_text()
    for attr in [*papers.CONTRACT, *papers.THEORY_SETTINGS_CONTRACT]:
        assert f"`{attr}`" in text, attr


# ---------------------------------------------------------------- commands

def test_an_unknown_command_errors_naming_the_commands(capsys):
    assert cli.main(["no-such-command"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnrepro: unknown command 'no-such-command'; commands: ") and "compare-theory" in err


def test_paper_bs_compare_theory_is_listed_and_dispatched(tmp_path, capsys):
    assert cli.paper_commands() == {"compare-theory": "attnrepro.papers.tied_attention.compare_theory"}
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "The papers' commands:" in out and "attnrepro compare-theory " in out and "Paper B's ERM" in out
    assert cli.main(["compare-theory", f"outputs={tmp_path}"]) == 2  # reached its main: no records there
    assert f"no complete records of tied_interpolation_peak under {tmp_path}" in capsys.readouterr().err
    assert cli.main(["compare-theory", "bogus=1"]) == 2
    assert "unknown argument 'bogus=1'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli.main(["compare-theory", "--help"])
    assert e.value.code == 0 and "attnrepro compare-theory outputs=" in capsys.readouterr().out


def test_a_papers_command_is_dispatched_and_a_taken_name_refused(monkeypatch, capsys):
    fake_paper(monkeypatch)
    assert cli.main(["fake-hello", "a=1"]) == 7
    assert capsys.readouterr().out == "hello a=1\n"
    assert cli.main(["-h"]) == 0
    assert "attnrepro fake-hello" in capsys.readouterr().out and "Says hello (a fake paper's command)." \
        in cli._help()
    fake_paper(monkeypatch, COMMANDS={"figures": "hello"})
    assert cli.main(["fake-hello"]) == 1
    assert f"paper package attnrepro.papers.{FAKE}: command 'figures' is also attnrepro's" in capsys.readouterr().err
    fake_paper(monkeypatch, COMMANDS={"compare-theory": "hello"})
    assert "command 'compare-theory' is also attnrepro.papers.tied_attention's" in refused(cli.paper_commands)
    fake_paper(monkeypatch, COMMANDS=["fake-hello"])
    assert "COMMANDS must be a dict" in refused(papers.packages)
