#!/usr/bin/env bash
# The examples of the README and of every page under docs/, run as printed, so that the docs
# cannot drift from the command line: every `./build/boostlm ...` (or `boostlm ...`) line of their
# ```sh blocks is extracted, a few sizes are made small (models -> a tiny config, step counts,
# corpus -> a tiny generated one; `...` in the distributed examples -> the flags they leave out)
# and each one must exit 0. The ones that need root, network namespaces or minutes of measuring
# are skipped, and listed. The files run in one world, in this order: the README, then
# docs/getting-started.md (whose first run on your own data the other pages continue), then the
# other pages by path.
# Usage: test_readme.sh path/to/boostlm SOURCE_DIR      (the README and docs/ of SOURCE_DIR)
#        test_readme.sh path/to/boostlm FILE.md...      (those files only)
set -uo pipefail
boostlm=$(realpath "$1")
shift
if (($# == 1)) && [[ -d $1 ]]; then
  source_dir=$(realpath "$1")
  files=("$source_dir/README.md" "$source_dir/docs/getting-started.md")
  while IFS= read -r page; do
    [[ $page == "$source_dir/docs/getting-started.md" ]] || files+=("$page")
  done < <(find "$source_dir/docs" -name '*.md' | LC_ALL=C sort)
else
  files=()
  for file in "$@"; do files+=("$(realpath "$file")"); done
fi
source "$(dirname "$0")/lib.sh" readme

# The commands, one per line (continuation lines joined), comments stripped, each after the name
# of its file and a tab.
extract() {
  local file
  for file in "${files[@]}"; do
    [[ -f $file ]] || { echo "MISSING$(printf '\t')$file"; continue; }
    extract_file "$file" | sed "s#^#${file#"${source_dir:-/}"/}\t#"
  done
}
extract_file() {
  awk '
    /^```sh/ { inside = 1; next }
    /^```/ { inside = 0; next }
    inside {
      line = (pending == "" ? $0 : pending " " $0)
      if (line ~ /\\$/) { sub(/\\$/, "", line); pending = line; next }
      pending = ""
      print line
    }' "$1" |
    sed -E 's/[[:space:]]+#.*$//; s/[[:space:]]+/ /g; s/^ //; s/ $//' |
    grep -E '^(\./build/)?boostlm '
}

# skip_reason COMMAND: why a command is not run here ("" to run it).
skip_reason() {
  case "$1" in
    *--hostfile*) echo "emulated cluster: needs root and network namespaces (scripts/cluster.sh)" ;;
    *"boostlm calibrate"*) echo "measures this machine for minutes, rewrites hardware/this-machine.json" ;;
    *) echo "" ;;
  esac
}

# The tiny world the commands run in: $work is the repository root they expect.
cd "$work" || exit 1
mkdir -p configs my_texts data path/to runs results
for i in $(seq 1 1500); do
  echo "Line $i of the text, with words such as river, mountain, $((i * 13)) and sky above."
  echo
done > my_texts/a.txt
for i in $(seq 1 1500); do
  echo "Another page $i: the quick brown fox jumps over the lazy dog near the water."
  echo
done > my_texts/b.txt
head -40 my_texts/a.txt > some.txt
# ./configs comes first where presets are looked for (model/presets.h), so `--shape tiny` and
# `-c configs/tiny-cola.json` mean these here.
for arch in dense svd cola; do
  cat > "configs/tiny-$arch.json" << JSON
{"arch": "$arch", "vocab_size": 512, "d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
 "d_ff": 48, "attn_rank": 8, "mlp_rank": 8, "max_seq_len": 256}
JSON
done
setup() { "$@" > "$work/setup.log" 2>&1 || { cat "$work/setup.log"; echo "FAIL: setup: $*"; exit 1; }; }
setup "$boostlm" prepare my_texts/*.txt -o data/prepared --vocab-size 400 --val-fraction 0.1
cp data/prepared/* data/
setup "$boostlm" init -c configs/tiny-dense.json -o runs/dense60m --tokenizer data/prepared/tokenizer.model
setup "$boostlm" convert --to-hf runs/dense60m --out path/to/llama

# make_small COMMAND: the command on the tiny world. Step counts: 10000 -> 2, 20000 -> 4 (a
# resume must go further than the run it resumes), anything else -> at most 2. Batch and sequence
# of train and eval stay as printed (a resume must repeat them).
make_small() {
  perl -pe '
    sub steps { my $s = shift; $s >= 5000 ? int($s / 5000) : ($s > 2 ? 2 : $s) }
    chomp;
    s#^(\./build/)?boostlm #BOOSTLM #;
    s#configs/[\w.]+-(dense|svd|cola)\.json#configs/tiny-$1.json#g;
    s#--shape \S+#--shape tiny#g;
    s#--vocab-size \d+#--vocab-size 400#g;
    s#--(steps|schedule-steps) (\d+)#"--$1 " . steps($2)#ge;
    s#--(warmup|save-interval|eval-interval|log-interval) (\d+)#"--$1 " . ($2 > 1 ? 1 : $2)#ge;
    s#(^| )\.\.\.$# -d data/prepared -o runs/example-$ENV{EXAMPLE} --steps 2 --eval-batches 1#;
    # Benchmarks: a small batch, one timed step (their defaults are 8 x 256 and 5 steps).
    if (/ bench gemm /) { $_ .= " --tokens 64 --reps 1" }
    elsif (/ bench metrics/) { $_ .= " --steps 50 --repeats 1" }  # no model: no batch shape
    elsif (/ bench /) {
      s#(-b|--batch-size) \d+#$1 2#g or $_ .= " -b 2";
      s#(-t|--seq-len) \d+#$1 32#g or $_ .= " -t 32";
      / --steps / or $_ .= " --steps 1";
    }
  ' <<< "$1" | sed "s#^BOOSTLM #\"$boostlm\" #"
}

ran=0
skipped=()
start=$(date +%s)
while IFS=$'\t' read -r file command; do
  if [[ $file == MISSING ]]; then
    fail "no such file: $command"
    continue
  fi
  reason=$(skip_reason "$command")
  if [[ -n "$reason" ]]; then
    skipped+=("$file: $command  ($reason)")
    continue
  fi
  small=$(EXAMPLE=$ran make_small "$command")
  began=$(date +%s)
  if out=$(timeout -k 5 120 bash -c "$small" 2>&1 < /dev/null); then
    echo "ok ($(($(date +%s) - began)) s): $file: $command"
  else
    fail "example of $file exits $?: $command
  ran as: $small
$(tail -5 <<< "$out")"
  fi
  ran=$((ran + 1))
done < <(extract)

((ran >= 30)) || fail "only $ran examples found (the extraction is broken?)"
echo "skipped ${#skipped[@]} example(s):"
printf '  %s\n' "${skipped[@]}"
finish "examples of ${#files[@]} Markdown files: $ran ran in $(($(date +%s) - start)) s, ${#skipped[@]} skipped"
