"""Tracking (W&B offline, the report run, no secret anywhere) and scale-out (submitit launchers)."""

from __future__ import annotations

import json
import math
import struct
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from attnrepro.jobs import tracking
from attnrepro.jobs.records import read_record, record_path
from attnrepro.jobs.training import job_key, run_job
from sweep_tools import ROOT, run_train, valid_records, wandb_dirs

SECRET = "dummy-secret-value-123"
SMOKE = ("experiment=xor_phase_dm", "profile=smoke")


# --- reading W&B offline runs back ------------------------------------------------------------
# An offline run is <dir>/offline-run-*/run-<id>.wandb, wandb-core's transaction log: a LevelDB-style
# log (7-byte file header, 32 KiB blocks, chunks of crc32 + length + type + data, the crc32 (IEEE)
# over type and data) of wandb_internal_pb2.Record messages, the exit record last. wandb 0.31 has no
# Python reader of it (wandb sync reads it in wandb-core, in Go: core/pkg/leveldb/record.go).

BLOCK, HEADER = 32768, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def _chunks(data: bytes):
    """(type, payload) of every chunk of a .wandb file; raises when a chunk is cut short or its
    checksum does not match (a file read before W&B wrote it whole)."""
    assert data[:4] == b":W&B", "not a W&B run file"
    pos = HEADER
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        crc, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER]) if left >= HEADER else (0, 0, 0)
        if kind == 0:  # block trailer or padding
            pos += left
            continue
        end = pos + HEADER + length
        if end > len(data) or zlib.crc32(data[pos + HEADER - 1:end]) != crc:
            raise ValueError(f"chunk at byte {pos} cut short or corrupt ({len(data)} bytes read)")
        yield kind, data[pos + HEADER:end]
        pos = end


def wandb_records(path: Path):
    """The protobuf Records of a .wandb file, fragments joined."""
    from wandb.proto import wandb_internal_pb2 as pb

    buf = b""
    for kind, payload in _chunks(path.read_bytes()):
        buf = payload if kind in (FULL, FIRST) else buf + payload
        if kind in (FULL, LAST):
            rec = pb.Record()
            rec.ParseFromString(buf)
            buf = b""
            yield rec


def _items(updates) -> dict:
    """{key: value} of config, summary or history items; nested keys joined by '/'."""
    return {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in updates}


@dataclass
class OfflineRun:
    folder: Path
    name: str = ""
    group: str = ""
    job_type: str = ""
    config: dict = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    history: list = field(default_factory=list)
    exit_code: int | None = None  # None: no exit record (the run did not finish)


def read_offline_run(folder: Path) -> OfflineRun:
    """Name, group, job type, config, summary, history and exit code of one offline run folder.
    Raises when the transaction log is incomplete (read before W&B closed it)."""
    (path,) = folder.glob("run-*.wandb")
    run = OfflineRun(folder)
    for rec in wandb_records(path):
        kind = rec.WhichOneof("record_type")
        if kind == "run":  # the run record; a later one may update only some fields
            run.name = rec.run.display_name or run.name
            run.group = rec.run.run_group or run.group
            run.job_type = rec.run.job_type or run.job_type
            run.config.update(_items(rec.run.config.update))
        elif kind == "config":
            run.config.update(_items(rec.config.update))
        elif kind == "summary":
            run.summary.update(_items(rec.summary.update))
        elif kind == "history":
            run.history.append(_items(rec.history.item))
        elif kind == "exit":
            run.exit_code = rec.exit.exit_code
    return run


def offline_runs(outputs: Path) -> list[OfflineRun]:
    return [read_offline_run(f) for f in sorted((outputs / "wandb").glob("offline-run-*"))]


# --- a smoke sweep with logger=wandb, offline, with an API key in the environment ------------


@pytest.fixture(scope="module")
def wandb_sweep(tmp_path_factory):
    """(outputs, process) of `train.py -m experiment=xor_phase_dm profile=smoke logger=wandb`."""
    outputs = tmp_path_factory.mktemp("wandb_sweep")
    proc = run_train(outputs, *SMOKE, "logger=wandb", env={"WANDB_MODE": "offline", "WANDB_API_KEY": SECRET})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return outputs, proc


