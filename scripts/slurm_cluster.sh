#!/usr/bin/env bash
# A real one-node SLURM cluster on this machine, for the tests (tests/test_slurm.py, tests/test_cluster.py)
# and for trying `hydra/launcher=slurm_cpu` by hand. Debian 12's own packages (slurm-wlm 22.05, slurmdbd,
# munge, mariadb-server); the daemons run from their binaries, without systemd and without cgroups.
#
#   scripts/slurm_cluster.sh install   apt-get the packages (quick when they are there already)
#   scripts/slurm_cluster.sh up        write the configs, start munged, mariadbd, slurmdbd, slurmctld,
#                                      slurmd; wait until the node is idle (already up: says so, exit 0)
#   scripts/slurm_cluster.sh down      stop what `up` started (by recorded pid) and nothing else
#   scripts/slurm_cluster.sh status    each daemon's pid and state, and sinfo (exit 0 up, 3 down, 1 partly)
#   scripts/slurm_cluster.sh clean     down, then remove the state folder (database, job state, logs)
#
# Everything lives in a state folder, $ATTNREPRO_SLURM_DIR (default /tmp/attnrepro-slurm):
#   etc/   slurm.conf, slurmdbd.conf (mode 600), cgroup.conf     log/  each daemon's log (and its stdout+stderr)
#   pids/  one pid file per daemon `up` started                   munge/, mysql/, ctld/, spool/  their data
# The clients (sinfo, sbatch, sacct: also submitit's) find the cluster through /etc/slurm/slurm.conf,
# which `up` makes a symlink to etc/slurm.conf (and `down` removes) unless a slurm.conf of someone else's
# is there; then `export SLURM_CONF=$ATTNREPRO_SLURM_DIR/etc/slurm.conf`.
#
# The cluster: one node (this machine's short hostname, its CPUs and sockets/cores/threads as `slurmd -C`
# reports them, RealMemory = MemTotal of /proc/meminfo minus a margin), one partition `debug` (Default=YES)
# with a finite MaxTime so that a too-long request can be tested, no GPUs/gres, MaxArraySize default
# (1001). Accounting through slurmdbd + MariaDB stays on: submitit reads job states with sacct.
# EnforcePartLimits is left at its default (NO): a job over the partition's MaxTime is accepted and stays
# PENDING with Reason=PartitionTimeLimit, as on many real clusters; a job that no node can hold (CPUs,
# memory, gres) is refused by sbatch.
#
# Settings (environment): ATTNREPRO_SLURM_DIR, ATTNREPRO_SLURM_MAXTIME (minutes, default 30),
# ATTNREPRO_SLURM_MEM_MARGIN_MB (default 1024), ATTNREPRO_SLURM_TIMEOUT (seconds each wait, default 60),
# ATTNREPRO_SLURM_PORTS (slurmctld,slurmd,slurmdbd,mariadb; default 6817,6818,6819,3307).
set -euo pipefail

STATE=${ATTNREPRO_SLURM_DIR:-/tmp/attnrepro-slurm}
CLUSTER=attnrepro
PARTITION=debug
MAXTIME=${ATTNREPRO_SLURM_MAXTIME:-30}
MEM_MARGIN_MB=${ATTNREPRO_SLURM_MEM_MARGIN_MB:-1024}
TIMEOUT=${ATTNREPRO_SLURM_TIMEOUT:-60}
IFS=, read -r CTLD_PORT SLURMD_PORT DBD_PORT DB_PORT <<<"${ATTNREPRO_SLURM_PORTS:-6817,6818,6819,3307}"
NODE=$(hostname -s)
CONF=$STATE/etc/slurm.conf
SYSTEM_CONF=/etc/slurm/slurm.conf
# Start order (`down` stops them in the reverse order).
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd)
PACKAGES=(slurm-wlm slurmdbd munge mariadb-server)
BINARIES=(/usr/sbin/munged /usr/sbin/mariadbd /usr/bin/mariadb-install-db /usr/bin/mariadb /usr/sbin/slurmdbd
          /usr/sbin/slurmctld /usr/sbin/slurmd /usr/bin/sinfo /usr/bin/sbatch /usr/bin/sacct /usr/bin/sacctmgr)

# The daemons and clients read their configuration from here (slurmdbd.conf and cgroup.conf are looked
# up beside it).
export SLURM_CONF=$CONF

say() { echo "slurm_cluster: $*"; }
die() { echo "slurm_cluster: error: $*" >&2; exit 1; }

