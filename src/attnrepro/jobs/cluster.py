"""What a SLURM cluster can run, whether a request fits it, and where submitted tasks stand.

Read from the cluster's own commands, nothing else:

- ``cluster_limits()``: ``scontrol -a -o show partition``, ``scontrol -o show node`` and ``scontrol show
  config`` into one ``PartitionLimits`` per partition. The key=value form is parsed (``-o``: one line per
  record): ``scontrol`` has no ``--json`` in SLURM 22.05 (Debian 12's), and ``sinfo --json``'s schema
  changed in 23.02, while the key=value form has been the same for many versions.
- ``check_request(request, limits)``: one line per thing the request asks that no node of the partition
  has, naming the Hydra option to change (``hydra.launcher.cpus_per_task=4 exceeds the 2 CPUs of every
  node in partition debug: lower it``). Such a job is refused by sbatch (CPUs, memory, gres, array size)
  or, past the partition's MaxTime, accepted and left PENDING for ever (Reason=PartitionTimeLimit).
- ``queue_state(job_ids)``: each task's state and reason from ``squeue`` (and from ``sacct`` for the
  tasks squeue no longer knows), with ``TaskState.hopeless`` for a PENDING reason that cannot resolve.

Every command runs with a timeout and fails with one line (``ClusterError``). The functions take the
command runner as an argument (``run``), so that tests give them canned outputs. No Hydra import.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Optional, Sequence, Union

Runner = Callable[[Sequence[str]], str]


class ClusterError(RuntimeError):
    """A SLURM command is missing, failed or did not answer in time (the message is one line)."""


def run_command(cmd: Sequence[str], timeout: float = 15.0) -> str:
    """The stdout of a SLURM command; ClusterError when it is missing, fails or takes longer than timeout."""
    if shutil.which(cmd[0]) is None:
        raise ClusterError(f"{cmd[0]} not found: no SLURM client on this machine")
    try:
        proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ClusterError(f"`{' '.join(cmd)}` did not answer within {timeout:g}s (is slurmctld up?)") from None
    if proc.returncode != 0:
        # the last line: SLURM's clients end with the fatal one ("Could not establish a configuration source")
        last = next((ln.strip() for ln in reversed(proc.stderr.splitlines()) if ln.strip()), "no error message")
        raise ClusterError(f"`{' '.join(cmd)}` failed (exit {proc.returncode}): {last}")
    return proc.stdout


# --- parsing ------------------------------------------------------------------------------------

# A key of scontrol's key=value form: at the start or after white space, followed by "=". Values may hold
# spaces (OS=Linux 6.1.0 #1 SMP ...) and "=" (TRES=cpu=2,mem=1M), or be empty (AllocTRES=).
_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z_][\w:/.\-]*)=")


def parse_records(text: str) -> list[dict[str, str]]:
    """``scontrol -o show <entity>`` (one record per line) as a list of {key: value}."""
    records = []
    for line in text.splitlines():
        matches = list(_KEY.finditer(line))
        if not matches:  # e.g. "No partitions in the system"
            continue
        rec = {}
        for m, nxt in zip(matches, [*matches[1:], None]):
            rec[m.group(1)] = line[m.end(): nxt.start() if nxt else len(line)].strip()
        records.append(rec)
    return records


def parse_config(text: str) -> dict[str, str]:
    """``scontrol show config`` ("Key = Value" lines) as {key: value}."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out


def parse_time_min(value: str) -> Optional[int]:
    """A SLURM time limit in whole minutes (rounded down); None for UNLIMITED/INFINITE. Forms: minutes,
    minutes:seconds, hours:minutes:seconds, days-hours, days-hours:minutes, days-hours:minutes:seconds."""
    v = value.strip()
    if v.upper() in ("UNLIMITED", "INFINITE", "NONE", ""):
        return None
    days, _, rest = v.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:
        hms = parts + [0] * (3 - len(parts))  # days-hours[:minutes[:seconds]]
    else:
        hms = {1: [0, parts[0], 0], 2: [0, *parts], 3: parts}[len(parts)]
    return int(days or 0) * 1440 + hms[0] * 60 + hms[1] + hms[2] // 60


_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 ** 2}


def parse_mem_mb(value: Union[str, int, float]) -> float:
    """A SLURM memory size in MB: a number is MB; K, M, G, T suffixes (powers of 1024; GB = G)."""
    if isinstance(value, (int, float)):
        return float(value)
    m = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]?)B?\s*", value.upper())
    if not m:
        raise ValueError(f"not a memory size: {value!r}")
    return float(m.group(1)) * _UNITS[m.group(2) or "M"]


