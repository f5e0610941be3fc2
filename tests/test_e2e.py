"""End to end, as a user runs it: the session's smoke reproduction (tests/conftest.py: smoke_run),
a failing job and the reproduction that heals it (and resumes everything else), and (slow suite)
a no-op resume; each on its own copy of the shared outputs, which stay as the first reproduction
left them."""

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from attnrepro.cli import main as cli
from attnrepro.jobs import theory
from attnrepro.jobs.records import read_record, record_path
from attnrepro.report.figure_spec import specs
from sweep_tools import run_cli


def run(outputs: Path, command: str, *args: str) -> str:
    proc = run_cli(outputs, command, *args, env={"WANDB_MODE": "disabled"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def record_stamps(outputs: Path) -> dict[str, int]:
    """{record path: mtime_ns} of every training and theory record under outputs."""
    return {str(p.relative_to(outputs)): p.stat().st_mtime_ns
            for part in ("runs", "theory") for p in (outputs / part).rglob("record.json")}


def theory_keys(outputs: Path) -> set[str]:
    """The keys of every theory job the smoke profile wants (a curve shared by experiments is one job)."""
    settings = theory.theory_settings("smoke", [f"paths.outputs={outputs}"])
    return {job.key for e in theory.theory_experiments() for job in theory.jobs(e, settings)}


# --- the first reproduction ---------------------------------------------------------------------


def test_smoke_reproduction_completes_every_job_and_figure(smoke_run):
    out, outputs = smoke_run.stdout, smoke_run.outputs
    assert len(re.findall(r": complete in ", out)) == smoke_run.n_jobs
    for e, ej in smoke_run.jobs.items():
        for _, key in ej:
            assert read_record(record_path(outputs, e, key))["status"] == "complete"
    html = (outputs / "report" / "index.html").read_text()
    for spec in specs():
        assert spec.name in html
        assert (outputs / "results" / f"{spec.name}.parquet").exists()
        assert (outputs / "figures" / f"{spec.name}.png").stat().st_size > 1000
    assert "report/index.html" in out
    # the theory stage computed every curve the smoke grids want, once each
    n = len(theory_keys(outputs))
    assert n >= 4 and f"theory: {n} computed, 0 cached, 0 failed" in out
    assert len(list((outputs / "theory").rglob("record.json"))) == n


def test_sweeps_cache_the_jobs_a_fresh_composition_expects(smoke_run, smoke_grid_cache):
    """The reproduction composed no job itself: each sweep wrote the expected jobs (overrides, key, task,
    model) of its grid to cache/grid/, and they equal what composing every job in this process gave
    (smoke_grid_cache: expected_jobs on an empty folder composes every job)."""
    from attnrepro.jobs.grid import expected_jobs, experiments, is_cached

    fresh_outputs = str(smoke_grid_cache.parents[1])
    for e in experiments():
        assert is_cached(e, "smoke", outputs=str(smoke_run.outputs)), e
        assert smoke_run.jobs[e] == expected_jobs(e, "smoke", outputs=fresh_outputs), e


# --- a failing job, the report, and the reproduction that heals it (and resumes the rest) ------


def users_of(experiment: str) -> list[str]:
    """The figures that read the experiment."""
    return [spec.name for spec in specs() if experiment in spec.sources]


@pytest.fixture(scope="module")
def failed_and_healed(smoke_run, tmp_path_factory):
    """On a copy: the xor_phase_dm jobs at d = 32 run again on a GPU this machine lacks (so they
    fail); aggregate; the figures that read xor_phase_dm; then the smoke reproduction once more."""
    outputs = smoke_run.copy(tmp_path_factory.mktemp("failing") / "outputs")
    jobs = smoke_run.jobs["xor_phase_dm"]
    failing = [key for ov, key in jobs if "task.d=32" in ov]
    assert failing and len(failing) < len(jobs)
    for key in failing:
        shutil.rmtree(record_path(outputs, "xor_phase_dm", key).parent)
    sweep = run_cli(outputs, "train", "-m", "experiment=xor_phase_dm", "profile=smoke", "task.d=32",
                    "trainer.accelerator=gpu", env={"WANDB_MODE": "disabled"})
    assert sweep.returncode == 1 and f"{len(failing)} of {len(failing)} jobs failed" in sweep.stdout.splitlines()[-1]
    failed = {key: read_record(record_path(outputs, "xor_phase_dm", key)) for key in failing}
    # the aggregate and figure commands in this process (their argument parsing included; the sweeps
    # and reproductions are processes of their own): only the figures of the failed jobs, the
    # others' tables did not change (the heal below draws them all)
    assert cli(["aggregate", "profile=smoke", f"outputs={outputs}"]) == 0
    figures_rc = cli(["figures", f"figures={','.join(users_of('xor_phase_dm'))}", f"outputs={outputs}"])
    status = json.loads((outputs / "results" / "status.json").read_text())["experiments"]
    html = (outputs / "report" / "index.html").read_text()
    pngs = {spec.name: (outputs / "figures" / f"{spec.name}.png").stat().st_mtime_ns for spec in specs()}
    before_heal = record_stamps(outputs)
    healed = run(outputs, "reproduce", "profile=smoke")
    return dict(outputs=outputs, jobs=jobs, failing=failing, failed=failed, figures_rc=figures_rc, status=status,
                html=html, pngs=pngs, before_heal=before_heal, healed=healed)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the injected failure asks for a GPU that must be absent")
def test_failed_job_is_recorded_and_reported(smoke_run, failed_and_healed):
    f = failed_and_healed
    for rec in f["failed"].values():
        assert rec["status"] == "failed" and rec["reason"]
    phase = f["status"]["xor_phase_dm"]
    assert {j["key"] for j in phase["failed"]} == set(f["failing"]) and len(phase["failed"]) == len(f["failing"])
    assert all(j["reason"] for j in phase["failed"])
    assert phase["complete"] == len(f["jobs"]) - len(f["failing"])  # the others survive
    for e, ej in smoke_run.jobs.items():  # ... and so does every other experiment
        if e != "xor_phase_dm":
            assert f["status"][e]["complete"] == len(ej) and not f["status"][e]["failed"], e
    users = users_of("xor_phase_dm")
    assert users
    assert f["html"].count("<td>failed</td>") == len(f["failing"]) * len(users)  # each failed job, with its reason
    shared = {spec.name: (smoke_run.outputs / "figures" / f"{spec.name}.png").stat().st_mtime_ns for spec in specs()}
    for name in users:  # the figures that read the failed jobs are drawn again, from the jobs that survive
        assert name in f["html"] and f["pngs"][name] > shared[name], name
    assert f["figures_rc"] == 0  # ... without an error
    for name in set(shared) - set(users):  # and only those (copytree kept the others' times)
        assert f["pngs"][name] == shared[name], name


@pytest.mark.skipif(torch.cuda.is_available(), reason="the injected failure asks for a GPU that must be absent")
def test_next_reproduction_reruns_only_the_failed_jobs(smoke_run, failed_and_healed):
    """The reproduction after the failure trains the failed jobs and nothing else: every other
    sweep is done (not even started), xor_phase_dm's complete jobs are skipped, the theory curves
    are all cached, and no other record is rewritten; then every figure is drawn again."""
    f = failed_and_healed
    healed = f["healed"]
    assert len(re.findall(r": complete in ", healed)) == len(f["failing"])
    rerun = {m.group(1) for m in re.finditer(r": complete in [\d.]+s \(([0-9a-f]{16})\)", healed)}
    assert rerun == set(f["failing"])
    skipped = {m.group(1) for m in re.finditer(r": done before, skipped \(([0-9a-f]{16})\)", healed)}
    assert skipped == {key for _, key in f["jobs"]} - set(f["failing"])
    done = {m.group(1): int(m.group(2)) for m in re.finditer(r"\[(\w+)\] all (\d+) jobs done before", healed)}
    assert done == {e: len(j) for e, j in smoke_run.jobs.items() if e != "xor_phase_dm"}
    assert f"theory: 0 computed, {len(theory_keys(f['outputs']))} cached, 0 failed" in healed
    for key in f["failing"]:
        assert read_record(record_path(f["outputs"], "xor_phase_dm", key))["status"] == "complete"
    after = record_stamps(f["outputs"])
    changed = {p for p in after if after[p] != f["before_heal"].get(p)}
    assert changed == {str(record_path(f["outputs"], "xor_phase_dm", k).relative_to(f["outputs"]))
                       for k in f["failing"]}
    status = json.loads((f["outputs"] / "results" / "status.json").read_text())["experiments"]["xor_phase_dm"]
    assert status["complete"] == len(f["jobs"]) and not status["failed"]
    html = (f["outputs"] / "report" / "index.html").read_text()
    assert "<td>failed</td>" not in html and all(spec.name in html for spec in specs())


# --- resume: nothing changed, nothing trains (the reproduction above checks it for the jobs it
# --- did not have to run; this is the whole no-op run, one more pass of every figure) -----------


@pytest.fixture(scope="module")
def resumed(smoke_run, tmp_path_factory):
    """The smoke reproduction run again on a copy of its outputs: (outputs, stdout, stamps before, after)."""
    outputs = smoke_run.copy(tmp_path_factory.mktemp("resumed") / "outputs")
    before = record_stamps(outputs)
    out = run(outputs, "reproduce", "profile=smoke")
    return outputs, out, before, record_stamps(outputs)


@pytest.mark.slow
def test_resume_trains_nothing(smoke_run, resumed):
    outputs, again, before, after = resumed
    assert ": complete in " not in again
    done = {m.group(1): int(m.group(2)) for m in re.finditer(r"\[(\w+)\] all (\d+) jobs done before", again)}
    assert done == {e: len(j) for e, j in smoke_run.jobs.items()}  # every sweep: all its jobs done, none run
    assert f"theory: 0 computed, {len(theory_keys(outputs))} cached, 0 failed" in again
    assert len(before) == smoke_run.n_jobs + len(theory_keys(outputs)) and after == before  # no record rewritten
    html = (outputs / "report" / "index.html").read_text()
    assert all(spec.name in html for spec in specs())  # the report is rebuilt from the same records
