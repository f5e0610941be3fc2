"""The SLURM launch path (packed job arrays, jobs.slurm) against a real scheduler: the one-node cluster of
scripts/slurm_cluster.sh (.ci/run brings it up around `make test`). Every test here skips, saying why,
when no cluster answers. Every test that needs the cluster is in this file: `make test` runs a file in one
pytest-xdist worker, and these tests need the cluster's queue to themselves.

The compute node is this machine, so the array tasks see this checkout, its .venv and the temp outputs
folder as the sweep does (on a real cluster: a shared file system)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from attnrepro.jobs import slurm
from attnrepro.jobs.cluster import PartitionLimits, Request, check_request, cluster_limits, parse_gres, queue_state
from sweep_tools import cli_cmd, run_cli, train_env, valid_records, wait_until

pytestmark = pytest.mark.slurm

EXPERIMENT = "xor_phase_dm"
SWEEP = [f"experiment={EXPERIMENT}", "profile=smoke"]
# Options that fit the test node (2 CPUs; partition MaxTime 30 min): one CPU and 1 GB per task, so two
# tasks run at once, and a time limit within MaxTime.
LAUNCHER = {"cpus_per_task": 1, "mem_gb": 1, "timeout_min": 10}
SLURM = ["hydra/launcher=slurm", *(f"hydra.launcher.{k}={v}" for k, v in LAUNCHER.items())]
ONE_JOB_A_TASK = ["hydra.sweeper.job_seconds=600", "hydra.sweeper.task_minutes=5"]  # 4 tasks of 1 job
TWO_TASKS = ["hydra.sweeper.job_seconds=120", "hydra.sweeper.task_minutes=5", "hydra.launcher.cpus_per_task=2"]
# ... 2 tasks of 2 jobs, one at a time on the 2-CPU node: the second waits while the first runs
SWEEP_TIMEOUT_S = 300  # a subprocess limit; the sweep's own wait ends when the tasks do

# Record fields that differ between two runs of the same jobs by nature: when the job started (a
# wall-clock time) and how long its parts took (wall-clock seconds). Everything else (key, config,
# overrides, provenance commit and fingerprint, versions, derived quantities, metrics, curves, and
# timings.steps / timings.device) must be equal.
TIME_FIELDS = ("started",)


def without_times(record: dict) -> dict:
    """A record without its wall-clock fields: `started` and timings.*_s."""
    out = {k: v for k, v in record.items() if k not in TIME_FIELDS}
    out["timings"] = {k: v for k, v in record.get("timings", {}).items() if not k.endswith("_s")}
    return out


def this_node() -> str:
    return socket.gethostname().split(".")[0]


def sinfo(*fmt: str) -> list[list[str]]:
    out = subprocess.run(["sinfo", "-h", *fmt], capture_output=True, text=True, timeout=30, check=True).stdout
    return [ln.split() for ln in out.splitlines() if ln.strip()]


def task_ids(outputs: Path) -> list[str]:
    """Every array task this outputs folder submitted (its ledger, jobs.slurm)."""
    return [tid for s in slurm.submissions(outputs) for tid in s.ids]


def wait_finished(ids: list[str], timeout: float = 600) -> dict:
    """queue_state of these tasks once every one has finished or left the queue for good (an array task
    cancelled while pending has no accounting record in SLURM 22.05: UNKNOWN). The sweep returns once its
    records are written; SLURM may still be ending the step. Fails, saying so, after `timeout`."""
    end = time.monotonic() + timeout
    while True:
        states = queue_state(sorted(ids))
        if all(states.get(i) is not None and (states[i].finished or states[i].state == "UNKNOWN") for i in ids):
            return states
        assert time.monotonic() < end, f"tasks not finished within {timeout}s: {states}"
        time.sleep(1)


def cancel_all(outputs: Path) -> None:
    arrays = sorted({s.array for s in slurm.submissions(outputs)})
    if arrays and shutil.which("scancel"):
        subprocess.run(["scancel", *arrays], capture_output=True, timeout=30)


def start_sweep(outputs: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(cli_cmd("train", "-m", *SWEEP, *SLURM, f"paths.outputs={outputs}", *extra),
                            cwd=Path(__file__).resolve().parents[1], env=train_env(outputs, WANDB_MODE="disabled"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_the_cluster_answers_with_this_machines_cpus():
    """sinfo lists this machine as a node with all its CPUs and at most its memory, in a default
    partition with a finite MaxTime; cluster_limits reads the same."""
    nodes = {row[0]: row[1:] for row in sinfo("-N", "-o", "%N %c %m %T")}
    assert this_node() in nodes, f"the cluster's nodes {sorted(nodes)} do not include this machine"
    cpus, mem_mb, state = nodes[this_node()]
    assert int(cpus) == os.cpu_count()
    mem_total_mb = next(int(ln.split()[1]) // 1024 for ln in open("/proc/meminfo") if ln.startswith("MemTotal:"))
    assert 0 < int(mem_mb) <= mem_total_mb
    assert state in ("idle", "mixed", "allocated", "completing")

    limits = cluster_limits()
    default = [p for p in limits.values() if p.default]
    assert len(default) == 1, limits
    part = default[0]
    assert this_node() in part.nodes
    assert part.max_cpus_per_node == os.cpu_count() and part.max_mem_per_node_mb == int(mem_mb)
    assert part.max_time_min is not None and part.max_time_min >= LAUNCHER["timeout_min"]
    (time_limit,) = {row[1] for row in sinfo("-o", "%P %l") if row[0] == part.name + "*"}
    assert time_limit != "infinite"


@pytest.fixture(scope="module")
def slurm_sweep(slurm_cluster, tmp_path_factory):
    """The smoke sweep of xor_phase_dm twice into the same outputs path: with the basic launcher (then
    moved aside to <tmp>/basic), and through SLURM (hydra/launcher=slurm: one packed array). Same path,
    so that the records' overrides (paths.outputs=...) are the same. Yields (outputs, basic outputs,
    the SLURM sweep's stdout); cancels what is left in the queue afterwards. (It asks for slurm_cluster
    itself: a module fixture is set up before the marker's function-scoped check.)"""
    root = tmp_path_factory.mktemp("slurm")
    outputs, basic = root / "outputs", root / "basic"
    problems = check_request(Request.from_launcher(LAUNCHER, array_size=4), cluster_limits())
    assert not problems, "the test's launcher options do not fit this cluster:\n" + "\n".join(problems)

    proc = run_cli(outputs, "train", "-m", *SWEEP, f"paths.outputs={outputs}", timeout=SWEEP_TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    outputs.rename(basic)
    try:
        start = time.monotonic()
        proc = run_cli(outputs, "train", "-m", *SWEEP, *SLURM, f"paths.outputs={outputs}", timeout=SWEEP_TIMEOUT_S)
        print(f"SLURM sweep: {time.monotonic() - start:.1f}s")
        logs = "".join(p.read_text()[-1500:] for p in (outputs / "slurm").glob("*/*/*_log.*"))
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:] + "\njob logs:\n" + logs[-4000:]
        yield outputs, basic, proc.stdout
    finally:
        cancel_all(outputs)