# The last lines of a daemon's log (or of its stdout+stderr, when it died before opening its log), to
# show with an error.
show_log() {
  local name=$1 f=$STATE/log/$1.log
  [[ -s $f ]] || f=$STATE/log/$name.out
  [[ -s $f ]] && { echo "--- last lines of $f:" >&2; tail -n 8 "$f" >&2; }
  return 0
}

# wait_for <seconds> <daemon> <what> <command...>: run the command every 0.2 s until it succeeds; on
# timeout (or when the daemon died) fail with a line naming the daemon's log.
wait_for() {
  local secs=$1 name=$2 what=$3; shift 3
  local end=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if ! kill -0 "$(<"$STATE/pids/$name.pid")" 2>/dev/null; then  # (not alive: it may not have exec'd yet)
      show_log "$name"
      die "$name exited while waiting for $what; see $STATE/log/$name.log and $STATE/log/$name.out"
    fi
    if ((SECONDS >= end)); then
      show_log "$name"
      die "$what not reached within ${secs}s; see $STATE/log/$name.log and $STATE/log/$name.out"
    fi
    sleep 0.2
  done
}

# The pid `up` recorded for a daemon, when that process still runs that daemon's binary (a recycled pid
# of another program does not count).
pid_of() {
  local name=$1 pid
  [[ -f $STATE/pids/$name.pid ]] || return 1
  pid=$(<"$STATE/pids/$name.pid")
  [[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] || return 1
  local cmdline
  cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ $cmdline == *"$name"* ]] || return 1
  echo "$pid"
}
alive() { pid_of "$1" >/dev/null; }

# start <name> <command...>: run a daemon in the foreground of its own session, detached from this
# shell, its stdout and stderr to log/<name>.out; record its pid.
start() {
  local name=$1; shift
  setsid "$@" </dev/null >"$STATE/log/$name.out" 2>&1 &
  echo $! >"$STATE/pids/$name.pid"
}

sinfo_state() { timeout 5 sinfo -h -N -n "$NODE" -o %T 2>/dev/null; }

