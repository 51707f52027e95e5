#!/usr/bin/env bash
# `boostlm plan` and `boostlm calibrate` as a user meets them: the paper table, a ranked search,
# a comparison with a benchmark result, a calibration that writes a file plan can use, and the
# errors bad input produces.
# Usage: test_plan_cli.sh path/to/boostlm
set -uo pipefail
boostlm=$1
source "$(dirname "$0")/../cli/lib.sh" plan_cli

out=$("$boostlm" plan --paper --json "$work/paper.json") || fail "plan --paper: exit $?"
for model in 1b 3b 7b 13b 30b; do grep -q "^$model " <<< "$out" || fail "paper table lacks $model"; done
grep -q '"naive_over_btp"' "$work/paper.json" || fail "paper JSON lacks the ratios"

out=$("$boostlm" plan --model 7b --arch cola --hardware a100-80g --gpus 16 --global-batch 64 \
      --with-dense --top 5 --json "$work/plan.json") || fail "plan search: exit $?"
grep -q "fastest that fits" <<< "$out" || fail "plan search names no fastest plan: $out"
[[ $(grep -c '"layout"' "$work/plan.json") -gt 100 ]] || fail "plan JSON should list every row"
grep -q '"dense-tp"' "$work/plan.json" || fail "--with-dense should add dense-tp rows"

# A benchmark result in `boostlm bench layouts --json`'s format, compared with the model.
cat > "$work/bench.json" <<'JSON'
{"shape": "60m", "precision": "fp32", "batch": 8, "seq_len": 256, "tp": 2,
 "results": [{"layout": "btp", "arch": "cola", "step_ms": 900.0}]}
JSON
out=$("$boostlm" plan --measured "$work/bench.json" --hardware a100-80g) || fail "--measured: exit $?"
grep -q "^btp " <<< "$out" || fail "--measured prints no btp row: $out"
"$boostlm" plan --measured "$work/bench.json" --hardware a100-80g --json "$work/measured.json" \
  > /dev/null || fail "--measured --json: exit $?"
python3 -c '
import json, sys
rows = json.load(open(sys.argv[1]))
assert len(rows) == 1 and rows[0]["layout"] == "btp" and rows[0]["measured_ms"] == 900.0, rows
assert rows[0]["predicted_ms"] > 0 and rows[0]["link_rate"] == "local", rows
' "$work/measured.json" || fail "--measured --json rows"

# Calibration writes a hardware file that plan reads (multi-rank probe when mpirun exists).
"$boostlm" calibrate -o "$work/machine.json" > "$work/calibrate.log" 2>&1 ||
  fail "calibrate: $(cat "$work/calibrate.log")"
out=$("$boostlm" plan --model 60m --hardware "$work/machine.json" --gpus 2 --global-batch 8 \
      --seq-len 256 --precision fp32) || fail "plan on the calibrated machine: exit $?"
grep -q "this-machine" <<< "$out" || fail "plan does not name the calibrated machine: $out"

expect_error "unknown hardware" "no hardware named" "$boostlm" plan --model 7b --hardware nosuch \
  --gpus 8 --global-batch 8
expect_error "unknown model" "no model named" "$boostlm" plan --model 5b --gpus 8 --global-batch 8
# Without --global-batch or --seq-len: 4 sequences per device, the model's max_seq_len (issue 32).
out=$("$boostlm" plan --model 7b --gpus 8 2>&1) || fail "plan without --global-batch: $out"
grep -q "global batch 32 x 2048 tokens" <<< "$out" || fail "plan defaults: $(head -1 <<< "$out")"
expect_error "zero batch" "--global-batch" "$boostlm" plan --model 7b --gpus 8 --global-batch 0
echo '{"name": "x"}' > "$work/bad.json"
expect_error "bad hardware file" "devices_per_node" "$boostlm" plan --model 7b \
  --hardware "$work/bad.json" --gpus 8 --global-batch 8

finish "plan cli: all checks passed"
