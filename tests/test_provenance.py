"""Provenance: a record made before a change to a model runs again after it; one made before a change
to the report (or to a docstring) does not."""

import shutil

import pytest

from attnrepro.jobs import provenance
from attnrepro.jobs.training import roots, run_job, training_job

TIED = roots("attention_indexed", "tied_direct")


@pytest.fixture
def source_copy(tmp_path, monkeypatch):
    """provenance reads a copy of src/ that the test may edit: edit(relative path, text to append)."""
    src = tmp_path / "src"
    shutil.copytree(provenance.SRC / "attnrepro", src / "attnrepro", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(provenance, "SRC", src)

    def clear():
        provenance._parsed.cache_clear()
        provenance.fingerprint.cache_clear()

    def edit(rel: str, text: str):
        path = src / "attnrepro" / rel
        path.write_text(path.read_text() + text)
        clear()

    clear()
    yield edit
    clear()


def test_closure_follows_imports_but_not_the_report():
    mods = provenance.closure(TIED)
    assert {"attnrepro.papers.tied_attention.model", "attnrepro.papers.tied_attention.task",
            "attnrepro.lit.replica", "attnrepro.seeding"} <= set(mods)
    assert not [m for m in mods if m.startswith(("attnrepro.report", "attnrepro.stats"))]
    assert "attnrepro.papers.sparse_xor.problem" not in mods  # the other paper decides no tied number
    exact = provenance.closure(roots("attention_indexed", "psd_exact_fit"))
    assert "attnrepro.papers.tied_attention.exact_fit" in exact and "attnrepro.lit.replica" not in exact


def test_fingerprint_changes_with_code_not_with_docs_or_report(source_copy):
    before = provenance.fingerprint(TIED)
    source_copy("report/html.py", "\nREPORT_CHANGED = 1\n")
    source_copy("papers/tied_attention/model.py", "\n# a comment\n")
    source_copy("papers/tied_attention/__init__.py", "\nFIGURES = (*FIGURES, 'figures.another')\n")  # a registry
    source_copy("papers/__init__.py", "\nPACKAGES = (*PACKAGES, 'a_third_paper')\n")
    assert provenance.fingerprint(TIED) == before
    source_copy("papers/tied_attention/config.py", "\nROUNDING = 'floor'\n")  # the schemas' n(), p(d) decide numbers
    assert provenance.fingerprint(TIED) != before
    before = provenance.fingerprint(TIED)
    source_copy("papers/tied_attention/model.py", '\n\ndef _unused():\n    """only a docstring"""\n')
    changed = provenance.fingerprint(TIED)
    assert changed != before
    source_copy("papers/tied_attention/model.py", "\nSCALE = 2.0\n")
    assert provenance.fingerprint(TIED) != changed


def test_stale_record_runs_again(job_config, source_copy):
    cfg, _ = job_config("experiment=xor_phase_dm", "task.d=16", "n_seeds=1")
    job = training_job(cfg)
    assert run_job(cfg)["status"] == "complete"
    made_by = job.state().record["provenance"]
    assert made_by["fingerprint"] == provenance.fingerprint(job.roots) and made_by["roots"] == list(job.roots)
    source_copy("report/html.py", "\nREPORT_CHANGED = 1\n")  # the report: the record stays
    assert job.state().done and run_job(cfg)["status"] == "skipped"
    source_copy("papers/sparse_xor/attention.py", "\nSCALE = 2.0\n")  # the model: the record is stale
    state = job.state()
    assert state.status.value == "stale" and state.reason == "made by other code"
    assert run_job(cfg)["status"] == "complete" and job.state().done


def test_a_record_that_is_not_there_is_missing_and_a_broken_one_corrupt(tmp_path):
    from attnrepro.jobs.job import Status, state_of

    path = tmp_path / "k" / "record.json"
    assert state_of(path, "k", ()).status is Status.missing
    path.parent.mkdir()
    path.write_text('{"schema": 1, "key": "tru')
    assert state_of(path, "k", ()).status is Status.corrupt