def test_slurm_sweep_gives_the_basic_launchers_records(slurm_sweep):
    """One array of two tasks of two jobs (packed: one import of torch and Lightning per task; two tasks, as
    the node runs two at once), COMPLETED in SLURM's accounting; the same 4 records as the basic launcher,
    equal in every field but the wall-clock ones (`started`, timings.*_s), and the same curves.csv, byte
    for byte."""
    outputs, basic, stdout = slurm_sweep
    assert "0 done before, 4 to run" in stdout and "4 jobs in 2 tasks" in stdout
    assert "sweep complete: the 4 jobs to run have their records" in stdout.strip().splitlines()[-1]
    (sub,) = slurm.submissions(outputs)
    assert [len(t) for t in sub.tasks] == [2, 2]
    ids = task_ids(outputs)
    states = wait_finished(ids)
    assert {i: states[i].state for i in ids} == {i: "COMPLETED" for i in ids}, states

    slurm_records, basic_records = valid_records(outputs, EXPERIMENT), valid_records(basic, EXPERIMENT)
    assert len(slurm_records) == 4 and set(slurm_records) == set(basic_records) == {k for t in sub.tasks for k in t}
    for key, rec in slurm_records.items():
        assert rec["status"] == "complete", rec.get("reason")
        assert without_times(rec) == without_times(basic_records[key]), key
        csv = f"runs/{EXPERIMENT}/{key}/curves.csv"
        assert (outputs / csv).read_bytes() == (basic / csv).read_bytes(), csv


