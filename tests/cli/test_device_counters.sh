#!/usr/bin/env bash
# The emulated CUDA device's kernel counters through `boostlm bench step --device cuda` (issue 47;
# the -DBOOSTLM_CUDA=EMULATE build):
#  - every launch of a training step declares its cost (no undeclared launches), for each
#    architecture and precision;
#  - bf16 runs every matrix product on tensor-core instructions (cuBLASLt bf16 and the mma.sync
#    attention, whose executed FLOPs the emulator holds to their declarations; LaX's tiny gate
#    factor gradients aside), fp32 none;
#  - count-only mode gives exactly the counters of the executed step, kernel by kernel (it prices
#    shapes the emulator cannot run, so it must not differ where both run);
#  - plan against the counted step; the counted step priced on an A100 against the paper's
#    measured 1B step times;
#  - the refusals: --count-only without the emulated device's --device cuda.
# Usage: test_device_counters.sh path/to/boostlm
set -uo pipefail
boostlm=$(realpath "$1")
root=$(realpath "$(dirname "$0")/../..")
source "$(dirname "$0")/lib.sh" devcount
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
cd "$work" || exit 1
py=$(command -v python3)

bench() {
  local name=$1; shift
  "$boostlm" bench step --device cuda --shape tiny -b 2 -t 64 --json "$name.json" "$@" \
    > "$name.log" 2>&1 || fail "$name: exit $?: $(tail -3 "$name.log")"
}
bench executed --arch dense svd cola lax --precision bf16 fp32
bench counted --arch dense svd cola lax --precision bf16 fp32 --count-only
# CUDA graphs (--cuda-graph, on by default): the counted step (the second) is one graph, the
# gradients' zeroing, the micro-batch's forward, loss and backward, the gradient norm's sums, the
# clipping factor and the optimizer's updates (train/step.h's whole_step). Against the same step
# with every launch from the host: the same kernels with the same launches and bytes (and the
# clipping kernel), the same loss; from the host only the graph launch and the copies around it
# (the batch's ids and the step's values up, the loss and the norm down).
bench graphs-off --arch cola --precision bf16 --cuda-graph off

"$py" - executed.json counted.json graphs-off.json << 'PY' || fail "counters: see above"
import json, sys
executed = json.load(open(sys.argv[1]))["results"]
counted = json.load(open(sys.argv[2]))["results"]
bad = 0
def check(ok, what):
    global bad
    if not ok:
        print("FAIL:", what)
        bad += 1
check(len(executed) == 8 and len(counted) == 8, "8 configurations each")
for e, c in zip(executed, counted):
    name = f"{e['arch']} {e['precision']}"
    check(e["undeclared_launches"] == 0, f"{name}: {e['undeclared_launches']} undeclared launches")
    check(e["launches"] > 0 and e["predicted_step_s"] > 0, f"{name}: nothing counted")
    # The design's ceilings: no step faster than its FLOPs alone, attention at the GEMMs' best
    # faster still (bf16: FA2's curve is below the GEMMs').
    check(0 < e["ceiling_attention_at_gemm_s"] <= e["ceiling_bytes_free_s"] < e["predicted_step_s"],
          f"{name}: ceilings out of order")
    if e["precision"] == "bf16":
        # All of them; LaX's Kronecker factor gradients (a contraction of r² elements per gate)
        # run on the CUDA cores, a millionth of the step.
        off = e["cuda_core_flops"] / (e["tensor_flops"] + e["cuda_core_flops"])
        check(e["tensor_flops"] > 0 and (off == 0 if e["arch"] != "lax" else off < 1e-3),
              f"{name}: {e['cuda_core_flops']} matrix FLOPs off the tensor cores")
        check(e["tensor_flops"] >= e["model_flops"], f"{name}: fewer tensor FLOPs than model FLOPs")
    else:
        check(e["tensor_flops"] == 0 and e["cuda_core_flops"] > 0,
              f"{name}: fp32 on tensor cores ({e['tensor_flops']})")
    keys = ("launches", "tensor_flops", "cuda_core_flops", "bytes_read", "bytes_written")
    ek = {k["kernel"]: tuple(k[x] for x in keys) for k in e["kernels"]}
    ck = {k["kernel"]: tuple(k[x] for x in keys) for k in c["kernels"]}
    for kernel in sorted(set(ek) | set(ck)):
        check(ek.get(kernel) == ck.get(kernel),
              f"{name}: {kernel}: executed {ek.get(kernel)} vs count-only {ck.get(kernel)}")

# Graphs: cola bf16 executed (on, the default) against graphs-off.json.
on = [r for r in executed if r["arch"] == "cola" and r["precision"] == "bf16"][0]
off = json.load(open(sys.argv[3]))["results"][0]
check(off["graph_launches"] == 0, f"off: {off['graph_launches']} graph launches")
check(on["graph_launches"] > 0, "on: nothing replayed")
check(on["loss"] == off["loss"], f"loss {on['loss']} with graphs, {off['loss']} without")
graph_rows = [k for k in on["kernels"] if k["kernel"] == "cudaGraphLaunch"]
check(len(graph_rows) == 1 and graph_rows[0]["launches"] == 1, f"graph launches: {graph_rows}")
host_on = on["launches"] - on["graph_launches"]
from_host = sorted(k["kernel"] for k in on["kernels"] if k["launches"] > k["graph_launches"])
check(from_host == ["cudaGraphLaunch", "cudaMemcpy device to host", "cudaMemcpy host to device"],
      f"launched from the host: {from_host}")
