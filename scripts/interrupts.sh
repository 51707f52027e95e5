#!/usr/bin/env bash
# Counts lost runs under stop signals (issue 37 §2): N times, a tiny CoLA run is started (in one
# process, or under `boostlm launch -n 2 --tp 2`, alternately) and sent SIGINT at a random moment
# from when it takes the signal (start-up) to 2.7 s later (mid-training). A run is kept when it
# exits 130 with a checkpoint that `latest` names and whose weights file exists; anything else is
# lost, and printed.
# Usage: scripts/interrupts.sh [N] [path/to/boostlm]   (default 200, build/boostlm)
set -uo pipefail
n=${1:-200}
boostlm=$(realpath "${2:-build/boostlm}")
work=$(mktemp -d /tmp/boostlm_interrupts.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
for i in $(seq 1 300); do
  echo "Line $i of the text, with words such as river, mountain, $((i * 13)) and sky."
  echo
done > text.txt
"$boostlm" prepare text.txt -o data --vocab-size 300 --val-fraction 0.1 > /dev/null 2>&1 ||
  { echo "prepare failed"; exit 1; }
train=(train -c tiny-cola --vocab-size 320 -d data -t 16 -b 2 --steps 100000 --eval-interval 0
       --eval-batches 1 --log-interval 1000)
lost=0
for i in $(seq 1 "$n"); do
  rm -rf run
  if ((i % 2)); then
    how="one process"
    "$boostlm" "${train[@]}" -o run > out.txt 2> log.txt &
  else
    how="launch -n 2 --tp 2"
    setsid "$boostlm" launch -n 2 -- "${train[@]}" --tp 2 -o run > out.txt 2> log.txt &
  fi
  pid=$!
  # From the moment the program takes SIGINT (its handlers or mask are in place: a signal before
  # that, while the dynamic loader runs, meets the SIG_IGN a background job inherits and is
  # discarded, which no program can save), then a random 0 to 2.7 s: start-up to mid-training.
  for _ in $(seq 1 100); do
    mask=$(awk '/^Sig(Blk|Cgt):/ { print $2 }' "/proc/$pid/status" 2> /dev/null | tr '\n' ' ')
    for m in $mask; do (( (16#$m >> 1) & 1 )) && break 2; done
    sleep 0.01
  done
  sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 2.7 * r / 32767 }')"
  kill -INT "$pid"
  wait "$pid"
  code=$?
  latest=$(cat run/checkpoints/latest 2> /dev/null)
  if [ "$code" -ne 130 ] || [ -z "$latest" ] || [ ! -f "run/checkpoints/$latest/index.json" ]; then
    lost=$((lost + 1))
    echo "lost $i ($how): exit $code, latest '$latest': $(grep -v '^step' log.txt | tail -2 | tr '\n' ' ')"
  fi
done
echo "interrupts: $n, lost runs: $lost"
((lost == 0))
