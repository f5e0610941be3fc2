"""Aggregation stage: records -> outputs/results/<figure>.parquet and outputs/results/status.json.

status.json = {"profile": ..., "experiments": {experiment: status (tables.load_experiment)},
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

from attnrepro.jobs.theory import load as load_theory
from attnrepro.jobs.theory import theory_experiments, theory_settings
from attnrepro.report.figure_spec import error_text, specs
from attnrepro.report.tables import ExperimentData, load_experiment, status_line


def default_outputs() -> Path:
    return Path(os.environ.get("ATTNREPRO_OUTPUTS", "outputs"))


def results_dir(outputs: str | Path) -> Path:
    return Path(outputs) / "results"


def table_path(outputs: str | Path, figure: str) -> Path:
    return results_dir(outputs) / f"{figure}.parquet"


def status_path(outputs: str | Path) -> Path:
    return results_dir(outputs) / "status.json"


def read_status(outputs: str | Path) -> dict:
    path = status_path(outputs)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


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
    """Parquet, via a temp file then a rename. Object columns that Arrow cannot type (mixed
    values) are written as strings, missing values kept."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".parquet.tmp")
    try:
        df.to_parquet(tmp, index=False)
    except (TypeError, ValueError, ArithmeticError):  # what pyarrow's ArrowInvalid/ArrowTypeError derive from
        df = df.copy()
        for col in df.select_dtypes(include="object").columns:
            df[col] = df[col].map(lambda v: v if v is None else str(v))
        df.to_parquet(tmp, index=False)
    os.replace(tmp, path)


def aggregate(outputs: str | Path, profile: str, names: Sequence[str] | None = None,
              log=print, all_records: bool = False) -> dict:
    """Build and save the table of every selected figure; returns the status written.
    A bad record is listed in the status, a figure whose table fails gets an error entry.
    all_records: use every complete record, not only those of the profile's grid."""
    outputs = Path(outputs)
    selected = specs(names)
    data: dict[str, ExperimentData] = {}
    settings = None
    for exp in sorted({s for spec in selected for s in spec.sources}):
        data[exp] = load_experiment(outputs, exp, profile, all_records)
        if exp in theory_experiments():
            try:
                settings = settings or theory_settings(profile, [f"paths.outputs={outputs}"])
                data[exp].theory, data[exp].status["theory"] = load_theory(exp, settings)
            except Exception as e:  # a broken theory conf must not hide the simulations
                data[exp].status["theory_error"] = error_text(e)
                log(f"{exp}: THEORY NOT LOADED: {type(e).__name__}: {e}")
        log(status_line(data[exp].status))
    old = read_status(outputs)
    status = old if old.get("profile") == profile else {}
    status["profile"] = profile
    status.setdefault("experiments", {}).update({e: d.status for e, d in data.items()})
    figures = status.setdefault("figures", {})
    for spec in selected:
        entry = {"sources": list(spec.sources), "rows": 0, "error": ""}
        try:
            table = spec.table({e: data[e] for e in spec.sources})
            write_table(table, table_path(outputs, spec.name))
            entry["rows"] = len(table)
        except Exception as e:  # one figure's table must not stop the others
            entry["error"] = error_text(e)
            table_path(outputs, spec.name).unlink(missing_ok=True)  # never leave a stale table behind
        figures[spec.name] = entry
        log(f"{spec.name}: " + (f"TABLE FAILED: {entry['error'].splitlines()[-1]}" if entry["error"]
                                else f"{entry['rows']} rows -> {table_path(outputs, spec.name)}"))
    path = status_path(outputs)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_jsonable(status), indent=1))
    return status
