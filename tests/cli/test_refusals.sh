#!/usr/bin/env bash
# What cannot work is refused before it starts, with the allowed range or the way out; what a run
# leaves behind is never lost: an earlier run in --out, metrics of steps a crash made twice.
# Usage: test_refusals.sh path/to/boostlm path/to/configs
set -uo pipefail
boostlm=$1
configs=$2
source "$(dirname "$0")/lib.sh" refusals

for i in $(seq 1 300); do
  echo "Line $i of the corpus: the fox and the river and the evening, number $((i * 3))."
  echo
done > "$work/corpus.txt"
"$boostlm" prepare "$work/corpus.txt" -o "$work/data" --vocab-size 300 > /dev/null 2>&1 ||
  fail "prepare failed"
cat > "$work/model.json" <<'JSON'
{"arch": "cola", "vocab_size": 512, "d_model": 32, "n_layers": 2, "n_heads": 4, "d_ff": 64,
 "attn_rank": 8, "mlp_rank": 8, "max_seq_len": 64}
JSON
train() { "$boostlm" train -c "$work/model.json" -d "$work/data" -b 2 -t 32 --eval-batches 2 "$@"; }

# The command line: an unknown command is named; help shows defaults and marks what is required.
expect_error "unknown command" "unknown command 'frobnicate'" "$boostlm" frobnicate
help=$("$boostlm" train --help 2>&1)
grep -q -- "--steps.*=1000" <<< "$help" || fail "train --help shows no default for --steps"
grep -q -- "--data.*REQUIRED" <<< "$help" || fail "train --help does not mark --data required"

# Options out of range: refused with the range, written as a person would.
expect_range() {  # option value fragment
  local out
  if out=$(train -o "$work/x" --steps 1 "$1" "$2" 2>&1); then fail "$1 $2 accepted"; return; fi
  grep -qF -- "$3" <<< "$out" || fail "$1 $2: message lacks '$3': $out"
  grep -qE '[0-9]{30}' <<< "$out" && fail "$1 $2: unreadable range: $out"
}
expect_range --beta1 1 "[0, 1)"
expect_range --beta2 -0.1 "[0, 1)"
expect_range --weight-decay -1 "0 or more"
expect_range --eval-batches -1 "at least 1"
expect_range --save-interval -5 "at least 0"
expect_range --keep 0 "at least 1"
expect_range --eval-interval -1 "at least 0"
expect_range --lr inf "above 0"
expect_range --lr nan "above 0"
expect_range --steps 2.5 "an integer"
expect_range --batch-size -3 "at least 1"
[[ -e "$work/x" ]] && fail "a refused run created its directory"
expect_error "temperature nan" "out of range" "$boostlm" generate --checkpoint "$work" -p x --temperature nan
expect_error "negative top-k" "at least 0" "$boostlm" generate --checkpoint "$work" -p x --top-k -1

# Config fields: a fraction where an integer belongs; ranks in a dense config are only a warning.
sed 's/"d_model": 32/"d_model": 32.5/' "$work/model.json" > "$work/frac.json"
expect_error "fractional d_model" "must be an integer (found 32.5)" \
  "$boostlm" train -c "$work/frac.json" -d "$work/data" -o "$work/x" --steps 1
sed 's/"cola"/"dense"/' "$work/model.json" > "$work/dense.json"
out=$("$boostlm" train -c "$work/dense.json" -d "$work/data" -o "$work/dense" -b 2 -t 32 \
      --steps 1 --eval-batches 2 2>&1) || fail "dense config with ranks: $out"
grep -q "warning: config: attn_rank and mlp_rank are ignored" <<< "$out" ||
  fail "no warning for ranks in a dense config: $out"

# Memory: a 7B model on this machine is refused before it allocates, with the figures.
expect_error "7b dense" "per rank" "$boostlm" train -c "$configs/7b-dense.json" -d "$work/data" \
  -o "$work/x" --vocab-size 512 -b 1 -t 32 --steps 1
mkdir -p "$work/train_only" && cp "$work/data/train_000000.bin" "$work/train_only/"
expect_error "huge batch" "available. Try a smaller --batch-size" "$boostlm" train \
  -c "$configs/60m-dense.json" -d "$work/train_only" -o "$work/x" --vocab-size 512 -b 200000 -t 32 --steps 1

# A second run into a directory that holds one: refused, with the ways out; nothing touched.
train -o "$work/run" --steps 3 > /dev/null 2>&1 || fail "first run failed"
before=$(cat "$work/run/metrics.jsonl")
expect_error "second run into the same --out" "--overwrite" train -o "$work/run" --steps 2
[[ $(cat "$work/run/metrics.jsonl") == "$before" ]] || fail "the refused run touched metrics.jsonl"
train -o "$work/run" --steps 2 --overwrite > /dev/null 2>&1 || fail "--overwrite failed"
[[ $(wc -l < "$work/run/metrics.jsonl") -eq 2 ]] || fail "--overwrite kept the old metrics"

