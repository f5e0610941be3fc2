"""Derived analyses (a spectrum fit, an error decomposition) as cached jobs, keyed by what they read.

A figure's table calls ``cached(outputs, name, inputs, compute)`` instead of ``compute()``: the
key hashes the analysis' name and its inputs (the records' keys and the numbers it reads), the
record (jobs.job, the result's columns as ``metrics``) lies at
<outputs>/derived/<name>/<key>/record.json and is stale when the analysis' modules, or any
attnrepro module they import (report and stats helpers included), changed, so
the aggregate stage only reads and joins. A failed analysis is recorded and raised again, for
the figure's table to report.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable

import pandas as pd

from attnrepro.jobs.job import Job, digest


def frame_digest(df: pd.DataFrame) -> str:
    """A content hash of a frame (its columns and every value), to key an analysis by the data it reads."""
    h = hashlib.sha256(",".join(map(str, df.columns)).encode())
    h.update(pd.util.hash_pandas_object(df, index=False).to_numpy().tobytes())
    return h.hexdigest()[:16]


def derived_job(outputs: str | Path, name: str, inputs: object, roots: tuple[str, ...]) -> Job:
    key = digest({"analysis": name, "inputs": inputs})
    return Job("derived", name, key, Path(outputs) / "derived" / name / key / "record.json",
               {"analysis": name, "inputs_key": key}, tuple(roots), name, skip=())


def cached(outputs: str | Path | None, name: str, inputs: object, compute: Callable[[], pd.DataFrame],
           roots: tuple[str, ...]) -> pd.DataFrame:
    """compute()'s frame, read from its record when one made by this code exists (outputs None: not cached).

    inputs: JSON-able, everything the result depends on besides the code (roots: the modules that
    compute it)."""
    if outputs is None:
        return compute()
    job = derived_job(outputs, name, inputs, roots)
    state = job.state()
    record = state.record if state.done else job.execute(lambda: {"metrics": compute().to_dict(orient="list")})
    if record["status"] != "complete":
        raise RuntimeError(f"derived analysis {name} failed: {record['reason']}")
    return pd.DataFrame(record["metrics"])
