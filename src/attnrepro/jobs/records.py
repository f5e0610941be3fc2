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

SCHEMA = 1
REQUIRED = ("schema", "key", "experiment", "status", "config")


class CorruptRecord(ValueError):
    """A record file that cannot be read or lacks required fields."""


def record_path(outputs: str | Path, experiment: str, key: str) -> Path:
    return Path(outputs) / "runs" / experiment / key / "record.json"


def atomic_write(path: Path, write: Callable[[TextIO], None], newline: str | None = None) -> None:
    """write(f) into a unique temp file beside path, fsync, then rename onto path.

    Readers see the old file or the new one, never a half one, and two processes
    writing the same path at once each rename a complete file of their own.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline=newline) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
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
    if rec["status"] == "complete" and "metrics" not in rec:
        raise CorruptRecord(f"{path}: complete but has no metrics")
    return rec


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
