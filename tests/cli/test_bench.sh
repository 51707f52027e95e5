#!/usr/bin/env bash
# `boostlm bench layouts|ablations|gemm|step|pipeline|metrics` as a user meets them, on a tiny model: each runs on
# one rank and (layouts, ablations, gemm) on two, writes JSON with the fields the results script
# and `boostlm plan --measured` read, and a wrong flag or input gives a clear error. The timings
# are not checked (a test cannot know this machine's speed); the collective bytes are, as far as
# SPEC §3 orders them.
# Usage: test_bench.sh path/to/boostlm
set -uo pipefail
boostlm=$1
source "$(dirname "$0")/lib.sh" bench
# check NAME JSON PYTHON: runs the Python with `j` the parsed JSON; an AssertionError fails.
check() {
  /usr/bin/python3 - "$2" "$1" "$3" <<'PY' || fail "$1"
import json, sys
j = json.load(open(sys.argv[1]))
try:
    exec(sys.argv[3])
except (AssertionError, KeyError, IndexError, TypeError) as e:
    print(sys.argv[2], "JSON check failed:", repr(e))
    sys.exit(1)
PY
}

cat > "$work/tiny-cola.json" <<'JSON'
{"arch": "cola", "vocab_size": 256, "d_model": 32, "n_layers": 2, "n_heads": 4, "d_ff": 64,
 "attn_rank": 8, "mlp_rank": 8, "max_seq_len": 32}
JSON
model=$work/tiny-cola.json
small=(-b 2 -t 16 --steps 2 --warmup 0)

layout_fields='
names = [r["variant"] for r in j["results"]]
assert names == ["dense-tp", "naive-tp", "btp", "btp-sync-rmsnorm", "btp-ungrouped",
                 "btp-recompute-lowrank", "btp-recompute-block"], names
for r in j["results"]:
    for key in ("layout", "arch", "rmsnorm", "grouping", "recompute", "step_ms", "tokens_per_s",
                "mfu", "mfu_now", "comm_ms", "compute_ms", "tp_comm", "tp_bytes", "tp_calls", "peak_mb",
                "activation_mb", "kept_mb_per_block", "loss"):
        assert key in r, (r["variant"], key)
    assert r["step_ms"] > 0 and r["tokens_per_s"] > 0 and r["mfu"] > 0 and r["mfu_now"] > 0, r
    assert r["peak_mb"] > 0, r
assert j["benchmark"] == "layouts" and j["batch"] == 2 and j["seq_len"] == 16
'

# One rank: every configuration runs (TP 1: nothing is communicated).
out=$("$boostlm" bench layouts --shape "$model" "${small[@]}" --json "$work/l1.json" 2>&1) ||
  fail "bench layouts, 1 rank: $out"
grep -q "^btp-recompute-block " <<< "$out" || fail "bench layouts table lacks btp-recompute-block: $out"
check "layouts 1 rank" "$work/l1.json" "$layout_fields"'
assert j["tp"] == 1
assert all(r["tp_bytes"] == 0 for r in j["results"])
'

out=$("$boostlm" bench gemm --shape "$model" --tp 2 --tokens 64 --reps 1 --json "$work/g1.json" 2>&1) ||
  fail "bench gemm, 1 rank: $out"
check "gemm 1 rank" "$work/g1.json" '
rows = j["rows"]
assert len(rows) == 2 * 7 * 2, len(rows)
q = {(r["layout"], r["factor"]): r for r in rows if r["projection"] == "q_proj"}
# naive-tp: d -> r/t -> d; btp: d/t -> r -> d/t (SPEC 3.2-3.3), d = 32, r = 8, t = 2.
assert (q["naive-tp", "A"]["k"], q["naive-tp", "A"]["n"]) == (32, 4), q["naive-tp", "A"]
assert (q["naive-tp", "B"]["k"], q["naive-tp", "B"]["n"]) == (4, 32), q["naive-tp", "B"]
assert (q["btp", "A"]["k"], q["btp", "A"]["n"]) == (16, 8), q["btp", "A"]
assert (q["btp", "B"]["k"], q["btp", "B"]["n"]) == (8, 16), q["btp", "B"]
for r in rows:
    assert r["fp32_gflops"] > 0 and r["bf16_gflops"] > 0 and 0 < r["fp32_of_peak"], r