def test_wandb_offline_sweep_one_run_per_job(wandb_sweep):
    """Every job is one W&B run, named by its key, in one group per sweep, with its resolved
    config, its curves and its final metrics."""
    outputs, proc = wandb_sweep
    records = valid_records(outputs, "xor_phase_dm")
    runs = offline_runs(outputs)
    assert len(records) == 4 and sorted(r.name for r in runs) == sorted(records)
    assert len({r.group for r in runs}) == 1 and runs[0].group.startswith("xor_phase_dm-")
    for run in runs:
        rec = records[run.name]
        assert run.job_type == "train" and run.config["key"] == run.name and run.exit_code == 0
        assert run.config["task"]["d"] == rec["config"]["task"]["d"] in (32, 128)
        assert run.config["model"]["m_c"] == rec["config"]["model"]["m_c"]
        assert run.summary["status"] == "complete"
        loss = rec["metrics"]["loss"]
        assert run.summary["final/loss/mean"] == pytest.approx(math.fsum(loss) / len(loss))
        assert run.summary["final/loss/seed0"] == pytest.approx(loss[0])
        steps = [row["_step"] for row in run.history if "loss/mean" in row]
        assert steps == rec["curves"]["step"]
    banner = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("wandb:")]
    assert not banner, banner[:5]  # quiet: no W&B console output


def test_no_secret_in_any_output(wandb_sweep):
    """WANDB_API_KEY was set for the sweep: its value is in no file under outputs, nor in the console."""
    outputs, proc = wandb_sweep
    files = [p for p in outputs.rglob("*") if p.is_file()]
    assert any(p.name == "record.json" for p in files) and any(p.suffix == ".wandb" for p in files)
    leaks = [p for p in files if SECRET.encode() in p.read_bytes()]
    assert not leaks, f"secret found in {leaks}"
    assert SECRET not in proc.stdout + proc.stderr


# --- the report run -----------------------------------------------------------------------------


def _png(path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [1, 0])
    fig.savefig(path)
    plt.close(fig)
    return path


