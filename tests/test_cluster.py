"""attnrepro.jobs.cluster: reading a SLURM cluster's limits and queue, and checking a request against them.

The parsing tests run anywhere, on outputs captured from the real one-node cluster of
scripts/slurm_cluster.sh (SLURM 22.05.8, Debian 12) and on a hand-written two-partition GPU cluster in
the same format. None needs a cluster: the checks against the real scheduler (sbatch refuses, or strands
PENDING for ever, each request check_request reports) are in tests/test_slurm.py with every `slurm` test."""

from __future__ import annotations

import time

import pytest

from attnrepro.jobs.cluster import (
    ClusterError,
    PartitionLimits,
    Request,
    TaskState,
    check_request,
    cluster_limits,
    limits_from_outputs,
    parse_config,
    parse_gres,
    parse_mem_mb,
    parse_queue,
    parse_records,
    parse_time_min,
    queue_state,
)

# --- captured from the real cluster (scripts/slurm_cluster.sh up, 2 CPUs, 24 GB) --------------------

# scontrol -a -o show partition
PARTITIONS_2205 = (
    "PartitionName=debug AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=YES QoS=N/A "
    "DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=UNLIMITED "
    "MaxTime=00:30:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=vm PriorityJobFactor=1 PriorityTier=1 "
    "RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=2 "
    "TotalNodes=1 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED "
    "TRES=cpu=2,mem=23081M,node=1,billing=2\n"
)
# scontrol -o show node (note the spaces inside OS=, the empty AllocTRES=, and "=" inside CfgTRES=)
NODES_2205 = (
    "NodeName=vm Arch=x86_64 CoresPerSocket=2  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=1.14 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=vm NodeHostName=vm Version=22.05.8 "
    "OS=Linux 6.18.44-fc-v1147 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=23081 AllocMem=0 FreeMem=22306 Sockets=1 "
    "Boards=1 State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=debug  "
    "BootTime=2026-12-03T10:23:06 SlurmdStartTime=2026-12-03T10:45:31 LastBusyTime=2026-12-03T10:47:09 "
    "CfgTRES=cpu=2,mem=23081M,billing=2 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s "
    "ExtSensorsWatts=0 ExtSensorsTemp=n/s\n"
)
# scontrol show config (an excerpt: its first and last lines and 11 of the 190 settings between)
CONFIG_2205 = """\
Configuration data as of 2026-12-03T10:48:21
AccountingStorageType   = accounting_storage/slurmdbd
AcctGatherNodeFreq      = 0 sec
AuthInfo                = socket=/tmp/attnrepro-slurm/munge/munge.socket.2
ClusterName             = attnrepro
DefMemPerCPU            = 1024
EnforcePartLimits       = NO
GresTypes               = (null)
MaxArraySize            = 1001
MaxJobCount             = 10000
SLURM_VERSION           = 22.05.8
TrackWCKey              = No

Slurmctld(primary) at vm is UP
"""
# squeue -h -r -t all -j 14,15,16 -o '%i|%T|%r': a job over MaxTime, an array of 3 two-CPU tasks
# (one running), a job waiting behind them
SQUEUE_2205 = """\
14|PENDING|PartitionTimeLimit
15_1|PENDING|Resources
15_2|PENDING|Resources
16|PENDING|Priority
15_0|RUNNING|None
"""
# the same moments later, then after a drain: a job pinned to the drained node (-w vm), and one not
SQUEUE_DRAINED_2205 = """\
19|PENDING|ReqNodeNotAvail, UnavailableNodes:vm
20|PENDING|Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions
"""
# sacct -n -P -X -j 7,8,10,14,16 -o JobID,State,Reason, after cancels and a time-out: pending array tasks
# are one line (8_[1-3]); a cancelled job's reason as the database keeps it (PartitionConfig)
SACCT_2205 = """\
7|CANCELLED by 0|PartitionConfig
8_0|CANCELLED by 0|None
8_[1-3]|CANCELLED by 0|None
10_0|COMPLETED|None
10_1|COMPLETED|None
14|PENDING|PartitionTimeLimit
16|TIMEOUT|None
"""

