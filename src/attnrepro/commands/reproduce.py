"""Every figure from one command: each experiment's sweep, its theory curves, aggregate, figures, report.

    attnrepro reproduce [profile=quick] [experiments=xor_phase_dm,...] [workers=2] [accept_failed=false]
                        [launcher=slurm|slurm_gpu] [-- hydra overrides for every sweep]

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
stage (figures, report, claims; the figures drawn in `workers` processes).
A second run with nothing changed computes nothing.

launcher=slurm (or slurm_gpu, any conf/hydra/launcher/ file of a submitit SLURM launcher): every sweep and
the theory curves are submitted as packed job arrays (jobs.slurm; options after --, e.g.
hydra.launcher.partition=cpu hydra.sweeper.task_minutes=30), this command waits for them without
hanging, then aggregates and draws here. Run it again to attach to arrays still running.

Exit status 1 when a job failed (the last line lists them; accept_failed=true accepts them), a sweep or
theory curve failed, or a figure could not be drawn. One `reproduce` at a time per outputs folder (a lock,
jobs.lifetime: a second one stops at once, naming the first); stopping it (Ctrl-C, SIGTERM, or the death of
the process that started it, e.g. `kill -9` of make) stops its sweep and theory workers; the records
written so far are kept.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from attnrepro.commands.args import UsageError, default_outputs, parse, worker_count
from attnrepro.jobs.local_sweeps import Worker, count_pending, run_sweeps, stop_workers, sweep_size
from attnrepro.jobs.sweep_seconds import outputs_table, read_sweep_seconds, write_sweep_seconds


def _stop(signum, frame) -> None:
    """SIGINT/SIGTERM (also sent by the kernel when the parent dies): stop every worker, then exit."""
    stopped = stop_workers()
    print(f"\nreproduce stopped by {signal.Signals(signum).name}: {stopped} sweep workers stopped; the "
          "records written so far are kept, and a rerun goes on from them", flush=True)
    os._exit(128 + signum)  # the theory workers exit with this process (jobs.lifetime.die_with_parent)


def main(argv: list[str]) -> int:
    from attnrepro.jobs.grid import experiments

    hydra_overrides = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    args = parse(argv, {"profile": os.environ.get("PROFILE", "quick"), "experiments": [], "outputs": default_outputs(),
                        "workers": str(min(2, os.cpu_count() or 1)), "accept_failed": False, "launcher": ""},
                 __doc__)
    profile, outputs = args["profile"], args["outputs"]
    worker_count(args["workers"])
    if profile not in ("smoke", "quick", "paper"):
        raise UsageError(f"profile must be smoke, quick or paper, got {profile!r}")
    names = args["experiments"] or experiments()
    unknown = sorted(set(names) - set(experiments()))
    if unknown:
        raise UsageError(f"unknown experiments {unknown}; known: {experiments()}")
    if args["launcher"]:
        args["launcher_params"] = launcher_params(args["launcher"], hydra_overrides)
    from attnrepro.jobs.lifetime import Busy, OutputsLock, die_with_parent, meant_to_outlive_its_shell

    try:
        folder = OutputsLock(outputs).acquire()
    except Busy as e:
        raise UsageError(str(e)) from None
    Worker.lock_fd = folder.fd
    if not meant_to_outlive_its_shell():
        die_with_parent()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _stop)
    try:
        return _reproduce(args, names, hydra_overrides)
    finally:
        folder.release()


def _reproduce(args: dict, names: list[str], hydra_overrides: list[str]) -> int:
    profile, outputs = args["profile"], args["outputs"]
    lock = threading.Lock()

    def log(line: str) -> None:  # one whole line at a time, from any sweep's thread
        with lock:
            print(line, flush=True)

    start = time.perf_counter()
    workers = int(args["workers"])
    cluster = args.get("launcher_params")
    # the sweeps accept their failed jobs (recorded with their reasons): this command counts them at the end
    sweep_overrides = [*hydra_overrides, "accept_failed=true"]
    if cluster is not None:  # the sweeps only compose and submit, one after the other; the cluster computes
        workers = 1
        sweep_overrides += [f"hydra/launcher={args['launcher']}", "hydra.sweeper.wait=false"]
    user_threads = os.environ.get("OMP_NUM_THREADS")
    # The theory curves run in this process beside the sweeps: cores / workers BLAS and torch threads, set
    # before numpy and torch load (with their default of one per core, the theory stage beside two
    # 1-thread sweeps on 2 cores took 367 s of curve time against 126 s, and slowed the sweeps 1.6x).
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(max(1, (os.cpu_count() or 1) // workers)))
    pending = {name: count_pending(name, profile, hydra_overrides, outputs, log) for name in names}
    # the theory curves (numerics on the CPU, one process per worker) alongside the sweeps
    rc_theory: list[int] = []
    theory = threading.Thread(target=lambda: rc_theory.append(_theory(names, profile, outputs, log, workers, cluster)))
    theory.start()
    sizes = {n: sweep_size(n, profile) for n in names}
    failed, times = run_sweeps(pending, profile, sweep_overrides, outputs, workers, log, sizes,
                               read_sweep_seconds(profile), user_threads)
    if times and cluster is None:
        write_sweep_seconds(outputs_table(outputs), profile, times, pending, sizes)
    log(f"\n=== sweeps {'submitted' if cluster is not None else 'finished'} in {time.perf_counter() - start:.1f}s ===")
    theory.join()
    if cluster is not None:
        _wait_for_cluster(outputs, log)
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
    rc_fig = figure_stage.render(outputs, figures, profile, workers=int(args["workers"]))
    log(f"\nreproduce-figures finished in {time.perf_counter() - start:.1f}s")
    if failed:
        log(f"sweeps that did not finish: {failed} (their recorded jobs are in the report)")
    if rc_theory:
        log(f"some theory curves failed: their reasons are in {outputs}/theory/ and the report")
    jobs = [f"{e}: {' '.join(j['overrides']) or j['key']} ({j['reason'].splitlines()[0] if j['reason'] else '?'})"
            for e, s in status["experiments"].items() if e in names for j in s.get("failed", [])]
    if jobs:
        log(f"{len(jobs)} jobs failed" + (" (accepted: accept_failed=true)" if args["accept_failed"] else "")
            + ": " + "; ".join(jobs))
    return 1 if (failed or rc_theory or rc_agg or rc_fig or (jobs and not args["accept_failed"])) else 0


def _theory(names: list[str], profile: str, outputs: str, log, sweeps: int, cluster: dict | None = None) -> int:
    """The theory curves of the experiments that have them, from this process (worker processes:
    conf/theory.yaml's workers less one for each sweep beyond the first running beside them, at least
    one), or submitted to the cluster (launcher options `cluster`); 1 when one failed."""
    from attnrepro.jobs import theory

    try:
        with_theory = [n for n in names if n in theory.theory_experiments()]
        if not with_theory:
            return 0
        log(f"\n=== theory curves ({', '.join(with_theory)}) ===")
        settings = theory.theory_settings(profile, [f"paths.outputs={outputs}",
                                                    f"experiments=[{','.join(with_theory)}]"])
        settings.workers = max(1, settings.workers - sweeps + 1)
        counts = theory.run(settings, log=lambda line: None if "cached, skipped" in line else log(line),
                            launcher=cluster, wait=False)
        if cluster is not None:
            log(f"theory: {counts.get('submitted', 0)} curves submitted, {counts['skipped']} cached")
            return 0
    except Exception as e:  # a broken theory conf must not stop the figures
        log(f"theory stage FAILED: {type(e).__name__}: {e}")
        return 1
    log(f"theory: {counts['complete']} computed, {counts['skipped']} cached, {counts['failed']} failed")
    return int(counts["failed"] > 0)


def launcher_params(name: str, hydra_overrides: list[str]) -> dict:
    """The options of conf/hydra/launcher/<name>.yaml with the hydra.launcher.* overrides (UsageError when it
    is not a SLURM launcher)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from attnrepro.config import register_configs
    from attnrepro.jobs.grid import CONF_DIR

    known = sorted(p.stem for p in (CONF_DIR / "hydra" / "launcher").glob("*.yaml"))
    if name not in known:
        raise UsageError(f"launcher must be one of {known}, got {name!r}")
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", return_hydra_config=True,
                      overrides=[f"hydra/launcher={name}",
                                 *(o for o in hydra_overrides if o.startswith("hydra.launcher."))])
    GlobalHydra.instance().clear()
    params = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    if not str(params.get("_target_", "")).endswith("SlurmLauncher"):
        raise UsageError(f"launcher={name} is not a SLURM launcher (reproduce runs locally without launcher=)")
    return {**params, "name": "theory"}


def _wait_for_cluster(outputs: str, log) -> None:
    """Wait for every live array of this outputs folder (jobs.slurm.wait), then say what is missing."""
    from attnrepro.jobs import slurm

    subs = slurm.submissions(outputs)
    live = slurm.in_flight(outputs, [k for s in subs for t in s.tasks for k in t])
    subs = [s for s in subs if any(s.task_of(k) for k in live)]
    log(f"\n=== waiting for {len(subs)} arrays on the cluster ({len(live)} jobs) ===")
    root = Path(outputs)
    folders = {p.name: p for part in ("runs", "theory") for p in root.glob(f"{part}/*/*/")}

    def record_of(key: str) -> Path:  # a train or theory record (its folder exists once a task made it)
        if key not in folders:
            folders.update({p.name: p for part in ("runs", "theory") for p in root.glob(f"{part}/*/{key}")})
        return folders.get(key, root / "runs" / "?" / key) / "record.json"

    outcome = slurm.wait(subs, record_of, log=log)
    for line in outcome["ended"]:
        log(f"{line}: those jobs are missing (run reproduce again to compute them)")