def _split_top(text: str) -> list[str]:
    """Split on commas outside parentheses: "gpu:a100:4(S:0,1),nic:1" -> ["gpu:a100:4(S:0,1)", "nic:1"]."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [p for p in (*out, cur) if p.strip()]


def parse_gres(text: Optional[str]) -> dict[tuple[str, Optional[str]], int]:
    """A Gres string (a node's ``Gres=`` or a request's ``--gres``) as {(name, type or None): count}.
    "gpu:a100:4(S:0-1),nic:1" -> {("gpu", "a100"): 4, ("nic", None): 1}; "(null)" or "" -> {}. A count
    may carry K/M/G suffixes (1024s); no count means 1."""
    if not text or text.strip() in ("(null)", "N/A"):
        return {}
    out: dict[tuple[str, Optional[str]], int] = {}
    for item in _split_top(text.strip()):
        item = re.sub(r"\(.*\)$", "", item.strip())  # socket bindings: (S:0-1), (IDX:0-3)
        fields = item.split(":")
        count = 1
        if len(fields) > 1 and re.fullmatch(r"\d+[KMGT]?", fields[-1]):
            c = fields.pop()
            count = int(c[:-1]) * 1024 ** ("KMGT".index(c[-1]) + 1) if c[-1].isalpha() else int(c)
        name, typ = fields[0], (fields[1] if len(fields) > 1 else None)
        out[(name, typ)] = out.get((name, typ), 0) + count
    return out


def gres_count(available: Mapping[tuple[str, Optional[str]], int], name: str, typ: Optional[str]) -> int:
    """How many of gres `name` (of type `typ`; any type when None) a node's parsed Gres holds."""
    return sum(n for (nm, t), n in available.items() if nm == name and (typ is None or t == typ))


def _int_or_none(value: Optional[str]) -> Optional[int]:
    """An integer field, None for UNLIMITED / absent / (null)."""
    if value is None or not re.fullmatch(r"\d+", value.strip()):
        return None
    return int(value)


# --- what the cluster has -------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionLimits:
    """What one job of a partition can get. The per-node tuples follow `nodes`' order."""

    name: str
    default: bool
    max_cpus_per_node: int            # the most CPUs any one node offers a job (capped by MaxCPUsPerNode)
    max_mem_per_node_mb: int          # the most memory (MB) any one node offers (RealMemory - MemSpecLimit,
    #                                   capped by MaxMemPerNode)
    max_time_min: Optional[int]       # MaxTime in minutes; None = UNLIMITED
    nodes: tuple[str, ...]
    gres_per_node: tuple[str, ...]    # each node's Gres as scontrol shows it ("" when none)
    max_array_size: int               # the cluster's MaxArraySize (array indices 0 .. MaxArraySize-1)
    cpus_per_node: tuple[int, ...] = ()
    mem_per_node_mb: tuple[int, ...] = ()
    state: str = "UP"


def limits_from_outputs(partitions: str, nodes: str, config: str) -> dict[str, PartitionLimits]:
    """PartitionLimits per partition from the texts of ``scontrol -a -o show partition``, ``scontrol -o
    show node`` and ``scontrol show config``."""
    conf = parse_config(config)
    max_array = _int_or_none(conf.get("MaxArraySize")) or 1001  # SLURM's default
    node_recs = parse_records(nodes)
    out = {}
    for p in parse_records(partitions):
        name = p.get("PartitionName", "")
        if not name:
            continue
        cap_cpus = _int_or_none(p.get("MaxCPUsPerNode"))
        cap_mem = _int_or_none(p.get("MaxMemPerNode"))
        members = [n for n in node_recs if name in (n.get("Partitions") or "").split(",")]
        names, cpus, mems, gres = [], [], [], []
        for n in members:
            c = _int_or_none(n.get("CPUEfctv")) or _int_or_none(n.get("CPUTot")) or 0
            m = (_int_or_none(n.get("RealMemory")) or 0) - (_int_or_none(n.get("MemSpecLimit")) or 0)
            names.append(n.get("NodeName", "?"))
            cpus.append(min(c, cap_cpus) if cap_cpus is not None else c)
            mems.append(min(m, cap_mem) if cap_mem is not None else m)
            g = n.get("Gres", "")
            gres.append("" if g in ("(null)", "N/A") else g)
        out[name] = PartitionLimits(
            name=name, default=p.get("Default", "NO").upper() == "YES",
            max_cpus_per_node=max(cpus, default=0), max_mem_per_node_mb=max(mems, default=0),
            max_time_min=parse_time_min(p.get("MaxTime", "UNLIMITED")), nodes=tuple(names),
            gres_per_node=tuple(gres), max_array_size=max_array, cpus_per_node=tuple(cpus),
            mem_per_node_mb=tuple(mems), state=p.get("State", "UP"))
    return out


