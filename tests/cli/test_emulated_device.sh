#!/usr/bin/env bash
# The engine on the emulated CUDA device (issue 38; the build's -DBOOSTLM_CUDA=EMULATE): `--device
# cuda` runs the real kernel table, caching allocator, device transports and trainer with every GPU
# thread a fiber on the CPU, and must give the losses of `--device cpu`:
#  one process  dense, svd, cola and lax, fp32 and bf16 (lax with the Kronecker gate, the linear
#               gate and without σ); cola with --cuda-graph off equal bit for bit to on, and on
#               replaying its steps (TP 2 too, with its collectives in the graphs)
#  launch -n 2  TP 2 in btp, naive-tp and dense-tp (NCCL, i.e. comm/nccl_transport.cpp on the
#               emulated NCCL), btp again with BOOSTLM_NCCL=0 (the staged path: device -> host ->
#               MPI -> device) and in bf16, DP 2 with ZeRO-1, PP 2; lax in btp with low-rank
#               recomputation, in naive-tp and over PP 2
#  checkpoints  ZeRO-1 at dp 1 saving (its all-gather over a group of one), a resume on the device
#               whose losses are those of one uninterrupted run on the device, bit for bit
#  eval, generate  the cuda runs' cola and lax checkpoints scored and continued (greedy, with the
#               KV cache and its cached-attention kernel, and without) as on the CPU
# Tiny runs (d_model 32, 16 tokens, batch 2, 3 steps): the emulator is ~100x slower than the CPU;
# the whole test takes 3.5-6.5 minutes on 2 shared cores (with the lax runs: 243 and 262 s measured,
# 380 s under a load of 5.5; 207 s with the one-process runs two at a time, 40 s of it theirs
# against 87 s before). It catches host memory handed to a device collective (the trainer's
# control all-reduce before d028a0b: the emulated NCCL refuses it, naming ncclAllReduce; the staged
# copy refuses it too) and a group of one memcpy'ing device memory (ZeRO-1 saving at dp 1 before
# d028a0b: the emulator faults on the host's access).
# Usage: test_emulated_device.sh path/to/boostlm
set -uo pipefail
boostlm=$(realpath "$1")
source "$(dirname "$0")/lib.sh" emudev
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
started=$SECONDS
tiny_corpus "$boostlm" "$work"
cd "$work" || exit 1
sed 's/"cola"/"svd"/' cola.json > svd.json
steps=3
common=(-d data -t 16 --lr 1e-2 --warmup 1 --eval-interval 0 --eval-batches 2)

# train NAME RANKS DEVICE CONFIG FLAGS...: a run directory NAME (its log NAME.log) of $steps steps
# (of $run_steps where set).
train() {
  local name=$1 ranks=$2 device=$3 config=$4 launch=(); shift 4
  ((ranks > 1)) && launch=(launch -n "$ranks" --)
  "$boostlm" "${launch[@]}" train --device "$device" -c "$config.json" -o "$name" "${common[@]}" \
    --steps "${run_steps:-$steps}" "$@" \
    > "$name.log" 2>&1 || { fail "$name: exit $?: $(grep -v '^step' "$name.log" | tail -4)"; return 1; }
}
# compare NAME REFERENCE RUN TOLERANCE WHY [STEP1_TOLERANCE]: every step's loss (and the final
# val_loss) of RUN within TOLERANCE (relative) of REFERENCE's, step 1's within STEP1_TOLERANCE if
# given; WHY is printed with it, and the worst relative difference seen.
compare() {
  python3 - "$2/metrics.jsonl" "$3/metrics.jsonl" "$1" "$4" "$5" "${6:-$4}" << 'PY' || fail "$1"
import json, sys
ref = [json.loads(l) for l in open(sys.argv[1])]
run = [json.loads(l) for l in open(sys.argv[2])]
name, tol, why, tol1 = sys.argv[3], float(sys.argv[4]), sys.argv[5], float(sys.argv[6])
assert len(ref) == len(run) > 0, (name, len(ref), len(run))
pairs = [(f"step {a['step']}", a["loss"], b["loss"], tol1 if a["step"] == 1 else tol)
         for a, b in zip(ref, run)]
if "val_loss" in ref[-1]:
    pairs.append(("val_loss", ref[-1]["val_loss"], run[-1]["val_loss"], tol))
worst = max(abs(x - y) / abs(x) for _, x, y, _ in pairs)
bad = [p[:3] for p in pairs if abs(p[1] - p[2]) > p[3] * abs(p[1])]
if bad:
    print(f"{name}: beyond {tol:g} relative ({why}):", bad)
    sys.exit(1)
print(f"ok   {name}: {len(pairs)} losses within {tol:g} relative (worst {worst:.1e}; {why})")
PY
}
# Tolerances. fp32: the device sums in other orders than the CPU (cuBLASLt's emulation is oneDNN's
# sgemm, not the CPU backend's matmul primitive; the kernels reduce in block and warp order), so an
# op may differ by an fp32 ulp or two; measured: dense, cola and every TP/DP/PP run bit for bit
# equal over 3 steps, svd 8e-8. 1e-5 (as for the CPU's own reordered sums, test_parallel_train.sh)
# leaves two orders of margin and catches a wrong scale, dropped term or stale buffer (>= 1e-3).
fp32_tol=1e-5
fp32_why="fp32: sums in other orders"
# bf16: operands and kept activations are rounded to bf16 (2^-9 relative), so where the backends'
# fp32 sums differ by an ulp an element can round to the neighbouring bf16; and AdamW's first
# updates are lr * g/|g| whatever |g| is, so a gradient element near zero that flips sign moves its
# weight by the whole lr (1e-2) on one backend only. Step 1 (no update yet) measured within 6e-5
# (svd; dense 2e-6), bounded at 2e-4; steps 2-3 and val_loss drift to 3.3e-3 (svd; dense 8e-4,
# cola 2e-4), bounded at 1e-2: still far below what a wrong kernel gives (a loss off by >= 5%).
bf16_tol=1e-2
bf16_step1_tol=2e-4
bf16_why="bf16: neighbouring roundings, amplified by AdamW's sign-like first steps"