# --- hand-written in scontrol's format: a CPU partition (default, no time limit) and a GPU partition
# with two kinds of node; MaxArraySize raised
PARTITIONS_GPU = (
    "PartitionName=cpu AllowGroups=ALL Default=YES MaxTime=UNLIMITED MaxCPUsPerNode=UNLIMITED Nodes=c[01-02] "
    "State=UP MaxMemPerNode=UNLIMITED\n"
    "PartitionName=gpu AllowGroups=ALL Default=NO MaxTime=2-00:00:00 MaxCPUsPerNode=32 Nodes=g[01-02],h01 "
    "State=UP MaxMemPerNode=500000\n"
)
NODES_GPU = (
    "NodeName=c01 CPUTot=64 CPUEfctv=64 Gres=(null) RealMemory=256000 Partitions=cpu State=IDLE\n"
    "NodeName=c02 CPUTot=64 CPUEfctv=62 Gres=(null) RealMemory=256000 MemSpecLimit=4000 Partitions=cpu State=IDLE\n"
    "NodeName=g01 CPUTot=48 CPUEfctv=48 Gres=gpu:a100:4(S:0-1) RealMemory=1000000 Partitions=gpu State=MIXED\n"
    "NodeName=g02 CPUTot=48 CPUEfctv=48 Gres=gpu:a100:4(S:0-1) RealMemory=1000000 Partitions=gpu State=IDLE\n"
    "NodeName=h01 CPUTot=16 CPUEfctv=16 Gres=gpu:v100:8(S:0,1),nic:1 RealMemory=64000 Partitions=gpu State=IDLE\n"
)
CONFIG_GPU = "MaxArraySize            = 5001\nGresTypes               = gpu,nic\n"


@pytest.fixture
def real():
    return limits_from_outputs(PARTITIONS_2205, NODES_2205, CONFIG_2205)


@pytest.fixture
def gpu():
    return limits_from_outputs(PARTITIONS_GPU, NODES_GPU, CONFIG_GPU)


def test_key_value_records_keep_spaces_equals_and_empty_values():
    (node,) = parse_records(NODES_2205)
    assert node["OS"] == "Linux 6.18.44-fc-v1147 #1 SMP PREEMPT_DYNAMIC @0"
    assert node["AllocTRES"] == "" and node["CapWatts"] == "n/a"
    assert node["CfgTRES"] == "cpu=2,mem=23081M,billing=2" and node["Partitions"] == "debug"
    assert parse_records("No partitions in the system\n") == []
    conf = parse_config(CONFIG_2205)
    assert conf["MaxArraySize"] == "1001" and conf["AuthInfo"] == "socket=/tmp/attnrepro-slurm/munge/munge.socket.2"
    assert "Configuration data as of 2026-12-03T10:48:21" not in conf and len(conf) == 11


@pytest.mark.parametrize("text,minutes", [
    ("00:30:00", 30), ("30", 30), ("30:00", 30), ("1:30:59", 90), ("2-00:00:00", 2880), ("1-12", 2160),
    ("1-00:05", 1445), ("UNLIMITED", None), ("INFINITE", None)])
def test_time_limits_in_minutes(text, minutes):
    assert parse_time_min(text) == minutes


def test_memory_and_gres_strings():
    assert parse_mem_mb("4G") == 4096 and parse_mem_mb("4000M") == 4000 and parse_mem_mb(512) == 512
    assert parse_mem_mb("1GB") == 1024
    with pytest.raises(ValueError):
        parse_mem_mb("lots")
    assert parse_gres("(null)") == {} and parse_gres("") == {} and parse_gres(None) == {}
    assert parse_gres("gpu:v100:8(S:0,1),nic:1") == {("gpu", "v100"): 8, ("nic", None): 1}
    assert parse_gres("gpu:2") == {("gpu", None): 2} and parse_gres("gpu:a100") == {("gpu", "a100"): 1}
    assert parse_gres("bw:lustre:2K") == {("bw", "lustre"): 2048}


