"""The software environment of a training process: the package versions its records name, full fp32
matmuls on CUDA (no TF32), set before it trains, glibc's allocator settings of a process that runs jobs, and
the collection of what each job leaves in reference cycles."""

from __future__ import annotations

import functools
import gc
import platform

# glibc's malloc in a process that runs jobs (mallopt): freed memory stays with the process (trim threshold 2 GiB,
# 256 MiB more taken each time the heap grows) and blocks up to 32 MiB (the most glibc allows) come from the
# heap, not a fresh mmap. By default the temporaries of a step, a few MiB each, go back to the kernel when freed
# and return as fresh zeroed pages: tied_error_vs_alpha's quick sweep spent 16 s of kernel time beside its
# 280 core-s, 1.7 s with these settings, and its claims are the same byte for byte.
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
MALLOC_SETTINGS = {M_TRIM_THRESHOLD: 2**31 - 1, M_TOP_PAD: 2**28, M_MMAP_THRESHOLD: 2**25}


@functools.cache
def keep_freed_memory() -> bool:
    """Set MALLOC_SETTINGS in this process, once (glibc only; elsewhere nothing); whether they were set.
    Job.execute calls it before every job."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    import ctypes

    libc = ctypes.CDLL("libc.so.6")
    return all(libc.mallopt(param, value) == 1 for param, value in MALLOC_SETTINGS.items())


_frozen = False  # free_cycles froze this process's objects


def free_cycles() -> int:
    """Collect the reference cycles a finished job leaves (Lightning's trainer, its module and the problem
    they hold, with the job's data) now, not at Python's next full collection, many jobs later; the number of
    objects freed. Job.execute calls it after every job. The first call freezes what survives it (the imports
    and caches of the process: gc.freeze), so that later calls walk only what the jobs made since (a full
    collection took 0.16 s, these about 1 ms). xor_sample_complexity's quick sweep (36 jobs in one process)
    grew to 7.3 GB without it, against 1.9 GB with it, and spent 24.6 s of kernel time on fresh pages against
    6.4 s (50 s against 33 s wall time; its records are the same). Whether the freeze was made is this module's
    flag, not gc.get_freeze_count(), which walks every frozen object (30-50 ms a call in a sweep worker)."""
    global _frozen
    freed = gc.collect()
    if not _frozen:
        gc.freeze()
        _frozen = True
    return freed


def versions() -> dict:
    """{python and each package a record names: its version} (None: not installed); read once per process
    (7 ms a job otherwise)."""
    return dict(_versions())


@functools.cache
def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("attnrepro", "torch", "pytorch-lightning", "hydra-core", "omegaconf", "numpy"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def full_fp32_matmuls() -> None:
    """fp32 matmuls in full fp32 on CUDA, never TF32 (10-bit mantissa, ~1e-3 relative rounding): the
    ridgeless recovery of paper B reaches estimation errors of 1e-8. No effect on CPU."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