def cluster_limits(run: Runner = run_command) -> dict[str, PartitionLimits]:
    """{partition name: PartitionLimits} of the cluster this machine's SLURM client talks to
    (ClusterError, one line, when it does not answer)."""
    return limits_from_outputs(run(["scontrol", "-a", "-o", "show", "partition"]),
                               run(["scontrol", "-o", "show", "node"]),
                               run(["scontrol", "show", "config"]))


# --- does a request fit? ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """What a sweep asks of each array task, in the submitit launcher's terms (hydra.launcher.<name>)."""

    partition: Optional[str] = None                 # None: the cluster's default; "a,b": any of them
    cpus_per_task: int = 1
    tasks_per_node: int = 1
    mem_gb: Optional[float] = None                  # --mem (GB = 1024 MB)
    mem_per_cpu: Optional[Union[str, int]] = None   # --mem-per-cpu, SLURM units (a number is MB)
    gpus_per_node: Optional[Union[int, str]] = None  # --gpus-per-node: 2 or "a100:2"; None/0: no GPU
    gres: Optional[str] = None                      # --gres: "gpu:2", "gpu:a100:1,nic:1"
    timeout_min: Optional[int] = None               # --time
    array_size: int = 1                             # tasks in one array (one launch of the sweeper)

    @classmethod
    def from_launcher(cls, launcher: Mapping, array_size: int = 1) -> "Request":
        """From a hydra.launcher node (any mapping with the submitit launcher's keys)."""
        get = launcher.get
        return cls(partition=get("partition"), cpus_per_task=get("cpus_per_task") or 1,
                   tasks_per_node=get("tasks_per_node") or 1, mem_gb=get("mem_gb"),
                   mem_per_cpu=get("mem_per_cpu"), gpus_per_node=get("gpus_per_node"), gres=get("gres"),
                   timeout_min=get("timeout_min"), array_size=array_size)

    def mem_mb(self) -> Optional[float]:
        """Memory per node in MB, None when the request leaves it to the cluster's default."""
        if self.mem_gb is not None:
            return float(self.mem_gb) * 1024
        if self.mem_per_cpu is not None:
            return parse_mem_mb(self.mem_per_cpu) * self.cpus_per_task * self.tasks_per_node
        return None

    def gres_wanted(self) -> list[tuple[str, str, Optional[str], int]]:
        """[(option, name, type, count)] of the GPUs and gres asked per node."""
        out = []
        g = self.gpus_per_node
        if g not in (None, 0, "0", ""):
            typ, _, n = str(g).rpartition(":")
            out.append((f"hydra.launcher.gpus_per_node={g}", "gpu", typ or None, int(n)))
        for (name, typ), n in parse_gres(self.gres).items():
            out.append((f"hydra.launcher.gres={self.gres}", name, typ, n))
        return out


def _fmt(x: float) -> str:
    return f"{x:g}"


