"""Robustness of sweeps: SIGKILL and resume, corrupt records, determinism across processes,
concurrent sweeps, divergence, impossible parameters (fail before any work)."""

from __future__ import annotations

import csv
import importlib
import json
import shutil
import sys

import pytest

from attnrepro.jobs.grid import expected_jobs
from attnrepro.jobs.records import CorruptRecord, scan
from sweep_tools import (
    ROOT,
    job_lines,
    leftover_temp_files,
    output_of,
    run_cli,
    run_train,
    start_train,
    valid_records,
    wait_until,
)

VARIANTS = "xor_attention_variants"
# 6 jobs of ~0.1 s; on CPU even where a GPU is (determinism is checked on these records)
VARIANTS_SMALL = (f"experiment={VARIANTS}", "profile=smoke", "task.d=16", "trainer.accelerator=cpu")
PHASE_SMOKE = ("experiment=xor_phase_dm", "profile=smoke")  # 4 jobs


# --- SIGKILL in the middle of a sweep, then the same sweep again ------------------------------


@pytest.fixture(scope="module")
def killed_then_resumed(tmp_path_factory):
    """A 6-job sweep whose jobs after the first wait for ever, killed with SIGKILL once its first record
    exists, a half-written temp record planted as a kill during a write would leave it, then the sweep again."""
    outputs = tmp_path_factory.mktemp("killed")
    expected = {key for _, key in expected_jobs(VARIANTS, "smoke", list(VARIANTS_SMALL[2:]))}
    proc = start_train(outputs, *VARIANTS_SMALL, gated=True)
    runs = outputs / "runs" / VARIANTS
    try:
        wait_until(lambda: any(runs.glob("*/record.json")), timeout=120)
    finally:
        proc.kill()  # SIGKILL
        proc.wait()
    done_before = set(valid_records(outputs, VARIANTS))
    pending = sorted(expected - done_before)
    (runs / pending[0]).mkdir(parents=True, exist_ok=True)
    (runs / pending[0] / ".record.killed.tmp").write_text('{"schema": 1, "key": "' + pending[0][:5])
    resumed = run_train(outputs, *VARIANTS_SMALL)
    return dict(outputs=outputs, expected=expected, done_before=done_before, killed=proc,
                killed_output=output_of(proc), resumed=resumed)


def test_sigkill_then_resume_completes_every_job_once(killed_then_resumed):
    """The kill landed mid-sweep; the second sweep skips the jobs done, runs the rest, and leaves
    exactly one complete, parseable record per key (the planted temp file is not a record)."""
    k = killed_then_resumed
    assert k["killed"].returncode == -9
    assert len(k["done_before"]) == 1, k["killed_output"][-2000:]
    assert k["resumed"].returncode == 0, k["resumed"].stderr[-3000:]
    lines = job_lines(k["resumed"].stdout)
    assert {key for key, s in lines.items() if s == "skipped"} == k["done_before"]
    assert {key for key, s in lines.items() if s == "complete"} == k["expected"] - k["done_before"]
    records = valid_records(k["outputs"], VARIANTS)
    assert set(records) == k["expected"] and len(list(scan(k["outputs"], VARIANTS))) == len(k["expected"])
    assert all(rec["status"] == "complete" for rec in records.values())
    # the kill may land while job 1 writes curves.csv (after its record): only record temp files count
    assert [p.name for p in leftover_temp_files(k["outputs"]) if p.name.startswith(".record.")] == [
        ".record.killed.tmp"]


