"""SLURM job arrays of packed jobs: checked before submission, waited on without hanging, never twice.

A sweep through a submitit SLURM launcher (hydra/launcher=slurm, slurm_gpu) becomes one job array whose
every task runs a chunk of the sweep's jobs in one process (torch and Lightning imported once, about
10 s of a core, against well under a second of work for a small job). The theory stage packs its
curves the same way. Chunks: ``per_task = floor(task_minutes * 60 / job_seconds)`` jobs, interleaved
over the grid's order (which mostly runs from small to large), with job_seconds the measured seconds per
job of the sweep (reference/sweep_seconds.csv) or an estimate the user gives; a chunk's estimate is
kept below half the task's time limit. A sweep that would fill fewer tasks than the partition runs at once
(``slots``) is spread over up to that many, about TASK_START_S of work or more each.

Before submitting, the request (CPUs, memory, GPUs and gres, time limit, array size) is checked against
the cluster (jobs.cluster.check_request): a request no node can meet is one line naming the option to
change. Every submission is appended to <outputs>/cache/slurm/submissions.jsonl (array id, kind,
experiment, each task's job keys). While waiting, squeue (sacct for finished tasks) is read every few
seconds: a task pending for a reason waiting cannot resolve (PartitionTimeLimit, ...) ends the wait
with that reason, and the arrays are cancelled (``on_hopeless=cancel``) or left (``leave``); a task
that ended without writing its jobs' records (cancelled, timed out, killed) leaves them missing, said
so, and the next sweep runs them. Records, keys and resume are those of any other launcher: a job is
done when its record is complete.

A job already in a live array of this outputs folder (queued or running: a rerun while the first
waits, or after it was stopped) is not submitted again: the sweep waits for that array instead.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

from attnrepro.jobs import cluster

TRAIN, THEORY = "train", "theory"
POLL_S = (2, 5, 10, 15)  # seconds between queue reads: quick at first, then at most 15 s
RECORDS_S = 1.0          # seconds between looks at the records (a file read each): the wait ends when all are written
PROGRESS_S = 60.0        # a waiting sweep says where it stands every this many seconds
GRACE_S = 30.0           # a task neither squeue nor sacct knows this soon after submission is still live


@dataclass(frozen=True)
class Unit:
    """One job an array task computes: its key, and what the task needs to rebuild it (a training job's
    overrides; a theory job's experiment and key)."""

    key: str
    spec: list


@dataclass
class Submission:
    """One job array: its id, what it computes, each task's job keys and SLURM id ("12_3"; "12" for an
    array of one task, which submitit submits as a plain job), where submitit keeps its files."""

    array: str
    kind: str
    experiment: str
    tasks: list[list[str]]
    folder: str
    submitted: float
    ids: list[str]

    def task_of(self, key: str) -> str | None:
        return next((self.ids[i] for i, keys in enumerate(self.tasks) if key in keys), None)


def ledger_path(outputs: str | Path) -> Path:
    return Path(outputs) / "cache" / "slurm" / "submissions.jsonl"


def _record(outputs: str | Path, sub: Submission) -> None:
    """Append the submission to the folder's ledger (one line, one write: appends do not interleave)."""
    path = ledger_path(outputs)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(asdict(sub)) + "\n")


def submissions(outputs: str | Path) -> list[Submission]:
    """Every submission of the ledger (a damaged line is skipped)."""
    out = []
    try:
        lines = ledger_path(outputs).read_text().splitlines()
    except FileNotFoundError:
        return out
    for line in lines:
        try:
            out.append(Submission(**json.loads(line)))
        except (ValueError, TypeError):
            continue
    return out


def _ours(st: cluster.TaskState | None, sub: Submission) -> cluster.TaskState | None:
    """st, unless its batch script lies outside sub's submitit folder: then the id is another job's (a cluster
    whose state was reset numbers its jobs from 1 again), and sub's task is gone (None)."""
    if st is None or not st.command or not sub.folder:
        return st
    return st if st.command.startswith(str(Path(sub.folder)) + "/") else None