def _check_partition(req: Request, p: PartitionLimits) -> list[str]:
    lines = []
    cpus = req.cpus_per_task * req.tasks_per_node
    if cpus > p.max_cpus_per_node:
        what = (f"hydra.launcher.cpus_per_task={req.cpus_per_task}" if req.tasks_per_node == 1 else
                f"hydra.launcher.cpus_per_task={req.cpus_per_task} x hydra.launcher.tasks_per_node="
                f"{req.tasks_per_node} = {cpus} CPUs")
        lines.append(f"{what} exceeds the {p.max_cpus_per_node} CPUs of every node in partition {p.name}: lower it")
    mem = req.mem_mb()
    if mem is not None and mem > p.max_mem_per_node_mb:
        if req.mem_gb is not None:
            what, fix = f"hydra.launcher.mem_gb={_fmt(req.mem_gb)}", f"{p.max_mem_per_node_mb // 1024} or less"
        else:
            what, fix = (f"hydra.launcher.mem_per_cpu={req.mem_per_cpu} x {cpus} CPUs",
                         f"{p.max_mem_per_node_mb // cpus}M or less per CPU")
        lines.append(f"{what} ({_fmt(mem)} MB) exceeds the {p.max_mem_per_node_mb} MB of memory of every node in "
                     f"partition {p.name}: lower it to {fix}")
    if req.timeout_min is not None and p.max_time_min is not None and req.timeout_min > p.max_time_min:
        lines.append(f"hydra.launcher.timeout_min={req.timeout_min} exceeds the MaxTime of partition {p.name} "
                     f"({p.max_time_min} min; the jobs would stay PENDING, Reason=PartitionTimeLimit): lower it to "
                     f"{p.max_time_min} or less, or choose another hydra.launcher.partition")
    parsed = [parse_gres(g) for g in p.gres_per_node]
    for option, name, typ, n in req.gres_wanted():
        label = f"{name}:{typ}" if typ else name
        most = max((gres_count(g, name, typ) for g in parsed), default=0)
        if most == 0:
            fix = "set it to null" if option.startswith("hydra.launcher.gpus_per_node") else "remove it"
            lines.append(f"{option} asks for gres {label} but no node of partition {p.name} has any "
                         f"(the nodes' gres: {', '.join(sorted(set(filter(None, p.gres_per_node)))) or 'none'}): {fix}")
        elif n > most:
            lines.append(f"{option} asks for {n} {label} per node but the nodes of partition {p.name} have at most "
                         f"{most}: lower it")
    if req.array_size > p.max_array_size:
        lines.append(f"an array of {req.array_size} tasks exceeds the cluster's MaxArraySize={p.max_array_size}: "
                     f"raise hydra.sweeper.task_minutes (more jobs in each task) or split the sweep")
    if not lines and p.nodes and not _one_node_fits(req, p, cpus, mem, parsed):
        lines.append(f"no single node of partition {p.name} has the {cpus} CPUs"
                     + (f", {_fmt(mem)} MB" if mem is not None else "")
                     + (" and the gres" if req.gres_wanted() else "")
                     + " asked together (hydra.launcher.cpus_per_task, mem_gb, gpus_per_node, gres): lower one of them")
    return lines


def _one_node_fits(req: Request, p: PartitionLimits, cpus: int, mem: Optional[float], parsed: list) -> bool:
    for i in range(len(p.nodes)):
        c = p.cpus_per_node[i] if i < len(p.cpus_per_node) else p.max_cpus_per_node
        m = p.mem_per_node_mb[i] if i < len(p.mem_per_node_mb) else p.max_mem_per_node_mb
        g = parsed[i] if i < len(parsed) else {}
        if cpus <= c and (mem is None or mem <= m) and all(gres_count(g, name, typ) >= n
                                                           for _, name, typ, n in req.gres_wanted()):
            return True
    return False


def partition_names(request: Request, by_name: Mapping[str, PartitionLimits]) -> list[str]:
    """The partitions a request asks for: its list ("a,b"), or the cluster's default one ([] when none)."""
    if request.partition is None:
        return [p.name for p in by_name.values() if p.default][:1]
    return [n.strip() for n in str(request.partition).split(",") if n.strip()]


def check_request(request: Request, limits: Union[Mapping[str, PartitionLimits], Iterable[PartitionLimits]]
                  ) -> list[str]:
    """Each thing `request` asks that the cluster cannot give, one line each naming the Hydra option to
    change; [] when every array task fits a node of its partition. With a list of partitions ("a,b"),
    the request fits when it fits one of them; otherwise every partition's lines are given."""
    by_name = dict(limits) if isinstance(limits, Mapping) else {p.name: p for p in limits}
    names = partition_names(request, by_name)
    if request.partition is None and not names:
        return [f"hydra.launcher.partition=null but the cluster has no default partition: set it to one of "
                f"{', '.join(sorted(by_name)) or '(none: the cluster has no partitions)'}"]
    unknown = [n for n in names if n not in by_name]
    if unknown:
        return [f"hydra.launcher.partition={request.partition}: no partition {', '.join(unknown)} on this cluster "
                f"(it has {', '.join(sorted(by_name)) or 'none'})"]
    per_partition = [_check_partition(request, by_name[n]) for n in names]
    if any(not lines for lines in per_partition):
        return []
    return [line for lines in per_partition for line in lines]


# --- where submitted tasks stand ------------------------------------------------------------------

# PENDING reasons that cannot resolve by waiting: the job asks what its partition or account never gives,
# or depends on a job that failed. (ReqNodeNotAvail also covers nodes down for a while; here, where a sweep
# waits on it unattended, it counts as hopeless.)
HOPELESS_REASONS = frozenset({
    "PartitionConfig", "PartitionTimeLimit", "PartitionNodeLimit", "ReqNodeNotAvail", "BadConstraints",
    "DependencyNeverSatisfied", "InvalidAccount", "InvalidQOS", "AccountNotAllowed", "QOSNotAllowed",
    "PartitionDown", "PartitionInactive", "NodeDown",
})
# Per-job QOS and association limits (a job over them never starts): QOSMaxWallDurationPerJobLimit,
# AssocMaxCpuPerJobLimit, QOSMaxGRESPerJob, ...
_PER_JOB_LIMIT = re.compile(r"^(QOS|Assoc)Max\w*PerJob")