# pair NAME CONFIG PRECISION FLAGS...: NAME-cpu and NAME-cuda, one process each, compared with the
# precision's tolerances.
pair() {
  local name=$1 config=$2 precision=$3; shift 3
  train "$name-cpu" 1 cpu "$config" -b 2 --precision "$precision" "$@" &&
    train "$name-cuda" 1 cuda "$config" -b 2 --precision "$precision" "$@" || return
  if [ "$precision" = fp32 ]; then
    compare "$name" "$name-cpu" "$name-cuda" "$fp32_tol" "$fp32_why"
  else
    compare "$name" "$name-cpu" "$name-cuda" "$bf16_tol" "$bf16_why" "$bf16_step1_tol"
  fi
}

# One process: each architecture and precision, cpu against cuda. The emulator runs a process on
# one thread: two pairs at a time.
for arch in dense svd cola; do
  for precision in fp32 bf16; do
    side_by_side pair "$arch-$precision" "$arch" "$precision"
  done
done
# LaX (issue 48): its crossing's kernels (kernels/cuda/lax.cu) and the chains' buffers on the
# device, with the Kronecker gate, the linear gate and the ablation without σ.
sed 's/"arch": *"cola"/"arch": "lax"/' cola.json > lax.json
grep -q '"lax"' lax.json || fail "lax.json: no arch to replace in cola.json"
for precision in fp32 bf16; do
  side_by_side pair "lax-$precision" lax "$precision"
  side_by_side pair "lax-linear-$precision" lax "$precision" --lax-gate linear
  side_by_side pair "lax-nosigma-$precision" lax "$precision" --lax-latent-act off
