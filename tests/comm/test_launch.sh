#!/usr/bin/env bash
# `boostlm launch`: the mpirun command it builds (dry runs, against this machine's CPU count) and
# real runs through mpirun (exit codes pass through, a failing rank ends the job).
# Usage: test_launch.sh BOOSTLM
set -u
boostlm=$1
exe=$(readlink -f "$boostlm")
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # nproc obeys OMP_NUM_THREADS; launch counts CPUs
status=0

fail() { echo "FAIL: $*"; status=1; }

# expect_dry LABEL "ARGS..." WORDS...: the dry run of `launch ARGS` contains each of WORDS.
expect_dry() {
  local label=$1 args=$2 out
  shift 2
  out=$("$boostlm" launch $args 2>&1) || { fail "$label: exit $? ($out)"; return; }
  for word in "$@"; do
    [[ " $out " == *" $word "* ]] || fail "$label: lacks '$word' in: $out"
  done
  [ "$status" -eq 0 ] && echo "ok   $label: $out"
}

expect_dry "one rank per core" "-n $cores --dry-run -- train --steps 3" \
  "mpirun -n $cores" "--bind-to hwthread" "--map-by slot:PE=1" "OMP_NUM_THREADS=1" \
  "--mca orte_abort_on_non_zero_status 1" "$exe train --steps 3"
expect_dry "one rank, all cores" "-n 1 --dry-run -- train" "OMP_NUM_THREADS=$cores" \
  "--map-by slot:PE=$cores"
expect_dry "oversubscribed" "-n $((2 * cores + 1)) --dry-run -- eval --x" "--oversubscribe" \
  "--bind-to none" "OMP_NUM_THREADS=1" "$exe eval --x"
expect_dry "threads given" "-n 1 --threads-per-rank $((cores + 1)) --dry-run -- train" \
  "OMP_NUM_THREADS=$((cores + 1))" "--bind-to none"
expect_dry "no -- needed" "-n 1 --dry-run train --steps 3 -n 2" "$exe train --steps 3 -n 2"
# A train rank is asked to stop with SIGURG (ignored by default: a stop forwarded before its main
# is dropped, not fatal, and resent by the launcher); other commands keep SIGUSR1, which ends them.
expect_dry "train stops on SIGURG" "-n 2 --dry-run -- train" \
  "--mca ess_base_forward_signals SIGURG $exe train"
out=$("$boostlm" launch -n 2 --dry-run -- eval --x 2>&1)
[[ $out == *SIGURG* ]] && fail "eval under launch: stopped by SIGURG: $out"
if [ "$(id -u)" -eq 0 ]; then
  expect_dry "root" "-n 1 --dry-run -- train" "OMPI_ALLOW_RUN_AS_ROOT=1" \
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
fi
hostfile=$(mktemp)
printf 'node-a slots=4\nnode-b slots=4  # comment\n# node-c\nnode-a\n' >"$hostfile"
out=$("$boostlm" launch -n 8 --hostfile "$hostfile" --dry-run -- train)
[[ "$out" == *"--hostfile $hostfile --bind-to none"* && "$out" != *oversubscribe* &&
   "$out" == *"OMP_NUM_THREADS=$((cores / 4 > 1 ? cores / 4 : 1))"* ]] ||
  fail "hostfile: $out"
[[ "$out" == *"--mca btl tcp,vader,self"* && "$out" != *netns-agent* && "$out" != *if_include* ]] ||
  fail "hostfile: a real cluster uses ssh and Open MPI's interfaces: $out"
out=$("$boostlm" launch --hostfile "$hostfile" --subnet 10.1.0.0/16 --dry-run -- train)
[[ "$out" == *"mpirun -n 9 "* && "$out" == *"btl_tcp_if_include 10.1.0.0/16"* &&
   "$out" == *"oob_tcp_if_include 10.1.0.0/16"* ]] || fail "hostfile slots and --subnet: $out"
# A hostfile written by scripts/cluster.sh: its marker makes the run emulated (namespace agent,
# TCP only, the marker's subnet and rate), and the hosts share this machine's cores.
printf '# boostlm-emulated-cluster name=blmx rate=2gbit subnet=198.18.7.0/24 namespaces=blmx-h0,blmx-h1\nblmx-h0 slots=1\nblmx-h1 slots=1\n' >"$hostfile"
expect_dry "emulated cluster" "--hostfile $hostfile --dry-run -- train" "mpirun -n 2" \
  "--mca btl tcp,self" "--mca btl_tcp_if_include 198.18.7.0/24" \
  "--mca oob_tcp_if_include 198.18.7.0/24" "--mca plm_rsh_agent '$exe netns-agent'" \
  "--mca plm_rsh_no_tree_spawn 1" "-x BOOSTLM_LINK_RATE=2gbit" \
  "OMP_NUM_THREADS=$((cores / 2 > 1 ? cores / 2 : 1))" "--bind-to none"
printf 'ns-a slots=2\nns-b slots=2\n' >"$hostfile"
expect_dry "--emulated" "--hostfile $hostfile --emulated --dry-run -- train" "mpirun -n 4" \
  "--mca btl tcp,self" "--mca btl_tcp_if_include 198.18.0.0/15" "netns-agent'" \
  "OMP_NUM_THREADS=$((cores / 4 > 1 ? cores / 4 : 1))"
out=$("$boostlm" launch --emulated --dry-run -- train 2>&1) && fail "--emulated without hostfile: $out"
[[ "$out" == *"needs the --hostfile"* ]] || fail "--emulated without hostfile: $out"
out=$("$boostlm" launch --dry-run -- train 2>&1) && fail "no -n and no hostfile: $out"
[[ "$out" == *"give -n"* ]] || fail "no -n and no hostfile: $out"
out=$("$boostlm" netns-agent blm-no-such-ns echo hi 2>&1) && fail "agent on a missing host: $out"
[[ "$out" == *"not a network namespace"* ]] || fail "agent on a missing host: $out"
rm -f "$hostfile"

out=$("$boostlm" launch -n 2 --dry-run 2>&1) && fail "no command accepted: $out"
[[ "$out" == *"nothing to launch"* ]] || fail "no command: $out"

# Real runs: every rank prints the version; a command every rank rejects ends the job non-zero.
out=$(timeout -k 5 60 "$boostlm" launch -n 2 -- --version 2>&1)
code=$?
[ "$code" -eq 0 ] && [ "$(grep -c '^boostlm ' <<<"$out")" -eq 2 ] ||
  fail "2-rank --version: exit $code, output: $out"
timeout -k 5 60 "$boostlm" launch -n 2 -- no-such-command >/dev/null 2>&1
code=$?
[ "$code" -ne 0 ] && [ "$code" -ne 124 ] || fail "a failing command gave exit $code"
[ "$status" -eq 0 ] && echo "ok   real runs"
exit $status
