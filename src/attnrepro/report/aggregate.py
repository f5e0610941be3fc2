"""Aggregation stage: records -> outputs/results/<figure>.parquet and outputs/results/status.json.

status.json = {"profile": ..., "experiments": {experiment: status (sweep_status.load_experiment)},
"figures": {figure: {"sources": [...], "rows": n, "error": ""}}}. Aggregating a subset of
figures updates their entries and keeps the others (when the profile is the same).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Sequence

import pandas as pd

from attnrepro.jobs.records import atomic_write
from attnrepro.jobs.theory import load as load_theory
from attnrepro.jobs.theory import theory_experiments, theory_settings
from attnrepro.report.figure_spec import error_text, specs
from attnrepro.report.sweep_status import load_experiment, status_line
from attnrepro.report.tables import ExperimentData


def default_outputs() -> Path:
    return Path(os.environ.get("ATTNREPRO_OUTPUTS", "outputs"))


def results_dir(outputs: str | Path) -> Path:
    return Path(outputs) / "results"


def table_path(outputs: str | Path, figure: str) -> Path:
    return results_dir(outputs) / f"{figure}.parquet"


def status_path(outputs: str | Path) -> Path:
    return results_dir(outputs) / "status.json"


class CorruptStatus(ValueError):
    """status.json exists but cannot be read: `attnrepro aggregate` rebuilds it from the records."""


def read_status(outputs: str | Path) -> dict:
    """The aggregate's status ({} before the first aggregate); CorruptStatus when the file is unreadable."""
    path = status_path(outputs)
    try:
        status = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise CorruptStatus(f"{path} is unreadable ({type(e).__name__}: {e}); `attnrepro aggregate` rebuilds it "
                            "from the records") from e
    if not isinstance(status, dict):
        raise CorruptStatus(f"{path} is not a status map; `attnrepro aggregate` rebuilds it from the records")
    return status


def _jsonable(x):
    """NaN -> None, numpy scalars -> Python, recursively (status.json stays strict JSON)."""
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def write_table(df: pd.DataFrame, path: Path) -> None:
    """Parquet, written atomically (records.atomic_write: the old file or the new one, never a half one).
    Object columns that Arrow cannot type (mixed values) are written as strings, missing values kept."""
    try:
        atomic_write(path, lambda f: df.to_parquet(f, index=False), binary=True)
    except (TypeError, ValueError, ArithmeticError):  # what pyarrow's ArrowInvalid/ArrowTypeError derive from
        df = df.copy()
        for col in df.select_dtypes(include="object").columns:
            df[col] = df[col].map(lambda v: v if v is None else str(v))
        atomic_write(path, lambda f: df.to_parquet(f, index=False), binary=True)


def read_table(path: Path) -> pd.DataFrame | None:
    """A saved table (None when there is none); OSError with one line naming the file when it is unreadable."""
    if not path.exists():
        return None
    try:
        return pd.read_parquet(path)
    except Exception as e:  # pyarrow's errors: a truncated or foreign file
        raise OSError(f"{path} is unreadable ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
                      "`attnrepro aggregate` rebuilds it") from e


def aggregate(outputs: str | Path, profile: str, names: Sequence[str] | None = None,
              log=print, all_records: bool = False) -> dict:
    """Build and save the table of every selected figure; returns the status written.
    A bad record is listed in the status, a figure whose table fails gets an error entry.
    all_records: use every complete record, not only those of the profile's grid (theory curves too: at
    every parameter point computed under the profile's theory settings)."""
    outputs = Path(outputs)
    selected = specs(names)
    data: dict[str, ExperimentData] = {}
    settings = None
    for exp in sorted({s for spec in selected for s in spec.sources}):
        data[exp] = load_experiment(outputs, exp, profile, all_records)
        if exp in theory_experiments():
            try:
                settings = settings or theory_settings(profile, [f"paths.outputs={outputs}"])
                data[exp].theory, data[exp].status["theory"] = load_theory(exp, settings, all_records)
            except Exception as e:  # a broken theory conf must not hide the simulations
                data[exp].status["theory_error"] = error_text(e)
                log(f"{exp}: THEORY NOT LOADED: {type(e).__name__}: {e}")
        log(status_line(data[exp].status))
    try:
        old = read_status(outputs)
    except CorruptStatus as e:
        log(f"{e}: rebuilt")
        old = {}
    status = old if old.get("profile") == profile else {}
    status["profile"] = profile
    status.setdefault("experiments", {}).update({e: d.status for e, d in data.items()})
    figures = status.setdefault("figures", {})
    for spec in selected:
        entry = {"sources": list(spec.sources), "rows": 0, "error": ""}
        try:
            table = spec.table({e: data[e] for e in spec.sources})
        except Exception as e:  # one figure's table must not stop the others
            entry["error"] = error_text(e)
            table_path(outputs, spec.name).unlink(missing_ok=True)  # never leave a stale table behind
        else:
            try:
                write_table(table, table_path(outputs, spec.name))
                entry["rows"] = len(table)
            except OSError as e:  # a full disk, a read-only folder: the earlier table is kept, said so
                entry["error"] = (f"table not written: {type(e).__name__}: {e}; the file on disk, if any, is from "
                                  "an earlier aggregate")
        figures[spec.name] = entry
        log(f"{spec.name}: " + (f"TABLE FAILED: {entry['error'].splitlines()[-1]}" if entry["error"]
                                else f"{entry['rows']} rows -> {table_path(outputs, spec.name)}"))
    atomic_write(status_path(outputs), lambda f: json.dump(_jsonable(status), f, indent=1))
    return status
