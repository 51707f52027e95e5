#!/usr/bin/env bash
# prepare as a user runs it on a compressed JSONL corpus: a run killed (SIGKILL) after some shards
# resumes with --resume to the bytes of an uninterrupted run; peak resident memory stays flat for
# a corpus ten times larger; a tiny model trains from the sharded output, and 4 steps plus 4
# resumed give the losses of 8 uninterrupted. Usage: test_prepare.sh path/to/boostlm
set -uo pipefail
boostlm=$1
source "$(dirname "$0")/lib.sh" prepare
tiny_corpus "$boostlm" "$work"  # its tokenizer (300 tokens) and tiny models (vocab 320)
tok=$work/data/tokenizer.model

# corpus N FILE: N documents of generated words as gzip-compressed JSON Lines (seeded).
corpus() {
  python3 - "$1" "$2" << 'PY'
import gzip, json, random, sys
words = "the river flows past old stone houses and green fields where farmers grow wheat in summer".split()
rng = random.Random(11)
with gzip.open(sys.argv[2], "wt", compresslevel=1) as out:
    for i in range(int(sys.argv[1])):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(20, 200)))
        out.write(json.dumps({"id": i, "text": f"Document {i}. {text}"}) + "\n")
PY
}
corpus 3000 "$work/small.jsonl.gz"
corpus 30000 "$work/large.jsonl.gz"
prep() { "$boostlm" prepare --tokenizer "$tok" --val-fraction 0.05 --threads 2 --progress off "$@"; }

# 1: killed after a few shards, resumed: the same shards and meta.json as one uninterrupted run.
prep "$work/large.jsonl.gz" -o "$work/whole" --shard-tokens 20000 > /dev/null || fail "uninterrupted prepare"
# Started directly, not through prep: $! of a backgrounded function is the subshell's, and killing
# it left prepare running beside the resume below (the two then raced over the same directory).
"$boostlm" prepare --tokenizer "$tok" --val-fraction 0.05 --threads 2 --progress off \
  "$work/large.jsonl.gz" -o "$work/cut" --shard-tokens 20000 > /dev/null 2>&1 &
pid=$!
shards() { python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['shards']))" "$1" 2>/dev/null || echo 0; }
for _ in $(seq 1 600); do
  [ "$(shards "$work/cut/progress.json")" -ge 3 ] && break
  sleep 0.02
