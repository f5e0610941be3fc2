"""Job records: one JSON file per job, written atomically, read back with checks.

Layout: <outputs>/runs/<experiment>/<key>/record.json (training), <outputs>/theory/<curve>/<key>/
(theory curves), <outputs>/derived/<analysis>/<key>/ (derived analyses); jobs.job says what a record
holds and reads its status. Later stages read nothing else.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Callable, Iterator, TextIO

# the record layout: 2 (2026-12-04) moved a training record's learning rate and stop reasons from `derived` to
# `fit`, and its config's model.name to model.family; a training record of layout 1 reads as stale
SCHEMA = 2
_UMASK = os.umask(0o022)
os.umask(_UMASK)  # read once: a file written here gets the mode open() would give it, not mkstemp's 0600
REQUIRED = ("schema", "key", "experiment", "status", "config")


class CorruptRecord(ValueError):
    """A record file that cannot be read or lacks required fields."""


def record_path(outputs: str | Path, experiment: str, key: str) -> Path:
    return Path(outputs) / "runs" / experiment / key / "record.json"


def atomic_write(path: Path, write: Callable[[TextIO], None], newline: str | None = None,
                 binary: bool = False) -> None:
    """write(f) into a unique temp file beside path (opened "wb" when binary), fsync, then rename onto path.

    Readers see the old file or the new one, never a half one, and two processes
    writing the same path at once each rename a complete file of their own. When the write fails (a
    full disk, say) the old file stays and the temp file is removed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"newline": newline})) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:  # name the file meant, not the temp file
        Path(tmp).unlink(missing_ok=True)
        raise OSError(e.errno, e.strerror or str(e), str(path)) from e
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_record(path: Path, record: dict) -> None:
    """Write atomically (temp file in the same folder, fsync, rename): never a half record."""
    atomic_write(path, lambda f: json.dump(record, f, allow_nan=True))


def read_record(path: Path) -> dict:
    """The record at path; FileNotFoundError when there is none, CorruptRecord when it cannot be used."""
    try:
        rec = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as e:
        raise CorruptRecord(f"{path}: unreadable ({e})") from e
    if not isinstance(rec, dict) or any(k not in rec for k in REQUIRED):
        missing = [k for k in REQUIRED if not isinstance(rec, dict) or k not in rec]
        raise CorruptRecord(f"{path}: missing fields {missing}")
    if rec["status"] == "complete":
        problem = _metrics_problem(rec)
        if problem:
            raise CorruptRecord(f"{path}: complete but {problem}")
    return rec


def _metrics_problem(rec: dict) -> str:
    """What is wrong with a complete record's metrics ('' when nothing): a map of columns, and for a
    training record a non-empty one with a list of n_seeds numbers (or nulls) per metric."""
    metrics = rec.get("metrics")
    if not isinstance(metrics, dict):
        return f"its metrics are {type(metrics).__name__}, not a map" if "metrics" in rec else "has no metrics"
    if rec.get("kind", "train") != "train":
        return ""
    if not metrics:
        return "its metrics are empty"
    n = rec["config"].get("n_seeds") if isinstance(rec["config"], dict) else None
    for name, values in metrics.items():
        if not isinstance(values, list) or (isinstance(n, int) and len(values) != n):
            return f"metric {name!r} is not a list of {n} values, one per seed"
        if not all(v is None or isinstance(v, (int, float)) for v in values):
            return f"metric {name!r} holds values that are not numbers"
    return ""


def scan(outputs: str | Path, experiment: str) -> Iterator[tuple[Path, dict | CorruptRecord]]:
    """Every record file of an experiment, as (path, record) or (path, CorruptRecord)."""
    root = Path(outputs) / "runs" / experiment
    for path in sorted(root.glob("*/record.json")):
        try:
            yield path, read_record(path)
        except FileNotFoundError:  # removed since the listing
            continue
        except CorruptRecord as e:
            yield path, e