def test_limits_of_the_real_cluster(real):
    assert real == {"debug": PartitionLimits(
        name="debug", default=True, max_cpus_per_node=2, max_mem_per_node_mb=23081, max_time_min=30,
        nodes=("vm",), gres_per_node=("",), max_array_size=1001, cpus_per_node=(2,), mem_per_node_mb=(23081,),
        state="UP")}


def test_limits_of_a_gpu_cluster(gpu):
    cpu, g = gpu["cpu"], gpu["gpu"]
    assert cpu.default and not g.default
    assert cpu.max_time_min is None and g.max_time_min == 2880
    # c02 has 62 effective CPUs and 4000 MB held back; g nodes capped at 32 CPUs and 500000 MB by the partition
    assert cpu.cpus_per_node == (64, 62) and cpu.mem_per_node_mb == (256000, 252000)
    assert g.nodes == ("g01", "g02", "h01") and g.cpus_per_node == (32, 32, 16)
    assert g.max_cpus_per_node == 32 and g.max_mem_per_node_mb == 500000
    assert g.gres_per_node == ("gpu:a100:4(S:0-1)", "gpu:a100:4(S:0-1)", "gpu:v100:8(S:0,1),nic:1")
    assert g.max_array_size == cpu.max_array_size == 5001


FITS = dict(cpus_per_task=1, mem_gb=1, timeout_min=10, array_size=4)


@pytest.mark.parametrize("change,option,words", [
    ({"cpus_per_task": 4}, "hydra.launcher.cpus_per_task=4", "exceeds the 2 CPUs of every node in partition debug"),
    ({"mem_gb": 32}, "hydra.launcher.mem_gb=32", "exceeds the 23081 MB of memory"),
    ({"mem_gb": None, "mem_per_cpu": "30G"}, "hydra.launcher.mem_per_cpu=30G", "exceeds the 23081 MB"),
    ({"timeout_min": 31}, "hydra.launcher.timeout_min=31", "MaxTime of partition debug (30 min"),
    ({"gres": "gpu:1"}, "hydra.launcher.gres=gpu:1", "no node of partition debug has any"),
    ({"gpus_per_node": 1}, "hydra.launcher.gpus_per_node=1", "set it to null"),
    ({"array_size": 1002}, "hydra.sweeper.task_minutes", "MaxArraySize=1001"),
])
def test_each_impossible_request_is_one_line(real, change, option, words):
    lines = check_request(Request(**{**FITS, **change}), real)
    assert len(lines) == 1, lines
    assert option in lines[0] and words in lines[0] and "\n" not in lines[0]


def test_a_request_that_fits_has_no_line(real, gpu):
    assert check_request(Request(**FITS), real) == []
    assert check_request(Request(**{**FITS, "array_size": 1001, "timeout_min": 30, "cpus_per_task": 2}), real) == []
    assert check_request(Request(partition="gpu", cpus_per_task=8, gpus_per_node="a100:4", timeout_min=2880), gpu) == []
    assert check_request(Request(gpus_per_node=0, mem_gb=200, timeout_min=100000), gpu) == []  # cpu: no MaxTime


def test_several_problems_give_several_lines(real):
    lines = check_request(Request(cpus_per_task=3, mem_gb=100, timeout_min=60, gres="gpu:1", array_size=5000), real)
    assert len(lines) == 5 and len({ln.split()[0] for ln in lines}) == 5, lines


