#!/usr/bin/env bash
# boostlm under a real Slurm (Debian's slurm-wlm) on a two-host emulated cluster (scripts/slurm.sh:
# a slurmd per network-namespace host, a controller on a third), through the example batch
# script examples/slurm/train_cpu.sbatch (srun --mpi=pmix, TP 2 btp, one rank per host):
#  - the cluster, brought up from a copy of the checkout under /tmp (its scripts, the example and
#    the binary), gives each host's tasks a temporary directory of their own, and slurm.sh refuses
#    a checkout that the hosts see otherwise (a bind mount in another mount namespace);
#  - a job across the two hosts, run from that copy under /tmp (issue 49: the hosts once hid /tmp),
#    gives one process's losses (relative 1e-5 over the first 20 steps: TP reorders fp32 sums),
#    with one OpenMP thread per rank from --cpus-per-task (OMP_NUM_THREADS unset); the later jobs
#    run from the checkout where it is, their files under /tmp too;
#  - a time limit's warning (--signal=B:USR1) mid-run: every rank saves, the job requeues itself and
#    the restarted job resumes; its losses equal an uninterrupted job's bit for bit;
#  - scancel: a checkpoint, exit 130, no requeue;
#  - a host that dies (its slurmd, step and rank killed): the job fails naming the host, Slurm
#    requeues it, and once the host is back it resumes from the last checkpoint, ending with the
#    uninterrupted job's losses (a quarter of its steps, on its schedule: its first losses).
# The warning's timing is Slurm's (it checks time limits every 30 s and may signal up to a minute
# early): the test asserts the order of events, not their times. Needs root for namespaces and
# the daemons, and Slurm installed (scripts/setup.sh --slurm); skips (77) with the reason otherwise.
# Usage: test_slurm.sh BOOSTLM
set -uo pipefail
boostlm=$1
repo=$(cd "$(dirname "$0")/../.." && pwd)
slurm=$repo/scripts/slurm.sh
batch=$repo/examples/slurm/train_cpu.sbatch
source "$(dirname "$0")/lib.sh" slurm

for program in slurmctld slurmd munged sbatch; do
  command -v $program > /dev/null ||
    { echo "skipped: Slurm is not installed ($program missing: scripts/setup.sh --slurm)"; exit 77; }
done
command -v mpirun > /dev/null || { echo "skipped: MPI not available (no mpirun)"; exit 77; }
probe=blmprobe$$
if ! ip netns add "$probe" 2> /dev/null; then
  echo "skipped: cannot create network namespaces here (needs root / CAP_NET_ADMIN)"
  exit 77
fi
ip netns del "$probe"

# A copy of the checkout under /tmp ($work is there): what the hosts run must be found at any
# path. (A copy, not a bind mount: removing $work must never reach into the tree.)
copy=$work/checkout
mkdir -p "$copy/scripts" "$copy/examples/slurm" "$copy/build"
cp "$repo/scripts/slurm.sh" "$repo/scripts/cluster.sh" "$copy/scripts/"
cp "$batch" "$copy/examples/slurm/"
cp "$boostlm" "$copy/build/boostlm"
# The jobs' files, under /tmp as well: every host sees the whole file system.
shared=$work/jobs
mkdir "$shared"
name=blms$(($$ % 100000))
trap '"$copy/scripts/slurm.sh" down --name "$name" > /dev/null; rm -rf "$work"' EXIT
"$copy/scripts/slurm.sh" up 2 --name "$name" --cpus 1 > "$work/up.log" 2>&1 ||
  { cat "$work/up.log"; echo "slurm.sh up failed"; exit 1; }
export SLURM_CONF=/run/boostlm-cluster/$name-slurm/slurm.conf
h1=$name-h1

