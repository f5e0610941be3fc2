"""One kind of cached job, for training runs, theory curves and derived analyses alike.

A job is a key (a hash of what decides its numbers), the record file it writes, and the
modules that compute it (its provenance roots). ``state`` reads the record back as one typed
status; ``execute`` computes the job's fields and writes the record atomically, a failure
recorded with its reason and never raised. A complete record made by other code (another
fingerprint of the roots' modules, or none) is stale: it is computed again.

Record: {schema, kind, key, experiment, status, config, provenance, started, timings, ...fields}.
"""

from __future__ import annotations

import hashlib
import json
import time
import traceback
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Callable

from attnrepro.jobs.environment import free_cycles, keep_freed_memory
from attnrepro.jobs.provenance import NOT_FOLLOWED, fingerprint, provenance
from attnrepro.jobs.records import SCHEMA, CorruptRecord, read_record, write_record


class Status(str, Enum):
    complete = "complete"
    failed = "failed"
    stale = "stale"  # complete, but made by other code
    missing = "missing"
    corrupt = "corrupt"


@dataclass(frozen=True)
class State:
    status: Status
    record: dict | None = None
    reason: str = ""

    @property
    def done(self) -> bool:
        return self.status is Status.complete


def digest(blob: object) -> str:
    """The key of anything JSON-able: sha256 of its canonical JSON, 16 hex digits."""
    text = json.dumps(blob, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Job:
    kind: str  # "train", "theory" or "derived"
    experiment: str
    key: str
    path: Path
    config: dict  # what the key hashes, kept in the record
    roots: tuple[str, ...]  # the modules that compute it (provenance)
    label: str = ""
    skip: tuple[str, ...] = NOT_FOLLOWED  # modules the fingerprint does not follow (provenance.closure)

    def state(self) -> State:
        return state_of(self.path, self.key, self.roots, skip=self.skip)

    def execute(self, compute: Callable[[], dict], extra: dict | None = None,
                before_write: Callable[[dict], None] | None = None) -> dict:
        """Compute the job's record fields (status 'complete'), or record the failure; hand the
        record to before_write (e.g. a tracker), then write it: the record, written last, marks
        the job done. The process keeps its freed memory from then on (environment.keep_freed_memory), and the
        job's reference cycles are freed when it is done (environment.free_cycles)."""
        keep_freed_memory()
        record = {"schema": SCHEMA, "kind": self.kind, "key": self.key, "experiment": self.experiment,
                  "status": "running", "config": self.config, "provenance": provenance(self.roots, self.skip),
                  "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **(extra or {})}
        t0 = time.perf_counter()
        try:
            record.update(compute())
            record["status"] = "complete"
        except Exception as e:  # recorded, never lost: the other jobs go on
            record.update(status="failed", reason=f"{type(e).__name__}: {e}", traceback=traceback.format_exc(limit=8))
        record.setdefault("timings", {})["total_s"] = time.perf_counter() - t0
        if before_write is not None:
            before_write(record)
        write_record(self.path, record)
        free_cycles()
        return record


def state_of(path: Path, key: str, roots: tuple[str, ...], record: dict | None = None,
             skip: tuple[str, ...] = NOT_FOLLOWED) -> State:
    """The one status reader: missing, corrupt (unreadable, or its key is not the folder's), failed
    (with its reason), stale (complete but by other code) or complete. record: the file's content
    when already read."""
    if record is None:
        try:
            record = read_record(path)
        except FileNotFoundError:
            return State(Status.missing)
        except CorruptRecord as e:
            return State(Status.corrupt, reason=str(e))
    if record["key"] != key:
        return State(Status.corrupt, record, f"{path}: key field {record['key']!r} does not match {key!r}")
    if record["status"] != "complete":
        return State(Status.failed, record, record.get("reason", ""))
    made_by = (record.get("provenance") or {}).get("fingerprint")
    if made_by != fingerprint(tuple(roots), tuple(skip)):
        return State(Status.stale, record, "made by other code" if made_by else "made before records had provenance")
    return State(Status.complete, record)
