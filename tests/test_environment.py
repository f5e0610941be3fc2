"""A process that runs jobs: glibc's allocator settings (jobs.environment.keep_freed_memory) and the collection of
each job's reference cycles (jobs.environment.free_cycles)."""

import ctypes
import json
import os
import platform
import subprocess
import sys

import pytest

# In a fresh process, with or without the settings: malloc 16 MiB, then free it; glibc's own account
# (mallinfo2) of the bytes in mmapped blocks after the malloc and of the heap after the free
BLOCK = """
import ctypes, json, sys
from attnrepro.jobs.environment import keep_freed_memory

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.free.argtypes, libc.mallinfo2.restype = ctypes.c_void_p, [ctypes.c_void_p], MallInfo2
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
p = libc.malloc(16 << 20)
ctypes.memset(p, 1, 16 << 20)
mmapped = libc.mallinfo2().hblkhd
libc.free(p)
print(json.dumps({"kept": kept, "mmapped": mmapped, "heap_after_free": libc.mallinfo2().arena}))
"""


def _mallinfo2() -> bool:
    return platform.libc_ver()[0] == "glibc" and hasattr(ctypes.CDLL("libc.so.6"), "mallinfo2")


@pytest.mark.skipif(not _mallinfo2(), reason="mallopt's settings are glibc's; mallinfo2 needs glibc >= 2.33")
def test_a_process_that_runs_jobs_takes_blocks_from_its_heap_and_keeps_them():
    """By default glibc maps a fresh 16 MiB block from the kernel (and unmaps it when freed: a step's
    temporaries come back as new zeroed pages, 57k page faults in 50 steps of a tied-attention step at d = 100
    against 9k with the settings, docs/paper_profile.md); with them it comes from the heap, which keeps it."""
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES" and not k.startswith("MALLOC_")}

    def run(mode):
        out = subprocess.run([sys.executable, "-c", BLOCK, mode], env=env, capture_output=True, text=True,
                             check=True)
        return json.loads(out.stdout)

    default, keep = run("default"), run("keep")
    assert keep["kept"] is True
    assert default["mmapped"] >= 16 << 20 and keep["mmapped"] < 16 << 20
    assert keep["heap_after_free"] >= 16 << 20 > default["heap_after_free"]


# In a fresh process with Python's automatic collection off: two small training jobs (sparse XOR, GD on
# samples), then how many of Lightning's trainers, our modules and problems are still alive
JOBS = """
import gc, json, sys
gc.disable()
import pytorch_lightning as pl
from attnrepro.jobs import environment
from attnrepro.jobs.grid import compose
from attnrepro.jobs.training import run_job
from attnrepro.lit.replica import ReplicaModule
from attnrepro.papers.sparse_xor.problem import SampleSet

if sys.argv[2] == "off":
    environment.free_cycles = lambda: 0
    import attnrepro.jobs.job as job
    job.free_cycles = environment.free_cycles
for n in (2, 4):
    cfg = compose([f"paths.outputs={sys.argv[1]}", "experiment=xor_sample_complexity_trained", "task.d=16",
                   f"task.n_per_d={n}", "n_seeds=2", "train.steps=50"])
    assert run_job(cfg)["status"] == "complete"
alive = lambda cls: sum(isinstance(o, cls) for o in gc.get_objects())
print(json.dumps({"frozen": gc.get_freeze_count(), "trainers": alive(pl.Trainer), "modules": alive(ReplicaModule),
                  "samples": alive(SampleSet)}))
"""


def test_a_finished_job_leaves_no_trainer_module_or_data_behind(tmp_path):
    """Lightning's trainer, our module and the problem they hold form reference cycles that Python's collector
    takes only at a full collection, many jobs later: the process grew by each job's data (7.3 GB against 1.9
    in xor_sample_complexity's quick sweep). After Job.execute none is left; without free_cycles every job's is."""

    def run(mode):
        out = subprocess.run([sys.executable, "-c", JOBS, str(tmp_path / mode), mode], capture_output=True,
                             text=True)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    freed, kept = run("on"), run("off")
    assert freed == {"frozen": freed["frozen"], "trainers": 0, "modules": 0, "samples": 0} and freed["frozen"] > 0
    assert kept["trainers"] == 2 and kept["modules"] >= 2 and kept["samples"] >= 4  # each job's