def test_rerun_of_a_finished_slurm_sweep_submits_nothing(slurm_sweep):
    """The same SLURM sweep again finds every record complete: "4 done before, 0 to run", no new array,
    the records untouched."""
    outputs, _, _ = slurm_sweep
    records, ids = valid_records(outputs, EXPERIMENT), task_ids(outputs)
    proc = run_cli(outputs, "train", "-m", *SWEEP, *SLURM, f"paths.outputs={outputs}", timeout=SWEEP_TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "4 done before, 0 to run" in proc.stdout and "sweep complete" not in proc.stdout
    assert task_ids(outputs) == ids
    assert valid_records(outputs, EXPERIMENT) == records


def test_a_rerun_attaches_and_a_cancelled_task_leaves_only_its_jobs_missing(slurm_cluster, tmp_path):
    """2 tasks of 2 jobs, one running at a time. A second sweep started while the array runs submits nothing:
    it waits for that array ("already in live arrays"). Task 1 is cancelled (scancel) while it waits: both
    sweeps' waits end within 60 s of the other task, exit 1, naming that task and its jobs as missing; the
    next sweep submits those two jobs only, and ends with every record complete."""
    outputs = tmp_path / "outputs"
    first = start_sweep(outputs, *TWO_TASKS)
    second = None
    try:
        wait_until(lambda: slurm.submissions(outputs), timeout=120)
        (sub,) = slurm.submissions(outputs)
        assert [len(t) for t in sub.tasks] == [2, 2]
        second = start_sweep(outputs, *TWO_TASKS)
        wait_until(lambda: second.poll() is not None or (outputs / "runs").exists(), timeout=120)
        subprocess.run(["scancel", sub.ids[1]], check=True, timeout=30)
        outs = [p.communicate(timeout=SWEEP_TIMEOUT_S)[0] for p in (first, second)]
        ended = time.monotonic()
        states = wait_finished(task_ids(outputs))
        assert states[sub.ids[1]].state in ("CANCELLED", "UNKNOWN")  # UNKNOWN: cancelled while pending
        assert time.monotonic() - ended < 60
        for proc, out in zip((first, second), outs):
            assert proc.returncode == 1, out[-3000:]
            assert "2 of " in out.strip().splitlines()[-1] and "failed or are missing" in out.strip().splitlines()[-1]
        assert f"task {sub.ids[1]} ({EXPERIMENT}) ended " in outs[0]
        assert "submitted array" not in outs[1], outs[1][-2000:]
        assert len(slurm.submissions(outputs)) == 1
        lost = sub.tasks[1]
        assert set(valid_records(outputs, EXPERIMENT)) == set(sub.tasks[0])
        again = run_cli(outputs, "train", "-m", *SWEEP, *SLURM, f"paths.outputs={outputs}", timeout=SWEEP_TIMEOUT_S)
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-2000:]
        assert "2 done before, 2 to run" in again.stdout
        subs = slurm.submissions(outputs)
        assert len(subs) == 2 and sorted(k for t in subs[1].tasks for k in t) == sorted(lost)
        assert len(valid_records(outputs, EXPERIMENT)) == 4
    finally:
        for proc in (first, second):
            if proc is not None:
                proc.kill()
        cancel_all(outputs)


IMPOSSIBLE = [  # (overrides, the option the one line names)
    (["hydra.launcher.cpus_per_task=64"], "hydra.launcher.cpus_per_task=64"),
    (["hydra.launcher.mem_gb=100000"], "hydra.launcher.mem_gb=100000"),
    (["hydra.launcher.timeout_min=600"], "hydra.launcher.timeout_min=600"),
    (["hydra/launcher=slurm_gpu", "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1",
      "hydra.launcher.timeout_min=10"], "hydra.launcher.gpus_per_node=1"),
]


@pytest.mark.parametrize("overrides,option", IMPOSSIBLE, ids=["cpus", "memory", "time", "gpu"])
def test_a_request_no_node_can_meet_is_one_line_and_submits_nothing(slurm_cluster, tmp_path, overrides, option):
    """Checked against the cluster before submitting: exit non-zero within 60 s, one line naming the option
    to change, nothing in the ledger or the queue."""
    start = time.monotonic()
    proc = run_cli(tmp_path, "train", "-m", *SWEEP, *SLURM, *overrides, f"paths.outputs={tmp_path}", timeout=120)
    assert time.monotonic() - start < 60
    assert proc.returncode == 1 and "nothing was submitted" in proc.stderr, proc.stdout[-2000:] + proc.stderr
    problems = [ln.strip() for ln in proc.stderr.splitlines() if ln.startswith("  ")]
    assert len(problems) == 1 and problems[0].startswith(option), proc.stderr
    assert not slurm.submissions(tmp_path) and "Traceback" not in proc.stderr


def test_an_array_larger_than_max_array_size_is_refused():
    """MaxArraySize (1001 here): an array of 1002 tasks is one line naming hydra.sweeper.task_minutes, and the
    packing never asks for one (1002 jobs of a task each go into at most 1001 tasks)."""
    (line,) = slurm.check(LAUNCHER, 1002)
    assert "MaxArraySize" in line and "1002" in line and "hydra.sweeper.task_minutes" in line
    assert slurm.check(LAUNCHER, 1001) == []
    groups = slurm.chunks(1002, job_seconds=600, task_seconds=60, timeout_min=10, max_tasks=1001)
    assert len(groups) <= 1001 and sorted(i for g in groups for i in g) == list(range(1002))


