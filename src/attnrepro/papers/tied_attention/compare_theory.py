"""Paper B's ERM state evolution against any sweep's records (declared in its package's COMMANDS).

Paper B's ERM state evolution against every complete record of a sweep, whatever its grid: for runs
made with your own overrides (another d, other lambdas), which the profile's figures do not expect.

    attnrepro compare-theory outputs=outputs/d200 [experiment=tied_interpolation_peak] [profile=quick]

Reads the experiment's complete records under outputs, computes (or reads, cached under
<outputs>/theory/) the state-evolution curve of every (target, T, Delta, kappa, beta, lambda) they hold
with the profile's theory settings, and prints theory against simulation per point (converged seeds
only, as the figure's claims do) with the median and the largest |relative deviation| per metric and d.
"""

from __future__ import annotations

from attnrepro.commands.args import UsageError, default_outputs, parse


def main(argv: list[str]) -> int:
    import pandas as pd

    from attnrepro.jobs import theory
    from attnrepro.jobs.job import Status
    from attnrepro.jobs.records import scan
    from attnrepro.jobs.training import record_state
    from attnrepro.papers.tied_attention import theory_curves as curves
    from attnrepro.papers.tied_attention.figures.common import CONFIG, ID, METRICS
    from attnrepro.papers.tied_attention.figures.tied_error_vs_alpha_claims import SE_METRICS, se_deviations
    from attnrepro.report import series
    from attnrepro.report.tables import frames

    args = parse(argv, {"outputs": default_outputs(), "experiment": "tied_interpolation_peak", "profile": "quick"},
                 __doc__)
    records = [r for p, r in scan(args["outputs"], args["experiment"])
               if isinstance(r, dict) and record_state(p, r).status is Status.complete]
    if not records:
        raise UsageError(f"no complete records of {args['experiment']} under {args['outputs']}")
    final = frames(records)[0]
    sim = final[[c for c in [*ID, *CONFIG, *METRICS] if c in final]].assign(**{series.SOURCE: series.SIMULATION})
    settings = theory.theory_settings(args["profile"], [f"paths.outputs={args['outputs']}"])
    keys = [k for k in curves.STATE_EVOLUTION.keys if k in final]
    points = final[keys].drop_duplicates().to_dict("records")
    wanted = [p for p in (curves.STATE_EVOLUTION.params(pt) for pt in points) if p is not None]
    rows = []
    for params in theory.gather(wanted, "task.alpha"):
        job = theory.theory_job(args["experiment"], curves.STATE_EVOLUTION, params, settings)
        rec = None if job.state().done else theory.compute(job, settings)
        if rec is not None and rec["status"] != "complete":
            print(f"theory FAILED for {job.label}: {rec['reason']}")
        rows.append(theory.load_jobs([job])[0])
    dev = se_deviations(pd.concat([sim, *rows], ignore_index=True))
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
