#!/usr/bin/env bash
# A fault campaign against tiny training runs (issue 16): each case injects a fault, observes what
# happened, and the script prints a table
#
#   case | outcome | data lost
#
# where "data lost" counts what a user loses beyond the steps since the last checkpoint (which a
# crash always costs): it must read "none". The cases:
#   kill -9 in save   one process saves every step; kill -9 lands while a checkpoint is being
#                     written, N times; after each, `latest` must name a readable checkpoint
#                     (boostlm eval loads it), the run resumes, and after the last it finishes with
#                     the final loss of an uninterrupted run.
#   disk full         the run directory is a small tmpfs (mount -t tmpfs -o size=...), filled by
#                     checkpoints: does the run end with a message, and is `latest` still readable?
#                     (Needs root to mount; skipped with the reason otherwise.)
#   stalled rank      rank 1 of 2 is SIGSTOPped: the communication watchdog must end the whole job
#                     (--comm-timeout 5), every process of it.
#   dead rank         rank 1 of 2 is killed with kill -9 after a checkpoint; `launch --max-restarts 1`
#                     must finish the run from the checkpoint with the uninterrupted run's loss.
#   kill -9, 1 of 4   TP 2 x DP 2, a save every step: rank 2 is killed with kill -9 while a save is in
#                     flight; `latest` must be readable and a resume finish with the loss of an
#                     uninterrupted run.
#   stuck writer      rank 1's writer stalls for good (BOOSTLM_CHECKPOINT_FAULT=slow): past
#                     --save-timeout the job ends (exit 75) naming the rank and file; the last
#                     committed checkpoint is readable and resumes.
#   not shared        rank 1's --out is another directory (BOOSTLM_TEST_RANK_OUT, as a node's own
#                     disk): refused at start, nothing written that a resume could miss.
#   rank 0 commit     rank 0's commit fails after the rename (die-commit), writing `latest`, at the
#                     rename, at the fsync: a resume takes the newest complete checkpoint and
#                     finishes with the uninterrupted run's loss.
#
# Usage: scripts/faults.sh [path/to/boostlm] [--kills N]   (default build/boostlm, N = 5)
# Bounded: every run has a timeout; the whole campaign takes a few minutes on 2 cores.
set -uo pipefail
boostlm=build/boostlm
kills=5
while (($#)); do
  case $1 in
    --kills) kills=$2; shift 2 ;;
    *) boostlm=$1; shift ;;
  esac
done
[ -x "$boostlm" ] || { echo "faults.sh: no boostlm at $boostlm (build first, or pass its path)"; exit 1; }
boostlm=$(readlink -f "$boostlm")
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive

work=$(mktemp -d /tmp/boostlm_faults.XXXXXX)
mounted=""
cleanup() {
  local p
  for p in $(jobs -p); do kill -9 "$p" 2> /dev/null; done
  for p in $(pgrep -f -- "$work/"); do kill -9 "$p" 2> /dev/null; done  # ranks of this campaign
  [ -n "$mounted" ] && umount "$mounted" 2> /dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

rows=()
row() { rows+=("$1|$2|$3"); echo "  -> $1: $2 | data lost: $3" >&2; }

# --- data and a tiny model ----------------------------------------------------------------------
for i in $(seq 1 300); do
  echo "Line $i of the text, with words such as river, mountain, $((i * 13)) and sky."
  echo
done > "$work/text.txt"
"$boostlm" prepare "$work/text.txt" -o "$work/data" --vocab-size 300 --val-fraction 0.1 \
  > /dev/null 2>&1 || { echo "faults.sh: prepare failed"; exit 1; }
cat > "$work/tiny.json" <<JSON
{"arch": "cola", "vocab_size": 320, "d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
 "d_ff": 48, "attn_rank": 8, "mlp_rank": 8, "max_seq_len": 32}
JSON
# Larger (a few MB per checkpoint), so a save takes long enough for kill -9 to land inside it.
cat > "$work/small.json" <<JSON
{"arch": "cola", "vocab_size": 320, "d_model": 256, "n_layers": 4, "n_heads": 4, "n_kv_heads": 4,
 "d_ff": 512, "attn_rank": 64, "mlp_rank": 64, "max_seq_len": 32}
JSON
common=(-d "$work/data" -t 16 -b 2 --lr 1e-2 --warmup 1 --eval-interval 0 --eval-batches 1
        --log-interval 100000)

wait_for() {  # wait_for SECONDS COMMAND...: polls the command every 0.1 s
  local limit=$(($1 * 10)) i; shift
  for ((i = 0; i < limit; i++)); do "$@" && return 0; sleep 0.1; done
  return 1
}
steps_logged() { [ -f "$1/metrics.jsonl" ] && [ "$(wc -l < "$1/metrics.jsonl")" -ge "$2" ]; }
last_step() { tail -1 "$1/metrics.jsonl" 2> /dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['step'])" 2> /dev/null || echo 0; }
latest_step() { local n; n=$(cat "$1/checkpoints/latest" 2> /dev/null) && echo "$((10#${n#step_}))" || echo 0; }
summary_loss() { grep '^{' "$1" | tail -1 | python3 -c "import json,sys; print(repr(json.load(sys.stdin)['train_loss']))" 2> /dev/null; }
readable() {  # readable RUN: eval loads the checkpoint `latest` names
  timeout 60 "$boostlm" eval --checkpoint "$1" --data "$work/data/val_000000.bin" -t 16 -b 1 \
    --eval-batches 1 > /dev/null 2>&1
}
rank_pid() {  # rank_pid RUN RANK
  local p
  for p in $(pgrep -f -- "-o $1 "); do
    tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" &&
      { echo "$p"; return 0; }
  done
  return 1
}
left_behind() { pgrep -f -- "-o $1 " > /dev/null; }

# --- kill -9 during checkpoint saves ------------------------------------------------------------
echo "faults.sh: kill -9 during checkpoint saves ($kills times)" >&2
steps=60
ref=$work/save_ref
timeout 300 "$boostlm" train -c "$work/small.json" -o "$ref" "${common[@]}" --steps "$steps" \
  --save-interval 1 --keep 2 > "$ref.out" 2> "$ref.log"
want=$(summary_loss "$ref.out")
run=$work/save_kill
in_save=0 unreadable=0 lost_beyond=0 worst_gap=0
for ((k = 1; k <= kills; k++)); do
  resume=()
  [ -f "$run/checkpoints/latest" ] && resume=(--resume "$run")
  # Not under timeout(1): kill -9 must reach the trainer itself (it always comes, below).
  "$boostlm" train -c "$work/small.json" -o "$run" "${common[@]}" --steps "$steps" \
    --save-interval 1 --keep 2 "${resume[@]}" > "$run.out" 2>> "$run.log" &
  pid=$!
  # Wait for a completed checkpoint and a few steps of this attempt, then for a save in progress.
  start_step=$(last_step "$run")
  wait_for 60 steps_logged "$run" $((start_step + 3))
  deadline=$((SECONDS + 20))
  while ((SECONDS < deadline)) && kill -0 "$pid" 2> /dev/null; do
    compgen -G "$run/checkpoints/.step_*" > /dev/null && break
  done
  if compgen -G "$run/checkpoints/.step_*" > /dev/null; then in_save=$((in_save + 1)); fi
  kill -9 "$pid" 2> /dev/null
  wait "$pid" 2> /dev/null
  readable "$run" || unreadable=$((unreadable + 1))
  gap=$(($(last_step "$run") - $(latest_step "$run")))
  ((gap > worst_gap)) && worst_gap=$gap
  ((gap > 1)) && lost_beyond=$((lost_beyond + gap - 1))  # more than the save interval (1 step)
done
timeout 300 "$boostlm" train -c "$work/small.json" -o "$run" "${common[@]}" --steps "$steps" \
  --save-interval 1 --keep 2 --resume "$run" > "$run.out" 2>> "$run.log"
got=$(summary_loss "$run.out")
outcome="$kills kills, $in_save inside a save; latest unreadable after $unreadable"
if [ -n "$got" ] && [ "$got" = "$want" ]; then
  outcome+="; resumed to step $steps with the uninterrupted loss ($got)"
else
  outcome+="; final loss ${got:-none} vs uninterrupted ${want:-none}"
fi
if ((unreadable == 0 && lost_beyond == 0)) && [ "$got" = "$want" ]; then
  lost="none (at most $worst_gap step since the last checkpoint)"
else
  lost="$lost_beyond steps beyond the last checkpoint; $unreadable unreadable"
fi
row "kill -9 in save x$kills" "$outcome" "$lost"

# --- disk full ----------------------------------------------------------------------------------
echo "faults.sh: disk full" >&2
full=$work/full
mkdir -p "$full"
if [ "$(id -u)" -ne 0 ]; then
  row "disk full" "skipped: mounting a tmpfs needs root" "-"
elif ! mount -t tmpfs -o size=3m tmpfs "$full" 2> "$work/mount.err"; then
  row "disk full" "skipped: mount -t tmpfs failed: $(head -1 "$work/mount.err")" "-"
else
  mounted=$full
  run=$full/run
  timeout 300 "$boostlm" train -c "$work/tiny.json" -o "$run" "${common[@]}" --steps 2000 \
    --save-interval 20 --keep 100 > "$work/full.out" 2> "$work/full.log"
  code=$?
  done_steps=$(grep -o '"steps":[0-9]*' "$work/full.out" | grep -o '[0-9]*$')
  cut=no
  python3 -c "
import json, sys
for line in open(sys.argv[1]): json.loads(line)
" "$run/metrics.jsonl" 2> /dev/null || cut=yes
  message=$(grep -iE "space|disk|write|error" "$work/full.log" | head -1 | cut -c1-120)
  if [ "$code" -eq 0 ]; then
    outcome="run continued silently (exit 0, $done_steps steps)"
  else
    outcome="ended with exit $code: ${message:-no message}"
  fi
  outcome+="; metrics.jsonl cut mid-line: $cut"
  if readable "$run"; then
    gap=$(($(last_step "$run") - $(latest_step "$run")))
    outcome+="; latest (step $(latest_step "$run")) readable"
    if [ "$code" -ne 0 ] && [ "$cut" = no ] && ((gap <= 20)); then
      lost="none ($gap steps since the last checkpoint)"
    else
      lost="$gap steps after the last good checkpoint (step $(latest_step "$run")) trained without a trace"
      [ "$cut" = yes ] && lost+="; metrics cut"
    fi
  else
    outcome+="; latest unreadable"
    lost="the checkpoint: latest unreadable"
  fi
  row "disk full (3 MB tmpfs)" "$outcome" "$lost"
  umount "$full" && mounted=""
fi

# --- stalled rank -------------------------------------------------------------------------------
echo "faults.sh: stalled rank" >&2
run=$work/stall
dp2=(launch -n 2 -- train -c "$work/tiny.json" "${common[@]}" --dp 2)
start=$SECONDS
timeout 120 "$boostlm" "${dp2[@]}" -o "$run" --steps 100000 --save-interval 50 --comm-timeout 5 \
  > "$run.out" 2> "$run.log" &
pid=$!
if wait_for 60 steps_logged "$run" 120 && victim=$(rank_pid "$run" 1); then
  kill -STOP "$victim"
  stopped=$SECONDS
  wait "$pid"; code=$?
  took=$((SECONDS - stopped))
  sleep 1
  leftover=none
  if left_behind "$run"; then leftover="$(pgrep -f -- "-o $run " | wc -l) processes"; fi
  what=$(grep -o 'communication watchdog: [^;]*' "$run.log" | head -1)
  outcome="exit $code after ${took}s (timeout 5s): ${what:-no watchdog message}; left behind: $leftover"
  gap=$(($(last_step "$run") - $(latest_step "$run")))
  if readable "$run" && ((gap <= 50)); then lost="none ($gap steps since the last checkpoint)"
  else lost="$gap steps; latest readable: $(readable "$run" && echo yes || echo no)"; fi
  row "stalled rank (SIGSTOP)" "$outcome" "$lost"
else
  row "stalled rank (SIGSTOP)" "did not start: $(tail -1 "$run.log")" "-"
fi

# --- dead rank, restarted -----------------------------------------------------------------------
echo "faults.sh: dead rank with --max-restarts 1" >&2
ref=$work/dead_ref
timeout 120 "$boostlm" "${dp2[@]}" -o "$ref" --steps 400 --save-interval 50 > "$ref.out" 2> "$ref.log"
want=$(summary_loss "$ref.out")
run=$work/dead
timeout 180 "$boostlm" launch -n 2 --max-restarts 1 -- train -c "$work/tiny.json" "${common[@]}" \
  --dp 2 -o "$run" --steps 400 --save-interval 50 > "$run.out" 2> "$run.log" &
pid=$!
if wait_for 60 steps_logged "$run" 120 && victim=$(rank_pid "$run" 1); then
  kill -9 "$victim"
  wait "$pid"; code=$?
  got=$(summary_loss "$run.out")
  from=$(grep -o 'resumes from .*' "$run.log" | head -1 | sed 's|.*/||')
  outcome="exit $code; restarted from ${from:-?}; final loss ${got:-none} vs uninterrupted ${want:-none}"
  if [ "$code" -eq 0 ] && [ -n "$got" ] && [ "$got" = "$want" ]; then lost="none"
  else lost="run did not complete with the uninterrupted loss"; fi
  row "dead rank (kill -9), --max-restarts 1" "$outcome" "$lost"
else
  row "dead rank (kill -9), --max-restarts 1" "did not start: $(tail -1 "$run.log")" "-"
fi

# --- multi-rank checkpoints ---------------------------------------------------------------------
# The uninterrupted 2-rank run the resumes below must end with (saving every 2 steps).
ref2=$work/commit_ref
timeout 180 "$boostlm" "${dp2[@]}" -o "$ref2" --steps 8 --save-interval 2 --keep 10 > "$ref2.out" \
  2> "$ref2.log"
want2=$(summary_loss "$ref2.out")
resume2() {  # resume2 RUN: resumes RUN on 2 ranks to step 8; prints its final loss
  timeout 180 "$boostlm" "${dp2[@]}" -o "$1" --steps 8 --save-interval 2 --keep 10 --resume "$1" \
    > "$1.resume.out" 2> "$1.resume.log"
  summary_loss "$1.resume.out"
}

echo "faults.sh: kill -9 of one rank of 4 mid-save" >&2
tp2dp2=(launch -n 4 -- train -c "$work/small.json" "${common[@]}" --tp 2 --dp 2)
ref=$work/kill4_ref
timeout 300 "$boostlm" "${tp2dp2[@]}" -o "$ref" --steps 12 --save-interval 1 --keep 2 > "$ref.out" \
  2> "$ref.log"
want=$(summary_loss "$ref.out")
run=$work/kill4
timeout 300 "$boostlm" "${tp2dp2[@]}" -o "$run" --steps 12 --save-interval 1 --keep 2 > "$run.out" \
  2> "$run.log" &
pid=$!
in_save=no
if wait_for 120 steps_logged "$run" 3 && victim=$(rank_pid "$run" 2); then
  deadline=$((SECONDS + 20))
  while ((SECONDS < deadline)) && ! compgen -G "$run/checkpoints/.step_*" > /dev/null; do :; done
  compgen -G "$run/checkpoints/.step_*" > /dev/null && in_save=yes
  kill -9 "$victim"
  wait "$pid"; code=$?
  ok=no; readable "$run" && ok=yes
  timeout 300 "$boostlm" "${tp2dp2[@]}" -o "$run" --steps 12 --save-interval 1 --keep 2 \
    --resume "$run" > "$run.resume.out" 2> "$run.resume.log"
  got=$(summary_loss "$run.resume.out")
  outcome="exit $code, killed inside a save: $in_save; latest readable: $ok; resumed: final loss ${got:-none} vs uninterrupted ${want:-none}"
  if [ "$ok" = yes ] && [ -n "$got" ] && [ "$got" = "$want" ]; then lost=none
  else lost="resume did not reach the uninterrupted loss"; fi
  row "kill -9 of rank 2 of 4 mid-save" "$outcome" "$lost"
else
  kill -9 "$pid" 2> /dev/null
  row "kill -9 of rank 2 of 4 mid-save" "did not start: $(tail -1 "$run.log")" "-"
fi

echo "faults.sh: stuck writer" >&2
run=$work/stuck
start=$SECONDS
BOOSTLM_CHECKPOINT_FAULT='slow@1#2:600' timeout 180 "$boostlm" "${dp2[@]}" -o "$run" --steps 8 \
  --save-interval 2 --keep 10 --save-timeout 5 > "$run.out" 2> "$run.log"
code=$?
took=$((SECONDS - start))
named=$(grep -o 'rank 1 at [^ )]*' "$run.log" | head -1 | sed 's|.*/||')
got=$(resume2 "$run")
outcome="exit $code after ${took}s (--save-timeout 5), naming rank 1 at ${named:-?}; resumed from step $(grep -o 'steps [0-9]*\.\.' "$run.resume.log" | grep -o '[0-9]*' | head -1): final loss ${got:-none} vs ${want2:-none}"
if [ "$code" -eq 75 ] && [ -n "$named" ] && [ -n "$got" ] && [ "$got" = "$want2" ]; then lost=none
else lost="did not end with the message and resume to the uninterrupted loss"; fi
row "stuck writer on rank 1 of 2" "$outcome" "$lost"

echo "faults.sh: a run directory one rank does not share" >&2
run=$work/unshared
BOOSTLM_TEST_RANK_OUT="1:$work/unshared_rank1" timeout 120 "$boostlm" "${dp2[@]}" -o "$run" \
  --steps 8 --save-interval 2 > "$run.out" 2> "$run.log"
code=$?
said=$(grep -o 'is not one directory that every rank sees: rank 1' "$run.log" | head -1)
outcome="exit $code at start: ${said:-no message}"
if [ "$code" -ne 0 ] && [ -n "$said" ] && [ ! -e "$run/checkpoints/latest" ]; then
  lost="none (refused before the first step)"
else lost="started without a shared run directory"; fi
row "--out not shared by rank 1 of 2" "$outcome" "$lost"

for kind in die-commit latest rename fsync; do
  echo "faults.sh: rank 0's commit, $kind" >&2
  run=$work/commit_$kind
  BOOSTLM_CHECKPOINT_FAULT="$kind@0#2" timeout 180 "$boostlm" "${dp2[@]}" -o "$run" --steps 8 \
    --save-interval 2 --keep 10 > "$run.out" 2> "$run.log"
  code=$?
  if [ "$code" -eq 0 ]; then
    got=$(summary_loss "$run.out")
    outcome="exit 0 (a warning: $(grep -c 'could not be synced' "$run.log") line); final loss ${got:-none} vs ${want2:-none}"
  else
    got=$(resume2 "$run")
    from=$(grep -o 'steps [0-9]*\.\.' "$run.resume.log" | grep -o '[0-9]*' | head -1)
    outcome="exit $code; the resume took step ${from:-?}; final loss ${got:-none} vs ${want2:-none}"
  fi
  if [ -n "$got" ] && [ "$got" = "$want2" ] && readable "$run"; then lost=none
  else lost="did not finish with the uninterrupted loss"; fi
  row "rank 0's commit fails: $kind (step 4)" "$outcome" "$lost"
done

# --- the table ----------------------------------------------------------------------------------
echo
printf '| %s | %s | %s |\n' case outcome "data lost"
printf '|---|---|---|\n'
for r in "${rows[@]}"; do
  IFS='|' read -r c o l <<< "$r"
  printf '| %s | %s | %s |\n' "$c" "$o" "$l"
done