def test_a_task_that_can_never_start_ends_the_wait_with_its_reason(slurm_cluster, tmp_path):
    """A task pending for a reason waiting cannot resolve (here DependencyNeverSatisfied: it depends on a
    job that failed) ends the wait within a minute with that reason, and its array is cancelled."""
    failed = subprocess.run(["sbatch", "--parsable", "--output=/dev/null", "--wrap", "exit 1"], capture_output=True,
                            text=True, check=True,
                            timeout=30).stdout.strip().split(";")[0]
    wait_finished([failed], timeout=120)
    start = time.monotonic()
    proc = run_cli(tmp_path, "train", "-m", *SWEEP, *SLURM, f"paths.outputs={tmp_path}",
                   f"+hydra.launcher.additional_parameters.dependency=afterok:{failed}", timeout=SWEEP_TIMEOUT_S)
    try:
        assert time.monotonic() - start < 90
        assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
        assert "DependencyNeverSatisfied" in proc.stdout and "cancelled" in proc.stdout
        states = wait_finished(task_ids(tmp_path), timeout=60)
        assert all(s.state == "CANCELLED" for s in states.values()), states
    finally:
        cancel_all(tmp_path)


# --- the cluster's limits as attnrepro.jobs.cluster reads them, against the scheduler ---------------


def sbatch(*args: str, timeout: float = 15) -> subprocess.CompletedProcess:
    return subprocess.run(["sbatch", *args, "-o", "/dev/null", "--wrap", "true"], capture_output=True, text=True,
                          timeout=timeout)


def test_real_limits_agree_with_sinfo():
    limits = cluster_limits()
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %P %c %m"], capture_output=True, text=True, timeout=10,
                         check=True).stdout
    for node, part, cpus, mem in (ln.split() for ln in out.splitlines()):
        p = limits[part.rstrip("*")]
        assert p.default == part.endswith("*")
        i = p.nodes.index(node)
        assert p.cpus_per_node[i] <= int(cpus) and p.mem_per_node_mb[i] <= int(mem)


def impossible(p: PartitionLimits) -> dict:
    """Per kind, a request that the default partition p cannot run, and the sbatch options that ask it."""
    cases = {
        "cpus": (dict(cpus_per_task=p.max_cpus_per_node + 1), ["-c", str(p.max_cpus_per_node + 1)]),
        "memory": (dict(mem_gb=p.max_mem_per_node_mb // 1024 + 1), [f"--mem={p.max_mem_per_node_mb // 1024 + 1}G"]),
        "array": (dict(array_size=p.max_array_size + 1), [f"--array=0-{p.max_array_size}"]),
    }
    if p.max_time_min is not None:
        cases["timeout"] = (dict(timeout_min=p.max_time_min + 1), [f"--time={p.max_time_min + 1}"])
    if not any(parse_gres(g) for g in p.gres_per_node):
        cases["gres"] = (dict(gres="gpu:1"), ["--gres=gpu:1"])
    return cases


@pytest.mark.parametrize("kind", ["cpus", "memory", "timeout", "gres", "array"])
def test_each_impossible_request_on_the_real_cluster(kind):
    """check_request gives one line, and the scheduler agrees: sbatch refuses it, or (over MaxTime, with
    EnforcePartLimits=NO) accepts it and leaves it PENDING with a reason queue_state calls hopeless."""
    limits = cluster_limits()
    (p,) = [p for p in limits.values() if p.default]
    cases = impossible(p)
    if kind not in cases:
        pytest.skip(f"partition {p.name} has {'no MaxTime' if kind == 'timeout' else 'GPUs'}: nothing to exceed")
    change, options = cases[kind]
    base = dict(cpus_per_task=1, mem_gb=1, timeout_min=min(10, p.max_time_min or 10))
    assert check_request(Request(**base), limits) == [] and sbatch("--test-only", "-c", "1", "--mem=1G").returncode == 0
    lines = check_request(Request(**{**base, **change}), limits)
    assert len(lines) == 1, lines
    if kind != "timeout":
        proc = sbatch("--test-only", *options)
        assert proc.returncode != 0, f"sbatch accepted {options}: {proc.stdout}{proc.stderr}"
        return
    proc = sbatch("--parsable", "-c", "1", "--mem=1G", *options)
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.strip().split(";")[0]
    try:
        end = time.monotonic() + 20
        while not (state := queue_state([job])[job]).hopeless and time.monotonic() < end:
            time.sleep(0.5)
        # at submission the reason is PartitionConfig, the scheduler's next pass makes it PartitionTimeLimit
        assert state.state == "PENDING" and state.reason in ("PartitionConfig", "PartitionTimeLimit"), state
    finally:
        subprocess.run(["scancel", job], capture_output=True, timeout=10)
