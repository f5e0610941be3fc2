"""Tables -> figures and report: <outputs>/figures/<figure>.{png,pdf}, <outputs>/results/<figure>.estimates.parquet
(the numbers a figure's plot and claims share), <outputs>/report/index.html, claims.csv (one row per
claim, its stable id first) and claims_diff.csv (against the profile's reference, reference/claims_<profile>.csv).

    attnrepro figures [figures=xor_phase_dm,...] [profile=quick] [outputs=DIR] [wandb=true] [refresh_reference=true]
                      [workers=<cores>]

Reads only <outputs>/results/ (run `attnrepro aggregate` first): no training, no records. Without figures=,
the figures that have data there: a table with rows, a table that failed, or records (even failed ones)
of a source experiment, in status.json; one line names the registered figures skipped for having none
(figures=... draws them anyway, as "not enough data"), and the report, claims.csv and the comparison with
the reference are those of the figures drawn. With figures=, exactly those figures, with or without data.
No figure with data and no figures= is an error (nothing is written). A figure whose table and code did
not change since its last rendering is not drawn again. profile, when given, must match the profile the
tables were aggregated for. Exit status 1 when a figure, its estimates or its claims could not be
computed, or claim ids are missing or repeated (the report still lists it). wandb=true also logs every
figure and the claims table to one W&B run (job_type report). refresh_reference=true makes this run's
claims.csv the profile's reference (commit it): the figures drawn replace their rows and every other
figure's rows are kept (with figures=, or when figures without data were skipped); the whole reference is
replaced only when every registered figure was drawn. The figures are drawn in `workers` processes (default:
one per core), each with one torch thread. It needs a source checkout: from an installed wheel
(`pip install .`) it is an error, before anything is drawn.
"""

from __future__ import annotations

import os
import sys

from attnrepro.commands.args import UsageError, default_outputs, parse, worker_count


def render(outputs: str, figures: list[str] | None = None, profile: str | None = None, wandb: bool = False,
           refresh_reference: bool = False, with_data: bool = False, workers: int = 1) -> int:
    """Draw the figures (all, or those named; in `workers` processes), write the report and claims; 1 when
    one failed. with_data (the command without figures=): instead of all, those with data (`_with_data`);
    `reproduce` leaves it off and draws every figure of what it ran."""
    from attnrepro.locations import CHECKOUT
    from attnrepro.report.aggregate import CorruptStatus, aggregate, read_status
    from attnrepro.report.figure_spec import specs
    from attnrepro.report.html import build_report

    if refresh_reference and CHECKOUT is None and not (figures and set(figures) <= set(_outside_references(""))):
        raise UsageError("refresh_reference=true needs a source checkout (git clone; pip install -e .): "
                         "an installed wheel's reference is its packaged, read-only copy (a paper installed from "
                         "outside refreshes its own with figures=<its figures>)")
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
    if with_data and not figures:
        figures = _with_data(outputs)
    report = build_report(outputs, figures, workers)
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


def _with_data(outputs: str) -> list[str] | None:
    """The registered figures with data in <outputs>/results/status.json (a table with rows, a table error, or
    records of a source experiment: complete, failed, stale, corrupt or of another grid), None when that is
    every one (the whole report, as before); prints one line naming those skipped. UsageError when none has."""
    from attnrepro.report.aggregate import read_status
    from attnrepro.report.figure_spec import specs

    status = read_status(outputs)
    experiments, tables = status.get("experiments", {}), status.get("figures", {})

    def recorded(exp: dict) -> bool:
        th = exp.get("theory") or {}
        return bool(exp.get("complete") or exp.get("other") or any(exp.get(k) for k in ("failed", "stale", "corrupt"))
                    or th.get("complete") or any(th.get(k) for k in ("failed", "stale", "corrupt")))

    def has_data(spec) -> bool:
        entry = tables.get(spec.name)
        if entry is None:  # not aggregated (for this profile): a table on disk, if any, is not this profile's
            return False
        return bool(entry.get("error") or entry.get("rows") or any(recorded(experiments.get(e) or {})
                                                                   for e in spec.sources))

    registered = specs()
    drawn = [s.name for s in registered if has_data(s)]
    skipped = [s.name for s in registered if s.name not in drawn]
    if not drawn:
        raise UsageError(f"no figure has data in {outputs}/results: run `attnrepro aggregate profile=<profile>` after "
                         "training (figures=<figure>,... draws figures without data)")
    if not skipped:
        return None
    print(f"{len(skipped)} of {len(registered)} registered figures skipped, no data in {outputs}/results: "
          f"{', '.join(skipped)} (draw them anyway: figures={','.join(skipped)})")
    return drawn


def _outside_references(profile: str) -> dict:
    """{figure: its reference claims table} of the figures of papers installed from outside (each keeps its
    own, <package>/reference/claims_<profile>.csv); attnrepro's figures are not listed."""
    from attnrepro.papers import is_external, owner, package_dir
    from attnrepro.report.figure_spec import specs

    out = {}
    for spec in specs():
        package = owner(spec.table.__module__)
        if package is not None and is_external(package):
            out[spec.name] = package_dir(package) / "reference" / f"claims_{profile}.csv"
    return out


def _refresh(report, profile: str | None, figures: list[str] | None) -> None:
    """This run's claims become the profile's reference: all of it, or, when the run drew some figures (figures=,
    or the figures with data of a run without figures=), those figures' rows: every other figure's reference
    rows are kept, so figures skipped for lack of data never lose theirs. The claims of a paper installed from
    outside go to its own reference table, the others to attnrepro's reference/."""
    import pandas as pd

    from attnrepro.jobs.records import atomic_write
    from attnrepro.report.claims_diff import reference_path

    if not profile or report.errors:
        raise UsageError("refresh_reference needs figures rendered without errors, of a known profile")
    outside = _outside_references(profile)
    claims = report.claims
    targets = {reference_path(profile): claims[~claims["figure"].isin(list(outside))]}
    for figure, path in outside.items():
        targets.setdefault(path, claims.iloc[:0])
        targets[path] = pd.concat([targets[path], claims[claims["figure"] == figure]], ignore_index=True)
    for path, part in targets.items():
        if part.empty:
            continue  # nothing of this table drawn here: left as it is
        if figures and path.exists():
            kept = pd.read_csv(path)
            part = pd.concat([kept[~kept["figure"].isin(figures)], part], ignore_index=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda f, part=part: part.to_csv(f, index=False), newline="")
        print(f"reference claims of profile {profile}: {path} ({len(part)} claims"
              + (f", those of {', '.join(figures)} from this run" if figures else "") + "); commit it")


def main(argv: list[str]) -> int:
    args = parse(argv, {"figures": [], "profile": "", "outputs": default_outputs(), "wandb": False,
                        "refresh_reference": False, "workers": str(os.cpu_count() or 1)}, __doc__)
    return render(args["outputs"], args["figures"] or None, args["profile"] or None, args["wandb"],
                  args["refresh_reference"], with_data=True, workers=worker_count(args["workers"]))
