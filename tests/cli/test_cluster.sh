#!/usr/bin/env bash
# Training across the hosts of an emulated cluster (scripts/cluster.sh: network namespaces on a
# shaped bridge, one rank per host, TCP between them): TP 2 for each layout (dense-tp on a dense
# model, naive-tp and btp on a low-rank one), DP 2 and PP 2 give the same losses as one process
# (relative 1e-5 per step, as tests/cli/test_parallel_train.sh: the sharded runs only reorder fp32
# sums), log per-kind byte counts equal to the closed forms (tests/parallel/closed_form_comm.cpp),
# and their bytes really cross the links (the veths' counters); a link cut mid-run ends the ranks
# through the communication watchdog with the last checkpoint intact.
# Needs root to make namespaces; skips (exit 77) with the reason where they cannot be made.
# Usage: test_cluster.sh BOOSTLM CLOSED_FORM_COMM
set -uo pipefail
boostlm=$1 closed_form=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
cluster=$repo/scripts/cluster.sh
source "$(dirname "$0")/lib.sh" cluster

if ! command -v mpirun > /dev/null; then echo "skipped: MPI not available (no mpirun)"; exit 77; fi
probe=blmprobe$$
if ! ip netns add "$probe" 2> /dev/null; then
  echo "skipped: cannot create network namespaces here (needs root / CAP_NET_ADMIN)"
  exit 77
fi
ip netns del "$probe"

# A name of its own, so that concurrent tests and a user's cluster are left alone.
cluster_name=blmc$(($$ % 100000))
trap '"$cluster" down --name "$cluster_name" > /dev/null; rm -rf "$work"' EXIT
"$cluster" up 2 --rate 10gbit --name "$cluster_name" --hostfile "$work/hosts" > "$work/up.log" ||
  { cat "$work/up.log"; echo "cluster.sh up failed"; exit 1; }
grep -q '^# boostlm-emulated-cluster .*rate=10gbit' "$work/hosts" || fail "hostfile marker"
# Both directions of host 0's link are shaped; `up` again is a no-op, of another shape a refusal.
tc qdisc show dev "$cluster_name-v0" | grep -q 'tbf.*rate 10Gbit' || fail "no tbf towards host 0"
ip netns exec "$cluster_name-h0" tc qdisc show dev eth0 | grep -q 'tbf.*rate 10Gbit' ||
  fail "no tbf from host 0"
ip netns exec "$cluster_name-h0" ip route | grep -q default && fail "host 0 has a default route"
"$cluster" up 2 --rate 10gbit --name "$cluster_name" --hostfile "$work/hosts" | grep "already up" > /dev/null ||
  fail "second up is not a no-op"
expect_error "up of another shape" "down --name $cluster_name" "$cluster" up 3 --name "$cluster_name"

tiny_corpus "$boostlm" "$work"
steps=3 seq=16
common=(-d "$work/data" -t "$seq" --steps "$steps" --lr 1e-2 --warmup 1 --eval-interval 0
  --eval-batches 1 --save-interval 0)

for arch in dense cola; do
  timeout 60 "$boostlm" train -c "$work/$arch.json" -o "$work/${arch}1" -b 4 "${common[@]}" \
    > /dev/null 2>&1 || fail "$arch in one process"
done

link_bytes() {
  echo $(($(< /sys/class/net/"$cluster_name"-v0/statistics/rx_bytes) +
    $(< /sys/class/net/"$cluster_name"-v0/statistics/tx_bytes)))
}

# check NAME CONFIG LAYOUT TP PP DP MICRO_BATCH MICRO_BATCHES [OVERLAP_CHUNKS]: losses as one
# process, the closed forms' bytes (and calls, per --tp-overlap chunk) on every step but the last
# (which also evaluates), and at least that many bytes through host 0's link.
check() {
  local name=$1 arch=$2 layout=$3 tp=$4 pp=$5 dp=$6 b=$7 m=$8 chunks=${9:-1}
  "$closed_form" "$work/$arch.json" "$layout" "$tp" "$pp" "$dp" "$b" "$seq" "$m" "$chunks" \
    > "$work/$name.expected" || { fail "$name: closed form"; return; }
  python3 - "$work/${arch}1/metrics.jsonl" "$work/$name/metrics.jsonl" "$work/$name.expected" \
    "$name" "$chunks" "$(($(link_bytes) - link_before))" << 'PY' || fail "$name"
import json, sys
ref = [json.loads(l) for l in open(sys.argv[1])]
run = [json.loads(l) for l in open(sys.argv[2])]
expected = json.load(open(sys.argv[3]))
name, link_bytes = sys.argv[4], int(sys.argv[6])
assert len(run) == len(ref), f"{name}: {len(run)} steps logged, want {len(ref)}"
bad = [(i, a["loss"], b["loss"]) for i, (a, b) in enumerate(zip(ref, run))
       if abs(a["loss"] - b["loss"]) > 1e-5 * abs(a["loss"])]
assert not bad, f"{name}: losses differ from one process: {bad}"
for step in run[:-1]:
    assert step["comm"] == expected, f"{name} step {step['step']}: {step['comm']} != {expected}"
chunks = int(sys.argv[5])
overlap = run[0].get("tp_overlap", {"chunks": 1})
assert overlap["chunks"] == chunks, f"{name}: --tp-overlap chunks {overlap['chunks']}, want {chunks}"
sent = sum(c["bytes"] for group in run[0]["comm"].values() for c in group.values())
# Rank 0 lives on host 0: each step's traffic leaves or enters through its veth (TCP adds headers).
assert link_bytes >= sent * len(run), f"{name}: {link_bytes} bytes on the link, {sent}/step logged"
print(f"ok   {name}: losses match, comm {expected}, {link_bytes} bytes over the link")
PY
}