keys = ("launches", "bytes_read", "bytes_written", "tensor_flops")
kernels = lambda r: {k["kernel"]: tuple(k[x] for x in keys) for k in r["kernels"]
                     if not k["kernel"].startswith("cuda") and k["kernel"] != "clip_step_kernel"}
check(kernels(on) == kernels(off), "the kernels differ with and without graphs")
check(on["predicted_overhead_s"] < off["predicted_overhead_s"], "no launch overhead saved")
print(f"ok   graphs: {on['graph_launches']} of {on['launches']} launches replayed; host launches "
      f"{host_on} vs {off['launches']}; predicted overhead {on['predicted_overhead_s']*1e3:.3f} vs "
      f"{off['predicted_overhead_s']*1e3:.3f} ms")
sys.exit(1 if bad else 0)
PY

# boostlm plan against the counted step (issue 47: plan takes the roofline's figures where its own
# constants differed): a 1B CoLA of 4 blocks at 2048 tokens, one process on an H200, each class of
# work priced by both: GEMMs, attention (the CUDA kernels' 7 products in backward), and element-wise
# work with the optimizer (fp32 activations through the passes) against the counted memory-bound
# kernels and copies. Before, plan said 55.6 ms for the whole 1B where the counted step was 71.4.
"$py" -c "
import json; c = json.load(open('$root/configs/1b-cola.json'))
c.update(name='1b-cola-4', n_layers=4, max_seq_len=2048); json.dump(c, open('1b4.json', 'w'))"
"$boostlm" plan -m 1b4.json --hardware h200 -g 1 -B 1 -t 2048 --micro-batch 1 --layouts btp \
  --recompute none --no-zero --json plan4.json > plan4.log 2>&1 || fail "plan: $(tail -3 plan4.log)"
"$boostlm" bench step --device cuda --shape 1b --layers 4 -b 1 -t 2048 --arch cola \
  --precision bf16 --count-only --json roof4.json > roof4.log 2>&1 || fail "roof4: $(tail -3 roof4.log)"
"$py" - plan4.json roof4.json << 'PY' || fail "plan against the counted step: see above"
import json, sys
plan = json.load(open(sys.argv[1]))[0]
roof = json.load(open(sys.argv[2]))["results"][0]
by = {}
for k in roof["kernels"]:
    by[k["class"]] = by.get(k["class"], 0) + k["predicted_s"]
pairs = [("step", plan["step_s"], roof["predicted_step_s"], 0.10),
         ("gemm", plan["gemm_s"], by.get("gemm", 0), 0.15),
         ("attention", plan["attention_s"], by.get("attention", 0), 0.10),
         ("element-wise and optimizer", plan["elementwise_s"] + plan["optimizer_s"],
          by.get("memory", 0) + by.get("copy", 0), 0.15)]
bad = 0
for name, p, r, tol in pairs:
    ok = abs(p / r - 1) <= tol
    bad += not ok
    print(f"{'ok  ' if ok else 'FAIL'} plan {name} {p*1e3:.3f} ms, counted {r*1e3:.3f} ms "
          f"({(p / r - 1) * 100:+.1f}%, within {tol*100:.0f}%)")
sys.exit(1 if bad else 0)
PY

# The counted step priced on the paper's GPU against the paper's measurement (SPEC section 5, the
# BOOST paper's table on A100 in bf16 at seq 4096 and micro-batch 4, one GPU: the 1B dense 0.85 s an
# iteration, the 1B CoLA under BTP 0.59 s). hardware/a100-80g.json's curves come from FA2's and
# cuBLAS's published rates and the paper's 7B GEMM utilisation, not from these step times, so this
# holds the whole prediction (the counted kernels and the roofline) to the one measured step there is.
# The dense step is the calibration: within 10% both ways. The CoLA step is held to "no slower than
# the paper's" (+10% at most) and to no more than 25% faster: issue 60 sets this engine's goal below
# the paper's measurement (bf16 activations, fused passes, no latent packing on one rank: 0.50 s
# against 0.59), so a faster prediction is the work showing, and the floor catches a miscount.
"$boostlm" bench step --device cuda --shape 1b -b 4 -t 4096 --arch dense cola --precision bf16 \
  --count-only --hardware a100-80g --json paper.json > paper.log 2>&1 \
  || fail "paper: $(tail -3 paper.log)"
"$py" - paper.json << 'PY' || fail "the counted step against the paper's A100 measurement: see above"
import json, sys
results = {r["arch"]: r for r in json.load(open(sys.argv[1]))["results"]}
bad = 0
for arch, paper_s, low, high in (("dense", 0.85, -0.10, 0.10), ("cola", 0.59, -0.25, 0.10)):
    predicted = results[arch]["predicted_step_s"]
    ok = low <= predicted / paper_s - 1 <= high
    bad += not ok
    print(f"{'ok  ' if ok else 'FAIL'} 1B {arch} batch 4 x 4096 on a100-80g: predicted "
          f"{predicted:.3f} s, the paper {paper_s:.2f} s ({(predicted / paper_s - 1) * 100:+.1f}%, "
          f"within {low * 100:+.0f}% .. {high * 100:+.0f}%)")
sys.exit(1 if bad else 0)
PY

expect_error "--count-only on the cpu" "need the emulated CUDA device" \
  "$boostlm" bench step --shape tiny --arch cola --precision bf16 -b 1 -t 8 --count-only
finish "device counters: every launch declared; bf16 all on tensor cores; count-only = executed"