done
side_by_side_wait
# CUDA graphs (issue 47, --cuda-graph on by default): every one-process run above replays, from
# its second step on, the whole step as one graph (train/step.h's whole_step; the emulated
# runtime's stream capture refuses a host read, a synchronisation or an allocation outside the
# graph's pool in it), as do --grad-accum 2 (both micro-batches in it) and runs with TP or DP
# ranks over NCCL (their collectives, the DP all-reduces and the norm's TP sum in the graph): one
# graph launch and 5 copies a step (the ids, the step's values, the loss and the norm back), ZeRO-1
# too (its reduce-scatter, the norm's DP sum and the all-gather in the graph), and pipeline stages
# (the 1F1B schedule with its sends and receives in the graph, LaX's chains and whole-block
# recomputation included). Off, every kernel is launched from the host:
# the same kernels on the same data, so the same losses bit for bit, fp32 and bf16 (whose AdamW
# also writes the bf16 copy in the graph).
# graphs NAME MOST [OFF]: from step 2 on, NAME's steps replay their kernels from graphs and launch
# at most MOST from the host (metrics.jsonl's "device": the emulated device's counts, rank 0's);
# OFF, the same run with --cuda-graph off, replays nothing and counts the same collectives.
graphs() {
  python3 - "$1" "$2" "${3:-}" << 'PY' || fail "graphs: $1"
import json, sys
name, most, off_name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
on = [json.loads(l) for l in open(f"{name}/metrics.jsonl")]
for line in on[1:]:
    d = line["device"]
    host = d["launches"] - d["replayed"]
    assert d["replayed"] > 0 and host <= most, (name, line["step"], d, f"at most {most} from the host")
if off_name:
    off = [json.loads(l) for l in open(f"{off_name}/metrics.jsonl")]
    assert all(line["device"]["replayed"] == 0 for line in off), (off_name, "replayed")
    assert [l["comm"] for l in on] == [l["comm"] for l in off], ("collectives", on, off)
d = on[-1]["device"]
host = d["launches"] - d["replayed"]
print(f"ok   {name}: {d['replayed']} of {d['launches']} launches replayed in its last step, "
      f"{host} from the host")
PY
}
nograph() {  # nograph PRECISION
  train "cola-$1-nograph" 1 cuda cola -b 2 --precision "$1" --cuda-graph off &&
    compare "--cuda-graph off, $1" "cola-$1-cuda" "cola-$1-nograph" 0 \
      "the same kernels launched from the host or replayed: exact" &&
    graphs "cola-$1-cuda" 6 "cola-$1-nograph"  # one graph launch, 5 copies
}
side_by_side nograph fp32
side_by_side nograph bf16
side_by_side_wait
echo "one process: $((SECONDS - started)) s so far"

# Two ranks under the launcher: each group's collectives on the device (NCCL on the emulated NCCL
# over MPI, or staged through the host with BOOSTLM_NCCL=0). fp32 against the one-process CPU run
# of the same sequences (-b is per DP rank; a pipeline's step is its micro-batches).
parallel() {  # parallel NAME CONFIG REFERENCE FLAGS...
  local name=$1 config=$2 ref=$3; shift 3
  train "$name" 2 cuda "$config" "$@" && compare "$name" "$ref" "$name" "$fp32_tol" "$fp32_why"
}
parallel btp-tp2 cola cola-fp32-cpu -b 2 --tp 2 --layout btp
parallel naive-tp2 cola cola-fp32-cpu -b 2 --tp 2 --layout naive-tp
parallel dense-tp2 dense dense-fp32-cpu -b 2 --tp 2 --layout dense-tp
BOOSTLM_NCCL=0 parallel btp-tp2-staged cola cola-fp32-cpu -b 2 --tp 2 --layout btp
# CUDA graphs across ranks: TP's collectives over NCCL are captured with the kernels, the whole
# step one graph (the norm's total all-reduced on the device, as the host path all-reduces it),
# counted per replay as when launched; off, the same losses bit for bit and the same collectives.
# The staged path's collectives wait on the host: only the norm and the updates are graphs there.
train btp-tp2-nograph 2 cuda cola -b 2 --tp 2 --layout btp --cuda-graph off &&
  compare "--cuda-graph off, tp 2" btp-tp2 btp-tp2-nograph 0 "the same kernels and collectives: exact" &&
  graphs btp-tp2 6 btp-tp2-nograph
graphs naive-tp2 6
graphs dense-tp2 6
python3 - btp-tp2-staged/metrics.jsonl << 'PY' || fail "the staged path captured its collectives"
import json, sys
d = [json.loads(l) for l in open(sys.argv[1])][-1]["device"]
assert d["launches"] - d["replayed"] > 100, d
PY
# bf16 across ranks: the bf16 GEMMs and kept activations on each rank's device, the collectives
# over NCCL, against the one-process CPU bf16 run with bf16's tolerances.
train btp-tp2-bf16 2 cuda cola -b 2 --tp 2 --layout btp --precision bf16 &&
  compare btp-tp2-bf16 cola-bf16-cpu btp-tp2-bf16 "$bf16_tol" "$bf16_why" "$bf16_step1_tol"
# LaX across ranks: under btp (with low-rank recomputation) the crossing runs on the replicated
# latents; under naive-tp on r/t columns, with its all-gathers, the norm's all-reduced sums and the
# reduce-scatter of ∂h on the device collectives.
parallel lax-btp-tp2-lowrank lax lax-fp32-cpu -b 2 --tp 2 --layout btp --recompute lowrank
parallel lax-naive-tp2 lax lax-fp32-cpu -b 2 --tp 2 --layout naive-tp
echo "tp 2: $((SECONDS - started)) s so far"
# The device transport is what the ranks use: a bad BOOSTLM_NCCL is read, and refused, when the
# groups are set up for --device cuda (the CPU device has no transport to choose).
expect_error "BOOSTLM_NCCL=2 under --device cuda" "BOOSTLM_NCCL=2: expected 1" \
  env BOOSTLM_NCCL=2 "$boostlm" launch -n 2 -- train --device cuda -c cola.json -o nccl-refused \
  "${common[@]}" --steps 1 -b 2 --tp 2
