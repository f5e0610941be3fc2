"""Tables -> figures and report: <outputs>/figures/<figure>.{png,pdf}, <outputs>/results/<figure>.estimates.parquet
(the numbers a figure's plot and claims share), <outputs>/report/index.html, claims.csv (one row per
claim, its stable id first) and claims_diff.csv (against the profile's reference, reference/claims_<profile>.csv).

    attnrepro figures [figures=xor_phase_dm,...] [profile=quick] [outputs=DIR] [wandb=true] [refresh_reference=true]

Reads only <outputs>/results/ (run `attnrepro aggregate` first): no training, no records. A figure
whose table and code did not change since its last rendering is not drawn again. profile, when
given, must match the profile the tables were aggregated for. Exit status 1 when a figure, its
estimates or its claims could not be computed, or claim ids are missing or repeated (the report
still lists it). wandb=true also logs every figure and the claims table to one W&B run (job_type
report). refresh_reference=true makes this run's claims.csv the profile's reference (commit it); with figures=, only
those figures' rows are replaced.
"""

from __future__ import annotations

import sys

from attnrepro.commands.args import UsageError, default_outputs, parse


def render(outputs: str, figures: list[str] | None = None, profile: str | None = None, wandb: bool = False,
           refresh_reference: bool = False) -> int:
    """Draw the figures (all, or those named), write the report and claims; 1 when one failed."""
    from attnrepro.report.aggregate import CorruptStatus, aggregate, read_status
    from attnrepro.report.figure_spec import specs
    from attnrepro.report.html import build_report

    try:
        specs(figures)
    except KeyError as e:
        raise UsageError(e.args[0]) from e
    try:
        aggregated = read_status(outputs).get("profile")
    except CorruptStatus as e:
        if not profile:
            raise UsageError(f"{e}: run `attnrepro aggregate profile=<profile>`, or give profile= here") from e
        print(f"{e}: rebuilding it (aggregate, profile {profile})")
        aggregated = aggregate(outputs, profile, figures)["profile"]
    if profile and aggregated and profile != aggregated:
        raise UsageError(f"tables in {outputs}/results were aggregated for profile {aggregated!r}, "
                         f"not {profile!r}: run `attnrepro aggregate profile={profile}`")
    report = build_report(outputs, figures)
    print(report.summary())
    if wandb:
        from attnrepro.jobs.tracking import log_report

        pngs = {r.spec.name: f"{outputs}/figures/{r.spec.name}.png" for r in report.rendered}
        folder = log_report(outputs, pngs, report.claims, group=f"report-{aggregated or 'any'}")
        print(f"W&B report run: {folder or 'not logged (W&B unavailable)'}")
    for err in report.errors:
        print(f"ERROR {err}", file=sys.stderr)
    if refresh_reference:
        _refresh(report, aggregated, figures)
    return 1 if report.errors else 0


def _refresh(report, profile: str | None, figures: list[str] | None) -> None:
    """This run's claims become the profile's reference: all of it, or with figures= those figures' rows (the
    other figures' reference rows are kept)."""
    import pandas as pd

    from attnrepro.jobs.records import atomic_write
    from attnrepro.report.claims_diff import reference_path

    if not profile or report.errors:
        raise UsageError("refresh_reference needs figures rendered without errors, of a known profile")
    path = reference_path(profile)
    claims = report.claims
    if figures and path.exists():
        kept = pd.read_csv(path)
        claims = pd.concat([kept[~kept["figure"].isin(figures)], claims], ignore_index=True)
    atomic_write(path, lambda f: claims.to_csv(f, index=False), newline="")
    print(f"reference claims of profile {profile}: {path} ({len(claims)} claims"
          + (f", those of {', '.join(figures)} from this run" if figures else "") + "); commit it")


def main(argv: list[str]) -> int:
    args = parse(argv, {"figures": [], "profile": "", "outputs": default_outputs(), "wandb": False,
                        "refresh_reference": False}, __doc__)
    return render(args["outputs"], args["figures"] or None, args["profile"] or None, args["wandb"],
                  args["refresh_reference"])
