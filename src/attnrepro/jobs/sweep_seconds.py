"""Measured wall seconds of each experiment's sweep per profile: reference/sweep_seconds.csv (committed;
`reproduce` writes a run's own to <outputs>/report/sweep_seconds.csv), rows profile,experiment,seconds,
jobs_run with seconds the whole grid's. `reproduce` orders its sweeps by them, and packed SLURM arrays
size their tasks by the seconds per job.
"""

from __future__ import annotations

import csv
from pathlib import Path

from attnrepro.locations import REFERENCE_DIR

SWEEP_SECONDS = REFERENCE_DIR / "sweep_seconds.csv"


def read_sweep_seconds(profile: str, path: Path = SWEEP_SECONDS) -> dict[str, float]:
    """{experiment: seconds} of the profile's sweeps as last measured (empty when the table is missing
    or unreadable: the order then falls back to job counts)."""
    try:
        with open(path, newline="") as f:
            return {r["experiment"]: float(r["seconds"]) for r in csv.DictReader(f) if r["profile"] == profile}
    except (OSError, KeyError, ValueError):
        return {}


def outputs_table(outputs: str | Path) -> Path:
    """Where `reproduce` writes the sweep seconds it measured: <outputs>/report/sweep_seconds.csv."""
    return Path(outputs) / "report" / "sweep_seconds.csv"


def write_sweep_seconds(path: Path, profile: str, times: dict[str, float], pending: dict[str, int | None],
                        sizes: dict[str, int]) -> None:
    """Each finished sweep's wall time as profile,experiment,seconds,jobs_run rows; seconds is the whole
    grid's (the measured time x grid size / jobs run, when only some jobs ran)."""
    rows = []
    for n, t in times.items():
        ran = pending[n] or sizes.get(n) or 1
        rows.append([profile, n, f"{t * max(sizes.get(n) or ran, ran) / ran:.1f}", ran])
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["profile", "experiment", "seconds", "jobs_run"])
        w.writerows(sorted(rows, key=lambda r: -float(r[2])))


def job_seconds(experiment: str, profile: str, grid_size: int, path: Path = SWEEP_SECONDS) -> float | None:
    """The measured seconds per job of the experiment's sweep (None when not measured)."""
    seconds = read_sweep_seconds(profile, path).get(experiment)
    return seconds / max(grid_size, 1) if seconds is not None else None
