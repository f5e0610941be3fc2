"""Records -> tidy tables: <outputs>/results/<figure>.parquet and <outputs>/results/status.json.

    attnrepro aggregate [profile=quick] [figures=xor_phase_dm,...] [outputs=DIR] [all_records=true]

The profile decides which jobs are expected (missing ones are listed). Bad records (failed,
stale, corrupt) are listed in status.json, never fatal. all_records=true uses every complete
record, also those of runs made with your own overrides, and the experiment's theory curves computed at
points of your own (`attnrepro theory` with sizes set on its command line). Exit status 1 only when a
figure's table itself could not be built.
"""

from __future__ import annotations

from attnrepro.commands.args import UsageError, default_outputs, parse


def main(argv: list[str]) -> int:
    from attnrepro.report.aggregate import aggregate
    from attnrepro.report.figure_spec import specs

    args = parse(argv, {"profile": "quick", "figures": [], "outputs": default_outputs(), "all_records": False},
                 __doc__)
    try:
        specs(args["figures"])
    except KeyError as e:
        raise UsageError(e.args[0]) from e
    status = aggregate(args["outputs"], args["profile"], args["figures"] or None, all_records=args["all_records"])
    wanted = args["figures"] or list(status["figures"])
    return 1 if any(status["figures"][f].get("error") for f in wanted) else 0
