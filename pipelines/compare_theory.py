"""Paper B's ERM state evolution against every complete record of a sweep, whatever its grid: for runs
made with your own overrides (another d, other lambdas), which the profile's figures do not expect.

    python pipelines/compare_theory.py --outputs outputs/d200 --experiment tied_interpolation_peak

Reads the experiment's complete records under --outputs, computes (or reads, cached under
<outputs>/theory/) the state-evolution curve of every (target, T, Delta, kappa, beta, lambda) they hold
with the --profile's theory settings, and prints theory against simulation per point (converged seeds
only, as the figure's claims do) with the median and the largest |relative deviation| per metric and d.
"""

import argparse
import sys

import pandas as pd

from attnrepro.jobs import theory as theory_runs
from attnrepro.jobs.records import CorruptRecord, scan
from attnrepro.papers.tied_attention import theory_curves as curves
from attnrepro.papers.tied_attention.figures import CONFIG, ID, METRICS, SE_METRICS, se_deviations
from attnrepro.report import series
from attnrepro.report.tables import frames


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--outputs", required=True, help="outputs root holding runs/<experiment>/")
    ap.add_argument("--experiment", default="tied_interpolation_peak")
    ap.add_argument("--profile", default="quick", help="theory settings of this profile (default: quick)")
    args = ap.parse_args(argv)
    records = [r for _, r in scan(args.outputs, args.experiment)
               if not isinstance(r, CorruptRecord) and r["status"] == "complete"]
    if not records:
        ap.error(f"no complete records of {args.experiment} under {args.outputs}")
    final = frames(records)[0]
    sim = final[[c for c in [*ID, *CONFIG, *METRICS] if c in final]].assign(**{series.SOURCE: series.SIMULATION})
    settings = theory_runs.theory_settings(args.profile, [f"paths.outputs={args.outputs}"])
    keys = [k for k in curves.STATE_EVOLUTION.keys if k in final]
    points = final[keys].drop_duplicates().to_dict("records")
    wanted = [p for p in (curves.STATE_EVOLUTION.params(pt) for pt in points) if p is not None]
    theory = []
    for params in theory_runs._gather(wanted, "task.alpha"):
        job = theory_runs.make_job(args.experiment, curves.STATE_EVOLUTION, params, settings)
        rec = theory_runs.run_job(job, settings, args.outputs) if not job.path(args.outputs).exists() else None
        rows, _ = theory_runs.load_jobs(args.outputs, [job])
        if rec is not None and rec["status"] != "complete":
            print(f"theory FAILED for {job.label}: {rec['reason']}")
        theory.append(rows)
    table = pd.concat([sim, *theory], ignore_index=True)
    dev = se_deviations(table)
    if dev.empty:
        print("no point has both a converged theory value and two converged seeds")
        return 1
    pd.set_option("display.width", 200)
    print(dev.sort_values(["metric", "d", "model.lam", "task.alpha"]).to_string(index=False))
    for by in (["metric", "d"], ["metric", "d", "model.lam"]):
        for key, g in dev.groupby(by):
            a = g["dev"].abs()
            where = ", ".join(f"{k} = {v:g}" for k, v in zip(by[1:], key[1:]))
            print(f"{SE_METRICS[key[0]]}, {where}: {len(a)} points, median |relative deviation| {a.median():.2%}, "
                  f"largest {a.max():.2%}; unconverged seeds left out: {int(g['left_out'].sum())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
