"""Records -> tidy tables: outputs/results/<figure>.parquet and outputs/results/status.json.

    python pipelines/aggregate.py --profile smoke [--outputs DIR] [--figures xor_phase_dm ...] [--all-records]

The profile decides which jobs are expected (missing ones are listed). Bad records
(failed, corrupt) are listed in status.json, never fatal. Exit status 1 only when a
figure's table itself could not be built.
"""

import argparse
import sys

from attnrepro.report.aggregate import aggregate, default_outputs
from attnrepro.report.figure_spec import specs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--outputs", default=str(default_outputs()),
                    help="outputs root (default: $ATTNREPRO_OUTPUTS or ./outputs)")
    ap.add_argument("--profile", default="quick", help="grid profile of the sweeps (default: quick)")
    ap.add_argument("--figures", nargs="*", default=None, help="figures to aggregate (default: all)")
    ap.add_argument("--all-records", action="store_true",
                    help="use every complete record, also those of runs made with your own overrides "
                         "(default: only the jobs of the profile's grid)")
    args = ap.parse_args(argv)
    try:
        specs(args.figures)
    except KeyError as e:
        ap.error(e.args[0])
    status = aggregate(args.outputs, args.profile, args.figures, all_records=args.all_records)
    wanted = args.figures or list(status["figures"])
    return 1 if any(status["figures"][f].get("error") for f in wanted) else 0


if __name__ == "__main__":
    sys.exit(main())