assert j["peak_gflops"]["fp32"] > 0 and set(j["block"]) == {"naive-tp", "btp"}
'

out=$("$boostlm" bench step --shape "$model" --arch cola --precision fp32 bf16 -b 2 -t 16 --steps 1 \
      --warmup 0 --json "$work/s1.json" 2>&1) || fail "bench step: $out"
check "step" "$work/s1.json" '
assert [(r["arch"], r["precision"]) for r in j["results"]] == [("cola", "fp32"), ("cola", "bf16")]
assert all(r["step_ms"] > 0 and r["tokens_per_s"] > 0 for r in j["results"])
'
# --residual-dtype fp32 (the ablation, as train's): the step keeps the residual stream in fp32, so
# it holds more activation bytes than the default bf16 residual of the same bf16 step (the 60m at
# 4 x 128 tokens: 66 against 57 MB).
out=$("$boostlm" bench step --shape "$model" --arch cola --precision bf16 -b 4 -t 32 --steps 1 \
      --warmup 0 --residual-dtype fp32 --json "$work/s2.json" 2>&1) || fail "bench step fp32: $out"
check "step, fp32 residual" "$work/s2.json" '
assert j["residual_dtype"] == "fp32", j
'
out=$("$boostlm" bench step --shape "$model" --arch cola --precision bf16 -b 4 -t 32 --steps 1 \
      --warmup 0 --json "$work/s3.json" 2>&1) || fail "bench step bf16: $out"
/usr/bin/python3 - "$work/s2.json" "$work/s3.json" <<'PY' || fail "--residual-dtype fp32 holds more"
import json, sys
fp32, bf16 = (json.load(open(p))["results"][0]["activation_mb"] for p in sys.argv[1:3])
assert fp32 > bf16, (fp32, bf16)
PY
expect_error "bad residual dtype" "fp16" "$boostlm" bench step --shape "$model" --residual-dtype fp16

out=$("$boostlm" bench metrics --dir "$work" --steps 50 --repeats 1 --json "$work/m1.json" 2>&1) ||
  fail "bench metrics: $out"
check "metrics" "$work/m1.json" '
assert j["append_us_off"] > 0 and j["append_us_on"] > 0 and "event_us" in j and j["steps"] == 50, j
'

# Wrong flags and bad input.
expect_error "unknown flag" "--bogus" "$boostlm" bench layouts --shape "$model" --bogus
expect_error "unknown variant" "btp-fast" "$boostlm" bench layouts --shape "$model" --variants btp-fast
expect_error "bad precision" "fp16" "$boostlm" bench layouts --shape "$model" --precision fp16
expect_error "unknown shape" "no model named 3m" "$boostlm" bench layouts --shape 3m
expect_error "no benchmark" "subcommand is required" "$boostlm" bench
expect_error "gemm split" "does not split over tp=3" "$boostlm" bench gemm --shape "$model" --tp 3

if command -v mpirun > /dev/null; then
  # Two ranks: TP 2, and btp communicates less than naive-tp (7·N·r against N·(5d + 2·d_ff)
  # elements per block forward, SPEC §3.2–3.3) and no more than dense-tp here.
  out=$("$boostlm" launch -n 2 -- bench layouts --shape "$model" "${small[@]}" \
        --json "$work/l2.json" 2>&1) || fail "bench layouts, 2 ranks: $out"
  check "layouts 2 ranks" "$work/l2.json" "$layout_fields"'
