"""glibc's allocator settings of a process that runs jobs (jobs.environment.keep_freed_memory)."""

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