# ---- 0. Each host's tasks have a temporary directory of their own (TaskProlog), not /tmp.
hosts_tmp=$(timeout 60 srun -N 2 --ntasks-per-node=1 -t 1 sh -c 'echo "$(hostname) $TMPDIR"' 2> "$work/srun.err" | sort)
want="$name-h0 /run/boostlm-cluster/$name-slurm/tmp/$name-h0
$name-h1 /run/boostlm-cluster/$name-slurm/tmp/$name-h1"
[ "$hosts_tmp" = "$want" ] || fail "the hosts' TMPDIR: '$hosts_tmp' $(cat "$work/srun.err")"
# A checkout that the hosts see otherwise: here a bind mount in a mount namespace of its own
# (gone with it) shows the copy at $work/elsewhere, an empty directory for the hosts.
mkdir "$work/elsewhere"
expect_error "a checkout the hosts do not see" "the checkout $work/elsewhere is not what the emulated hosts" \
  unshare --mount --propagation private sh -c 'mount --bind "$1" "$2" && "$2/scripts/slurm.sh" env --name "$3"' \
  sh "$copy" "$work/elsewhere" "$name"

tiny_corpus "$boostlm" "$shared"
common=(-c "$shared/cola.json" -d "$shared/data" -b 4 -t 16 --lr 1e-2 --warmup 1
  --eval-interval 0 --eval-batches 1 --log-interval 100000)