# F3: --tp-overlap on over device collectives is refused at start, with the reason (it drives
# host MPI collectives; auto takes none on a device), not by an assertion mid-step.
expect_error "--tp-overlap on under --device cuda" "--tp-overlap on: the overlap hides host (MPI) collectives" \
  "$boostlm" launch -n 2 -- train --device cuda -c cola.json -o overlap-refused \
  "${common[@]}" --steps 1 -b 2 --tp 2 --tp-overlap on

# DP 2 with ZeRO-1 and PP 2: a rank's -b 1 twice, as one process's -b 1 --grad-accum 2 (whose
# validation windows are theirs too).
train cola-b1-cpu 1 cpu cola -b 1 --grad-accum 2 &&
  parallel dp2-zero1 cola cola-b1-cpu -b 1 --dp 2 --zero 1 &&
  train dp2-zero1-nograph 2 cuda cola -b 1 --dp 2 --zero 1 --cuda-graph off &&
  compare "--cuda-graph off, zero 1" dp2-zero1 dp2-zero1-nograph 0 "the same kernels: exact" &&
  graphs dp2-zero1 6 dp2-zero1-nograph &&  # the step a graph, ZeRO's reduce-scatter, norm and
  # all-gather in it
  # DP 2 without ZeRO: the bucketed all-reduces over NCCL, started during backward, are in the
  # step's graph with the averaging; off, the same losses and collectives.
  parallel dp2 cola cola-b1-cpu -b 1 --dp 2 &&
  train dp2-nograph 2 cuda cola -b 1 --dp 2 --cuda-graph off &&
  compare "--cuda-graph off, dp 2" dp2 dp2-nograph 0 "the same kernels and collectives: exact" &&
  graphs dp2 6 dp2-nograph &&
  { train cola-b1-cuda 1 cuda cola -b 1 --grad-accum 2 &&  # both micro-batches in the graph
      compare "one device, --grad-accum 2" cola-b1-cpu cola-b1-cuda "$fp32_tol" "$fp32_why" &&
      train cola-b1-nograph 1 cuda cola -b 1 --grad-accum 2 --cuda-graph off &&
      compare "--cuda-graph off, --grad-accum 2" cola-b1-cuda cola-b1-nograph 0 \
        "the same kernels: exact" &&
      graphs cola-b1-cuda 8 cola-b1-nograph; } &&  # the ids of two micro-batches: 2 more copies
  parallel pp2 cola cola-b1-cpu -b 1 --grad-accum 2 --pp 2 &&
  # Pipeline stages: the whole 1F1B schedule a graph, its sends and receives in it over NCCL, the
  # norm's total summed over the stages there (5 launches from the host on stage 0: the graph, the
  # two micro-batches' ids, the step's values, the norm back); off, the same losses and the same
  # sends, receives and all-reduces.
  train pp2-nograph 2 cuda cola -b 1 --grad-accum 2 --pp 2 --cuda-graph off &&
  compare "--cuda-graph off, pp 2" pp2 pp2-nograph 0 "the same kernels and sends: exact" &&
  graphs pp2 5 pp2-nograph &&
  # PP 2 x DP 2: the reducer's all-reduces on the DP group's side stream, forked from the last
  # micro-batch's stage backward and joined before the averaging, in the step's graph.
  train pp2dp2 4 cuda cola -b 1 --grad-accum 2 --pp 2 --dp 2 &&
  train pp2dp2-nograph 4 cuda cola -b 1 --grad-accum 2 --pp 2 --dp 2 --cuda-graph off &&
  compare "--cuda-graph off, pp 2 x dp 2" pp2dp2 pp2dp2-nograph 0 "the same kernels: exact" &&
  graphs pp2dp2 5 pp2dp2-nograph
