"""A running job's heartbeat: a line saying it still runs, every PROGRESS_S seconds until it ends."""

from __future__ import annotations

import contextlib
import threading
import time

PROGRESS_S = 60.0  # a running job says so every this many seconds


@contextlib.contextmanager
def still_running(label: str):
    """Print '<label>: running, <t> s' every PROGRESS_S seconds until the block ends (from a thread: the
    training code, whose edits make records stale, stays as it is)."""
    done, t0 = threading.Event(), time.perf_counter()

    def beat():
        while not done.wait(PROGRESS_S):
            print(f"{label}: running, {time.perf_counter() - t0:.0f} s", flush=True)

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
