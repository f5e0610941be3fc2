"""Process lifetime: one `reproduce` per outputs folder, and workers that die with their parent."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from attnrepro.jobs.lifetime import Busy, OutputsLock
from sweep_tools import ROOT, run_cli, wait_until

HOLD = """
import sys, time
from attnrepro.jobs.lifetime import OutputsLock
lock = OutputsLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(60)
"""

# a parent that starts a child which asks to die with it, prints the child's pid, then waits
PARENT = """
import subprocess, sys, time
from attnrepro.jobs.lifetime import die_with_parent
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], preexec_fn=die_with_parent)
print(child.pid, flush=True)
time.sleep(60)
"""


def _python(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=ROOT, stdout=subprocess.PIPE, text=True)


def test_a_second_reproduce_on_the_same_outputs_stops_at_once_naming_the_first(tmp_path):
    """While a process holds the outputs folder's lock, OutputsLock raises Busy naming it, and `reproduce`
    exits 2 with that one line before doing anything; once the holder is gone (kill -9), the lock is free."""
    holder = _python(HOLD, str(tmp_path))
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(Busy, match=f"pid {holder.pid}"):
            OutputsLock(tmp_path).acquire()
        proc = run_cli(tmp_path, "reproduce", "profile=smoke", f"outputs={tmp_path}", timeout=120)
        assert proc.returncode == 2 and f"is in use by attnrepro reproduce, pid {holder.pid}" in proc.stderr
        assert not (tmp_path / "runs").exists()
    finally:
        holder.kill()
        holder.wait()
    with OutputsLock(tmp_path) as lock:
        assert lock.fd is not None


def test_a_worker_dies_with_its_parent():
    """die_with_parent: kill -9 of the parent, and the child exits too (SIGTERM from the kernel)."""
    parent = _python(PARENT)
    child = int(parent.stdout.readline())
    parent.kill()
    parent.wait()

    def gone() -> bool:
        try:
            with open(f"/proc/{child}/stat") as f:
                return f.read().split(") ")[1].startswith("Z")  # a zombie until init reaps it
        except FileNotFoundError:
            return True

    start = time.monotonic()
    wait_until(gone, timeout=10)
    assert time.monotonic() - start < 10