def test_log_report_offline(tmp_path, monkeypatch, caplog):
    """Figures and the claims table go to one run of job_type 'report' in the given group, whose
    files are complete when log_report returns (the only warning: the missing figure)."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    for var, folder in wandb_dirs(tmp_path).items():
        monkeypatch.setenv(var, folder)
    figures = {"phase": _png(tmp_path / "phase.png"), "loss": _png(tmp_path / "loss.png"),
               "missing": tmp_path / "nope.png"}
    claims = [{"figure": "phase", "claim": "m ~ log2(d)^2", "measured": 1.02,
               "uncertainty": "95% CI [0.9, 1.1]", "holds": True, "detail": ""},
              {"figure": "loss", "claim": "loss < 0.01", "measured": float("nan"), "uncertainty": "",
               "holds": False, "detail": "not enough data"}]
    with caplog.at_level("WARNING", logger=tracking.__name__):
        folder = tracking.log_report(tmp_path, figures, claims, group="report-test")
    assert [r.getMessage() for r in caplog.records] == [f"figure missing: no file at {figures['missing']}, not logged"]
    assert folder and Path(folder).parent == tmp_path / "wandb"
    run = read_offline_run(Path(folder))  # at once: log_report returns with the run's files complete
    assert run.exit_code == 0, "no exit record: the transaction log was read before W&B wrote it whole"
    assert (run.job_type, run.group) == ("report", "report-test")
    logged = {k: v for row in run.history for k, v in row.items()}
    assert logged["figures/phase/_type"] == logged["figures/loss/_type"] == "image-file"
    assert (Path(folder) / "files" / logged["figures/phase/path"]).is_file()
    assert not any(k.startswith("figures/missing") for k in logged)
    assert logged["claims/_type"] == "table-file"
    table = json.loads((Path(folder) / "files" / logged["claims/path"]).read_text())
    assert len(table["data"]) == 2 and "claim" in table["columns"]
    assert run.summary["claims/total"] == 2 and run.summary["claims/holding"] == 1


def test_claims_frame_accepts_dataframe_and_rows():
    import pandas as pd

    rows = [{"claim": "a", "measured": 1.0, "holds": True}, {"claim": "b", "measured": "n/a", "holds": False}]
    from_rows, from_frame = tracking.claims_frame(rows), tracking.claims_frame(pd.DataFrame(rows))
    assert list(from_rows["measured"]) == list(from_frame["measured"]) == ["1.0", "n/a"]  # mixed -> text


# --- W&B is never required --------------------------------------------------------------------


def test_report_without_wandb_is_a_no_op(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError
    assert tracking.log_report(tmp_path, {}, [], group="g", mode="offline") is None
    assert tracking.log_report(tmp_path, {}, [], group="g", mode="disabled") is None


def test_wandb_failure_never_fails_the_job(job_config, monkeypatch):
    """wandb.init raising (online, then the offline retry): the job completes with its record and
    CSV; the next job of the process does not try online again."""
    import wandb

    tried = []

    def broken_init(**kwargs):
        tried.append(kwargs["mode"])
        raise RuntimeError("no network")

    monkeypatch.setattr(wandb, "init", broken_init)
    monkeypatch.setattr(tracking, "_online_failed", False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    for d, modes in [(16, ["online", "offline"]), (17, ["offline"])]:
        tried.clear()
        cfg, _ = job_config("experiment=xor_phase_dm", f"task.d={d}", "n_seeds=1", "logger=wandb")
        assert run_job(cfg)["status"] == "complete"
        assert tried == modes
        path = record_path(cfg.paths.outputs, cfg.experiment, job_key(cfg))
        assert read_record(path)["status"] == "complete" and (path.parent / "curves.csv").is_file()


@pytest.mark.parametrize("env,netrc,expected", [
    ({}, False, "offline"),
    ({"WANDB_API_KEY": "k"}, False, "online"),
    ({}, True, "online"),
    ({"WANDB_API_KEY": "k", "WANDB_MODE": "offline"}, False, "offline"),
    ({"WANDB_MODE": "disabled"}, True, "disabled"),
])
def test_wandb_mode_auto(tmp_path, monkeypatch, env, netrc, expected):
    """auto: WANDB_MODE if set, else online when logged in (API key or netrc), else offline."""
    for var in ("WANDB_API_KEY", "WANDB_MODE"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    rc = tmp_path / "netrc"
    rc.write_text("machine api.wandb.ai\n  login user\n  password k\n" if netrc else "")
    monkeypatch.setenv("NETRC", str(rc))
    assert tracking.wandb_mode("auto") == expected
    assert tracking.wandb_mode("offline") == "offline"


# --- scale-out: submitit launchers ----------------------------------------------------------------


def test_submitit_local_gives_the_basic_launchers_records(wandb_sweep, tmp_path):
    """The same jobs through submitit's local executor (one process per job) give the same keys and
    the same numbers as the basic launcher (the wandb_sweep above: the logger is not in the key)."""
    proc = run_train(tmp_path, *SMOKE, "task.d=32", "hydra/launcher=local")
    assert proc.returncode == 0, proc.stderr[-3000:]
    submitit = valid_records(tmp_path, "xor_phase_dm")
    basic = valid_records(wandb_sweep[0], "xor_phase_dm")
    assert len(submitit) == 2 and set(submitit) <= set(basic)
    for key, rec in submitit.items():
        assert rec["status"] == "complete"
        assert (rec["metrics"], rec["curves"]) == (basic[key]["metrics"], basic[key]["curves"])
    assert list((tmp_path / "hydra" / "xor_phase_dm").glob("*/.submitit/*/*_log.out"))


@pytest.mark.parametrize("launcher,gpu_line", [("slurm_gpu", "#SBATCH --gpus-per-node=1"), ("slurm", None)])
def test_slurm_launcher_writes_the_sbatch_script(tmp_path, monkeypatch, launcher, gpu_line):
    """hydra/launcher=slurm[_gpu] drives submitit's SLURM executor with our options (jobs.slurm.executor; the
    sbatch script rendered, nothing submitted): the CPU default asks no GPU, slurm_gpu one."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from attnrepro.config import register_configs
    from attnrepro.jobs import slurm

    (tmp_path / "srun").write_text("#!/bin/sh\nexit 1\n")
    (tmp_path / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{Path(sys.executable).parent}:/usr/bin:/bin")
    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", return_hydra_config=True, overrides=[
            *SMOKE, f"hydra/launcher={launcher}", "hydra.launcher.partition=gpu",
            "hydra.launcher.timeout_min=120", "hydra.launcher.array_parallelism=8"])
    ex = slurm.executor(OmegaConf.to_container(cfg.hydra.launcher, resolve=True), tmp_path / "sub")
    script = ex._executor._make_submission_file_text("python job.py", "uid")
    for line in ("#SBATCH --partition=gpu", "#SBATCH --time=120", "#SBATCH --job-name=xor_phase_dm",
                 "export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK"):
        assert line in script
    assert ex._executor.parameters["array_parallelism"] == 8
    assert (gpu_line in script) if gpu_line else ("gpus" not in script)
