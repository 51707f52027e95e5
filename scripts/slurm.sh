#!/usr/bin/env bash
# A real Slurm (Debian's slurm-wlm, with munge) on the emulated cluster of scripts/cluster.sh:
# one slurmd per emulated host, a controller on a host of its own, for running boostlm under
# sbatch/srun as on a cluster.
#
#   scripts/slurm.sh up N [--name NAME] [--rate RATE] [--cpus C]
#   scripts/slurm.sh down [--name NAME]
#   scripts/slurm.sh status [--name NAME]
#   scripts/slurm.sh env [--name NAME]      prints `export SLURM_CONF=...` for eval
#   scripts/slurm.sh kill-host HOST         a host fails: kills its slurmd, job steps and ranks
#   scripts/slurm.sh revive-host HOST       starts the host's slurmd again (the node returns)
#
# `up` brings up the network of `cluster.sh up N` (unless a cluster NAME of N hosts is up already),
# then, all of it recorded in /run/boostlm-cluster/NAME.slurm.state for `down`:
#  - a controller host NAME-c: a network namespace on the cluster's bridge (veth NAME-vc, address
#    .254 of the cluster's /24), where slurmctld runs with hostname NAME-c (its own UTS namespace),
#    so nothing of Slurm listens in the root namespace;
#  - one munged for all hosts, with a key and socket of its own in /run/boostlm-cluster/NAME-slurm
#    (not /etc/munge: a machine's own munge and Slurm, if any, are not touched);
#  - per host NAME-h<i>: slurmd in the host's network namespace (entered with nsenter: `ip netns
#    exec` remounts /sys, where slurmd then finds no cgroup file system) and its own UTS namespace
#    (hostname NAME-h<i>), but the file system of the shell that ran `up`: nothing is mounted
#    over it, so a checkout and a job's files work from any path, /tmp included (issue 49).
#    Each host's temporary files go to a directory of its own, NAME-slurm/tmp/NAME-h<i>, through
#    the settings Slurm, PMIx and Open MPI read (their session directories would collide in one
#    /tmp): TmpFS=NAME-slurm/tmp/%n (Slurm's PMIx plugin makes its client directory there), the
#    daemons' TMPDIR, PMIX_SYSTEM_TMPDIR and PMIX_SERVER_TMPDIR, and a TaskProlog that gives
#    every task (the batch script's too) TMPDIR, PMIX_SYSTEM_TMPDIR and OMPI_MCA_orte_tmpdir_base
#    of its host, replacing what the submitter's environment carried there.
# The generated slurm.conf is NAME-slurm/slurm.conf; Slurm's commands find it through SLURM_CONF
# (`eval "$(scripts/slurm.sh env)"`). Each node has C CPUs (default: this machine's cores over N,
# at least 1): the hosts share this machine's cores, so a job's tasks take --cpus-per-task of them
# (boostlm reads SLURM_CPUS_PER_TASK for its threads). One partition, "main", holds every node.
# Slurm is set for tests rather than throughput: the scheduler runs every 2 s, a node that stops
# answering is down after 10 s and back when its slurmd returns, credentials expire after 10 s
# (a requeued job restarts within seconds, not the default two minutes), KillWait is 30 s.
# Needs root, like cluster.sh; `down` stops exactly the processes it started (by the pids it
# recorded, and the processes of the namespaces it made), then removes the network if `up` made it.
# The daemons see the mounts of the shell that ran `up`: `up` (when Slurm is up already) and `env`
# refuse, naming the path, a checkout that they do not see as the caller does (made visible by a
# mount in another mount namespace), and a checkout under /run/boostlm-cluster, which `down` removes.
set -Eeuo pipefail

here=$(cd "$(dirname "$0")" && pwd)
state_dir=/run/boostlm-cluster
usage() { sed -n '6,11p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "slurm.sh: $*" >&2; exit 1; }

command=${1:-}
[ -n "$command" ] || { usage >&2; exit 2; }
shift
hosts=0
case $command in
  up)
    [[ ${1:-} =~ ^[0-9]+$ ]] || die "up needs the number of hosts, e.g. slurm.sh up 2"
    hosts=$1; shift
    ((hosts >= 1 && hosts <= 250)) || die "hosts: $hosts is outside 1..250"
    ;;
  down | status | env) ;;
  kill-host | revive-host)
    [[ ${1:-} =~ ^blm[a-z0-9]{0,6}-h[0-9]+$ ]] || die "$command needs a host such as blm-h1"
    target=$1; shift
    ;;
  -h | --help) usage; exit 0 ;;
  *) usage >&2; exit 2 ;;