# LaX's chains cross the stage boundary (h forward, ∂L/∂h backward) beside the residual; the
# step one graph with them, and with whole-block recomputation (whose decisions, like the chains'
# carries, the schedule's own calls make on the host, the same every step).
train lax-b1-cpu 1 cpu lax -b 1 --grad-accum 2 &&
  parallel lax-pp2 lax lax-b1-cpu -b 1 --grad-accum 2 --pp 2 &&
  train lax-pp2-nograph 2 cuda lax -b 1 --grad-accum 2 --pp 2 --cuda-graph off &&
  compare "--cuda-graph off, lax pp 2" lax-pp2 lax-pp2-nograph 0 "the same kernels and sends: exact" &&
  graphs lax-pp2 5 lax-pp2-nograph &&
  train pp2-block 2 cuda cola -b 1 --grad-accum 2 --pp 2 --recompute block &&
  compare "--recompute block, pp 2" pp2 pp2-block 0 "recomputed as computed: exact" &&
  train pp2-block-nograph 2 cuda cola -b 1 --grad-accum 2 --pp 2 --recompute block \
    --cuda-graph off &&
  compare "--cuda-graph off, pp 2 --recompute block" pp2-block pp2-block-nograph 0 \
    "the same kernels and sends: exact" &&
  graphs pp2-block 5 pp2-block-nograph
echo "dp 2, pp 2: $((SECONDS - started)) s so far"

# ZeRO-1 at dp 1 saving its checkpoint at step 2 (the optimizer's all-gather over a group of one,
# on device memory), resumed on the device for step 3: the losses of the uninterrupted device run,
# bit for bit (tolerance 0: the same kernels on the same data in the same order).
run_steps=2 train zero-dp1 1 cuda cola -b 2 --zero 1 --schedule-steps "$steps" &&
  { "$boostlm" train --device cuda -d data -o zero-dp1 --resume zero-dp1 --steps "$steps" \
      > zero-dp1-resume.log 2>&1 || fail "resume on the device: $(tail -3 zero-dp1-resume.log)"; } &&
  compare "zero-1 at dp 1, resumed" cola-fp32-cuda zero-dp1 0 "one device, one order: exact"

# eval and generate (greedy; with the KV cache, i.e. the cached-attention kernel, and without)
# of a device-trained checkpoint, on each device: cola's, and lax's (its crossing in the decoder).
# score_and_continue CHECKPOINT
score_and_continue() {
  local ckpt=$1 device cache
  for device in cpu cuda; do
    "$boostlm" eval --device "$device" --checkpoint "$ckpt" --data data/val_000000.bin -b 2 -t 16 \
      --eval-batches 2 > "$ckpt-eval-$device.json" 2> "$ckpt-eval-$device.log" ||
      fail "$ckpt: eval --device $device: $(tail -2 "$ckpt-eval-$device.log")"
    for cache in "" --no-cache; do
      "$boostlm" generate --device "$device" --checkpoint "$ckpt" --prompt "Line 3 of" \
        --max-new-tokens 12 --temperature 0 $cache > "$ckpt-generate-$device$cache.txt" 2> generate.log ||
        fail "$ckpt: generate --device $device $cache: $(tail -2 generate.log)"
    done
  done
  python3 - "$ckpt" "$ckpt-eval-cpu.json" "$ckpt-eval-cuda.json" "$fp32_tol" << 'PY' || fail "$ckpt: eval differs"
import json, sys
cpu, cuda = (json.loads(open(f).read().strip().splitlines()[-1])["loss"] for f in sys.argv[2:4])
assert abs(cpu - cuda) <= float(sys.argv[4]) * abs(cpu), (cpu, cuda)
print(f"ok   {sys.argv[1]} eval: loss {cuda!r} on the device, {cpu!r} on the CPU (fp32 tolerance)")
PY
  # Greedy decoding takes the largest logit: fp32 logits an ulp apart pick the same token unless
  # two are tied to an ulp, which a trained model's few candidates here are not (checked by the
  # outputs).
  local out=$ckpt-generate
  if [ -s "$out-cpu.txt" ] && cmp -s "$out-cpu.txt" "$out-cuda.txt" &&
     cmp -s "$out-cuda.txt" "$out-cuda--no-cache.txt" && cmp -s "$out-cpu.txt" "$out-cpu--no-cache.txt"; then
    echo "ok   $ckpt generate: '$(cat "$out-cuda.txt")' with and without the KV cache on both devices"
  else
    fail "$ckpt: generate differs: $(head -v "$out"-*.txt)"
  fi
}
score_and_continue cola-fp32-cuda
score_and_continue lax-fp32-cuda

echo "emulated device: $((SECONDS - started)) s in all"
finish "the engine on the emulated CUDA device gives the CPU's losses"