def _live(states: dict[str, cluster.TaskState], sub: Submission, now: float) -> dict[str, cluster.TaskState]:
    """The tasks of sub that are queued or running (UNKNOWN counts as live just after submission)."""
    out = {}
    for tid in sub.ids:
        st = _ours(states.get(tid) or states.get(sub.array), sub)
        if st is None:
            continue
        if not st.finished and (st.state != "UNKNOWN" or now - sub.submitted < GRACE_S):
            out[tid] = st
    return out


def in_flight(outputs: str | Path, keys: Sequence[str], run=cluster.run_command) -> dict[str, str]:
    """{job key: task id} of these jobs that a live array of this outputs folder already computes."""
    wanted, subs = set(keys), submissions(outputs)
    if not wanted or not subs:
        return {}
    states = cluster.queue_state([s.array for s in subs], run)
    now, out = time.time(), {}
    for sub in subs:
        live = _live(states, sub, now)
        for tid, task_keys in zip(sub.ids, sub.tasks, strict=True):
            if tid in live:
                out.update({k: tid for k in task_keys if k in wanted})
    return out


# The least work (seconds) a task is given when a short sweep is spread over the partition's CPUs: a task's
# start (Python, torch, Lightning) costs 5-10 s of a core here.
TASK_START_S = 5.0