# A crash after step 6 whose last checkpoint is step 3 (what kill -9 leaves, made by hand: the
# newer checkpoint removed and `latest` pointed back, a save's temporaries left behind). The
# resumed run redoes steps 4-6: metrics hold each step once, the temporaries are cleaned.
train -o "$work/crash" --steps 6 --save-interval 3 --keep 5 > /dev/null 2>&1 || fail "crash run"
rm -rf "$work/crash/checkpoints/step_000006"
echo step_000003 > "$work/crash/checkpoints/latest"
mkdir -p "$work/crash/checkpoints/.step_000006.tmp.999999999"
echo step_000006 > "$work/crash/checkpoints/latest.tmp.999999999"
printf '{"step": 7, "lo' >> "$work/crash/metrics.jsonl"
out=$(train -o "$work/crash" --resume "$work/crash" --steps 8 2>&1) || fail "resume after crash: $out"
steps=$(grep -o '"step":[0-9]*' "$work/crash/metrics.jsonl" | cut -d: -f2 | tr '\n' ' ')
[[ $steps == "1 2 3 4 5 6 7 8 " ]] || fail "metrics after a resume hold steps: $steps"
ls -a "$work/crash/checkpoints" | grep -q "tmp" && fail "stale temporaries survived: $(ls -a "$work/crash/checkpoints")"
grep -q "removed .*step_000006.tmp" <<< "$out" || fail "the cleaning is not reported: $out"

# The schedule's length is saved: resuming with a longer --steps keeps it and says so.
grep -q "keeping the checkpoint's learning-rate schedule of 6 steps" <<< "$out" ||
  fail "resume does not say it keeps the schedule: $out"

# prepare: binary or non-UTF-8 input is reported; a vocabulary too large for the text is
# explained in prepare's own options.
{ cat "$work/corpus.txt"; head -c 3000 /dev/urandom; } > "$work/mixed.txt"
out=$("$boostlm" prepare "$work/mixed.txt" -o "$work/mixed" --vocab-size 300 2>&1)
grep -q "warning: prepare: .*mixed.txt.*invalid bytes" <<< "$out" || fail "no UTF-8 warning: $out"
expect_error "vocabulary too large" "give --vocab-size" \
  "$boostlm" prepare "$work/corpus.txt" -o "$work/big" --vocab-size 60000

# Per-projection ranks (issue 31), on a GQA model whose k/v are 64 x 32: a shorthand wider than
# k/v gives them their full rank and says so; a family's own rank too wide, --energy with ranks,
# and a rank naive-tp cannot split are refused naming the family.
cat > "$work/gqa.json" <<'JSON'
{"arch": "dense", "vocab_size": 512, "d_model": 64, "n_layers": 1, "n_heads": 4, "n_kv_heads": 2,
 "d_ff": 96, "max_seq_len": 64}
JSON
"$boostlm" init -c "$work/gqa.json" -o "$work/gqa" > /dev/null 2>&1 || fail "init gqa"
out=$("$boostlm" convert --to svd --checkpoint "$work/gqa" --attn-rank 64 --mlp-rank 48 \
      -o "$work/gqa-svd" 2>&1) || fail "convert --attn-rank 64 of a GQA model: $out"
grep -q "k: --attn-rank 64 exceeds its full rank; it keeps full rank 32" <<< "$out" ||
  fail "the capped k rank is not reported: $out"
grep -q "ranks q 64, k 32, v 32, o 64, mlp 48" <<< "$out" || fail "convert ranks: $out"
grep -q '"k_rank": 32' "$work/gqa-svd/config.json" || fail "k_rank not in config.json"
expect_error "family rank too wide" "k_rank=40 exceeds" "$boostlm" convert --to svd \
  --checkpoint "$work/gqa" --rank k=40 --attn-rank 16 --mlp-rank 16 -o "$work/x"
expect_error "energy with ranks" "give --energy or the ranks" "$boostlm" convert --to svd \
  --checkpoint "$work/gqa" --energy 0.9 --rank q=8 -o "$work/x"
expect_error "bad --rank" "unknown projection family 'key'" "$boostlm" convert --to svd \
  --checkpoint "$work/gqa" --rank key=8 -o "$work/x"
sed 's/"attn_rank": 8/"attn_rank": 8, "v_rank": 6/' "$work/model.json" > "$work/v6.json"
expect_error "naive-tp rank" "the v projections' rank 6 (v_rank) is not divisible by tp=4" \
  "$boostlm" launch -n 4 -- train -c "$work/v6.json" -d "$work/data" -o "$work/x" --tp 4 \
  --layout naive-tp --steps 1 -b 2 -t 32

# A hostfile host that does not resolve is named before mpirun starts (issue 37 §5).
printf "localhost slots=1\nno-such-host.invalid slots=1\n" > "$work/hosts"
expect_error "unresolvable host" "line 2: host 'no-such-host.invalid' does not resolve" \
  "$boostlm" launch --hostfile "$work/hosts" -- train --steps 1

finish "all refusal checks passed"