def test_partitions_gres_types_and_nodes(gpu):
    assert check_request(Request(partition="tpu"), gpu) == [
        "hydra.launcher.partition=tpu: no partition tpu on this cluster (it has cpu, gpu)"]
    assert check_request(Request(partition=None, gpus_per_node=1), gpu)[0].startswith(
        "hydra.launcher.gpus_per_node=1 asks for gres gpu but no node of partition cpu has any")
    (line,) = check_request(Request(partition="gpu", gpus_per_node="a100:8"), gpu)
    assert "asks for 8 gpu:a100 per node but the nodes of partition gpu have at most 4" in line
    assert check_request(Request(partition="gpu", gpus_per_node="v100:8"), gpu) == []
    (line,) = check_request(Request(partition="gpu", gres="gpu:h100:1"), gpu)
    assert "no node of partition gpu has any (the nodes' gres: gpu:a100:4(S:0-1), gpu:v100:8(S:0,1),nic:1)" in line
    # 8 v100 fit h01 and 32 CPUs fit g01, but no node has both
    (line,) = check_request(Request(partition="gpu", gpus_per_node="v100:8", cpus_per_task=32), gpu)
    assert line.startswith("no single node of partition gpu has the 32 CPUs")
    # a list of partitions fits when one of them does
    assert check_request(Request(partition="cpu,gpu", gpus_per_node=2), gpu) == []
    assert len(check_request(Request(partition="cpu,gpu", cpus_per_task=100), gpu)) == 2
    no_default = {n: p for n, p in gpu.items() if n == "gpu"}
    assert check_request(Request(), no_default) == [
        "hydra.launcher.partition=null but the cluster has no default partition: set it to one of gpu"]