# submit NAME SBATCH_FLAGS... -- TRAIN_FLAGS...: the example script as a job; prints the job id.
# The script and the binary are the checkout's where it is, or the copy's under /tmp with FROM=copy.
# With SLEEP_MS, every rank sleeps that long after each step (BOOSTLM_TEST_STEP_SLEEP_MS).
submit() {
  local job=$1 flags=() root=$repo bin=$boostlm
  shift
  if [ "${FROM:-}" = copy ]; then root=$copy bin=$copy/build/boostlm; fi
  while (($#)) && [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  env -u OMP_NUM_THREADS sbatch --parsable -o "$shared/$job.out" \
    --export="ALL,BOOSTLM=$bin${SLEEP_MS:+,BOOSTLM_TEST_STEP_SLEEP_MS=$SLEEP_MS}" "${flags[@]}" \
    "$root/examples/slurm/train_cpu.sbatch" \
    "$shared/$job" "${common[@]}" --tp 2 --layout btp "$@"
}

# The job's state (COMPLETED, CANCELLED, PENDING, ...) and restart count.
job_state() { scontrol show job "$1" 2> /dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
job_restarts() { scontrol show job "$1" 2> /dev/null | grep -o 'Restarts=[0-9]*' | cut -d= -f2; }

# await JOB SECONDS: until the job has ended for good (not pending a requeue).
await() {
  local job=$1 limit=$2 i state
  for ((i = 0; i < limit * 2; i++)); do
    state=$(job_state "$job")
    case $state in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) return 0 ;; esac
    sleep 0.5
  done
  fail "job $job still $state after $limit s"
  scancel "$job"
  return 1
}

# steps_logged RUN: the steps in a run's metrics.jsonl.
steps_logged() { [ -f "$1/metrics.jsonl" ] && wc -l < "$1/metrics.jsonl" || echo 0; }

# same_losses REF RUN exact|prefix|close: the runs' per-step losses agree bit for bit, or (prefix)
# bit for bit over RUN's steps, the first of REF's (a shorter run on REF's schedule:
# --schedule-steps), or (close) on the first 20 steps to 1e-5 relative: TP reorders fp32 sums, and
# the difference grows with training.
same_losses() {
  python3 - "$@" << 'PY'
import json, sys
ref = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
run = [json.loads(l) for l in open(sys.argv[2] + "/metrics.jsonl")]
exact = sys.argv[3] in ("exact", "prefix")
if sys.argv[3] == "prefix":
    assert 0 < len(run) < len(ref), f"{len(run)} steps, want fewer than the reference's {len(ref)}"
    ref = ref[:len(run)]
assert [r["step"] for r in run] == [r["step"] for r in ref], \
    f"steps {run[0]['step']}..{run[-1]['step']} ({len(run)}), want {len(ref)}"
for a, b in zip(ref, run) if exact else zip(ref[:20], run[:20]):
    ok = a["loss"] == b["loss"] if exact else abs(a["loss"] - b["loss"]) <= 1e-5 * abs(a["loss"])
    assert ok, f"step {a['step']}: loss {b['loss']!r}, want {a['loss']!r}"
PY
}

# ---- 1. TP 2 btp across the two hosts, from the copy under /tmp, against one process; the speed
# sets the later runs' length.
OMP_NUM_THREADS=1 timeout 120 "$boostlm" train -o "$shared/one" "${common[@]}" --steps 300 \
  > /dev/null 2>&1 || fail "one process"
job=$(FROM=copy submit across --time=5 -- --steps 300)
scontrol show job "$job" | grep -q "Command=$copy/examples/slurm/train_cpu.sbatch" ||
  fail "across: not the copy's script: $(scontrol show job "$job" | grep -o 'Command=[^ ]*')"
await "$job" 120
grep -q "execve\|No such file" "$shared/across.out" && fail "across: the hosts do not see $copy: $(grep -m1 'execve\|No such file' "$shared/across.out")"
grep -q "on $name-h\[0-1\]" "$shared/across.out" || fail "across: not on both hosts: $(head -1 "$shared/across.out")"
grep -q "exited with status 0" "$shared/across.out" || fail "across: $(tail -5 "$shared/across.out")"
same_losses "$shared/one" "$shared/across" close || fail "across: losses differ from one process"
# One OpenMP thread per rank from --cpus-per-task=1 (OMP_NUM_THREADS unset): two ranks of two
# threads each on these shared cores ran 47x slower (issue 39).
grep -q "1 thread per rank" "$shared/across.out" || fail "across: $(grep 'boostlm train:' "$shared/across.out")"
seconds=$(grep '^{"checkpoint"' "$shared/across.out" | tail -1 |
  python3 -c "import json, sys; print(json.load(sys.stdin)['seconds'])") || seconds=1
# The job with a limit below must run ~100 s, so that it is always warned before it ends: slurmctld
# checks limits every 30 s, and that job gets its warning 30 to 60 s after it starts. (At ~40 s, a
# CI run whose job went faster than this measurement finished before a warning came.) It lasts so
# on 600 steps, each followed by a sleep (SLEEP_MS) that makes up the rest of 1/600 of 100 s: the
# sleeps alone are ~88 s however fast the steps go. The uninterrupted reference that it and the
# failed-host job are compared with then trains 600 steps, not the ~5000 that ~100 s of training
# took here (~90 s less). The failed-host job sleeps as long, so that its host dies as far from its
# end as before.
steps=600
sleep_ms=$(python3 -c "print(max(0, int(1000 * (100 / $steps - $seconds / 300))))")
echo "300 steps across the hosts in $seconds s: the jobs below run $steps steps, the time-limited and failed-host ones sleeping $sleep_ms ms after each"

# ---- 2. Reference: the same run, uninterrupted.
job=$(submit reference --time=10 -- --steps "$steps")
await "$job" 400
grep -q "exited with status 0" "$shared/reference.out" || fail "reference: $(tail -5 "$shared/reference.out")"

# ---- 3. A two-minute limit warned 60 s ahead: saved, requeued, resumed, the same losses.
# slurmctld sends the warning at its first limit check (every 30 s) from 30 s before the warning
# time on, so here 30-60 s after the start. With a one-minute limit warned 45 s ahead that could
# be the first check after the start; once in CI no warning reached the script and the job ended
# TIMEOUT (cause not confirmed: a signal to a batch step whose script had not started yet is one).
job=$(SLEEP_MS=$sleep_ms submit limit --time=2 --signal=B:USR1@60 -- --steps "$steps")
# Once requeued, the job gets time to finish: each restart under the two-minute limit would be
# warned, saved and requeued again (the first one is what is tested; each more costs ~15 s).
for ((i = 0; i < 400; i++)); do
  [ "$(job_restarts "$job")" = 1 ] || [ "$(job_state "$job")" = COMPLETED ] && break
  sleep 0.5
done
if [ "$(job_restarts "$job")" = 1 ]; then
  scontrol update JobId="$job" TimeLimit=10 || fail "limit: cannot lengthen the requeued job's time limit"
fi
await "$job" 900
out=$shared/limit.out
grep -q "USR1: asking the ranks to save" "$out" || fail "limit: no warning reached the script"
grep -q "checkpoint (interrupted)" "$out" || fail "limit: no checkpoint on the warning"
grep -q "requeueing job $job" "$out" || fail "limit: not requeued"
grep -q "restart 1 .*--resume $shared/limit" "$out" || fail "limit: the restart did not resume"
[ "$(job_state "$job")" = COMPLETED ] || fail "limit: ended $(job_state "$job")"
same_losses "$shared/reference" "$shared/limit" exact || fail "limit: losses differ from the uninterrupted job"
echo "time limit: $(job_restarts "$job") requeue(s), $(grep -c 'checkpoint (interrupted)' "$out") save(s) on the warning"

# ---- 4. scancel: every rank saves, status 130, the job is not requeued.
job=$(submit cancel --time=10 -- --steps 200000)
for ((i = 0; i < 240; i++)); do (($(steps_logged "$shared/cancel") > 0)) && break; sleep 0.5; done
scancel "$job"
await "$job" 90
out=$shared/cancel.out
grep -q "checkpoint (interrupted)" "$out" || fail "scancel: no checkpoint: $(tail -5 "$out")"
grep -q "exited with status 130" "$out" || fail "scancel: train's status: $(tail -5 "$out")"
grep -q requeueing "$out" && fail "scancel: requeued"
[ "$(job_state "$job")" = CANCELLED ] || fail "scancel: ended $(job_state "$job")"
[ "$(job_restarts "$job")" = 0 ] || fail "scancel: restarted"

# ---- 5. Host 1 dies after the first checkpoint: the job fails naming it, Slurm requeues it, and
# once the host is back the job resumes from that checkpoint and ends as the uninterrupted one.
# A quarter of the reference's steps on its schedule (--schedule-steps), so its losses are the
# reference's first ones bit for bit; the host dies a quarter of the way in.
node_steps=$((steps / 4))
save=$((node_steps / 4))
job=$(SLEEP_MS=$sleep_ms submit node --time=10 -- --steps "$node_steps" --schedule-steps "$steps" \
  --save-interval "$save")
for ((i = 0; i < 240; i++)); do [ -d "$shared/node/checkpoints/step_$(printf %06d "$save")" ] && break; sleep 0.5; done
"$slurm" kill-host "$h1" > /dev/null || fail "kill-host"
for ((i = 0; i < 120; i++)); do sinfo -h -N -t down -o %N | grep -q "$h1" && break; sleep 0.5; done
sinfo -h -N -t down -o %N | grep -q "$h1" || fail "node: $h1 was not marked down"
for ((i = 0; i < 120; i++)); do [ "$(job_restarts "$job")" = 1 ] && break; sleep 0.5; done
"$slurm" revive-host "$h1" > /dev/null || fail "revive-host"
await "$job" 500
out=$shared/node.out
grep -q "Node failure on $h1\|not responding: $h1" "$out" || fail "node: no message names $h1: $(grep -v '^ ' "$out" | tail -8)"
grep -q "restart 1 .*--resume $shared/node" "$out" || fail "node: the requeued job did not resume"
[ "$(job_state "$job")" = COMPLETED ] || fail "node: ended $(job_state "$job")"
same_losses "$shared/reference" "$shared/node" prefix || fail "node: losses differ from the uninterrupted job"

finish "Slurm: from a checkout under /tmp and where it is, TP 2 across two hosts, a time limit, scancel and a failed host: each saved, requeued and resumed as expected"