FINISHED_STATES = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE",
    "PREEMPTED", "REVOKED", "SPECIAL_EXIT",
})


@dataclass(frozen=True)
class TaskState:
    """One job or array task: its id ("123" or "123_4"), state (PENDING, RUNNING, COMPLETED, ...; UNKNOWN
    when neither squeue nor sacct has it), reason ("" when none), which command said so, and its batch
    script's path where squeue gave it ("" otherwise: whose job an id is, after a cluster reset reused it)."""

    job_id: str
    state: str
    reason: str = ""
    source: str = "squeue"
    command: str = ""

    @property
    def hopeless(self) -> bool:
        """PENDING for a reason that waiting does not resolve."""
        base = re.split(r"[,\s(]", self.reason, maxsplit=1)[0]  # "ReqNodeNotAvail, UnavailableNodes:vm"
        return self.state == "PENDING" and (base in HOPELESS_REASONS or bool(_PER_JOB_LIMIT.match(base)))

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES


def _expand_ids(job_id: str) -> list[str]:
    """"12_[1-3,7%2]" -> ["12_1", "12_2", "12_3", "12_7"]; other ids as they are."""
    m = re.fullmatch(r"(\d+)_\[([^\]]*)\]", job_id)
    if not m:
        return [job_id]
    out = []
    for part in m.group(2).split("%")[0].split(","):
        lo, _, hi = part.partition("-")
        out += [f"{m.group(1)}_{i}" for i in range(int(lo), int(hi or lo) + 1)]
    return out


def parse_queue(text: str, source: str) -> dict[str, TaskState]:
    """Lines "JobID|State|Reason[|Command]" (``squeue -h -r -t all -o '%i|%T|%r|%o'`` or ``sacct -n -P -X -o
    JobID,State,Reason``) as {task id: TaskState}; job steps (123.batch) are left out, array ranges
    expanded, "CANCELLED by 0" read as CANCELLED and reason "None" as ""."""
    out = {}
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) < 2 or not fields[0] or "." in fields[0]:
            continue
        state = fields[1].split()[0] if fields[1].split() else "UNKNOWN"
        reason = fields[2].strip() if len(fields) > 2 else ""
        reason = "" if reason in ("None", "(null)") else reason
        command = fields[3].strip() if len(fields) > 3 else ""
        for task in _expand_ids(fields[0]):
            out[task] = TaskState(task, state, reason, source, command)
    return out


def queue_state(job_ids: Iterable[Union[str, int]], run: Runner = run_command) -> dict[str, TaskState]:
    """{task id: TaskState} of these jobs (an array's id gives all its tasks): squeue first, sacct for
    the ids squeue no longer knows (finished more than MinJobAge ago); an id neither knows is UNKNOWN.
    squeue failing (e.g. every id unknown to it) falls back to sacct alone."""
    ids = [str(j) for j in job_ids]
    if not ids:
        return {}
    try:
        out = parse_queue(run(["squeue", "-h", "-r", "-t", "all", "-j", ",".join(ids), "-o", "%i|%T|%r|%o"]),
                          "squeue")
    except ClusterError:
        out = {}

    def known(i: str) -> bool:
        return i in out or any(k.split("_")[0] == i for k in out)

    missing = [i for i in ids if not known(i)]
    if missing:
        try:
            acct = parse_queue(run(["sacct", "-n", "-P", "-X", "-j", ",".join(missing), "-o", "JobID,State,Reason"]),
                               "sacct")
        except ClusterError:
            acct = {}
        out.update({k: v for k, v in acct.items() if k not in out})
    for i in ids:
        if not known(i):
            out[i] = TaskState(i, "UNKNOWN", "neither squeue nor sacct knows it", "none")
    return out


def hopeless_tasks(states: Mapping[str, TaskState]) -> list[str]:
    """One line per task that waits for nothing: "12_3 PENDING (PartitionTimeLimit)"."""
    return [f"{t.job_id} PENDING ({t.reason})" for t in states.values() if t.hopeless]


__all__ = [
    "ClusterError", "PartitionLimits", "Request", "TaskState", "check_request", "cluster_limits", "gres_count",
    "hopeless_tasks", "limits_from_outputs", "parse_config", "parse_gres", "parse_mem_mb", "parse_queue",
    "parse_records", "parse_time_min", "queue_state", "run_command", "HOPELESS_REASONS", "FINISHED_STATES",
]
