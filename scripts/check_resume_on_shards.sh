#!/usr/bin/env bash
# Training from prepare's sharded output, interrupted and resumed, follows the loss curve of one
# uninterrupted run (issue 30): the default corpus (scripts/fetch_corpus.sh) prepared into shards
# of SHARD_TOKENS tokens (default 50000, so that a few hundred steps cross several shards and the
# resume point lies inside one), then PRESET (default 60m-cola; --vocab-size 8192) trained with
# -b 4 -t 256 --shuffle for STEPS steps (default 300) once straight through, and once in two
# parts: STEPS/2 steps (on a schedule of STEPS), then --resume to STEPS. Prints both curves every
# 25 steps, the shards each run read, and whether all STEPS losses are equal; exits 1 if not.
# Usage: scripts/check_resume_on_shards.sh [STEPS [PRESET]]. Takes minutes per 100 steps at 60m.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-300}
preset=${2:-60m-cola}
half=$((steps / 2))
work=${CHECK_DIR:-/tmp/check_resume_on_shards}-${SHARD_TOKENS:-50000}
raw=${BOOSTLM_DATA_DIR:-data}/raw
[[ -f $raw/brown.txt && -f $raw/kjv.txt ]] || ./scripts/fetch_corpus.sh > /dev/null
mkdir -p "$work"
boostlm=./build/boostlm

if [[ ! -f $work/data/meta.json ]]; then
  "$boostlm" prepare "$raw/brown.txt" "$raw/kjv.txt" -o "$work/data" --vocab-size 8192 \
    --shard-tokens "${SHARD_TOKENS:-50000}" --progress off > /dev/null
fi
shards=$(ls "$work/data" | grep -c '^train_.*\.bin$')
common=(-c "configs/$preset.json" --vocab-size 8192 -d "$work/data" -b 4 -t 256 --shuffle
        --eval-interval 0 --save-interval 0)
start=$(date +%s)
"$boostlm" train "${common[@]}" -o "$work/straight" --overwrite --steps "$steps" > "$work/straight.log" 2>&1
"$boostlm" train "${common[@]}" -o "$work/parts" --overwrite --steps "$half" \
  --schedule-steps "$steps" > "$work/parts.log" 2>&1
"$boostlm" train -d "$work/data" -o "$work/parts" --resume "$work/parts" --steps "$steps" \
  >> "$work/parts.log" 2>&1
python3 - "$work/straight/metrics.jsonl" "$work/parts/metrics.jsonl" "$steps" "$half" \
  "$preset" "$shards" "$(($(date +%s) - start))" "$work" << 'PY'
import json, sys
def where(checkpoint):  # the loader's position a checkpoint saved: the shard under way, its window
    loader = json.load(open(f"{checkpoint}/trainer_state.json"))["loader"]
    return f"shard {loader['order'][loader['position']]['name']} ({loader['position'] + 1} of {len(loader['order'])} in the epoch's order), window {loader['window']}"
def losses(path):
    out = {}
    for line in open(path):
        record = json.loads(line)
        if "loss" in record:
            out[record["step"]] = record["loss"]
    return out
straight, parts = losses(sys.argv[1]), losses(sys.argv[2])
steps, half, preset, shards, seconds = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6], sys.argv[7]
print(f"{preset} on {shards} train shards: {steps} steps straight, and {half} + --resume to {steps} ({seconds} s for both)")
print("| step | straight | resumed |")
print("|---|---|---|")
for step in sorted(straight):
    if step % 25 == 0 or step in (1, half, half + 1, steps):
        print(f"| {step} | {straight[step]!r} | {parts.get(step)!r} |")
work = sys.argv[8]
print(f"resumed from: {where(f'{work}/parts/checkpoints/step_{half:06d}')}")
print(f"ended at:     {where(f'{work}/straight/checkpoints/step_{steps:06d}')}")
same = len(straight) == steps and straight == parts
print(f"all {steps} losses equal: {'yes' if same else 'NO'}")
sys.exit(0 if same else 1)
PY