done
kill -KILL "$pid" 2> /dev/null
wait "$pid" 2> /dev/null
[ -e "$work/cut/meta.json" ] && fail "prepare finished before it was killed (make the corpus larger)"
killed_at=$(shards "$work/cut/progress.json")
out=$(prep "$work/large.jsonl.gz" -o "$work/cut" --shard-tokens 20000 --resume) || fail "resume: $out"
grep -q "(resumed)" <<< "$out" || fail "resume did not say it resumed: $out"
for f in "$work/whole"/*_*.bin; do
  cmp -s "$f" "$work/cut/$(basename "$f")" || fail "resumed $(basename "$f") differs from the uninterrupted run's"
done
[ "$(ls "$work/cut" | grep -c '\.bin$')" = "$(ls "$work/whole" | grep -c '\.bin$')" ] || fail "shard counts differ"
python3 - "$work/whole/meta.json" "$work/cut/meta.json" << 'PY' || fail "meta.json differs after resume"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
# Per-file counts too: tokens of the documents before the kill come from progress.json.
sys.exit(0 if (a["train"], a["val"], a["inputs"]) == (b["train"], b["val"], b["inputs"]) else 1)
PY

# 2: bounded memory: peak RSS of a corpus and of one ten times larger, about the same.
peak_kb() {
  python3 - "$@" << 'PY'
import resource, subprocess, sys
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
PY
}
small_kb=$(peak_kb "$boostlm" prepare --tokenizer "$tok" --threads 2 --progress off "$work/small.jsonl.gz" -o "$work/rss1") || fail "prepare small"
large_kb=$(peak_kb "$boostlm" prepare --tokenizer "$tok" --threads 2 --progress off "$work/large.jsonl.gz" -o "$work/rss10") || fail "prepare large"
# Allowed: 10%, plus 4 MiB for the allocator, which is still settling in the small run (measured:
# 18.5 MB for 3000 documents, 19.8 for 10000, 20.9 for 30000); holding the documents or their
# tokens would add tens of MB here.
python3 -c "import sys; s, l = map(int, sys.argv[1:]); sys.exit(0 if l <= 1.10 * s + 4096 else 1)" "$small_kb" "$large_kb" ||
  fail "peak RSS grows with the corpus: ${small_kb} kB for 1x, ${large_kb} kB for 10x"

# 3: a tiny model from the sharded output: 4 steps and 4 resumed give the 8-step losses.
losses() { python3 -c "import json,sys; print(' '.join(repr(json.loads(l)['loss']) for l in open(sys.argv[1])))" "$1/metrics.jsonl"; }
run=(train -c "$work/dense.json" -d "$work/cut" -b 2 -t 16 --shuffle --eval-batches 1 --schedule-steps 8)
"$boostlm" "${run[@]}" -o "$work/straight" --steps 8 > /dev/null 2>&1 || fail "train 8 steps on shards"
"$boostlm" "${run[@]}" -o "$work/parts" --steps 4 > /dev/null 2>&1 || fail "train 4 steps on shards"
"$boostlm" train -d "$work/cut" -o "$work/parts" --resume "$work/parts" --steps 8 > /dev/null 2>&1 ||
  fail "resume on shards"
[ "$(losses "$work/straight")" = "$(losses "$work/parts")" ] ||
  fail "resumed losses differ: $(losses "$work/straight") vs $(losses "$work/parts")"
# The data directory's meta.json names the same data.
"$boostlm" train -c "$work/dense.json" -d "$work/cut/meta.json" -b 2 -t 16 --eval-batches 1 \
  -o "$work/by_meta" --steps 2 > /dev/null 2>&1 ||
  fail "train --data DIR/meta.json"

# Issue 37 §3: prepare never destroys a preparation. An existing one is refused without
# --overwrite and left as it was; the output directory is never read as input; an input given
# twice is refused; a failed prepare leaves nothing behind.
meta_before=$(md5sum "$work/whole/meta.json")
expect_error "prepare into a preparation" "already holds a preparation (meta.json): give --overwrite" \
  prep "$work/small.jsonl.gz" -o "$work/whole"
[[ "$(md5sum "$work/whole/meta.json")" == "$meta_before" ]] || fail "a refused prepare changed meta.json"
expect_error "prepare DIR -o DIR" "is the output directory --out" \
  prep "$work/whole" -o "$work/whole" --overwrite
[[ "$(md5sum "$work/whole/meta.json")" == "$meta_before" ]] || fail "prepare DIR -o DIR changed it"
ls "$work/whole"/train_*.bin > /dev/null 2>&1 || fail "prepare DIR -o DIR removed the shards"
expect_error "an input twice" "is given twice" prep "$work/small.jsonl.gz" "$work/./small.jsonl.gz" -o "$work/twice"
prep "$work/small.jsonl.gz" -o "$work/small-again" > /dev/null || fail "prepare small"
prep "$work/small.jsonl.gz" -o "$work/small-again" --overwrite > /dev/null || fail "prepare --overwrite"
printf '{"text": "one"}\n{"text": 5}\n' > "$work/bad.jsonl"
expect_error "a bad record" "is not a string" "$boostlm" prepare "$work/bad.jsonl" -o "$work/failed" --vocab-size 300
[[ -e "$work/failed" ]] && fail "a failed prepare left $(ls "$work/failed")"

finish "prepare: killed at $killed_at shards and resumed to the same bytes; peak RSS ${small_kb} kB (1x) vs ${large_kb} kB (10x); resumed training on shards exact"
