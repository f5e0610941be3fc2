"""Helpers of the end-to-end tests: run `attnrepro train` in a subprocess, read its records back."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from attnrepro.jobs.records import CorruptRecord, scan

ROOT = Path(__file__).resolve().parents[1]
# `attnrepro train` whose first job runs and every later one waits for ever (before its training starts),
# so that a test can kill a sweep with exactly one record written, however busy the machine.
GATED_TRAIN = """
import sys, time
import attnrepro.jobs.fit as fit_module
real_fit, calls = fit_module.fit, []
def gated_fit(*args, **kwargs):
    calls.append(1)
    while len(calls) > 1:
        time.sleep(60)
    return real_fit(*args, **kwargs)
fit_module.fit = gated_fit
from attnrepro.cli import main
sys.exit(main(["train", *sys.argv[1:]]))
"""

# "[experiment] job 3/6 <overrides>: complete in 0.2s (<key>)", or ": done before, skipped (<key>)"
JOB_LINE = re.compile(r": (complete|done before, skipped|FAILED \(.*\))(?: in [\d.]+s)? \(([0-9a-f]{16})\)$")


def train_env(outputs: Path, **extra: str) -> dict:
    """The environment of a training subprocess: outputs under `outputs`, no inherited W&B or
    attnrepro settings, one thread (the test machines are small), this checkout's src/ first on
    the import path (whether or not the package is installed)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "ATTNREPRO_"))}
    env.update(ATTNREPRO_OUTPUTS=str(outputs), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **wandb_dirs(outputs))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.update(extra)
    return env


def wandb_dirs(root: Path) -> dict:
    """W&B's config, cache and data (artifact staging) folders under root, not under $HOME."""
    return {f"WANDB_{what.upper()}_DIR": str(root / f".wandb-{what}") for what in ("config", "cache", "data")}


def cli_cmd(command: str, *args: str) -> list[str]:
    """The command line of `attnrepro <command> <args>` (python -m attnrepro: no install needed)."""
    return [sys.executable, "-m", "attnrepro", command, *args]


def run_cli(outputs: Path, command: str, *args: str, env: dict | None = None,
            timeout: float = 900) -> subprocess.CompletedProcess:
    """Run `attnrepro <command> <args>` with outputs under `outputs`; output captured as text."""
    return subprocess.run(cli_cmd(command, *args), cwd=ROOT, capture_output=True, text=True,
                          env=train_env(outputs, **(env or {})), timeout=timeout)


def train_cmd(*overrides: str, multirun: bool = True, gated: bool = False) -> list[str]:
    """The command line of `attnrepro train` (-m unless multirun=False); gated: only its first job runs."""
    args = [*(["-m"] if multirun else []), *overrides]
    if gated:
        return [sys.executable, "-c", GATED_TRAIN, *args]
    return cli_cmd("train", *args)


def run_train(outputs: Path, *overrides: str, multirun: bool = True, env: dict | None = None,
              timeout: float = 240) -> subprocess.CompletedProcess:
    """Run `attnrepro train` to the end; stdout and stderr captured as text."""
    return subprocess.run(train_cmd(*overrides, multirun=multirun), cwd=ROOT, capture_output=True, text=True,
                          env=train_env(outputs, **(env or {})), timeout=timeout)


def start_train(outputs: Path, *overrides: str, multirun: bool = True, gated: bool = False,
                env: dict | None = None) -> subprocess.Popen:
    """Start `attnrepro train` without waiting; its output goes to a log file beside outputs."""
    outputs.mkdir(parents=True, exist_ok=True)
    log = open(outputs.parent / f".{outputs.name}-{time.monotonic_ns()}.log", "w")
    proc = subprocess.Popen(train_cmd(*overrides, multirun=multirun, gated=gated), cwd=ROOT, text=True,
                            env=train_env(outputs, **(env or {})), stdout=log, stderr=subprocess.STDOUT)
    proc.log_path = Path(log.name)  # type: ignore[attr-defined]
    log.close()
    return proc


def output_of(proc: subprocess.Popen) -> str:
    """The combined output of a process started by start_train."""
    return proc.log_path.read_text()  # type: ignore[attr-defined]


def wait_until(condition: Callable[[], bool], timeout: float, every: float = 0.05) -> None:
    """Poll condition() until it holds; fail the test after timeout seconds."""
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(every)


def job_lines(stdout: str) -> dict[str, str]:
    """{key: 'complete' | 'skipped' | 'failed'} from a sweep's per-job lines."""
    out = {}
    for line in stdout.splitlines():
        m = JOB_LINE.search(line)
        if m:
            status = m.group(1)
            out[m.group(2)] = "skipped" if "skipped" in status else "failed" if "FAILED" in status else status
    return out


def valid_records(outputs: Path, experiment: str) -> dict[str, dict]:
    """{key: record} of every record of the experiment; fails on a corrupt one, a record in a
    folder not named by its key, or a temp file left beside a record."""
    records = {}
    for path, rec in scan(outputs, experiment):
        assert not isinstance(rec, CorruptRecord), rec
        assert rec["key"] == path.parent.name, f"{path}: key {rec['key']}"
        records[rec["key"]] = rec
    return records


def leftover_temp_files(outputs: Path) -> list[Path]:
    """Temp files of atomic writes (.record.*.tmp, .curves.*.tmp) under outputs/runs."""
    return sorted((outputs / "runs").rglob(".*.tmp"))