assert j["tp"] == 2
r = {x["variant"]: x for x in j["results"]}
assert r["btp"]["tp_bytes"] < r["naive-tp"]["tp_bytes"], (r["btp"]["tp_bytes"], r["naive-tp"]["tp_bytes"])
assert r["btp"]["tp_comm"]["all_reduce"]["calls"] > 0
# Grouping shares collectives; the synchronous norm adds its own.
assert r["btp-ungrouped"]["tp_calls"] > r["btp"]["tp_calls"]
assert r["btp-sync-rmsnorm"]["tp_calls"] > r["btp"]["tp_calls"]
# Low-rank checkpointing keeps less than none, and more than whole-block recomputation.
assert r["btp-recompute-block"]["kept_mb_per_block"] < r["btp-recompute-lowrank"]["kept_mb_per_block"] < r["btp"]["kept_mb_per_block"]
'
  out=$("$boostlm" launch -n 2 -- bench ablations --shape "$model" "${small[@]}" \
        --json "$work/a2.json" 2>&1) || fail "bench ablations, 2 ranks: $out"
  grep -q "ckpt MB/ms" <<< "$out" || fail "bench ablations prints no checkpoint efficiency: $out"
  check "ablations 2 ranks" "$work/a2.json" '
names = [r["variant"] for r in j["results"]]
assert "naive-tp-recompute-block" in names and "dense-tp" not in names, names
assert all("checkpoint_mb_per_ms" in r and "block_us" in r for r in j["results"])
'
  out=$("$boostlm" launch -n 2 -- bench gemm --shape "$model" --tokens 64 --reps 1 \
        --json "$work/g2.json" 2>&1) || fail "bench gemm, 2 ranks: $out"
  check "gemm 2 ranks" "$work/g2.json" 'assert j["tp"] == 2 and j["ranks"] == 2, (j["tp"], j["ranks"])'
  # The link between the ranks is recorded: one machine unless labelled (or launched on an
  # emulated cluster, which sets BOOSTLM_LINK_RATE).
  check "layouts link rate" "$work/l2.json" 'assert j["link_rate"] == "local", j["link_rate"]'
  out=$(BOOSTLM_LINK_RATE=3gbit "$boostlm" bench layouts --shape "$model" "${small[@]}" \
        --variants btp --json "$work/l1-rate.json" 2>&1) || fail "bench layouts, a rate: $out"
  check "layouts link rate from launch" "$work/l1-rate.json" 'assert j["link_rate"] == "3gbit", j'
  # The JSON is what `boostlm plan --measured` reads.
  out=$("$boostlm" plan --measured "$work/l2.json" 2>&1) || fail "plan --measured on bench JSON: $out"
  grep -q "^btp-recompute-lowrank " <<< "$out" || fail "plan --measured lacks a variant: $out"

  # Pipeline: 2 stages, every micro-batch count; the point-to-point bytes equal the formula.
  out=$("$boostlm" launch -n 2 -- bench pipeline --shape "$model" -b 1 -t 16 -m 1 3 --steps 2 \
        --json "$work/p2.json" 2>&1) || fail "bench pipeline, 2 ranks: $out"
  grep -q "= formula on every rank" <<< "$out" || fail "bench pipeline: p2p differs: $out"
  check "pipeline 2 ranks" "$work/p2.json" '
assert j["benchmark"] == "pipeline" and j["pp"] == 2 and j["stage_layers"] == [[0, 1], [1, 2]]
rows = j["rows"]
assert [r["micro_batches"] for r in rows] == [1, 3]
for r in rows:
    assert r["p2p_as_formula"] and len(r["stage_compute_ms"]) == 2 and 0 <= r["bubble_fraction"] < 1
    # the first stage sends each micro-batch [16, 32] floats forward, receives its gradient
    assert r["first_stage_send_bytes"] == r["micro_batches"] * 16 * 32 * 4
assert abs(rows[0]["bubble_fraction_1f1b"] - 0.5) < 1e-12 and abs(rows[1]["bubble_fraction_1f1b"] - 0.25) < 1e-12
'
  expect_error "pipeline on 1 stage" "at least 2 stages" "$boostlm" launch -n 2 -- bench pipeline --tp 2
  expect_error "zero micro-batches" "--micro-batches: Value 0 not in range 1 to 4096" \
    "$boostlm" launch -n 2 -- bench pipeline -m 4 0
  expect_error "unknown flag, 2 ranks" "--bogus" "$boostlm" launch -n 2 -- bench layouts --bogus
  expect_error "step on 2 ranks" "one process" "$boostlm" launch -n 2 -- bench step --shape "$model"
else
  echo "skipped the 2-rank checks: MPI not available (no mpirun found)"
fi

finish "bench cli: all checks passed"
