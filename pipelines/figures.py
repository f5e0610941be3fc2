"""Tables -> figures and report: outputs/figures/<figure>.{png,pdf}, outputs/report/index.html, claims.csv.

    python pipelines/figures.py [--outputs DIR] [--profile smoke] [--figures xor_phase_dm ...] [--wandb]

Reads only outputs/results/ (run pipelines/aggregate.py first): no training, no records.
--profile, when given, must match the profile the tables were aggregated for. Exit
status 1 when a figure or its claims could not be computed (the report still lists it).
--wandb also logs every figure and the claims table to one W&B run (job_type report).
"""

import argparse
import sys

from attnrepro.report.aggregate import default_outputs, read_status
from attnrepro.report.figure_spec import specs
from attnrepro.report.html import build_report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--outputs", default=str(default_outputs()),
                    help="outputs root (default: $ATTNREPRO_OUTPUTS or ./outputs)")
    ap.add_argument("--profile", default=None,
                    help="profile the tables must have been aggregated for (default: any)")
    ap.add_argument("--figures", nargs="*", default=None, help="figures to render (default: all)")
    ap.add_argument("--wandb", action="store_true", help="log figures and claims to a W&B report run")
    args = ap.parse_args(argv)
    try:
        specs(args.figures)
    except KeyError as e:
        ap.error(e.args[0])
    aggregated = read_status(args.outputs).get("profile")
    if args.profile and aggregated and args.profile != aggregated:
        ap.error(f"tables in {args.outputs}/results were aggregated for profile {aggregated!r}, "
                 f"not {args.profile!r}: run pipelines/aggregate.py --profile {args.profile}")
    report = build_report(args.outputs, args.figures)
    print(report.summary())
    if args.wandb:
        from attnrepro.jobs.tracking import log_report

        pngs = {r.spec.name: f"{args.outputs}/figures/{r.spec.name}.png" for r in report.rendered}
        folder = log_report(args.outputs, pngs, report.claims, group=f"report-{aggregated or 'any'}")
        print(f"W&B report run: {folder or 'not logged (W&B unavailable)'}")
    for err in report.errors:
        print(f"ERROR {err}", file=sys.stderr)
    return 1 if report.errors else 0


if __name__ == "__main__":
    sys.exit(main())
