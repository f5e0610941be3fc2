"""End to end, as a user runs it: smoke reproduction, resume, a failing job, all in a temp outputs dir."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnrepro.jobs.grid import expected_jobs, experiments
from attnrepro.jobs.records import read_record, record_path
from attnrepro.report.figure_spec import specs

ROOT = Path(__file__).resolve().parents[1]


def run(outputs: Path, *args: str) -> str:
    env = {**os.environ, "ATTNREPRO_OUTPUTS": str(outputs), "WANDB_MODE": "disabled"}
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="the injected failure asks for a GPU that must be absent")
def test_smoke_reproduction_resumes_and_reports_failures(tmp_path):
    out = run(tmp_path, "pipelines/reproduce.py", "--profile", "smoke")
    jobs = {e: expected_jobs(e, "smoke") for e in experiments()}
    n_jobs = sum(len(j) for j in jobs.values())
    assert len(re.findall(r": complete in ", out)) == n_jobs
    for e, ej in jobs.items():
        for _, key in ej:
            assert read_record(record_path(tmp_path, e, key))["status"] == "complete"
    html = (tmp_path / "report" / "index.html").read_text()
    for spec in specs():
        assert spec.name in html
        assert (tmp_path / "results" / f"{spec.name}.parquet").exists()
        assert (tmp_path / "figures" / f"{spec.name}.png").stat().st_size > 1000
    assert "report/index.html" in out

    # Resume: nothing changed, nothing trains.
    again = run(tmp_path, "pipelines/reproduce.py", "--profile", "smoke")
    assert ": complete in " not in again
    assert len(re.findall(r"done before, skipped", again)) == n_jobs

    # A failure: the xor_phase_dm jobs at d = 32 run again on a GPU this machine lacks.
    failing = [key for ov, key in jobs["xor_phase_dm"] if "task.d=32" in ov]
    assert failing
    for key in failing:
        shutil.rmtree(record_path(tmp_path, "xor_phase_dm", key).parent)
    run(tmp_path, "pipelines/train.py", "-m", "experiment=xor_phase_dm", "profile=smoke", "task.d=32",
        "trainer.accelerator=gpu")
    for key in failing:
        rec = read_record(record_path(tmp_path, "xor_phase_dm", key))
        assert rec["status"] == "failed" and rec["reason"]
    run(tmp_path, "pipelines/aggregate.py", "--profile", "smoke")
    proc = subprocess.run([sys.executable, "pipelines/figures.py"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "ATTNREPRO_OUTPUTS": str(tmp_path)})
    status = json.loads((tmp_path / "results" / "status.json").read_text())["experiments"]["xor_phase_dm"]
    assert len(status["failed"]) == len(failing)
    assert status["complete"] == len(jobs["xor_phase_dm"]) - len(failing)  # the others survive
    html = (tmp_path / "report" / "index.html").read_text()
    users = sum("xor_phase_dm" in spec.sources for spec in specs())  # figures that read this experiment
    assert html.count("<td>failed</td>") == len(failing) * users  # each failed job, with its reason
    for spec in specs():  # every other figure is still there
        assert (tmp_path / "figures" / f"{spec.name}.png").exists(), proc.stderr

    # The next reproduction re-runs only the failed jobs.
    healed = run(tmp_path, "pipelines/reproduce.py", "--profile", "smoke")
    assert len(re.findall(r": complete in ", healed)) == len(failing)
