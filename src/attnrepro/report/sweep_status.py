"""The status of an experiment's sweep, read from its records: what the profile's grid expects, what is
complete, failed, stale, corrupt or missing, and the frames (report.tables) of its complete records.

status = {experiment, profile, grid, expected, complete, failed, stale, corrupt, missing, other, mixed,
repeated_seeds, grid_error, example_config} (see :func:`load_experiment`); :func:`status_line` says it in
one line. Records outside the grid are pooled by report.pooling.
"""

from __future__ import annotations

import functools
from pathlib import Path

from attnrepro.jobs.job import State, Status
from attnrepro.jobs.records import CorruptRecord, scan
from attnrepro.jobs.training import record_state
from attnrepro.report.pooling import pooled, without
from attnrepro.report.tables import ExperimentData, frames


@functools.lru_cache(maxsize=None)
def expected(experiment: str, profile: str, outputs: str) -> tuple[list[tuple[list[str], str]] | None, dict, str]:
    """(expected jobs or None, the profile's grid, error message): what the sweep should have run."""
    from omegaconf import OmegaConf

    from attnrepro.jobs import grid

    try:
        jobs = grid.expected_jobs(experiment, profile, outputs=outputs)
        cfg = grid.base_config(experiment, profile)
        spec = OmegaConf.to_container(cfg.grid, resolve=False).get(profile, {})
        return jobs, spec, ""
    except Exception as e:  # a broken conf must not hide the records we have
        return None, {}, f"{type(e).__name__}: {e}"


def _state(path: Path, rec: dict | CorruptRecord) -> State:
    """The typed status of a scanned record (jobs.job.state_of: corrupt, failed, stale, complete)."""
    if isinstance(rec, CorruptRecord):
        return State(Status.corrupt, reason=str(rec))
    try:
        return record_state(path, rec)
    except (KeyError, TypeError, ValueError) as e:  # a config that names no known task or model
        return State(Status.corrupt, rec, f"{path}: {type(e).__name__}: {e}")


def load_experiment(outputs: str | Path, experiment: str, profile: str, all_records: bool = False) -> ExperimentData:
    """Frames of the experiment's complete records in the profile's grid, and its status:

    status = {experiment, profile, grid, expected, complete, failed: [{key, overrides, reason}],
    stale: [{key, overrides, reason}] (complete records made by other code: left out until the
    sweep runs them again), corrupt: [{key, path, error}], missing: [{key, overrides}], other
    (records of the experiment not in this profile's grid: ignored), mixed, repeated_seeds: [[key,
    replica]] (both from pooled, with all_records only), grid_error, example_config}.
    When the grid cannot be expanded (grid_error), or with all_records (runs made with your own
    overrides), every complete record is used, less the seeds that repeat an earlier record's; the
    points reached by more than one training protocol are listed in status["mixed"] (see pooled).
    """
    jobs, grid_spec, grid_error = expected(experiment, profile, str(outputs))
    if all_records:
        jobs = None
    want = None if jobs is None else {key: ov for ov, key in jobs}
    scanned = {path.parent.name: (path, _state(path, rec)) for path, rec in scan(outputs, experiment)}
    order = list(want) if want is not None else sorted(scanned)  # lists follow the grid's order
    found: dict[str, tuple[Path, State]] = {k: scanned[k] for k in order if k in scanned}
    other = len(scanned) - len(found)
    complete = [s.record for _, s in found.values() if s.status is Status.complete]
    final, curves, arrays, bad = frames(complete)
    bad_keys = {b["key"] for b in bad}
    mixed, repeats = [], set()
    if want is None:
        mixed, repeats = pooled([r for r in complete if r["key"] not in bad_keys], grid_spec)
        final, curves, arrays = (without(df, repeats) for df in (final, curves, arrays))

    def overrides(key: str, state: State) -> list[str]:
        return (want or {}).get(key) or (state.record or {}).get("overrides", [])

    def listed(status: Status) -> list[dict]:
        return [{"key": k, "overrides": overrides(k, s), "reason": s.reason} for k, (_, s) in found.items()
                if s.status is status]

    status = {
        "experiment": experiment, "profile": profile, "grid": grid_spec, "grid_error": grid_error,
        "expected": len(want) if want is not None else None,
        "complete": len(complete) - len(bad),
        "failed": listed(Status.failed),
        "stale": listed(Status.stale),
        "corrupt": [{"key": k, "path": str(p), "error": s.reason} for k, (p, s) in found.items()
                    if s.status is Status.corrupt]
        + [{"key": b["key"], "path": str(found[b["key"]][0]), "error": b["error"]} for b in bad],
        "missing": [{"key": k, "overrides": ov} for k, ov in (want or {}).items()
                    if k not in found],
        "other": other,
        "mixed": mixed,
        "repeated_seeds": sorted([k, r] for k, r in repeats),
        "example_config": next(({"overrides": r.get("overrides", []), "config": r["config"]}
                                for r in complete if r["key"] not in bad_keys), None),
    }
    return ExperimentData(experiment, final, curves, arrays, status, outputs=Path(outputs))


def status_line(status: dict) -> str:
    """'xor_phase_dm: 34/36 complete, 1 failed, 0 corrupt, 1 missing' (+ records of other grids)."""
    exp = status.get("expected")
    line = (f"{status['experiment']}: {status['complete']}/{exp if exp is not None else '?'} complete, "
            f"{len(status['failed'])} failed, {len(status.get('stale', []))} stale, {len(status['corrupt'])} corrupt, "
            f"{len(status['missing'])} missing")
    if status.get("other"):
        line += f", {status['other']} records not in this profile's grid (other profile or config) ignored"
    if status.get("repeated_seeds"):
        line += f", {len(status['repeated_seeds'])} seeds already in another record left out"
    if status.get("mixed"):
        line += (f"; WARNING: {len(status['mixed'])} points pool records of different training protocols "
                 f"(status.json: experiments.{status['experiment']}.mixed)")
    th = status.get("theory")
    if th:
        line += (f"; theory {th['complete']}/{th['expected'] + th.get('other', 0)} curves, {len(th['failed'])} failed, "
                 f"{len(th.get('stale', []))} stale, {len(th['missing'])} missing")
        if th.get("other"):
            line += f" (all_records: {th['other']} computed at other points)"
    return line
