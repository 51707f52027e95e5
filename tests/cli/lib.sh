# What the shell tests share. Source it with a name for the scratch directory:
#   source "$(dirname "$0")/lib.sh" NAME
# It makes $work (removed on exit), counts failures, and ends the test with `finish MESSAGE`.
work=$(mktemp -d "/tmp/boostlm_$1.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
# A failure inside side_by_side's background jobs is counted through $work/side_failures.
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
  if [[ -n ${side_by_side_job:-} ]]; then echo >> "$work/side_failures"; fi
}
# side_by_side CMD...: CMD in the background, at most two at once (a third waits for one of them
# to end); side_by_side_wait waits for all of them. For commands of one single-threaded process
# each, which two cores run side by side in half the time (issue 63). Their failures count.
side_by_side() {
  while (($(jobs -rp | wc -l) >= 2)); do wait -n; done
  (side_by_side_job=1 && "$@") &
}
side_by_side_wait() { wait; }
# expect_error "what" "fragment" cmd...: the command must fail and print the fragment.
expect_error() {
  local what=$1 fragment=$2; shift 2
  local out
  if out=$("$@" 2>&1); then fail "$what: succeeded"; return; fi
  grep -qF -- "$fragment" <<< "$out" || fail "$what: message lacks '$fragment': $out"
}
# finish "message": exits 1 after any failure, else prints the message.
finish() {
  side_by_side_wait
  [[ -f $work/side_failures ]] && failures=$((failures + $(wc -l < "$work/side_failures")))
  if ((failures)); then echo "$failures failure(s)"; exit 1; fi
  echo "$1"
}
# tiny_corpus BOOSTLM DIR [PREPARE FLAGS...]: DIR/text.txt (generated) prepared into DIR/data
# (300-token tokenizer, a tenth held out: about 16k train and 1.8k val tokens, one shard each
# unless the flags say otherwise), and DIR/dense.json, DIR/cola.json: tiny models over a
# 320-token vocabulary.
tiny_corpus() {
  local boostlm=$1 dir=$2 i arch
  shift 2
  for i in $(seq 1 300); do
    echo "Line $i of the text, with words such as river, mountain, $((i * 13)) and sky."
    echo
  done > "$dir/text.txt"
  "$boostlm" prepare "$dir/text.txt" -o "$dir/data" --vocab-size 300 --val-fraction 0.1 "$@" > /dev/null ||
    { echo "prepare failed"; exit 1; }
  for arch in dense cola; do
    cat > "$dir/$arch.json" << JSON
{"arch": "$arch", "vocab_size": 320, "d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
 "d_ff": 48, "attn_rank": 8, "mlp_rank": 8, "max_seq_len": 32}
JSON
  done
}