# run NAME CONFIG FLAGS...: train across the two hosts. Each run takes a few seconds; together
# they must end well inside CTest's limit, so that the trap still takes the cluster down.
deadline=$((SECONDS + 120))
run() {
  local name=$1 arch=$2 left=$((deadline - SECONDS))
  shift 2
  ((left > 5)) || { fail "$name: no time left"; return 1; }
  link_before=$(link_bytes)
  timeout -k 5 $((left < 40 ? left : 40)) "$boostlm" launch --hostfile "$work/hosts" -- train -c "$work/$arch.json" \
    -o "$work/$name" "${common[@]}" "$@" > "$work/$name.log" 2>&1 ||
    { fail "$name: $(tail -3 "$work/$name.log")"; return 1; }
}

# TP across hosts: --tp-overlap's default (auto) splits each micro-batch into 2 chunks there.
run dense_tp2 dense -b 4 --tp 2 --layout dense-tp && check dense_tp2 dense dense-tp 2 1 1 4 1 2
run naive_tp2 cola -b 4 --tp 2 --layout naive-tp && check naive_tp2 cola naive-tp 2 1 1 4 1 2
run btp_tp2 cola -b 4 --tp 2 --layout btp && check btp_tp2 cola btp 2 1 1 4 1 2
run btp_tp2_plain cola -b 4 --tp 2 --tp-overlap off && check btp_tp2_plain cola btp 2 1 1 4 1
run btp_tp2_chunks4 cola -b 4 --tp 2 --tp-overlap-chunks 4 &&
  check btp_tp2_chunks4 cola btp 2 1 1 4 1 4
run btp_dp2 cola -b 2 --dp 2 && check btp_dp2 cola btp 1 1 2 2 1
run btp_pp2 cola -b 2 --grad-accum 2 --pp 2 && check btp_pp2 cola btp 1 2 1 2 2

# A link cut mid-run: host 1's link goes down after the run's first checkpoint. The watchdog
# (--comm-timeout 3) ends both ranks within its timeout (plus a little), naming the exchange that
# hung, and the last checkpoint is intact and resumes. Known limit: mpirun then waits on the
# unreachable host's daemon and does not exit by itself (README, Failures), so the test ends it.
ranks_of_cut() { pgrep -f "^[^ ]*boostlm train .*-o $work/cut "; }
cut_link() {
  local left=$((deadline - SECONDS)) pid t0 took latest
  ((left > 30)) || { fail "link cut: no time left"; return; }
  # (in a subshell: mpirun ended by a signal would have the shell report it)
  (timeout -k 5 30 "$boostlm" launch --hostfile "$work/hosts" -- train -c "$work/cola.json" \
    -o "$work/cut" -d "$work/data" -t "$seq" -b 4 --tp 2 --steps 100000 --lr 1e-2 --warmup 1 \
    --eval-interval 0 --eval-batches 1 --save-interval 5 --comm-timeout 3 > "$work/cut.log" 2>&1) &
  pid=$!
  for _ in $(seq 1 150); do
    [[ -f $work/cut/checkpoints/latest ]] && break
    sleep 0.1
  done
  if [[ ! -f $work/cut/checkpoints/latest ]]; then
    fail "link cut: no checkpoint before the cut: $(tail -3 "$work/cut.log")"
    kill "$pid"
    wait "$pid"
    return
  fi
  t0=$SECONDS
  ip netns exec "$cluster_name-h1" ip link set eth0 down
  while ranks_of_cut > /dev/null && ((SECONDS - t0 < 20)); do sleep 0.2; done
  took=$((SECONDS - t0))
  ranks_of_cut > /dev/null && fail "link cut: ranks still running ${took}s after the cut"
  ((took <= 10)) || fail "link cut: the ranks took ${took}s to end (watchdog 3 s)"
  # mpirun forwards the ranks' last words a moment after they end: wait for them (up to 5 s)
  # before ending it. Ended at once, it lost them in one CI run (and then crashed on the signal).
  # The ranks also append it to the run's watchdog.log, which does not depend on mpirun.
  for _ in $(seq 1 50); do
    grep -q "communication watchdog: " "$work/cut.log" "$work/cut/watchdog.log" 2> /dev/null && break
    sleep 0.1
  done
  pkill -f "^mpirun .*-o $work/cut "
  wait "$pid"
  ip netns exec "$cluster_name-h1" ip link set eth0 up
  grep -q "communication watchdog: .* on group tp has not completed within 3 s" "$work/cut.log" \
    "$work/cut/watchdog.log" 2> /dev/null ||
    fail "link cut: no watchdog message naming the group: $(tail -3 "$work/cut.log")"
  grep -q "communication watchdog: .* on group tp" "$work/cut/watchdog.log" ||
    fail "link cut: the run's watchdog.log lacks the message"
  latest=$(cat "$work/cut/checkpoints/latest")
  timeout 60 "$boostlm" train -d "$work/data" -o "$work/cut" --resume "$work/cut" -t "$seq" -b 4 \
    --steps $((10#${latest#step_} + 1)) --eval-interval 0 --eval-batches 1 > "$work/cut_resume.log" 2>&1 ||
    fail "link cut: the last checkpoint ($latest) does not resume: $(tail -3 "$work/cut_resume.log")"
  echo "ok   link cut: the ranks ended ${took}s after the cut, $latest resumes"
}
cut_link

# `down` leaves nothing of the cluster behind.
"$cluster" down --name "$cluster_name" > /dev/null
ip netns list | grep -q "^$cluster_name-" && fail "down left namespaces"
ip -br link | grep -q "^$cluster_name-" && fail "down left links"
[ -e "$work/hosts" ] && fail "down left the hostfile"

finish "training across emulated hosts matches one process and the closed forms"