cmd_install() {
  local missing=() b
  for b in "${BINARIES[@]}"; do [[ -x $b ]] || missing+=("$b"); done
  if ((${#missing[@]} == 0)); then
    say "installed already ($(slurmd -V))"
    return 0
  fi
  command -v apt-get >/dev/null || die "apt-get not found: install ${PACKAGES[*]} by hand (missing ${missing[*]})"
  ((EUID == 0)) || die "install needs root (apt-get)"
  # Package scripts must not start the system's own munge or mariadb (they would hold the socket and
  # port): a policy-rc.d that says no, for the time of the install, unless one is there already.
  local policy=/usr/sbin/policy-rc.d own_policy=0
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod 755 "$policy"; own_policy=1
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  say "installing ${PACKAGES[*]} (missing ${missing[*]})"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >"${TMPDIR:-/tmp}/slurm_cluster-install.log" 2>&1 \
    || { tail -n 20 "${TMPDIR:-/tmp}/slurm_cluster-install.log" >&2; die "apt-get install failed; see ${TMPDIR:-/tmp}/slurm_cluster-install.log"; }
  ((own_policy)) && rm -f "$policy"
  for b in "${BINARIES[@]}"; do [[ -x $b ]] || die "$b still missing after apt-get install ${PACKAGES[*]}"; done
  say "installed ($(slurmd -V))"
}

write_configs() {
  mkdir -p "$STATE"/{etc,log,pids,munge,ctld,spool,run}
  chmod 755 "$STATE"; chmod 711 "$STATE/munge"  # munged: its socket's folder must be searchable by all
  # The node as the hardware reports it (CPUs, boards, sockets, cores, threads), memory with a margin
  # left for the system: a RealMemory above the real one would drain the node.
  local hw mem_mb real_mb
  hw=$(slurmd -C | head -n 1 | sed -e 's/ RealMemory=[0-9]*//' -e "s/^NodeName=[^ ]*/NodeName=$NODE/")
  mem_mb=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
  real_mb=$((mem_mb - MEM_MARGIN_MB))
  ((real_mb > 0)) || die "MemTotal ${mem_mb} MB is below the margin ATTNREPRO_SLURM_MEM_MARGIN_MB=${MEM_MARGIN_MB}"
  cat >"$CONF" <<EOF
# Written by scripts/slurm_cluster.sh up: a one-node test cluster. Edits are lost at the next up.
ClusterName=$CLUSTER
SlurmctldHost=$NODE
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$STATE/munge/munge.socket.2
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups: processes are tracked through /proc, tasks bound to CPUs by affinity only (memory is
# scheduled, not enforced).
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# A job without --mem would otherwise get the whole node's memory, and run alone.
DefMemPerCPU=1024
SchedulerType=sched/backfill
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
# Finished jobs stay in squeue/scontrol for MinJobAge seconds; sacct has them after that.
MinJobAge=300
KillWait=5
InactiveLimit=0
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
# The munge socket for the connections to slurmdbd (sacct, sacctmgr, slurmctld): AuthInfo does not
# apply to them, they would look for /run/munge/munge.socket.2.
AccountingStoragePass=$STATE/munge/munge.socket.2
JobCompType=jobcomp/none
$hw RealMemory=$real_mb State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=$MAXTIME State=UP
EOF
  # Unused without cgroup plugins (proctrack/linuxproc, task/affinity), but slurmd looks for it.
  cat >"$STATE/etc/cgroup.conf" <<EOF
# Written by scripts/slurm_cluster.sh up: no cgroup plugin is configured (see slurm.conf).
CgroupAutomount=no
ConstrainCores=no
ConstrainRAMSpace=no
EOF
  [[ -s $STATE/etc/db.pass ]] || { head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$STATE/etc/db.pass"; chmod 600 "$STATE/etc/db.pass"; }
  (umask 077; cat >"$STATE/etc/slurmdbd.conf" <<EOF
# Written by scripts/slurm_cluster.sh up. Mode 600: slurmdbd refuses a readable one (it has a password).
AuthType=auth/munge
AuthInfo=socket=$STATE/munge/munge.socket.2
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
LogFile=$STATE/log/slurmdbd.log
PidFile=$STATE/run/slurmdbd.pid
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$(<"$STATE/etc/db.pass")
StorageLoc=slurm_acct_db
EOF
  )
  chmod 600 "$STATE/etc/slurmdbd.conf"
}

# /etc/slurm/slurm.conf -> our slurm.conf, so that clients need no SLURM_CONF; never over another file.
link_system_conf() {
  mkdir -p /etc/slurm
  if [[ -L $SYSTEM_CONF && $(readlink "$SYSTEM_CONF") == "$CONF" ]]; then return 0; fi
  if [[ -e $SYSTEM_CONF || -L $SYSTEM_CONF ]]; then
    say "warning: $SYSTEM_CONF is not ours; clients need: export SLURM_CONF=$CONF"
    return 0
  fi
  ln -s "$CONF" "$SYSTEM_CONF"
}

db() { mariadb --no-defaults -S "$STATE/mysql/mysqld.sock" -u root "$@"; }

cmd_up() {
  local b start_s=$SECONDS name
  for b in "${BINARIES[@]}"; do [[ -x $b ]] || die "$b not found: run scripts/slurm_cluster.sh install first"; done
  local running=()
  for name in "${DAEMONS[@]}"; do alive "$name" && running+=("$name"); done
  if ((${#running[@]} == ${#DAEMONS[@]})) && node_idle_or_busy; then
    say "already up ($STATE; node $NODE $(sinfo_state))"
    return 0
  fi
  if ((${#running[@]} > 0)); then
    say "partly up (${running[*]} running): stopping those first"
    cmd_down >/dev/null
  fi
  write_configs
  link_system_conf

  # munge: the credentials of every daemon and client; our own key and socket.
  [[ -s $STATE/munge/munge.key ]] || { mungekey --create --keyfile="$STATE/munge/munge.key" --force; chmod 600 "$STATE/munge/munge.key"; }
  rm -f "$STATE/munge/munge.socket.2"
  start munged munged -F --force --key-file="$STATE/munge/munge.key" --socket="$STATE/munge/munge.socket.2" \
    --pid-file="$STATE/run/munged.pid" --log-file="$STATE/log/munged.log" --seed-file="$STATE/munge/munged.seed"
  wait_for 10 munged "munged's socket" test -S "$STATE/munge/munge.socket.2"

  # MariaDB for slurmdbd, on 127.0.0.1:$DB_PORT and a socket in the state folder; the data folder is
  # made once and kept (sacct history survives down/up; `clean` removes it).
  if [[ ! -d $STATE/mysql/mysql ]]; then
    mariadb-install-db --no-defaults --user=root --datadir="$STATE/mysql" --auth-root-authentication-method=socket \
      --skip-test-db >"$STATE/log/mariadb-install.out" 2>&1 \
      || { tail -n 15 "$STATE/log/mariadb-install.out" >&2; die "mariadb-install-db failed; see $STATE/log/mariadb-install.out"; }
  fi
  start mariadbd mariadbd --no-defaults --user=root --datadir="$STATE/mysql" --socket="$STATE/mysql/mysqld.sock" \
    --port="$DB_PORT" --bind-address=127.0.0.1 --pid-file="$STATE/run/mariadbd.pid" \
    --log-error="$STATE/log/mariadbd.log" --innodb-buffer-pool-size=128M --innodb-lock-wait-timeout=900 --skip-name-resolve
  wait_for "$TIMEOUT" mariadbd "MariaDB answering" db -e "SELECT 1"
  db <<EOF
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$(<"$STATE/etc/db.pass")';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
FLUSH PRIVILEGES;
EOF

  # slurmdbd, then the cluster registered in it (root's association comes with the cluster), so that
  # slurmctld's accounting and sacct work.
  start slurmdbd slurmdbd -D
  wait_for "$TIMEOUT" slurmdbd "slurmdbd answering" timeout 5 sacctmgr -n show cluster
  if [[ -z $(timeout 10 sacctmgr -n -P show cluster "$CLUSTER" format=cluster) ]]; then
    timeout 10 sacctmgr -i add cluster "$CLUSTER" >/dev/null || { show_log slurmdbd; die "sacctmgr add cluster $CLUSTER failed; see $STATE/log/slurmdbd.log"; }
  fi

  start slurmctld slurmctld -D
  wait_for "$TIMEOUT" slurmctld "slurmctld answering" timeout 5 scontrol ping
  start slurmd slurmd -D
  # A node left down or drained by an earlier run (state kept in ctld/) is put back.
  wait_for "$TIMEOUT" slurmd "node $NODE registered" node_registered
  case $(sinfo_state) in
    down*|drain*|fail*) timeout 5 scontrol update nodename="$NODE" state=resume || true ;;
  esac
  wait_for "$TIMEOUT" slurmd "node $NODE idle in sinfo" node_idle_or_busy
  say "up in $((SECONDS - start_s))s: cluster $CLUSTER, node $NODE ($(sinfo -h -N -n "$NODE" -o '%c CPUs, %m MB')), partition $PARTITION (MaxTime ${MAXTIME} min); state in $STATE"
}

# The node answers (any state but not-responding "*" or unknown).
node_registered() { local s; s=$(sinfo_state) && [[ -n $s && $s != *'*' && $s != unknown* ]]; }
# Idle, or running jobs (a second `up` while jobs run is still "up").
node_idle_or_busy() { [[ $(sinfo_state) =~ ^(idle|mixed|allocated|completing)$ ]]; }

# stop_group <name...>: SIGTERM to each daemon of the group that runs, wait up to 15 s for all of them,
# then SIGKILL what is left. Appends the names to `stopped`.
stop_group() {
  local name pid pids=() end=$((SECONDS + 15))
  for name in "$@"; do
    if pid=$(pid_of "$name"); then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid"); stopped+=("$name")
    fi
    rm -f "$STATE/pids/$name.pid"
  done
  for pid in "${pids[@]}"; do
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < end)); do sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      say "pid $pid still there after 15s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
}

cmd_down() {
  local n stopped=()
  if alive slurmctld && n=$(timeout 5 squeue -h -t running,pending 2>/dev/null | wc -l) && ((n > 0)); then
    say "warning: $n jobs still in the queue; their processes are not stopped"
  fi
  # The reverse of the start order, daemons that do not need each other to stop together (each takes
  # 1-4 s to stop here).
  stop_group slurmd slurmctld
  stop_group slurmdbd
  stop_group mariadbd munged
  if [[ -L $SYSTEM_CONF && $(readlink "$SYSTEM_CONF") == "$CONF" ]]; then rm -f "$SYSTEM_CONF"; fi
  if ((${#stopped[@]})); then say "stopped ${stopped[*]}"; else say "nothing running"; fi
}

cmd_status() {
  local name pid up=0
  for name in "${DAEMONS[@]}"; do
    if pid=$(pid_of "$name"); then echo "$name: running (pid $pid)"; up=$((up + 1)); else echo "$name: stopped"; fi
  done
  if ((up > 0)) && timeout 5 sinfo >/dev/null 2>&1; then timeout 5 sinfo -N -o '%N %P %T %c %m %l'; fi
  if ((up == ${#DAEMONS[@]})); then return 0; elif ((up == 0)); then return 3; else return 1; fi
}

cmd_clean() {
  cmd_down
  [[ -d $STATE ]] && rm -rf "$STATE" && say "removed $STATE"
  return 0
}

case ${1:-} in
  install) cmd_install ;;
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  clean) cmd_clean ;;
  *) echo "usage: $0 install|up|down|status|clean" >&2; exit 2 ;;
esac
