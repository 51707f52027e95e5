#!/usr/bin/env bash
# --device (issue 29): the host-access checking mode and the refusal of cuda where there is none.
#  checked   every layout and BOOST switch, DP with buckets and ZeRO, PP, --tp-overlap, eval,
#            generate and a resume run a few steps under --device cpu-checked (the engine's buffers
#            reachable only inside kernels, collectives and named copies, core/device.h) and give
#            the bits of --device cpu: no host access to device memory anywhere on those paths, and
#            no kernel given host memory (the checking mode's kernel table checks every array).
#  cuda      --device cuda stops at once, before any work, with the reason and a non-zero status;
#            not in the emulated device's build (second argument "emulated"), where --device cuda
#            runs (emulated_device_engine tests it there).
# Usage: test_device.sh path/to/boostlm [emulated]
set -uo pipefail
boostlm=$(realpath "$1")
emulated=${2:-}
source "$(dirname "$0")/lib.sh" device
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
tiny_corpus "$boostlm" "$work"
cd "$work" || exit 1

loss() { grep -o '"train_loss":[^,}]*' "$1"; }
# same NAME RANKS CONFIG FLAGS...: trains 4 steps under each device; the final losses must be equal.
same() {
  local name=$1 ranks=$2 config=$3 dev; shift 3
  for dev in cpu cpu-checked; do
    local launch=(); ((ranks > 1)) && launch=(launch -n "$ranks" --)
    "$boostlm" "${launch[@]}" train --device "$dev" -c "$config" -d data -t 16 -b 2 --steps 4 \
      --eval-interval 0 --eval-batches 1 -o "$name-$dev" "$@" > "$name-$dev.out" 2> "$name-$dev.log" ||
      { fail "$name --device $dev: exit $?: $(grep -v '^step' "$name-$dev.log" | tail -4)"; return; }
  done
  if [ -n "$(loss "$name-cpu.out")" ] && [ "$(loss "$name-cpu.out")" = "$(loss "$name-cpu-checked.out")" ]; then
    echo "ok   $name: $(loss "$name-cpu.out") under both"
  else
    fail "$name: cpu $(loss "$name-cpu.out"), cpu-checked $(loss "$name-cpu-checked.out")"
  fi
}
same one-process 1 cola.json
same one-process-bf16 1 cola.json --precision bf16
same btp 2 cola.json --tp 2 --layout btp
same btp-bf16-lowrank 2 cola.json --tp 2 --layout btp --precision bf16 --recompute lowrank
same btp-sync-ungrouped 2 cola.json --tp 2 --rmsnorm sync --grouping off
same naive-tp 2 cola.json --tp 2 --layout naive-tp
same dense-tp 2 dense.json --tp 2 --layout dense-tp
same dp-buckets 2 cola.json --dp 2 --grad-accum 2 --bucket-mb 1
same dp-zero 2 cola.json --dp 2 --zero 1
same pp 2 cola.json --pp 2 --grad-accum 2
same btp-overlap 2 cola.json --tp 2 --tp-overlap on
same dense-tp-overlap-bf16 2 dense.json --tp 2 --layout dense-tp --tp-overlap on --precision bf16
# LaX (issue 48): its crossing's kernels and buffers, btp (bf16, lowrank), naive-tp and PP.
sed 's/"arch": *"cola"/"arch": "lax"/' cola.json > lax.json
grep -q '"lax"' lax.json || fail "lax.json: no arch to replace in cola.json"
same lax-bf16 1 lax.json --precision bf16 --lax-gate linear
same lax-btp-lowrank 2 lax.json --tp 2 --recompute lowrank
same lax-naive-tp 2 lax.json --tp 2 --layout naive-tp
same lax-pp 2 lax.json --pp 2 --grad-accum 2

# eval, generate and a resume of the first run, under each device: the same output.
for dev in cpu cpu-checked; do
  "$boostlm" eval --device "$dev" --checkpoint one-process-cpu --data data/val_000000.bin -b 2 -t 16 \
    --eval-batches 2 > "eval-$dev.out" 2> "eval-$dev.log" || fail "eval --device $dev: $(tail -2 "eval-$dev.log")"
  "$boostlm" generate --device "$dev" --checkpoint one-process-cpu --prompt "Line 3 of" --max-new-tokens 8 \
    --seed 1 > "generate-$dev.out" 2> "generate-$dev.log" || fail "generate --device $dev: $(tail -2 "generate-$dev.log")"
  "$boostlm" generate --device "$dev" --checkpoint one-process-cpu --prompt "Line 3 of" --max-new-tokens 8 \
    --seed 1 --no-cache >> "generate-$dev.out" 2> "generate-nocache-$dev.log" ||
    fail "generate --no-cache --device $dev: $(tail -2 "generate-nocache-$dev.log")"
  cp -r one-process-cpu "resume-$dev"
  "$boostlm" train --device "$dev" -d data -o "resume-$dev" --resume "resume-$dev" -c cola.json \
    -t 16 -b 2 --steps 6 --eval-interval 0 --eval-batches 1 > "resume-$dev.out" 2> "resume-$dev.log" ||
    fail "resume --device $dev: $(tail -2 "resume-$dev.log")"
done
[ -s eval-cpu.out ] && [ -s generate-cpu.out ] && [ -n "$(loss resume-cpu.out)" ] &&
  cmp -s eval-cpu.out eval-cpu-checked.out && cmp -s generate-cpu.out generate-cpu-checked.out &&
  [ "$(loss resume-cpu.out)" = "$(loss resume-cpu-checked.out)" ] &&
  echo "ok   eval, generate and resume give the same output under both" ||
  fail "eval/generate/resume differ: $(cat eval-cpu*.out generate-cpu*.out) $(loss resume-cpu.out) $(loss resume-cpu-checked.out)"

# --device cuda: refused before any work (no run directory), with the reason.
if [ "$emulated" = emulated ]; then
  finish "device: every path runs under --device cpu-checked with the same bits (cuda runs here: the emulated device)"
  exit 0
fi
for cmd in "train -c cola.json -d data -o cuda-run --steps 1" "eval --checkpoint one-process-cpu --data data/val_000000.bin" \
           "generate --checkpoint one-process-cpu --prompt x" "bench step --shape tiny"; do
  # shellcheck disable=SC2086
  out=$("$boostlm" $cmd --device cuda 2>&1); code=$?
  # Which reason depends on the build and the machine (no CUDA backend built, no GPU visible, or
  # the engine not dispatching to it yet); each begins so.
  if [ "$code" -ne 0 ] && grep -q -- "error: --device cuda: " <<< "$out"; then
    echo "ok   ${cmd%% *} --device cuda: exit $code, '$(head -1 <<< "$out")'"
  else
    fail "${cmd%% *} --device cuda: exit $code: $out"
  fi
done
[ ! -e cuda-run ] || fail "train --device cuda made its run directory before refusing"

finish "device: every path runs under --device cpu-checked with the same bits; cuda is refused"
