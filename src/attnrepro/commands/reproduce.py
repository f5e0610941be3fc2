"""Every figure from one command: each experiment's sweep, its theory curves, aggregate, figures, report.

    attnrepro reproduce [profile=quick] [experiments=xor_phase_dm,...] [workers=2] [-- hydra overrides for every sweep]

An experiment whose every job has a complete record made by this code is not swept again; a sweep
is `attnrepro train -m experiment=<name> profile=<profile>`, which skips the complete jobs, run by
one of `workers` sweep worker subprocesses (default: 2 on a machine with 2 or more cores, else 1;
commands.sweep_worker: each runs its sweeps one after the other and imports torch and Lightning
once), the sweeps with the most jobs to run first, each worker with cores / workers torch threads
(OMP_NUM_THREADS, unless it is set already: more threads than cores slows every step down many times
over); their output lines are prefixed with the experiment. Then the theory curves of the experiments that have
them (cached alike), the aggregate stage (tables) and the figure stage (figures, report, claims).
A second run with nothing changed computes nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from attnrepro.commands.args import UsageError, default_outputs, parse


def _pending(name: str, profile: str, overrides: list[str], outputs: str, log) -> int | None:
    """The number of the experiment's jobs not done (None: the grid did not expand here). Before its first
    sweep (no cached expansion: composing every job here would cost ~0.2 s each, and the sweep composes
    them anyway and caches them) the size of its grid."""
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


class _Worker:
    """A sweep worker (commands.sweep_worker) with `threads` torch threads: a subprocess that runs the
    sweeps it is sent one after the other, importing torch, Lightning and Hydra once."""

    COMMAND = (sys.executable, "-m", "attnrepro.commands.sweep_worker")

    def __init__(self, threads: int):
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(list(self.COMMAND), env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1)

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


def _sweeps(pending: dict[str, int | None], profile: str, overrides: list[str], outputs: str, workers: int,
            log) -> list[str]:
    """The sweeps with jobs pending, the most pending jobs first, on `workers` sweep workers; the names
    that failed. A worker that dies is replaced for the next sweep."""
    start = time.perf_counter()
    names = list(pending)
    todo = sorted((n for n in names if pending[n] != 0), key=lambda n: -(pending[n] or 0))
    slots = max(1, min(workers, len(todo) or 1))
    threads = int(os.environ.get("OMP_NUM_THREADS") or max(1, (os.cpu_count() or 1) // slots))  # a user's value kept
    queue, failed = list(reversed(todo)), []  # list.pop and list.append are atomic

    def slot() -> None:
        worker = None
        while True:
            try:
                name = queue.pop()
            except IndexError:
                break
            t = time.perf_counter()
            log(f"\n=== sweep {name} (profile {profile}, {pending[name] if pending[name] is not None else '?'} jobs "
                f"to run, {threads} thread{'s' if threads > 1 else ''}) ===")
            worker = worker or _Worker(threads)
            ok = worker.sweep(name, ["-m", f"experiment={name}", f"profile={profile}", f"paths.outputs={outputs}",
                                     *overrides], log)
            if ok is None:
                worker = None
            log(f"=== {name}: {'done' if ok else 'FAILED'} in {time.perf_counter() - t:.1f}s "
                f"(total {time.perf_counter() - start:.1f}s) ===")
            if not ok:
                failed.append(name)
        if worker:
            worker.close()

    with ThreadPoolExecutor(max_workers=slots) as pool:
        list(pool.map(lambda _: slot(), range(slots)))
    return [n for n in names if n in failed]


def main(argv: list[str]) -> int:
    from attnrepro.jobs.grid import experiments

    hydra_overrides = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    args = parse(argv, {"profile": os.environ.get("PROFILE", "quick"), "experiments": [], "outputs": default_outputs(),
                        "workers": str(min(2, os.cpu_count() or 1))}, __doc__)
    profile, outputs = args["profile"], args["outputs"]
    if not args["workers"].isdigit() or int(args["workers"]) < 1:
        raise UsageError(f"workers must be a whole number >= 1, got {args['workers']!r}")
    if profile not in ("smoke", "quick", "paper"):
        raise UsageError(f"profile must be smoke, quick or paper, got {profile!r}")
    names = args["experiments"] or experiments()
    unknown = sorted(set(names) - set(experiments()))
    if unknown:
        raise UsageError(f"unknown experiments {unknown}; known: {experiments()}")
    lock = threading.Lock()

    def log(line: str) -> None:  # one whole line at a time, from any sweep's thread
        with lock:
            print(line, flush=True)

    start = time.perf_counter()
    workers = int(args["workers"])
    pending = {name: _pending(name, profile, hydra_overrides, outputs, log) for name in names}
    # the theory curves (numerics on the CPU, one process per worker) alongside the sweeps
    rc_theory: list[int] = []
    theory = threading.Thread(target=lambda: rc_theory.append(_theory(names, profile, outputs, log, workers)))
    theory.start()
    failed = _sweeps(pending, profile, hydra_overrides, outputs, workers, log)
    log(f"\n=== sweeps finished in {time.perf_counter() - start:.1f}s ===")
    theory.join()
    rc_theory = rc_theory[0] if rc_theory else 1
    figures = None
    if args["experiments"]:  # the figures whose every source was swept
        from attnrepro.report.figure_spec import specs

        figures = [s.name for s in specs() if set(s.sources) <= set(names)]
    from attnrepro.commands import figures as figure_stage
    from attnrepro.report.aggregate import aggregate

    log("\n=== aggregate ===")
    status = aggregate(outputs, profile, figures, log=log)
    rc_agg = int(any(status["figures"][f].get("error") for f in (figures or status["figures"])))
    log("\n=== figures and report ===")
    rc_fig = figure_stage.render(outputs, figures, profile)
    log(f"\nreproduce-figures finished in {time.perf_counter() - start:.1f}s")
    if failed:
        log(f"sweeps that did not finish: {failed} (their recorded jobs are in the report)")
    if rc_theory:
        log(f"some theory curves failed: their reasons are in {outputs}/theory/ and the report")
    return 1 if (failed or rc_theory or rc_agg or rc_fig) else 0


def _theory(names: list[str], profile: str, outputs: str, log, sweeps: int) -> int:
    """The theory curves of the experiments that have them, from this process (worker processes:
    conf/theory.yaml's workers less one for each sweep beyond the first running beside them, at least
    one); 1 when one failed."""
    from attnrepro.jobs import theory

    try:
        with_theory = [n for n in names if n in theory.theory_experiments()]
        if not with_theory:
            return 0
        log(f"\n=== theory curves ({', '.join(with_theory)}) ===")
        settings = theory.theory_settings(profile, [f"paths.outputs={outputs}",
                                                    f"experiments=[{','.join(with_theory)}]"])
        settings.workers = max(1, settings.workers - sweeps + 1)
        counts = theory.run(settings, log=lambda line: None if "cached, skipped" in line else log(line))
    except Exception as e:  # a broken theory conf must not stop the figures
        log(f"theory stage FAILED: {type(e).__name__}: {e}")
        return 1
    log(f"theory: {counts['complete']} computed, {counts['skipped']} cached, {counts['failed']} failed")
    return int(counts["failed"] > 0)