esac
name=blm rate="" cpus=""
while (($#)); do
  case $1 in
    --name) name=${2:?--name needs a value}; shift ;;
    --rate) rate=${2:?--rate needs a value such as 1gbit}; shift ;;
    --cpus) cpus=${2:?--cpus needs a number}; shift ;;
    *) die "unknown option $1" ;;
  esac
  shift
done
[ -z "${target:-}" ] || name=${target%-h*}
[[ $name =~ ^blm[a-z0-9]{0,6}$ ]] ||
  die "--name $name: must be 'blm' followed by up to 6 lowercase letters or digits"
state=$state_dir/$name.slurm.state
dir=$state_dir/$name-slurm
conf=$dir/slurm.conf
export SLURM_CONF=$conf

record() { echo "$*" >> "$state"; }

# The pid a daemon wrote to its pid file, once it has (up to 20 s).
wait_pid_file() {
  local file=$1 what=$2 i
  for ((i = 0; i < 200; i++)); do
    if [ -s "$file" ] && kill -0 "$(cat "$file")" 2> /dev/null; then cat "$file"; return; fi
    sleep 0.1
  done
  die "$what did not start (no live pid in $file); its log: ${3:-none}"
}

write_conf() {  # subnet prefix, cpus per node
  local net=$1 node_cpus=$2 i
  cat > "$conf" << EOF
# Written by scripts/slurm.sh for the emulated cluster $name (do not edit: 'down' removes it).
ClusterName=$name
SlurmctldHost=$name-c($net.254)
AuthType=auth/munge
AuthInfo=socket=$dir/munge.socket,cred_expire=10
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=10
SlurmctldTimeout=10
MessageTimeout=10
KillWait=30
InactiveLimit=0
MinJobAge=600
JobRequeue=1
TmpFS=$dir/tmp/%n
TaskProlog=$dir/task_prolog.sh
EOF
  for ((i = 0; i < hosts; i++)); do
    echo "NodeName=$name-h$i NodeAddr=$net.$((i + 2)) CPUs=$node_cpus State=UNKNOWN" >> "$conf"
  done
  echo "PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >> "$conf"
}

# Every task's temporary directories are its host's (slurmstepd runs this before each task, the
# batch script included, and adds its `export` lines to the task's environment). An srun in the
# batch script passes the first host's TMPDIR on to the other hosts' tasks: this replaces it.
write_task_prolog() {
  cat > "$dir/task_prolog.sh" << EOF
#!/bin/sh
# Written by scripts/slurm.sh for the emulated cluster $name: a task's temporary files stay on its host.
tmp=$dir/tmp/\${SLURMD_NODENAME:-\$(hostname)}
echo "export TMPDIR=\$tmp"
echo "export PMIX_SYSTEM_TMPDIR=\$tmp"
echo "export OMPI_MCA_orte_tmpdir_base=\$tmp"
EOF
  chmod 0755 "$dir/task_prolog.sh"
}

# Runs a daemon on a host: in its network namespace (nsenter, not `ip netns exec`) and a UTS
# namespace of its own (hostname), with the host's temporary directory for it and for the job
# steps it starts (slurmstepd, and the PMIx server in it, inherit the daemon's environment).
# The mount namespace stays the caller's. The daemon forks; its pid file says its pid.
start_in_host() {  # host, tmp dir, command words...
  local host=$1 tmp=$2
  shift 2
  TMPDIR=$tmp PMIX_SYSTEM_TMPDIR=$tmp PMIX_SERVER_TMPDIR=$tmp \
    nsenter --net="/run/netns/$host" unshare --uts \
    /bin/sh -c 'hostname "$1" && shift && exec "$@"' \
    sh "$host" "$@" 8>&-  # not the lock: a daemon holding it would block every later call
}