def test_the_slurm_launcher_defaults_against_the_test_cluster(real):
    """conf/hydra/launcher/slurm.yaml, composed: its CPU defaults (1 CPU, 4 GB, no GPU, 60 min) fit the test
    node but not its 30-minute partition."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from attnrepro.config import register_configs
    from attnrepro.jobs.grid import CONF_DIR

    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", return_hydra_config=True,
                      overrides=["experiment=xor_phase_dm", "hydra/launcher=slurm"])
    GlobalHydra.instance().clear()
    request = Request.from_launcher(cfg.hydra.launcher, array_size=4)
    assert (request.cpus_per_task, request.mem_gb, request.gpus_per_node, request.timeout_min) == (1, 4, None, 60)
    (line,) = check_request(request, real)
    assert line.startswith("hydra.launcher.timeout_min=60 exceeds the MaxTime of partition debug (30 min")


def test_a_short_sweep_is_spread_over_the_partitions_cpus(real, gpu):
    """Packing (jobs.slurm.chunks): tasks toward task_seconds, but a sweep that would fill fewer tasks than the
    partition runs at once is spread over them while each task keeps TASK_START_S of work; every index once."""
    from attnrepro.jobs.slurm import TASK_START_S, chunks, slots

    def sizes(*args, **kw):
        groups = chunks(*args, **kw)
        assert sorted(i for g in groups for i in g) == list(range(args[0]))
        return [len(g) for g in groups]

    assert sizes(36, 0.31, 1200, 30) == [36]                       # one slot: one task, as before
    assert sizes(36, 0.31, 1200, 30, slots=2) == [18, 18]          # 11 s of work on 2 CPUs
    assert sizes(36, 0.1, 1200, 30, slots=2) == [36]               # 3.6 s: below TASK_START_S, not spread
    assert sizes(24, 7.2, 1200, 30, slots=64) == [1] * 24          # at most one task a job
    per = int(TASK_START_S)                                        # each task keeps TASK_START_S of work
    assert sizes(100, 1.0, 1200, 30, slots=64) == [per] * (100 // per)
    assert sizes(10, 600, 1200, 60, slots=2) == [2] * 5            # long jobs: the task length decides
    assert len(chunks(5000, 10, 1200, 30, max_tasks=1001, slots=4096)) == 1001  # MaxArraySize still caps it
    assert slots({"cpus_per_task": 1}, real) == 2 and slots({"cpus_per_task": 2}, real) == 1
    assert slots({"cpus_per_task": 4}, real) == 1                  # a request no node fits: check_request says so
    assert slots({"cpus_per_task": 1, "mem_gb": 16}, real) == 1    # 23081 MB hold one 16 GB task
    assert slots({"cpus_per_task": 1, "array_parallelism": 1}, real) == 1
    assert slots({"cpus_per_task": 1, "mem_gb": 1, "array_parallelism": 256}, gpu) == 126
    assert slots({"cpus_per_task": 2}, gpu) == 63                  # default partition cpu: (64 + 62) / 2
    assert slots({"cpus_per_task": 8, "partition": "gpu"}, gpu) == 4 + 4 + 2
    assert slots({"cpus_per_task": 1, "gpus_per_node": 1, "partition": "gpu"}, gpu) == 1  # GPUs: not spread


def canned(outputs: dict):
    """A runner answering each command (by its first word) from `outputs`; an exception is raised."""
    calls = []

    def run(cmd):
        calls.append(list(cmd))
        out = outputs[cmd[0]]
        if isinstance(out, Exception):
            raise out
        return out

    run.calls = calls
    return run


def test_queue_lines_are_read_per_task():
    states = parse_queue(SACCT_2205, "sacct")
    assert [states[i].state for i in ("7", "8_0", "8_1", "8_2", "8_3", "10_0", "14", "16")] == [
        "CANCELLED", "CANCELLED", "CANCELLED", "CANCELLED", "CANCELLED", "COMPLETED", "PENDING", "TIMEOUT"]
    assert states["7"].reason == "PartitionConfig" and states["8_2"].reason == ""
    assert parse_queue("5_[0-3,7%2]|PENDING|Resources\n5.batch|RUNNING|None\n", "sacct").keys() == {
        "5_0", "5_1", "5_2", "5_3", "5_7"}


def test_hopeless_reasons():
    states = {**parse_queue(SQUEUE_2205, "squeue"), **parse_queue(SQUEUE_DRAINED_2205, "squeue")}
    assert {i for i, t in states.items() if t.hopeless} == {"14", "19"}  # PartitionTimeLimit, ReqNodeNotAvail
    assert not states["15_1"].hopeless and not states["16"].hopeless  # Resources, Priority: they will start
    assert TaskState("7", "PENDING", "PartitionConfig").hopeless
    assert TaskState("7", "PENDING", "QOSMaxWallDurationPerJobLimit").hopeless
    assert not TaskState("7", "PENDING", "QOSMaxJobsPerUserLimit").hopeless  # others' jobs end
    assert not TaskState("7", "CANCELLED", "PartitionConfig").hopeless and TaskState("7", "TIMEOUT").finished


def test_queue_state_asks_sacct_for_what_squeue_has_forgotten():
    run = canned({"squeue": SQUEUE_2205, "sacct": SACCT_2205})
    states = queue_state([14, 15, 16, 7, 99], run=run)
    assert states["14"] == TaskState("14", "PENDING", "PartitionTimeLimit", "squeue")
    assert {i for i in states if i.startswith("15_")} == {"15_0", "15_1", "15_2"}
    assert states["7"] == TaskState("7", "CANCELLED", "PartitionConfig", "sacct")
    assert states["99"].state == "UNKNOWN"
    assert run.calls[1][:2] == ["sacct", "-n"] and run.calls[1][run.calls[1].index("-j") + 1] == "7,99"
    # squeue failing (every id unknown to it, or slurmctld away): sacct alone
    run = canned({"squeue": ClusterError("squeue failed (exit 1): Invalid job id specified"), "sacct": SACCT_2205})
    assert queue_state(["16"], run=run)["16"].state == "TIMEOUT"


def test_a_missing_client_is_one_line(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ClusterError, match=r"^scontrol not found: no SLURM client on this machine$"):
        cluster_limits()


# --- the ledger and the wait, on canned scheduler answers ---------------------------------------


def test_an_id_reused_by_another_job_is_not_the_ledgers_task(tmp_path):
    """After a cluster's state is reset, SLURM numbers jobs from 1 again: a ledger's id that now names another
    job (its batch script outside the submission's submitit folder) is not attached to, nor waited for."""
    from attnrepro.jobs import slurm

    ours, other = tmp_path / "slurm" / "sweep", tmp_path / "elsewhere"
    slurm._record(tmp_path, slurm.Submission(array="12", kind="train", experiment="e", tasks=[["k1", "k2"]],
                                             folder=str(ours), submitted=time.time() - 3600, ids=["12"]))

    def queue(folder):
        def run(cmd):
            return f"12|RUNNING|None|{folder}/.submission_file_abc.sh\n" if cmd[0] == "squeue" else ""
        return run

    assert slurm.in_flight(tmp_path, ["k1", "k2"], run=queue(ours)) == {"k1": "12", "k2": "12"}
    assert slurm.in_flight(tmp_path, ["k1", "k2"], run=queue(other)) == {}
    assert parse_queue(f"12|RUNNING|None|{ours}/x.sh\n", "squeue")["12"].command == f"{ours}/x.sh"


def test_the_wait_names_only_the_arrays_it_still_waits_on(tmp_path, monkeypatch):
    """A rerun's wait holds the ledger's arrays; its progress line names those with live tasks, not an old
    array whose tasks ended (or whose id now names another job): the wait goes on for array 7 only."""
    from attnrepro.jobs import slurm

    ours = tmp_path / "slurm" / "sweep"
    subs = [slurm.Submission(array=a, kind="train", experiment="e", tasks=[[f"k{a}"]], folder=str(ours),
                             submitted=time.time() - 3600, ids=[a]) for a in ("5", "7")]
    polls = iter(range(3))

    def run(cmd):  # array 5 is gone from squeue and sacct; array 7 runs for two polls, then is gone
        if cmd[0] == "squeue":
            return f"7|RUNNING|None|{ours}/.submission_file_abc.sh\n" if next(polls, 9) < 2 else ""
        return ""

    monkeypatch.setattr(slurm, "PROGRESS_S", 0.0)
    monkeypatch.setattr(slurm, "POLL_S", (0.01,))  # the no-op sleep would otherwise spin through each poll
    lines = []
    slurm.wait(subs, lambda key: tmp_path / "no_record" / key, log=lines.append, run=run, sleep=lambda s: None)
    progress = [line for line in lines if line.startswith("waiting on")]
    assert progress and all(line.startswith("waiting on arrays 7:") for line in progress), lines


def test_a_task_ended_without_its_records_names_the_end_of_its_log(tmp_path):
    """Without cgroups an out-of-memory kill shows only in the task's stderr (srun: ... Killed): the outcome
    line of a task that ended without its records ends with that log's last line; none when there is no log."""
    from attnrepro.jobs import slurm

    folder = tmp_path / "slurm" / "sweep"
    folder.mkdir(parents=True)
    (folder / "21_6_0_log.err").write_text("Trainer.fit stopped\nsrun: error: vm: task 0: Killed\n\n")
    sub = slurm.Submission(array="21", kind="train", experiment="e", tasks=[["k1", "k2"], ["k3"]],
                           folder=str(folder), submitted=time.time(), ids=["21_6", "21_7"])
    states = {t: TaskState(t, "FAILED", "None") for t in ("21_6", "21_7")}
    out = slurm._outcome([sub], states, lambda key: key == "k1", run=lambda cmd: "")
    assert out["missing"] == ["k2", "k3"]
    assert out["ended"][0].endswith("without 1 of its 2 records; its log ends: srun: error: vm: task 0: Killed")
    assert out["ended"][1].endswith("without 1 of its 1 records")
