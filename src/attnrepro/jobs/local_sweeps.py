"""`reproduce`'s sweeps on this machine: the jobs each experiment has pending, the sweeps in
longest-processing-time order, run by a pool of sweep worker subprocesses (commands.sweep_worker), each
with cores / workers torch threads, and stopped with `reproduce`.

A worker runs the sweeps it is sent one after the other, importing torch, Lightning and Hydra once; one
that dies is replaced for the next sweep. The order comes from the measured sweep seconds
(jobs.sweep_seconds), scaled by the share of the grid still to run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor


def count_pending(name: str, profile: str, overrides: list[str], outputs: str, log) -> int | None:
    """The number of the experiment's jobs not done (None: the grid did not expand here). Before its first
    sweep (no cached expansion: the sweep composes every job anyway and caches them) the size of its grid."""
    from attnrepro.jobs.grid import expected_states, grid_size, is_cached

    try:
        if not is_cached(name, profile, overrides, outputs):
            return grid_size(name, profile)
        states = expected_states(name, profile, overrides, outputs)
    except Exception as e:  # the sweep itself reports a broken grid, with its reason
        log(f"[{name}] grid not expanded here ({type(e).__name__}: {e}); the sweep checks it")
        return None
    pending = sum(not s.done for _, _, s in states)
    if not pending:
        log(f"[{name}] all {len(states)} jobs done before, nothing to run")
    return pending


def sweep_size(name: str, profile: str) -> int:
    """The number of jobs of the experiment's grid (0 for a broken grid: its sweep reports it)."""
    from attnrepro.jobs.grid import grid_size

    try:
        return grid_size(name, profile)
    except Exception:  # a broken grid: its sweep reports it
        return 0


class Worker:
    """A sweep worker (commands.sweep_worker) with `threads` torch threads: a subprocess that runs the
    sweeps it is sent one after the other, importing torch, Lightning and Hydra once."""

    COMMAND = (sys.executable, "-m", "attnrepro.commands.sweep_worker")
    live: set["Worker"] = set()  # the workers running now (stopped with reproduce: stop_workers)
    lock_fd: int | None = None   # the outputs folder's lock, held by every worker too

    def __init__(self, threads: int):
        from attnrepro.jobs.lifetime import die_with_parent

        env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(list(self.COMMAND), env=env, preexec_fn=die_with_parent,
                                     pass_fds=() if self.lock_fd is None else (self.lock_fd,),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1)
        Worker.live.add(self)

    def sweep(self, name: str, argv: list[str], log) -> bool | None:
        """Run `attnrepro train <argv>`: True when it finished, False when it exited with an error, None
        when the worker died during it (it is gone then). Its output goes to log line by line, each line
        prefixed with the experiment once."""
        from attnrepro.commands.sweep_worker import DONE

        try:
            self.proc.stdin.write(json.dumps(argv) + "\n")
            self.proc.stdin.flush()
        except OSError:
            return None
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            if line.startswith(DONE):
                return line.split()[-1] == "0"
            log(line if line.startswith(f"[{name}]") else f"[{name}] {line}")
        log(f"[{name}] the sweep worker exited with status {self.proc.wait()} during the sweep")
        return None

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait()
        Worker.live.discard(self)


STOPPING = threading.Event()  # set by stop_workers: no sweep starts any more


def stop_workers() -> int:
    """Stop every live worker (terminate, then kill those still running 10 s on); no sweep starts after
    this. The number of workers stopped."""
    STOPPING.set()
    workers = list(Worker.live)
    for w in workers:
        w.proc.terminate()
    deadline = time.monotonic() + 10
    for w in workers:
        try:
            w.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            w.proc.kill()
    return len(workers)


def order(pending: dict[str, int | None], sizes: dict[str, int], seconds: dict[str, float]) -> list[str]:
    """The sweeps with jobs pending, longest first (longest-processing-time order, which keeps both
    workers busy to the end): a sweep without a measured time first, the most pending jobs first (None:
    not expanded, counted as its whole grid); then by seconds x pending / grid size."""
    todo = [n for n in pending if pending[n] != 0]
    unknown = sorted((n for n in todo if n not in seconds), key=lambda n: -(pending[n] or sizes.get(n, 0)))
    known = sorted((n for n in todo if n in seconds),
                   key=lambda n: -seconds[n] * (pending[n] or sizes.get(n, 1)) / max(sizes.get(n, 1), 1))
    return unknown + known


def run_sweeps(pending: dict[str, int | None], profile: str, overrides: list[str], outputs: str, workers: int,
               log, sizes: dict[str, int] | None = None, seconds: dict[str, float] | None = None,
               user_threads: str | None = None) -> tuple[list[str], dict[str, float]]:
    """The sweeps with jobs pending, in `order`, on `workers` sweep workers: (the names that failed,
    {name: wall seconds} of those that finished). A worker that dies is replaced for the next sweep."""
    start = time.perf_counter()
    names = list(pending)
    todo = order(pending, sizes or {}, seconds or {})
    times: dict[str, float] = {}
    slots = max(1, min(workers, len(todo) or 1))
    threads = int(user_threads or max(1, (os.cpu_count() or 1) // slots))  # a user's OMP_NUM_THREADS kept
    queue, failed = list(reversed(todo)), []  # list.pop and list.append are atomic

    def slot() -> None:
        worker = None
        while not STOPPING.is_set():
            try:
                name = queue.pop()
            except IndexError:
                break
            t = time.perf_counter()
            log(f"\n=== sweep {name} (profile {profile}, {pending[name] if pending[name] is not None else '?'} jobs "
                f"to run, {threads} thread{'s' if threads > 1 else ''}) ===")
            worker = worker or Worker(threads)
            ok = worker.sweep(name, ["-m", f"experiment={name}", f"profile={profile}", f"paths.outputs={outputs}",
                                     *overrides], log)
            if ok is None:
                worker = None
            log(f"=== {name}: {'done' if ok else 'FAILED'} in {time.perf_counter() - t:.1f}s "
                f"(total {time.perf_counter() - start:.1f}s) ===")
            if ok:
                times[name] = time.perf_counter() - t
            else:
                failed.append(name)
        if worker:
            worker.close()

    with ThreadPoolExecutor(max_workers=slots) as pool:
        list(pool.map(lambda _: slot(), range(slots)))
    return [n for n in names if n in failed], times