# Refuses, naming the path and the reason, a checkout the hosts cannot run from: one under
# /run/boostlm-cluster (`down` removes that tree), or one the daemons do not see as this shell
# does. They run in the mount namespace of the shell that ran `up`, so a directory that a mount
# in another namespace shows here (a private bind, a container's volume) is another directory
# for them, or none: compared by device and inode through /proc/PID/root.
check_checkout() {
  local checkout pid seen
  checkout=$(cd "$here/.." && pwd -P)
  case $checkout/ in
    "$state_dir"/*) die "the checkout $checkout is under $state_dir, which 'slurm.sh down' removes: clone it elsewhere" ;;
  esac
  [ -f "$state" ] || return 0
  pid=$(awk '$1 == "pid" && $3 == "slurmd" { print $2; exit }' "$state")
  [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2> /dev/null)" = slurmd ] || return 0
  # The same mount namespace sees the same files (and one that cannot look into theirs, not root,
  # cannot use the cluster anyway: munge's socket is root's).
  [ "$(readlink /proc/self/ns/mnt)" != "$(readlink "/proc/$pid/ns/mnt" 2> /dev/null || echo unreadable)" ] || return 0
  readlink "/proc/$pid/root" > /dev/null 2>&1 || return 0
  seen=$(stat -Lc %d:%i "/proc/$pid/root$checkout" 2> /dev/null) || seen=missing
  [ "$seen" = "$(stat -Lc %d:%i "$checkout")" ] ||
    die "the checkout $checkout is not what the emulated hosts of $name see at that path" \
      "($([ "$seen" = missing ] && echo "they find nothing there" || echo "they find another directory")):" \
      "their daemons run in the mount namespace of the shell that ran 'up', not this one's." \
      "Run from a checkout both see, or 'slurm.sh down --name $name' and 'up' again from here"
}

# A host's slurmd, in the host's namespaces; its pid recorded for `down`.
start_slurmd() {
  local host=$1 pid
  mkdir -p "$dir/tmp/$host" "$dir/spool/$host"
  rm -f "$dir/slurmd-$host.pid"
  start_in_host "$host" "$dir/tmp/$host" slurmd -f "$conf" -N "$host"
  pid=$(wait_pid_file "$dir/slurmd-$host.pid" "slurmd on $host" "$dir/slurmd-$host.log")
  record pid "$pid" slurmd
}

# Stops a process `up` started, if the pid is still that program's (a pid is reused once free).
stop_pid() {
  local pid=$1 program=${2:-} i
  [ "$(cat "/proc/$pid/comm" 2> /dev/null)" = "$program" ] || return 0
  kill -TERM "$pid" 2> /dev/null || true
  for i in $(seq 50); do kill -0 "$pid" 2> /dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2> /dev/null || true
}

slurm_up() {
  command -v slurmctld > /dev/null && command -v slurmd > /dev/null && command -v munged > /dev/null ||
    die "Slurm is not installed: run scripts/setup.sh --slurm (Debian's slurm-wlm and munge)"
  check_checkout
  if [ -f "$state" ]; then
    [ "$(sed -n 's/^hosts //p' "$state")" = "$hosts" ] ||
      die "Slurm on $name is up with another number of hosts; run 'slurm.sh down --name $name' first"
    echo "Slurm on $name is already up: export SLURM_CONF=$conf"
    return
  fi
  mkdir -p "$state_dir"
  printf 'hosts %s\n' "$hosts" > "$state"
  # Any failure from here on (an error, or die) leaves the state file listing what exists: undo it.
  trap 'echo "slurm.sh: up failed; removing what it made" >&2; slurm_down > /dev/null' EXIT

  local cluster_state=$state_dir/$name.state
  if [ -f "$cluster_state" ]; then
    [ "$(sed -n 's/^hosts //p' "$cluster_state")" = "$hosts" ] ||
      die "cluster $name is up with another number of hosts; run 'cluster.sh down --name $name' first"
  else
    "$here/cluster.sh" up "$hosts" --name "$name" ${rate:+--rate "$rate"} > /dev/null
    record cluster "$name"
  fi
  local subnet net pid
  subnet=$(sed -n 's/^subnet //p' "$cluster_state")
  net=${subnet%.0/24}

  # The controller's host: a namespace on the cluster's bridge.
  ip netns add "$name-c"
  record netns "$name-c"
  ip link add "$name-vc" type veth peer name eth0 netns "$name-c"
  record link "$name-vc"
  ip link set "$name-vc" master "$name-br" up
  ip -n "$name-c" link set lo up
  ip -n "$name-c" addr add "$net.254/24" dev eth0
  ip -n "$name-c" link set eth0 up

  rm -rf "$dir"
  mkdir -p -m 0700 "$dir"
  record dir "$dir"
  mkdir -p "$dir/ctld" "$dir/spool" "$dir/tmp"
  local node_cpus=${cpus:-$(($(nproc) / hosts))}
  ((node_cpus >= 1)) || node_cpus=1
  write_conf "$net" "$node_cpus"
  write_task_prolog

  mungekey --create --keyfile="$dir/munge.key" > /dev/null
  munged --force --socket="$dir/munge.socket" --key-file="$dir/munge.key" \
    --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munged.seed" \
    2> /dev/null 8>&-
  pid=$(wait_pid_file "$dir/munged.pid" munged "$dir/munged.log")
  record pid "$pid" munged

  mkdir -p "$dir/tmp/$name-c"
  start_in_host "$name-c" "$dir/tmp/$name-c" slurmctld -f "$conf"
  pid=$(wait_pid_file "$dir/slurmctld.pid" slurmctld "$dir/slurmctld.log")
  record pid "$pid" slurmctld
  local i
  for ((i = 0; i < hosts; i++)); do start_slurmd "$name-h$i"; done
  # Up when every node is idle (registered and schedulable).
  for ((i = 0; i < 300; i++)); do
    [ "$(sinfo -h -N -t idle -o %N 2> /dev/null | sort -u | wc -l)" = "$hosts" ] && break
    sleep 0.1
  done
  [ "$(sinfo -h -N -t idle -o %N 2> /dev/null | sort -u | wc -l)" = "$hosts" ] ||
    die "the nodes did not come up: $(sinfo -N 2>&1 | tr '\n' ' '); see $dir/*.log"
  trap - EXIT
  echo "Slurm on $name up: controller $name-c ($net.254), nodes $name-h0..$name-h$((hosts - 1)), $node_cpus CPUs each"
  echo "use it:      eval \"\$($0 env --name $name)\"   (export SLURM_CONF=$conf)"
  echo "remove it:   $0 down --name $name"
}

# Stops what the state file lists, newest first: the daemons (and, with a host's namespace, the
# job steps still running there), the controller's namespace, then the network if `up` made it.
slurm_down() {
  [ -f "$state" ] || { echo "Slurm on $name is not up (no $state)"; return; }
  local kind what i host
  # The job steps on each host (slurmstepd and the tasks it started live in the host's namespace).
  for ((i = 0; i < $(sed -n 's/^hosts //p' "$state"); i++)); do
    host=$name-h$i
    ip netns pids "$host" 2> /dev/null | xargs -r kill -KILL 2> /dev/null || true
  done
  tac "$state" | while read -r kind what; do
    case $kind in
      pid) stop_pid $what ;;
      netns)
        ip netns pids "$what" 2> /dev/null | xargs -r kill -KILL 2> /dev/null || true
        ip netns del "$what" 2> /dev/null || true ;;
      link) ip link del "$what" 2> /dev/null || true ;;
      dir) rm -rf "$what" ;;
      cluster) "$here/cluster.sh" down --name "$what" > /dev/null ;;
    esac
  done
  rm -f "$state"
  echo "Slurm on $name down"
}

# The host fails as a machine would: everything in its network namespace dies at once (slurmd,
# slurmstepd, the job's ranks); the controller marks the node down after SlurmdTimeout.
kill_host() {
  [ -f "$state" ] || die "Slurm on $name is not up"
  ip netns pids "$target" 2> /dev/null | grep -q . || die "$target: no such host, or nothing runs there"
  ip netns pids "$target" | xargs -r kill -KILL 2> /dev/null || true
  echo "$target: killed every process (slurmd, job steps, ranks)"
}

revive_host() {
  [ -f "$state" ] || die "Slurm on $name is not up"
  ip netns pids "$target" 2> /dev/null | grep -q . && die "$target is running (kill-host first)"
  ip netns list | grep -q "^$target\b" || die "$target: no such host"
  # As after a reboot: its temporary directory is empty, and what the steps that died with the
  # host left in its spool is gone: PMIx names its socket and directory there by job and step, and a requeued job
  # keeps its id, so its first step would find them taken and fail to launch (Slurm 22.05).
  find "$dir/spool/$target" -type s -delete 2> /dev/null || true
  rm -rf "$dir/spool/$target"/pmix.*
  rm -rf "${dir:?}/tmp/$target"
  start_slurmd "$target"
  echo "$target: slurmd started again"
}

case $command in
  kill-host | revive-host)
    [ "$(id -u)" = 0 ] || die "$command needs root"
    exec 8> "$state_dir/slurm.lock"
    flock 8
    if [ "$command" = kill-host ]; then kill_host; else revive_host; fi ;;
  up | down)
    [ "$(id -u)" = 0 ] || die "$command needs root (namespaces, and daemons run as root); run it with sudo"
    mkdir -p "$state_dir"
    exec 8> "$state_dir/slurm.lock"
    flock 8
    if [ "$command" = up ]; then slurm_up; else slurm_down; fi ;;
  status)
    [ -f "$state" ] || { echo "Slurm on $name is not up"; exit 1; }
    sinfo -N ;;
  env)
    check_checkout
    echo "export SLURM_CONF=$conf" ;;
esac
