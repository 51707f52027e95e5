#!/usr/bin/env bash
# Sharded checkpoints (issue 46): for CoLA models of MODELS (default 130m 350m, vocabulary 512) at
# one process, TP 2, TP 2 x PP 2 and TP 2 x DP 2 with ZeRO-1, each trained 4 steps of -b 1 -t 64
# in fp32 with a save at step 2 and at the end, in one run:
#   peak MB      the largest rank's peak resident memory (metrics' peak_rss_mb_max, after the
#                save at step 2), and with BEFORE=path/to/old/boostlm that binary's rank 0 at the
#                same settings (boostlm before sharding: every rank gathered the whole model)
#   stall ms     how long the save at step 2 held the training loop: asynchronous (the copy of
#                each rank's shard to host memory) and synchronous (--async-save off)
#   save ms      the save at step 2 from its start to its commit, asynchronous and synchronous
#   files        the checkpoint's safetensors files and the largest file's share of its bytes
# Usage: [MODELS="130m 350m"] [BEFORE=old/boostlm] scripts/bench_checkpoints.sh
# Run it alone: a 350m model several times at once does not fit, and load skews the times.
set -euo pipefail
cd "$(dirname "$0")/.."
boostlm=${BOOSTLM:-./build/boostlm}
before=${BEFORE:-}
models=${MODELS:-130m 350m}
work=$(mktemp -d /tmp/bench_checkpoints.XXXXXX)
trap 'rm -rf "$work"' EXIT

for i in $(seq 1 2000); do
  printf 'Line %d of the text, with words such as river, mountain, %d and sky.\n\n' "$i" $((i * 13))
done > "$work/text.txt"
"$boostlm" prepare "$work/text.txt" -o "$work/data" --vocab-size 300 --val-fraction 0.1 > /dev/null

grids=("1:" "2:--tp 2" "4:--tp 2 --pp 2" "4:--tp 2 --dp 2 --zero 1")
names=("one process" "TP 2" "TP 2 x PP 2" "TP 2 x DP 2, ZeRO-1")

# run BINARY NAME RANKS FLAGS... : trains and leaves its run in $work/NAME.
run() {
  local bin=$1 name=$2 ranks=$3
  shift 3
  local cmd=("$bin")
  ((ranks > 1)) && cmd+=(launch -n "$ranks" --)
  "${cmd[@]}" train -d "$work/data" -o "$work/$name" --overwrite -b 1 -t 64 --steps 4 \
    --save-interval 2 --eval-interval 0 "$@" > "$work/$name.log" 2>&1 ||
    { echo "bench_checkpoints: $name failed: $(tail -3 "$work/$name.log")" >&2; exit 1; }
}

# field RUN KEY: from its metrics, peak_rss_mb_max of the last line, or the save of step 2.
field() {
  python3 - "$work/$1/metrics.jsonl" "$2" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
key = sys.argv[2]
if key == "peak":
    print("%.0f" % max(l.get("peak_rss_mb_max", l["peak_rss_mb"]) for l in lines))
elif key == "stall":
    print("%.1f" % next(l["save"]["stall_ms"] for l in lines if l["step"] == 2))
elif key == "total":
    print("%.0f" % next(c["total_ms"] for l in lines for c in l.get("save_committed", [])
                        if c["checkpoint"] == "step_000002"))
PY
}

files() {  # the step-2 checkpoint's safetensors files and the largest one's share of its bytes
  python3 - "$work/$1/checkpoints/step_000002" <<'PY'
import os, sys
d = sys.argv[1]
sizes = [os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)]
st = [os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".safetensors")]
print("%d, largest %.0f %%" % (len(st), 100.0 * max(sizes) / sum(sizes)))
PY
}

echo "| model | grid | peak MB before | peak MB now | now / one process | stall ms async | stall ms sync | save ms async | save ms sync | files |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for m in $models; do
  one=""
  for g in "${!grids[@]}"; do
    ranks=${grids[$g]%%:*}
    read -r -a flags <<< "${grids[$g]#*:}"
    common=(-c "configs/$m-cola.json" --vocab-size 512 "${flags[@]}")
    old="-"
    if [[ -n $before ]]; then
      run "$before" "$m-$g-before" "$ranks" "${common[@]}"
      old=$(field "$m-$g-before" peak)
    fi
    run "$boostlm" "$m-$g-async" "$ranks" "${common[@]}" --async-save on
    run "$boostlm" "$m-$g-sync" "$ranks" "${common[@]}" --async-save off
    peak=$(field "$m-$g-async" peak)
    [[ -z $one ]] && one=$peak
    ratio=$(python3 -c "print('%.2f' % ($peak / $one))")
    echo "| $m-cola | ${names[$g]} | $old | $peak | $ratio | $(field "$m-$g-async" stall) |" \
      "$(field "$m-$g-sync" stall) | $(field "$m-$g-async" total) | $(field "$m-$g-sync" total) |" \
      "$(files "$m-$g-async") |"
    rm -rf "$work/$m-$g-"*/checkpoints  # a 350m checkpoint is 1.4 GB
  done
done
