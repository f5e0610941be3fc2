"""The paper profile's cost per experiment, from measured job times: jobs, core-hours on this machine's CPU
and the predicted wall time on a cluster of N single-core tasks.

    python pipelines/paper_cost.py [--outputs outputs/paper] [--cores 64] [--profile paper]
    python pipelines/paper_cost.py --sample 8 [--experiments E ...] [--seed 0]

--sample K prints, one line each, the overrides of K jobs drawn uniformly at random (without replacement)
from each experiment's grid, for `xargs -L1 attnrepro train`: their times are then an unbiased sample of the
experiment's, and the table gives the sampling standard error of its core-hours (finite population
corrected) next to the estimate. Each experiment's draw is the first K of a permutation seeded by --seed and
its name, so a larger K extends a smaller one; the lines go round the experiments in turn.

A job's time is its record's `timings.total_s` (one thread: the cluster path runs one CPU per task) for the
profile's own jobs (same keys: full seeds) found under --outputs. Jobs not run yet are counted at the mean
time of the experiment's measured jobs (the column says how many were measured); an experiment with none
is "not measured". The wall time is the longest-processing-time schedule of the job times on --cores
workers, plus one task start (about 15 s: torch and Lightning imported) per worker.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import math
import random
import statistics

from attnrepro.jobs.grid import expected_states, experiments

TASK_START_S = 15.0


def lpt_wall(times: list[float], cores: int) -> float:
    """Makespan of the longest-processing-time-first schedule of `times` on `cores` workers."""
    loads = [0.0] * min(cores, max(len(times), 1))
    heapq.heapify(loads)
    for t in sorted(times, reverse=True):
        heapq.heappush(loads, heapq.heappop(loads) + t)
    return max(loads) if loads else 0.0


def cost(experiment: str, profile: str, outputs: str, cores: int) -> dict:
    states = expected_states(experiment, profile, outputs=outputs)
    measured = [s.record["timings"]["total_s"] for _, _, s in states if s.done]
    row = {"experiment": experiment, "jobs": len(states), "measured": len(measured)}
    if not measured:
        return row
    mean = statistics.fmean(measured)
    times = measured + [mean] * (len(states) - len(measured))
    return {**row, "core_h": sum(times) / 3600, "se_h": sampling_se(measured, len(states)) / 3600,
            "longest_s": max(measured), "wall_s": lpt_wall(times, cores) + TASK_START_S}


def sampling_se(measured: list[float], jobs: int) -> float:
    """Standard error of the estimated total N * mean(t) from a simple random sample of k of N job times:
    N s / sqrt(k) * sqrt(1 - k / N) (0 when every job is measured; nan from one measured job)."""
    k = len(measured)
    if k >= jobs:
        return 0.0
    if k < 2:
        return math.nan
    return jobs * statistics.stdev(measured) / math.sqrt(k) * math.sqrt(1 - k / jobs)


def sample(experiment: str, profile: str, k: int, seed: int) -> list[list[str]]:
    """The overrides of k jobs of the experiment's grid, drawn uniformly without replacement: the first k of a
    random permutation seeded by (seed, experiment)."""
    states = [ov for ov, _, _ in expected_states(experiment, profile, outputs=None)]
    random.Random(f"{seed}/{experiment}").shuffle(states)
    return states[:k]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--outputs", default="outputs/paper")
    ap.add_argument("--profile", default="paper")
    ap.add_argument("--cores", type=int, default=64)
    ap.add_argument("--experiments", nargs="*", default=None, help="default: every experiment")
    ap.add_argument("--sample", type=int, default=0, help="print K random jobs' overrides per experiment, and stop")
    ap.add_argument("--seed", type=int, default=0, help="the sample's seed")
    args = ap.parse_args()
    names = args.experiments or experiments()
    if args.sample:
        draws = [sample(e, args.profile, args.sample, args.seed) for e in names]
        for ov in itertools.chain.from_iterable(itertools.zip_longest(*draws)):
            if ov is not None:
                print(" ".join(ov))
        return 0
    rows = [cost(e, args.profile, args.outputs, args.cores) for e in names]
    print("| experiment | jobs | measured | core-hours (this CPU) ± sampling s.e. | longest job "
          f"| wall on {args.cores} cores |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if "core_h" in r:
            se = "" if r["se_h"] == 0 else f" ± {r['se_h']:.2f}"
            print(f"| {r['experiment']} | {r['jobs']} | {r['measured']} | {r['core_h']:.2f}{se} "
                  f"| {r['longest_s']:.0f} s | {r['wall_s'] / 60:.1f} min |")
        else:
            print(f"| {r['experiment']} | {r['jobs']} | 0 | not measured | | |")
    done = [r for r in rows if "core_h" in r]
    print(f"\nmeasured experiments: {len(done)} of {len(rows)}; their core-hours {sum(r['core_h'] for r in done):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
