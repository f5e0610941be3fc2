"""Every figure from one command: each experiment's sweep, its theory curves, aggregate, figures, report.

    attnrepro reproduce [profile=quick] [experiments=xor_phase_dm,...] [workers=2] [-- hydra overrides for every sweep]

An experiment whose every job has a complete record made by this code is not swept again; a sweep
is `attnrepro train -m experiment=<name> profile=<profile>`, which skips the complete jobs, run by
one of `workers` sweep worker subprocesses (default: 2 on a machine with 2 or more cores, else 1;
commands.sweep_worker: each runs its sweeps one after the other and imports torch and Lightning
once), the longest first (longest-processing-time order: by the sweep seconds of
reference/sweep_seconds.csv, scaled by the share of the grid still to run; a sweep not in that table
first, the most jobs first), each worker with cores / workers torch threads
(OMP_NUM_THREADS, unless it is set already: more threads than cores slows every step down many times
over); their output lines are prefixed with the experiment. Each sweep's wall time is written to
<outputs>/report/sweep_seconds.csv (copy it over the reference to refresh the order). Then the theory
curves of the experiments that have them (cached alike), the aggregate stage (tables) and the figure
stage (figures, report, claims).
A second run with nothing changed computes nothing.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from attnrepro.commands.args import UsageError, default_outputs, parse

SWEEP_SECONDS = Path(__file__).resolve().parents[3] / "reference" / "sweep_seconds.csv"


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


def _grid_size(name: str, profile: str) -> int:
    from attnrepro.jobs.grid import grid_size

    try:
        return grid_size(name, profile)
    except Exception:  # a broken grid: its sweep reports it
        return 0


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


def read_sweep_seconds(profile: str, path: Path = SWEEP_SECONDS) -> dict[str, float]:
    """{experiment: seconds} of the profile's sweeps as last measured (empty when the table is missing
    or unreadable: the order then falls back to job counts)."""
    try:
        with open(path, newline="") as f:
            return {r["experiment"]: float(r["seconds"]) for r in csv.DictReader(f) if r["profile"] == profile}
    except (OSError, KeyError, ValueError):
        return {}


def order(pending: dict[str, int | None], sizes: dict[str, int], seconds: dict[str, float]) -> list[str]:
    """The sweeps with jobs pending, longest first (longest-processing-time order, which keeps both
    workers busy to the end): a sweep without a measured time first, the most pending jobs first (None:
    not expanded, counted as its whole grid); then by seconds x pending / grid size."""
    todo = [n for n in pending if pending[n] != 0]
    unknown = sorted((n for n in todo if n not in seconds), key=lambda n: -(pending[n] or sizes.get(n, 0)))
    known = sorted((n for n in todo if n in seconds),
                   key=lambda n: -seconds[n] * (pending[n] or sizes.get(n, 1)) / max(sizes.get(n, 1), 1))
    return unknown + known


def write_sweep_seconds(path: Path, profile: str, times: dict[str, float], pending: dict[str, int | None],
                        sizes: dict[str, int]) -> None:
    """Each finished sweep's wall time as profile,experiment,seconds,jobs_run rows; seconds is the whole
    grid's (the measured time x grid size / jobs run, when only some jobs ran)."""
    rows = []
    for n, t in times.items():
        ran = pending[n] or sizes.get(n) or 1
        rows.append([profile, n, f"{t * max(sizes.get(n) or ran, ran) / ran:.1f}", ran])
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["profile", "experiment", "seconds", "jobs_run"])
        w.writerows(sorted(rows, key=lambda r: -float(r[2])))


def _sweeps(pending: dict[str, int | None], profile: str, overrides: list[str], outputs: str, workers: int,
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
            if ok:
                times[name] = time.perf_counter() - t
            else:
                failed.append(name)
        if worker:
            worker.close()

    with ThreadPoolExecutor(max_workers=slots) as pool:
        list(pool.map(lambda _: slot(), range(slots)))
    return [n for n in names if n in failed], times


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
    user_threads = os.environ.get("OMP_NUM_THREADS")
    # The theory curves run in this process beside the sweeps: cores / workers BLAS and torch threads, set
    # before numpy and torch load (with their default of one per core, the theory stage beside two
    # 1-thread sweeps on 2 cores took 367 s of curve time against 126 s, and slowed the sweeps 1.6x).
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(max(1, (os.cpu_count() or 1) // workers)))
    pending = {name: _pending(name, profile, hydra_overrides, outputs, log) for name in names}
    # the theory curves (numerics on the CPU, one process per worker) alongside the sweeps
    rc_theory: list[int] = []
    theory = threading.Thread(target=lambda: rc_theory.append(_theory(names, profile, outputs, log, workers)))
    theory.start()
    sizes = {n: _grid_size(n, profile) for n in names}
    failed, times = _sweeps(pending, profile, hydra_overrides, outputs, workers, log, sizes,
                            read_sweep_seconds(profile), user_threads)
    if times:
        write_sweep_seconds(Path(outputs) / "report" / "sweep_seconds.csv", profile, times, pending, sizes)
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