@pytest.fixture(scope="module")
def rerun_after_corruption(killed_then_resumed, tmp_path_factory):
    """A copy of the resumed outputs with one record truncated, one emptied to '{}', and two complete
    records whose metrics are {} and null, what scan reported then, and the same sweep run again (a new
    process)."""
    outputs = tmp_path_factory.mktemp("corrupt") / "outputs"
    shutil.copytree(killed_then_resumed["outputs"], outputs)
    before = valid_records(outputs, VARIANTS)
    truncated, emptied, no_metrics, null_metrics = sorted(before)[:4]
    path = outputs / "runs" / VARIANTS / truncated / "record.json"
    path.write_text(path.read_text()[: len(path.read_text()) // 2])
    (outputs / "runs" / VARIANTS / emptied / "record.json").write_text("{}")
    for key, metrics in ((no_metrics, {}), (null_metrics, None)):
        path = outputs / "runs" / VARIANTS / key / "record.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "metrics": metrics}))
    found = {p.parent.name: rec for p, rec in scan(outputs, VARIANTS)}
    again = run_train(outputs, *VARIANTS_SMALL)
    return dict(outputs=outputs, before=before, corrupted={truncated, emptied, no_metrics, null_metrics},
                found=found, again=again)


def test_corrupt_records_are_reported_and_run_again(rerun_after_corruption):
    """scan reports the truncated and the emptied records, and those without metrics, as CorruptRecord
    (the others as records); the next sweep runs exactly those four jobs again and skips the rest."""
    r = rerun_after_corruption
    assert {key for key, rec in r["found"].items() if isinstance(rec, CorruptRecord)} == r["corrupted"]
    assert len(r["found"]) == len(r["before"])
    assert r["again"].returncode == 0, r["again"].stderr[-3000:]
    lines = job_lines(r["again"].stdout)
    assert {key for key, s in lines.items() if s == "complete"} == r["corrupted"]
    assert {key for key, s in lines.items() if s == "skipped"} == set(r["before"]) - r["corrupted"]
    assert set(valid_records(r["outputs"], VARIANTS)) == set(r["before"])


def test_same_config_same_numbers_in_two_processes(rerun_after_corruption):
    """The four re-run jobs (GD, 3 seeds, on CPU) were first run by the resumed sweep's process and
    now by another: identical metrics, curves and arrays, bit for bit."""
    r = rerun_after_corruption
    after = valid_records(r["outputs"], VARIANTS)
    for key in r["corrupted"]:
        first, second = r["before"][key], after[key]
        assert first["status"] == second["status"] == "complete"
        assert second["started"] != first["started"] or second["timings"] != first["timings"]  # a new run
        for part in ("metrics", "curves", "arrays", "derived", "fit"):
            assert json.dumps(first.get(part)) == json.dumps(second.get(part)), part


# --- two sweeps of the same experiment at once -------------------------------------------------


def test_concurrent_sweeps_do_not_collide(tmp_path):
    """Two sweeps started together: distinct Hydra sweep folders, both succeed, and every record
    (raced on: both run the same keys) is complete and valid, its curves.csv whole."""
    procs = [start_train(tmp_path, *PHASE_SMOKE, "task.d=32") for _ in range(2)]
    for proc in procs:
        assert proc.wait(timeout=240) == 0, output_of(proc)[-3000:]
    sweeps = sorted((tmp_path / "hydra" / "xor_phase_dm").iterdir())
    assert len(sweeps) == 2 and all((s / "multirun.yaml").is_file() for s in sweeps)
    assert all(sorted(p.name for p in s.iterdir() if p.is_dir()) == ["0", "1"] for s in sweeps)
    records = valid_records(tmp_path, "xor_phase_dm")
    assert len(records) == 2 and all(r["status"] == "complete" for r in records.values())
    for key, rec in records.items():
        with open(tmp_path / "runs" / "xor_phase_dm" / key / "curves.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        n_values = sum(len(v) for name, series in rec["curves"].items() if name != "step" for v in series)
        assert len(rows) == n_values
    assert not leftover_temp_files(tmp_path)
    for proc in procs:  # each sweep accounted for both jobs, run or skipped, and says it ended complete
        out = output_of(proc)
        assert set(job_lines(out)) == set(records)
        assert "[xor_phase_dm] sweep complete: the 2 jobs to run have their records" in out


# --- divergence: the job fails with its reason, the sweep goes on ------------------------------


def test_divergence_fails_its_job_and_the_sweep_goes_on(tmp_path):
    """A huge step size makes linear attention blow up (non-finite loss): that job is recorded
    failed with the reason, the next job of the same sweep completes, and the sweep exits 1 with the
    failed job in its last line; with accept_failed=true it exits 0."""
    sweep = (f"experiment={VARIANTS}", "profile=smoke", "model=linear", "model.init=antisymmetric", "task.d=16",
             "train.steps=10", "train.lr=1e6,0.1")
    proc = run_train(tmp_path, *sweep)
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert "1 of 2 jobs failed" in last and "train.lr=1000000.0" in last and "lr=0.1" not in last
    assert run_train(tmp_path, *sweep, "accept_failed=true").returncode == 0
    records = valid_records(tmp_path, VARIANTS)
    by_lr = {rec["config"]["train"]["lr"]: rec for rec in records.values()}
    failed, ok = by_lr[1e6], by_lr[0.1]
    assert failed["status"] == "failed" and "metrics" not in failed
    assert "Divergence" in failed["reason"] and "non-finite" in failed["reason"]
    assert ok["status"] == "complete"
    # linear attention from theta~ = -theta: an odd map, so theta~ = -theta all along and the loss stays
    # >= 1/4 (tests/test_sparse_xor.py), while GD at a small step still descends from its start
    m = ok["metrics"]
    assert len(m["loss"]) == 3 and all(0.25 <= v < v0 for v, v0 in zip(m["loss"], ok["curves"]["loss"][0]))
    assert m["mass_pq_tilde"] == pytest.approx([-v for v in m["mass_pq"]], abs=1e-12)
    assert sorted(job_lines(proc.stdout).values()) == ["complete", "failed"]
    assert "FAILED (Divergence" in proc.stdout


# --- impossible parameters: the sweep exits non-zero before any work --------------------------

PAPER_A_CASES = [
    ("task.d=1", "task.d"),
    ("task.d=32,1", "task.d"),  # one bad grid point: no job of the sweep runs
    ("model.m=0", "model.m"),
    ("task.n=0", "task.n"),
    ("train.lr=0", "train.lr"),
    ("train.lr=-1", "train.lr"),
    ("model.attention=sofmax", "model.attention"),
    ("grid.smoke={task.d:[]}", "task.d"),  # the experiment's grid entry made empty
    ("task.d=range(5,5)", "task.d"),  # a command-line sweep with no value
    ("grid.smoke.task.d=[]", "grid.smoke.task.d"),  # Hydra cannot address a dotted grid key: refused
    ("grid.smoke={}", "grid.smoke={}"),  # Hydra would merge it into the grid, not empty it: refused
    ("task.d=range(2,1002) model.m_c=range(1,1001)", "hydra.sweeper.max_jobs"),  # 10^6 jobs: refused at once
]
PAPER_B = ("profile=smoke", "task=attention_indexed", "model=tied_factorized")
PAPER_B_CASES = [("model.kappa=0", "model.kappa"), ("task.T=1", "task.T"), ("task.alpha=nan", "task.alpha"),
                 ("task.alpha=inf", "task.alpha"), ("model.lam=-inf", "model.lam")]


def _paper_b_ready() -> str | None:
    """None when paper B's schemas and config files exist, else why the cases are skipped."""
    try:
        importlib.import_module("attnrepro.papers.tied_attention.config")
    except Exception as e:
        return f"papers.tied_attention.config (paper-B schemas) is not importable yet: {type(e).__name__}: {e}"
    missing = [f for f in ("conf/task/attention_indexed.yaml", "conf/model/tied_factorized.yaml")
               if not (ROOT / f).is_file()]
    return f"paper-B config files missing: {missing}" if missing else None


def _assert_refused_before_work(outputs, overrides, field):
    proc = run_train(outputs, *overrides)
    message = proc.stdout + proc.stderr
    assert proc.returncode != 0, message[-2000:]
    assert field in message, message[-2000:]
    assert not list(outputs.rglob("record.json")) and not (outputs / "runs").exists()
    assert "Launching" not in message and "job 1/" not in message


@pytest.mark.parametrize("override,field", PAPER_A_CASES)
def test_impossible_values_fail_before_any_work(tmp_path, override, field):
    _assert_refused_before_work(tmp_path, [*PHASE_SMOKE, *override.split()], field)


@pytest.mark.parametrize("override,field", PAPER_B_CASES)
def test_impossible_paper_b_values_fail_before_any_work(tmp_path, override, field):
    reason = _paper_b_ready()
    if reason:
        pytest.skip(reason)
    _assert_refused_before_work(tmp_path, [*PAPER_B, override], field)


FAKE_WORKER = """
import json, sys
DONE = "@@attnrepro-sweep-done"
for line in sys.stdin:
    name = json.loads(line)[1].split("=", 1)[1]
    if name == "dies":
        print("[dies] about to crash", flush=True)
        sys.exit(3)
    print(f"[{name}] ran", flush=True)
    print(f"{DONE} {1 if name == 'fails' else 0}", flush=True)
"""


def test_a_dead_sweep_worker_fails_its_sweep_and_is_replaced(monkeypatch):
    """reproduce's sweep workers: a worker that dies during a sweep fails that sweep (with its exit
    status in the log) and a new worker runs the next one; a sweep that exits with an error fails alone."""
    from attnrepro.jobs import local_sweeps

    monkeypatch.setattr(local_sweeps.Worker, "COMMAND", (sys.executable, "-c", FAKE_WORKER))
    lines = []
    pending = {"dies": 3, "ok": 2, "fails": 1, "after": 0, "last": None}
    failed, times = local_sweeps.run_sweeps(pending, "smoke", [], "unused", 1, lines.append)
    assert failed == ["dies", "fails"] and set(times) == {"ok", "last"}
    log = "\n".join(lines)
    assert "[dies] the sweep worker exited with status 3 during the sweep" in log
    assert "[ok] ran" in log and "[last] ran" in log and "[after]" not in log  # 0 pending: not swept
    assert "=== ok: done" in log and "=== fails: FAILED" in log and "=== last: done" in log


def test_reproduce_starts_the_longest_sweeps_first(tmp_path):
    """Longest-processing-time order: unmeasured sweeps first (most jobs first), then by measured seconds
    scaled to the jobs still pending; done sweeps dropped; the table a run writes reads back."""
    from attnrepro.jobs import local_sweeps, sweep_seconds

    pending = {"short": 10, "long": 5, "half_done": 2, "new": 3, "newer": None, "done": 0}
    sizes = {"short": 10, "long": 5, "half_done": 4, "new": 3, "newer": 7, "done": 6}
    seconds = {"short": 20.0, "long": 100.0, "half_done": 150.0, "done": 500.0}
    assert local_sweeps.order(pending, sizes, seconds) == ["newer", "new", "long", "half_done", "short"]
    path = tmp_path / "sweep_seconds.csv"
    sweep_seconds.write_sweep_seconds(path, "quick", {"half_done": 30.0, "short": 50.0}, pending, sizes)
    assert sweep_seconds.read_sweep_seconds("quick", path) == {"half_done": 60.0, "short": 50.0}
    assert sweep_seconds.read_sweep_seconds("paper", path) == {}
    assert sweep_seconds.read_sweep_seconds("quick", tmp_path / "missing.csv") == {}
    assert sweep_seconds.read_sweep_seconds("quick", sweep_seconds.SWEEP_SECONDS)  # the committed table reads


# --- tables, status and report: written whole, rebuilt or named when broken ------------------


@pytest.fixture(scope="module")
def aggregated(tmp_path_factory):
    """xor_phase_dm's smoke sweep, aggregated and drawn (in this process)."""
    from attnrepro.commands.figures import render
    from attnrepro.report.aggregate import aggregate

    outputs = tmp_path_factory.mktemp("tables")
    assert run_train(outputs, *PHASE_SMOKE).returncode == 0
    aggregate(outputs, "smoke", ["xor_phase_dm"], log=lambda line: None)
    assert render(str(outputs), ["xor_phase_dm"], "smoke") == 0
    return outputs


def test_a_failed_table_write_keeps_the_earlier_table_and_leaves_no_temp_file(aggregated, tmp_path, monkeypatch):
    """A full disk while the aggregate writes: the earlier table stays whole, the figure's entry says the
    table was not written, and no temp file is left behind."""
    import errno

    import pandas as pd

    from attnrepro.report.aggregate import aggregate, table_path

    outputs = tmp_path / "outputs"
    shutil.copytree(aggregated, outputs)
    before = table_path(outputs, "xor_phase_dm").read_bytes()

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", full)
    status = aggregate(outputs, "smoke", ["xor_phase_dm"], log=lambda line: None)
    assert "table not written" in status["figures"]["xor_phase_dm"]["error"]
    assert "xor_phase_dm.parquet" in status["figures"]["xor_phase_dm"]["error"]  # the file meant, not a temp
    assert table_path(outputs, "xor_phase_dm").read_bytes() == before
    assert not list((outputs / "results").glob(".*.tmp"))


def test_a_truncated_status_is_rebuilt_and_a_truncated_table_named(aggregated, tmp_path):
    """figures with profile= rebuilds a truncated status.json from the records (without it: one line saying
    how); a truncated table is one error naming the file and how to rebuild it, not a traceback."""
    from attnrepro.report.aggregate import read_status, status_path, table_path

    outputs = tmp_path / "outputs"
    shutil.copytree(aggregated, outputs)
    path = status_path(outputs)
    path.write_text(path.read_text()[:200])
    bare = run_cli(outputs, "figures", "figures=xor_phase_dm", f"outputs={outputs}")
    assert bare.returncode == 2 and "status.json is unreadable" in bare.stderr and "profile=" in bare.stderr
    assert "Traceback" not in bare.stderr
    rebuilt = run_cli(outputs, "figures", "figures=xor_phase_dm", f"outputs={outputs}", "profile=smoke")
    assert rebuilt.returncode == 0, rebuilt.stderr[-2000:]
    assert read_status(outputs)["experiments"]["xor_phase_dm"]["complete"] == 4
    table = table_path(outputs, "xor_phase_dm")
    table.write_bytes(table.read_bytes()[:100])
    broken = run_cli(outputs, "figures", "figures=xor_phase_dm", f"outputs={outputs}", "profile=smoke")
    assert broken.returncode == 1 and "Traceback" not in broken.stderr
    assert f"{table} is unreadable" in broken.stderr and "attnrepro aggregate" in broken.stderr