def chunks(n: int, job_seconds: float, task_seconds: float, timeout_min: float | None,
           max_tasks: int | None = None, slots: int = 1) -> list[list[int]]:
    """Indices 0..n-1 in tasks of about task_seconds (at most half the time limit), interleaved; at most
    max_tasks tasks (the cluster's MaxArraySize: then longer tasks). A sweep that would fill fewer tasks
    than the partition runs at once (`slots`) is spread over up to that many, as long as they still get
    TASK_START_S of work each on average: its tasks run side by side instead of one after the other."""
    budget = task_seconds if not timeout_min else min(task_seconds, 30.0 * timeout_min)
    per_task = max(1, int(budget // max(job_seconds, 1e-3)))
    spread = min(n, slots, int(n * job_seconds // TASK_START_S))
    tasks = max(1, min(max(math.ceil(n / per_task), spread), max_tasks or n))
    return [list(range(i, n, tasks)) for i in range(tasks)]


def slots(launcher: dict, limits: dict[str, cluster.PartitionLimits]) -> int:
    """How many tasks of this request the partition runs at once: per node, its CPUs over cpus_per_task and
    its memory over the task's, summed, and at most array_parallelism (1 for a request of GPUs, or a
    partition the limits do not list)."""
    request = cluster.Request.from_launcher(launcher)
    part = next((limits[n] for n in cluster.partition_names(request, limits) if n in limits), None)
    if part is None or request.gpus_per_node or request.gres:
        return 1
    per_task, mem = max(1, request.cpus_per_task), request.mem_mb()
    fits = [min(c // per_task, int(m // mem) if mem else c) for c, m in zip(part.cpus_per_node, part.mem_per_node_mb)]
    return max(1, min(sum(fits), int(launcher.get("array_parallelism") or sum(fits))))


def executor(launcher: dict, folder: Path):
    """A submitit SLURM executor with the launcher's options, as hydra-submitit-launcher builds it (its
    BaseQueueConf keys as they are, the others prefixed slurm_)."""
    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from omegaconf import OmegaConf

    params = {k: v for k, v in launcher.items() if k not in ("_target_", "submitit_folder")}
    init = {"folder": str(folder)}
    if "max_num_timeout" in params:
        init["slurm_max_num_timeout"] = params.pop("max_num_timeout")
    ex = submitit.AutoExecutor(cluster="slurm", **init)
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    ex.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in params.items()})
    return ex


def check(launcher: dict, array_size: int, run=cluster.run_command) -> list[str]:
    """One line per way the request cannot run on this cluster (empty: it fits)."""
    return cluster.check_request(cluster.Request.from_launcher(launcher, array_size), cluster.cluster_limits(run))


def submit(kind: str, experiment: str, units: Sequence[Unit], launcher: dict, outputs: str | Path,
           job_seconds: float, task_minutes: float, context: dict, log=print) -> Submission:
    """Pack the units into one array, check it against the cluster (ConfigError listing what does not
    fit), submit it and record it in the ledger."""
    from attnrepro.config import ConfigError

    limits = cluster.cluster_limits()
    groups = chunks(len(units), job_seconds, 60.0 * task_minutes, launcher.get("timeout_min"),
                    min((p.max_array_size for p in limits.values()), default=None), slots(launcher, limits))
    problems = cluster.check_request(cluster.Request.from_launcher(launcher, len(groups)), limits)
    if problems:
        raise ConfigError(f"[{experiment}] the cluster cannot run this request; nothing was submitted:\n  "
                          + "\n  ".join(problems))
    folder = Path(outputs).resolve() / "slurm" / experiment / f"{time.strftime('%Y-%m-%d_%H-%M-%S')}_{os.getpid()}"
    ex = executor(launcher, folder)
    specs = [[units[i].spec for i in g] for g in groups]
    jobs = ex.map_array(run_chunk, [kind] * len(groups), [experiment] * len(groups), specs,
                        [context] * len(groups))
    sub = Submission(jobs[0].job_id.split("_")[0], kind, experiment, [[units[i].key for i in g] for g in groups],
                     str(folder), time.time(), [j.job_id for j in jobs])
    _record(outputs, sub)
    log(f"[{experiment}] submitted array {sub.array}: {len(units)} jobs in {len(groups)} tasks of up to "
        f"{max(map(len, groups))} (about {job_seconds:.3g} s a job, so {max(map(len, groups)) * job_seconds / 60:.3g} "
        f"min a task; target {task_minutes:g} min); "
        f"logs in {folder}")
    return sub


def cancel(arrays: Sequence[str], run=cluster.run_command) -> None:
    if arrays:
        run(["scancel", *arrays])


def written(path: Path, since: float) -> bool:
    """Whether a record was written at `path` since a submission (a stat; records are written once, at the
    end of their job, complete or failed)."""
    try:
        return path.stat().st_mtime >= since - 1.0
    except FileNotFoundError:
        return False


def wait(subs: Sequence[Submission], record_of: Callable[[str], Path], on_hopeless: str = "cancel", log=print,
         run=cluster.run_command, sleep=time.sleep) -> dict:
    """Wait until every job of these arrays has written its record since its submission (record_of(key):
    where), or no task is queued or running any more; returns {hopeless: [lines], ended: [lines for tasks
    that ended without all their records], missing: [keys]}. A hopeless task ends the wait at once (and
    cancels the arrays when on_hopeless=cancel)."""
    subs = [s for s in subs if s.tasks]
    start, last, polls = time.monotonic(), time.monotonic(), 0
    states: dict[str, cluster.TaskState] = {}
    keys = [k for s in subs for t in s.tasks for k in t]
    since = {k: s.submitted for s in subs for t in s.tasks for k in t}

    def done(key: str) -> bool:
        return written(record_of(key), since[key])

    while subs:
        if all(map(done, keys)):  # every record written: the tasks are ending their steps
            break
        states = cluster.queue_state([s.array for s in subs], run)
        now = time.time()
        per_array = {s.array: _live(states, s, now) for s in subs}
        live = {tid: st for tasks in per_array.values() for tid, st in tasks.items()}
        hopeless = [f"{st.job_id} {st.state} ({st.reason})" for st in live.values() if st.hopeless]
        if hopeless:
            arrays = sorted({s.array for s in subs})
            if on_hopeless == "cancel":
                cancel(arrays, run)
            log(f"task(s) that will never start: {'; '.join(hopeless)}; arrays {', '.join(arrays)} "
                + ("cancelled" if on_hopeless == "cancel" else "left in the queue (on_hopeless=leave)"))
            return {"hopeless": hopeless, **_outcome(subs, states, done, run)}
        if not live:
            break
        if time.monotonic() - last >= PROGRESS_S:
            last = time.monotonic()
            running = sum(st.state == "RUNNING" for st in live.values())
            arrays = ", ".join(a for a, tasks in per_array.items() if tasks)  # those with live tasks
            log(f"waiting on arrays {arrays}: {running} tasks running, "
                f"{len(live) - running} queued; {sum(map(done, keys))} of {len(keys)} records written "
                f"({time.monotonic() - start:.0f} s)")
        until = time.monotonic() + POLL_S[min(polls, len(POLL_S) - 1)]
        polls += 1
        while time.monotonic() < until and not all(map(done, keys)):
            sleep(RECORDS_S)
    return {"hopeless": [], **_outcome(subs, states, done, run)}


def _outcome(subs: Sequence[Submission], states: dict[str, cluster.TaskState], done: Callable[[str], bool],
             run=cluster.run_command) -> dict:
    """The tasks that ended without all their jobs' records (with their last state, asked of sacct when the
    queue no longer lists them), and those jobs' keys."""
    ended, missing = [], []
    lost_tasks = {tid: [k for k in keys if not done(k)]
                  for sub in subs for tid, keys in zip(sub.ids, sub.tasks, strict=True)}
    lost_tasks = {t: keys for t, keys in lost_tasks.items() if keys}
    unknown = [t for t in lost_tasks if t not in states or not states[t].finished]
    if unknown:
        try:
            states = {**states, **cluster.queue_state(unknown, run)}
        except cluster.ClusterError:
            pass
    for sub in subs:
        for tid, keys in zip(sub.ids, sub.tasks, strict=True):
            lost = lost_tasks.get(tid)
            if lost:
                st = _ours(states.get(tid), sub)
                how = (f"{st.state}{f' ({st.reason})' if st.reason else ''}" if st and st.state != "UNKNOWN"
                       else "out of the queue with no accounting record (cancelled while pending?)")
                ended.append(f"task {tid} ({sub.experiment}) ended {how} without {len(lost)} of its "
                             f"{len(keys)} records{_log_end(sub.folder, tid)}")
                missing += lost
    return {"ended": ended, "missing": missing}


def _log_end(folder: str, tid: str) -> str:
    """'; its log ends: <the last line of the task's stderr>' (submitit's JobPaths), or '' when there is none.
    Without cgroups an out-of-memory kill shows only there ("srun: error: ...: Killed")."""
    from submitit.core.utils import JobPaths

    try:
        lines = JobPaths(folder, job_id=tid, task_id=0).stderr.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    last = next((ln.strip() for ln in reversed(lines) if ln.strip()), "")
    return f"; its log ends: {last[:200]}" if last else ""


def run_chunk(kind: str, experiment: str, specs: list, context: dict) -> list[str]:
    """On the compute node: compute the chunk's jobs one after the other in this process; their statuses.
    train: each spec is a job's overrides; theory: each spec is (experiment, key) of a theory job."""
    if kind == TRAIN:
        from attnrepro.jobs.grid import compose_many
        from attnrepro.jobs.training import run_job

        configs = compose_many(specs)
        return [run_job(cfg, overrides=spec, label=f"job {i + 1}/{len(specs)} of this task")["status"]
                for i, (spec, cfg) in enumerate(zip(specs, configs, strict=True))]
    from attnrepro.jobs import theory

    settings = context["settings"]
    out = []
    for name, key in specs:
        job = next(job for _, job in theory.curve_jobs(name, settings) if job.key == key)
        out.append(theory.compute(job, settings)["status"])
        print(f"[theory {name}] {job.label}: {out[-1]} ({key})", flush=True)
    return out
