"""Every figure from one command: each experiment's sweep, its theory curves, aggregate, figures, report.

    attnrepro reproduce [profile=quick] [experiments=xor_phase_dm,...] [-- hydra overrides for every sweep]

An experiment whose every job has a complete record made by this code is not swept again; a sweep
is `attnrepro train -m experiment=<name> profile=<profile>` in a subprocess, which skips the
complete jobs. Then the theory curves of the experiments that have them (cached alike), the
aggregate stage (tables) and the figure stage (figures, report, claims). A second run with
nothing changed computes nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from attnrepro.commands.args import UsageError, default_outputs, parse


def _sweep(name: str, profile: str, overrides: list[str], outputs: str, log) -> bool:
    """Run the experiment's sweep unless every job is done; True when it finished."""
    from attnrepro.jobs.grid import expected_states

    try:
        states = expected_states(name, profile, overrides, outputs)
    except Exception as e:  # the sweep itself reports a broken grid, with its reason
        log(f"[{name}] grid not expanded here ({type(e).__name__}: {e}); the sweep checks it")
        states = None
    if states is not None and all(s.done for _, _, s in states):
        log(f"[{name}] all {len(states)} jobs done before, nothing to run")
        return True
    cmd = [sys.executable, "-m", "attnrepro", "train", "-m", f"experiment={name}", f"profile={profile}",
           f"paths.outputs={outputs}", *overrides]
    return subprocess.call(cmd) == 0


def main(argv: list[str]) -> int:
    from attnrepro.jobs.grid import experiments

    hydra_overrides = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    args = parse(argv, {"profile": os.environ.get("PROFILE", "quick"), "experiments": [], "outputs": default_outputs()},
                 __doc__)
    profile, outputs = args["profile"], args["outputs"]
    if profile not in ("smoke", "quick", "paper"):
        raise UsageError(f"profile must be smoke, quick or paper, got {profile!r}")
    names = args["experiments"] or experiments()
    unknown = sorted(set(names) - set(experiments()))
    if unknown:
        raise UsageError(f"unknown experiments {unknown}; known: {experiments()}")
    log = lambda line: print(line, flush=True)  # noqa: E731
    start = time.perf_counter()
    failed = []
    for i, name in enumerate(names, 1):
        t = time.perf_counter()
        log(f"\n=== [{i}/{len(names)}] sweep {name} (profile {profile}) ===")
        ok = _sweep(name, profile, hydra_overrides, outputs, log)
        log(f"=== [{i}/{len(names)}] {name}: {'done' if ok else 'FAILED'} in {time.perf_counter() - t:.1f}s "
            f"(total {time.perf_counter() - start:.1f}s) ===")
        if not ok:
            failed.append(name)
    rc_theory = _theory(names, profile, outputs, log)
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


def _theory(names: list[str], profile: str, outputs: str, log) -> int:
    """The theory curves of the experiments that have them, in this process; 1 when one failed."""
    from attnrepro.jobs import theory

    with_theory = [n for n in names if n in theory.theory_experiments()]
    if not with_theory:
        return 0
    log(f"\n=== theory curves ({', '.join(with_theory)}) ===")
    settings = theory.theory_settings(profile, [f"paths.outputs={outputs}", f"experiments=[{','.join(with_theory)}]"])
    try:
        counts = theory.run(settings, log=lambda line: None if "cached, skipped" in line else log(line))
    except Exception as e:  # a broken theory conf must not stop the figures
        log(f"theory stage FAILED: {type(e).__name__}: {e}")
        return 1
    log(f"theory: {counts['complete']} computed, {counts['skipped']} cached, {counts['failed']} failed")
    return int(counts["failed"] > 0)
