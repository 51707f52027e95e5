#!/usr/bin/env bash
# Reproduces the paper's comparisons on this machine and publishes them: runs the benchmarks,
# saves their JSON under results/, draws PNG plots with gnuplot and rewrites the generated part of
# docs/results.md (between <!-- results:begin --> and <!-- results:end -->: the machine, each
# part's date, commit and load, the tables and the commands run).
#
#   ./scripts/results.sh                    everything (about 15 minutes on 2 idle cores)
#   ./scripts/results.sh --layouts --report only the layout comparison, then docs/results.md
#   ./scripts/results.sh --report           only the plots and docs/results.md, from the saved JSON
#   ./scripts/results.sh --quick            tiny shapes, a generated corpus, a few steps: checks the
#                                           script itself (into build/results-quick/, results.md)
#
# Parts (default: all): --layouts (bench layouts at TP 2: 60m and 130m fp32, 60m bf16), --gemm
# (bench gemm 60m TP 2), --ablations (bench ablations 60m and 350m TP 2), --torch (boostlm vs PyTorch
# training throughput, 60m, one process), --pipeline (bench pipeline: 1F1B's bubble at PP 2, 60m),
# --curves (dense, svd, cola and lax loss curves at 60m on the prepared corpus), --step (bench step: one
# process, 60m and 130m, cola and dense, fp32 and bf16: MFU, peak memory and ms per kernel family;
# a saved step-<shape>-before.json, from an earlier build, is shown beside it), --lax (bench
# layouts naive-tp and btp for cola and lax back to back, 60m fp32 TP 2), --report (plots and
# docs/results.md; always run after any other part).
# --cluster (not part of "all": needs root, and minutes per rate) sweeps link rates on an emulated
# cluster of two hosts (scripts/cluster.sh): per rate, calibrate the link's alpha-beta
# (calibrate --hostfile), bench layouts dense-tp/naive-tp/btp at TP 2 across the hosts (60m fp32)
# and plan --measured beside it; writes cluster-*.json and cluster-sweep.md. --rates "R1 R2 ..."
# (tc rates) overrides the list. --recovery (not part of "all") trains tiny-dense, converts it to
# CoLA (boostlm convert --to cola) and trains on, against tiny-cola from scratch (recovery.md).
# Options: --out DIR (default results), --page FILE (default docs/results.md; "none" skips it;
# --readme is its old name),
# --no-build (use build/boostlm as it is; BOOSTLM_BIN=path another build of the same source).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

quick=0 build=1 out="" page="" rates=""
parts=()
while (($#)); do
  case $1 in
    --quick) quick=1 ;;
    --out) out=$2; shift ;;
    --page | --readme) page=$2; shift ;;
    --no-build) build=0 ;;
    --rates) rates=$2; shift ;;
    --layouts | --gemm | --ablations | --torch | --pipeline | --curves | --step | --lax | \
    --report | \
    --cluster | \
      --recovery)
      parts+=("${1#--}") ;;
    -h | --help) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "results.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
((${#parts[@]})) || parts=(layouts gemm ablations torch pipeline curves step lax report)
want() { [[ " ${parts[*]} " == *" $1 "* ]]; }

if ((quick)); then
  out=${out:-build/results-quick}
  page=${page:-$out/results.md}
else
  out=${out:-results}
  page=${page:-docs/results.md}
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
boostlm=${BOOSTLM_BIN:-$repo/build/boostlm}  # BOOSTLM_BIN: another build of the same source
python=/usr/bin/python3  # Debian's interpreter: the one python3-torch installs for

if ((build)); then
  command -v gnuplot > /dev/null || ./scripts/setup.sh
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
  cmake --build build -j "$(nproc)" > /dev/null
fi

# Each part logs its commands (for docs/results.md) and the machine's load while it ran, so that a
# partial rerun replaces only its own part's records.
part=""
run() {  # run LOG COMMAND...: prints and logs the command, tees its output into LOG
  local log=$1; shift
  echo "+ $*" | sed "s|$repo/||g" | tee -a "$out/commands-$part.txt"
  "$@" 2>&1 | tee "$log"
}
# machine_info start|end PART: the machine and, per part, its date and load average.
machine_info() {
  "$python" - "$out/machine.json" "$1" "$2" <<'PY'
import json, os, platform, subprocess, sys, time
path, phase, part = sys.argv[1:4]
info = json.load(open(path)) if os.path.exists(path) else {}
lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
field = lambda name: next((l.split(":", 1)[1].strip() for l in lscpu.splitlines()
                           if l.startswith(name + ":")), "?")
flags = field("Flags").split()
mem_kb = int(next(l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal")))
os_name = next((l.split("=", 1)[1].strip().strip('"') for l in open("/etc/os-release")
                if l.startswith("PRETTY_NAME=")), platform.system())
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                        text=True).stdout.strip()
info.update({"cpu": field("Model name"), "cpus": os.cpu_count(),
             "threads_per_core": field("Thread(s) per core"),
             "isa": [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags],
             "memory_gib": round(mem_kb / 2**20, 1), "os": os_name})
now = time.strftime("%Y-%m-%d %H:%M %Z")
parts = info.setdefault("parts", {})
if phase == "start":
    parts[part] = {"started": now, "commit": commit, "load_start": os.getloadavg()[0]}
else:
    parts[part].update({"finished": now, "load_end": os.getloadavg()[0]})
json.dump(info, open(path, "w"), indent=2)
PY
}
begin_part() { part=$1; : > "$out/commands-$part.txt"; machine_info start "$part"; }
end_part() { machine_info end "$part"; }

if ((quick)); then
  shapes=(tiny) shape_bf16=tiny gemm_shape=tiny torch_shape=tiny
  small=(-b 2 -t 64 --steps 2 --warmup 0)
  ablation_size=(-b 2 -t 64 --steps 2 --warmup 0)
  gemm_size=(--tokens 128 --reps 2)
  torch_size=(-b 2 -t 64) torch_steps=2
  step_shapes=(tiny) step_size=(-b 2 -t 64 --steps 2 --warmup 0)
  curve_shape=tiny curve=(-b 4 -t 64 --steps 30 --warmup 5 --eval-interval 10 --eval-batches 2)
  pipeline_size=(--shape tiny -b 1 -t 32 -m 1 2 4 --steps 2 --warmup 0)
else
  shapes=(60m 130m) shape_bf16=60m gemm_shape=60m torch_shape=60m
  small=(--steps 3 --warmup 1)
  ablation_size=(--steps 3 --warmup 1)
  gemm_size=()
  torch_size=(-b 8 -t 256) torch_steps=3
  step_shapes=(60m 130m) step_size=(-b 8 -t 256 --steps 3 --warmup 1)
  # The four families at 60m (issue 48), bf16 to keep the four runs near half an hour here.
  curve_shape=60m curve=(-b 8 -t 128 --steps 250 --warmup 25 --eval-interval 25 --eval-batches 10
    --precision bf16)
  # A 512-token vocabulary keeps the last stage's head from outweighing a stage of 4 blocks, so
  # the bubble measured is the schedule's.
  pipeline_size=(--shape 60m --vocab-size 512 -b 1 -t 128 -m 1 2 4 8 --steps 3 --warmup 1)
fi

if want layouts; then
  begin_part layouts
  for shape in "${shapes[@]}"; do
    # 130m: the three layouts only (each variant holds its own model; seven of them at 130m
    # would need ~15 GB); BOOST's switches are compared at 60m.
    variants=()
    [[ $shape == 130m ]] && variants=(--variants dense-tp naive-tp btp)
    run "$out/layouts-$shape-fp32.log" "$boostlm" launch -n 2 -- bench layouts --shape "$shape" \
      --precision fp32 "${small[@]}" "${variants[@]}" --json "$out/layouts-$shape-fp32.json"
  done
  run "$out/layouts-$shape_bf16-bf16.log" "$boostlm" launch -n 2 -- bench layouts \
    --shape "$shape_bf16" --precision bf16 "${small[@]}" --json "$out/layouts-$shape_bf16-bf16.json"
  end_part
fi

# --lax: naive-tp and btp with LaX's latent crossing against CoLA, back to back at 60m fp32, TP 2
# (issue 48): the crossing adds no communication under btp and two collectives per gate and norm
# under naive-tp.
if want lax; then
  begin_part lax
  for arch in cola lax; do
    run "$out/lax-layouts-$arch.log" "$boostlm" launch -n 2 -- bench layouts --shape \
      "${shapes[0]}" --low-rank "$arch" --precision fp32 "${small[@]}" --variants naive-tp btp \
      --json "$out/lax-layouts-$arch.json"
  done
  end_part
fi

if want cluster; then
  begin_part cluster
  if ((quick)); then
    cluster_shape=tiny rates=${rates:-1gbit} cluster_size=(-b 2 -t 64 --steps 2 --warmup 0)
  else
    # Scaled rates (docs/parallelism.md, Emulated cluster): 150mbit is the paper's inter-node InfiniBand and
    # 2gbit its NVLink at this machine's per-rank GEMM rate; 500mbit and 10gbit bracket them. A
    # micro-batch of 4x256 (two --tp-overlap chunks of 2 sequences) keeps naive-tp's steps at the
    # slowest rate under half a minute, and puts btp's communication about level with its compute
    # at 500mbit.
    cluster_shape=60m rates=${rates:-"150mbit 500mbit 2gbit 10gbit"}
    cluster_size=(-b 4 -t 256 --steps 3 --warmup 0)
  fi
  cluster_name=blmres
  # Whatever happens, the namespaces go (the parts run one after another; none else sets a trap
  # before this one).
  trap './scripts/cluster.sh down --name "$cluster_name" > /dev/null 2>&1 || true' EXIT
  for rate in $rates; do
    hosts=$out/cluster-$rate.hosts
    ./scripts/cluster.sh up 2 --rate "$rate" --name "$cluster_name" --hostfile "$hosts"
    run "$out/cluster-calibrate-$rate.log" "$boostlm" calibrate --hostfile "$hosts" \
      -o "$out/cluster-hardware-$rate.json"
    run "$out/cluster-layouts-$cluster_shape-$rate.log" "$boostlm" launch --hostfile "$hosts" -- \
      bench layouts --shape "$cluster_shape" --precision fp32 --variants dense-tp naive-tp btp \
      dense-tp-overlap naive-tp-overlap btp-overlap btp-compute-only \
      "${cluster_size[@]}" --json "$out/cluster-layouts-$cluster_shape-$rate.json"
    run "$out/cluster-plan-$cluster_shape-$rate.log" "$boostlm" plan \
      --measured "$out/cluster-layouts-$cluster_shape-$rate.json" \
      --hardware "$out/cluster-hardware-$rate.json" --json "$out/cluster-plan-$cluster_shape-$rate.json"
    ./scripts/cluster.sh down --name "$cluster_name"
  done
  trap - EXIT
  # One table: step time per layout against link rate, the plan's prediction beside each.
  # shellcheck disable=SC2086  # the rates are words
  "$python" - "$out" "$cluster_shape" $rates > "$out/cluster-sweep.md" << 'PY'
import json, os, sys
out, shape, rates = sys.argv[1], sys.argv[2], sys.argv[3:]
print("| link | variant | measured ms | predicted ms | error | comm waited ms | comm hidden ms "
      "| naive-tp / btp | dense-tp / btp |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
tables = {}
for rate in rates:
    rows = json.load(open(os.path.join(out, f"cluster-plan-{shape}-{rate}.json")))
    by = {r["variant"]: r for r in rows}
    tables[rate] = by
    btp = by.get("btp", {}).get("measured_ms")
    for r in rows:
        err = 100 * (r["predicted_ms"] / r["measured_ms"] - 1)
        ratio = lambda other: (f"{by[other]['measured_ms'] / btp:.2f}"
                               if btp and other in by and r["variant"] == "btp" else "")
        print(f"| {rate} | {r['variant']} | {r['measured_ms']:.1f} | {r['predicted_ms']:.1f} | "
              f"{err:+.0f}% | {r['measured_comm_ms']:.1f} | "
              f"{r.get('measured_comm_hidden_ms', 0):.1f} | {ratio('naive-tp')} | {ratio('dense-tp')} |")
# --tp-overlap: each layout off and on, btp's compute floor, and the targets' ratios.
print()
print("| link | layout | overlap off ms | overlap on ms | on / off | btp floor (compute only) ms "
      "| btp on / max(floor, comm) |")
print("|---|---|---:|---:|---:|---:|---:|")
for rate, by in tables.items():
    floor = by.get("btp-compute-only", {}).get("measured_ms")
    for layout in ("dense-tp", "naive-tp", "btp"):
        off, on = by.get(layout), by.get(layout + "-overlap")
        if not off or not on:
            continue
        bound = ""
        if layout == "btp" and floor:
            comm = off["measured_comm_ms"]
            bound = f"{on['measured_ms'] / max(floor, comm):.2f}"
        print(f"| {rate} | {layout} | {off['measured_ms']:.1f} | {on['measured_ms']:.1f} | "
              f"{on['measured_ms'] / off['measured_ms']:.2f} | "
              f"{(f'{floor:.1f}' if floor and layout == 'btp' else '')} | {bound} |")
PY
  cat "$out/cluster-sweep.md"
  end_part
fi

if want gemm; then
  begin_part gemm
  run "$out/gemm-$gemm_shape-tp2.log" "$boostlm" launch -n 2 -- bench gemm --shape "$gemm_shape" \
    "${gemm_size[@]}" --json "$out/gemm-$gemm_shape-tp2.json"
  end_part
fi

if want pipeline; then
  begin_part pipeline
  run "$out/pipeline-pp2.log" "$boostlm" launch -n 2 -- bench pipeline "${pipeline_size[@]}" \
    --json "$out/pipeline-pp2.json"
  end_part
fi

if want ablations; then
  begin_part ablations
  run "$out/ablations-$gemm_shape-fp32.log" "$boostlm" launch -n 2 -- bench ablations \
    --shape "$gemm_shape" "${ablation_size[@]}" --json "$out/ablations-$gemm_shape-fp32.json"
  if ((!quick)); then
    # 350m, as the paper's ablations: three runs of three configurations each (every
    # configuration holds its own model; all eight at once would not fit in 24 GiB).
    for group in "norm btp btp-sync-rmsnorm btp-ungrouped" \
      "recompute btp btp-recompute-lowrank btp-recompute-block" \
      "naive naive-tp naive-tp-ungrouped naive-tp-recompute-block"; do
      read -r name variants <<< "$group"
      # shellcheck disable=SC2086
      run "$out/ablations-350m-fp32-$name.log" "$boostlm" launch -n 2 -- bench ablations \
        --shape 350m -b 4 -t 256 --steps 3 --warmup 1 --variants $variants \
        --json "$out/ablations-350m-fp32-$name.json"
    done
  fi
  end_part
fi

if want torch; then
  begin_part torch
  # Same model and batch, one process, two threads each; PyTorch and boostlm alternate so that
  # the machine's load affects both alike. PyTorch starts from a boostlm checkpoint.
  if ! "$python" -c "import torch" 2> /dev/null; then
    echo "results.sh: /usr/bin/python3 cannot import torch (scripts/setup.sh installs it)" >&2
    exit 1
  fi
  tmp=$(mktemp -d /tmp/boostlm_results.XXXXXX)
  trap 'rm -rf "$tmp"' EXIT
  for arch in cola dense; do
    "$boostlm" init --config "configs/$torch_shape-$arch.json" --seed 1 --out "$tmp/$arch" > /dev/null
  done
  # Two rounds over the four pairs: a burst of other work on the machine then spoils one round of
  # a pair, not both; the report keeps the fastest step of each program over the rounds.
  rows=()
  for round in 1 2; do
    for arch in cola dense; do
      for precision in fp32 bf16; do
        name=$torch_shape-$arch-$precision-$round
        run "$out/torch-$name.log" "$python" tools/torch/boostlm_torch.py train-bench \
          --checkpoint "$tmp/$arch" "${torch_size[@]}" --precision "$precision" \
          --warmup-steps 1 --steps "$torch_steps"
        run "$out/boostlm-$name.log" "$boostlm" bench step --shape "$torch_shape" \
          --arch "$arch" --precision "$precision" "${torch_size[@]}" --warmup 1 \
          --steps "$torch_steps" --json "$out/boostlm-$name.json"
        rows+=("$out/torch-$name.log" "$out/boostlm-$name.json")
      done
    done
  done
  "$python" - "$out/torch-vs-boostlm-$torch_shape.json" "${rows[@]}" <<'PY'
import json, sys
out, files = sys.argv[1], sys.argv[2:]
pairs = {}
for log, bench in zip(files[::2], files[1::2]):
    torch = json.loads([l for l in open(log) if l.startswith("{")][-1])
    ours = json.load(open(bench))
    pairs.setdefault((torch["arch"], torch["precision"]), []).append((torch, ours))
results = []
for (arch, precision), rounds in pairs.items():
    torch_min = min(t["min_step_ms"] for t, _ in rounds)
    ours_min = min(o["results"][0]["min_step_ms"] for _, o in rounds)
    # Typical step: the median of the less disturbed round.
    torch_median = min(t["median_step_ms"] for t, _ in rounds)
    ours_median = min(o["results"][0]["step_ms"] for _, o in rounds)
    batch, seq_len = rounds[0][1]["batch"], rounds[0][1]["seq_len"]
    results.append({"arch": arch, "precision": precision, "batch": batch, "seq_len": seq_len,
                    "rounds": len(rounds), "steps": rounds[0][0]["steps"],
                    "torch_min_step_ms": torch_min, "torch_step_ms": torch_median,
                    "boostlm_min_step_ms": ours_min, "boostlm_step_ms": ours_median,
                    "torch_tokens_per_s": batch * seq_len / torch_min * 1e3,
                    "boostlm_tokens_per_s": batch * seq_len / ours_min * 1e3,
                    # Fastest step over fastest step: the pair least disturbed by other work.
                    "speedup": torch_min / ours_min,
                    "speedup_median": torch_median / ours_median,
                    "torch_rounds": [{k: t[k] for k in ("median_step_ms", "min_step_ms")}
                                     for t, _ in rounds],
                    "boostlm_rounds": [{k: o["results"][0][k] for k in ("step_ms", "min_step_ms")}
                                       for _, o in rounds],
                    "torch": {k: v for k, v in rounds[0][0].items() if k != "losses"}})
json.dump({"benchmark": "torch", "results": results}, open(out, "w"), indent=2)
PY
  end_part
fi

if want step; then
  begin_part step
  # One process on both cores, every architecture and precision in one run (so their ratios hold),
  # with the per-family breakdown and the per-shape GEMM table in the log.
  for shape in "${step_shapes[@]}"; do
    run "$out/step-$shape.log" "$boostlm" bench step --shape "$shape" --arch cola dense \
      --precision fp32 bf16 "${step_size[@]}" --breakdown --json "$out/step-$shape.json"
  done
  end_part
fi

if want curves; then
  begin_part curves
  # The corpus and shards as scripts/quickstart.sh makes them; --quick generates a small text.
  if ((quick)); then
    data=$out/data
    if [[ ! -f $data/meta.json ]]; then
      mkdir -p "$out/text"
      for i in $(seq 1 600); do
        echo "Paragraph $i: the quick brown fox jumps over the lazy dog by the river $((i % 37))."
        echo "It was the ${i}th day, and the fox said: look at the water before the evening came."
        echo
      done > "$out/text/corpus.txt"
      "$boostlm" prepare "$out/text/corpus.txt" -o "$data" --vocab-size 400 > /dev/null
    fi
  else
    data=data/prepared
    ./scripts/fetch_corpus.sh
    if [[ ! -f $data/meta.json ]]; then
      "$boostlm" prepare data/raw/brown.txt data/raw/kjv.txt -o "$data" --vocab-size 8192
    fi
  fi
  # Dense, SVD, CoLA and LaX from the same seed with the same schedule; the presets' 32000-token
  # vocabulary is cut to the tokenizer's (--vocab-size), the same for all four.
  vocab=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" \
    "$data/meta.json")
  rm -f "$out"/curve-*.jsonl "$out"/curve-*.log
  for arch in dense svd cola lax; do
    name=$curve_shape-$arch
    rm -rf "$out/run-$name"
    run "$out/curve-$name.log" "$boostlm" train -c "configs/$name.json" -d "$data" \
      --vocab-size "$vocab" -o "$out/run-$name" "${curve[@]}" --lr 2e-3 --min-lr 2e-4 \
      --log-interval 50 --seed 1
    cp "$out/run-$name/metrics.jsonl" "$out/curve-$name.jsonl"
    rm -rf "$out/run-$name"
  done
  end_part
fi

# --recovery (not part of "all"): tiny-dense trained, converted to CoLA at tiny-cola's ranks by
# truncated SVD (boostlm convert --to cola), then trained on; against tiny-cola from scratch with
# the same steps and schedule. Writes recovery-*.jsonl and recovery.md (validation loss by step).
if want recovery; then
  begin_part recovery
  data=data/prepared
  ./scripts/fetch_corpus.sh
  [[ -f $data/meta.json ]] ||
    "$boostlm" prepare data/raw/brown.txt data/raw/kjv.txt -o "$data" --vocab-size 8192
  if ((quick)); then steps=20 every=10; else steps=200 every=25; fi
  schedule=(-b 8 -t 256 --steps "$steps" --warmup 20 --eval-interval "$every" --eval-batches 10
    --lr 3e-3 --min-lr 3e-4 --log-interval 50 --seed 1)
  rm -rf "$out/recovery-dense" "$out/recovery-converted" "$out/recovery-from-dense" \
    "$out/recovery-scratch"
  run "$out/recovery-dense.log" "$boostlm" train -c configs/tiny-dense.json -d "$data" \
    -o "$out/recovery-dense" "${schedule[@]}"
  run "$out/recovery-convert.log" "$boostlm" convert --to cola --checkpoint "$out/recovery-dense" \
    --attn-rank 32 --mlp-rank 32 --data "$data/val_000000.bin" -b 8 -t 256 --eval-batches 10 \
    -o "$out/recovery-converted"
  run "$out/recovery-from-dense.log" "$boostlm" train -d "$data" \
    --init-from "$out/recovery-converted" -o "$out/recovery-from-dense" "${schedule[@]}"
  run "$out/recovery-scratch.log" "$boostlm" train -c configs/tiny-cola.json -d "$data" \
    -o "$out/recovery-scratch" "${schedule[@]}"
  for run_name in dense from-dense scratch; do
    cp "$out/recovery-$run_name/metrics.jsonl" "$out/recovery-$run_name.jsonl"
    rm -rf "$out/recovery-$run_name"
  done
  rm -rf "$out/recovery-converted"
  "$python" - "$out" > "$out/recovery.md" << 'PY'
import json, os, sys
out = sys.argv[1]
def val(name):
    rows = [json.loads(l) for l in open(os.path.join(out, f"recovery-{name}.jsonl"))]
    return {r["step"]: r["val_loss"] for r in rows if "val_loss" in r}
dense, converted, scratch = val("dense"), val("from-dense"), val("scratch")
print("| step | tiny-dense | CoLA from the converted dense model | tiny-cola from scratch |")
print("|---:|---:|---:|---:|")
for step in sorted(scratch):
    print(f"| {step} | {dense.get(step, float('nan')):.4f} | {converted[step]:.4f} | {scratch[step]:.4f} |")
PY
  cat "$out/recovery.md"
  end_part
fi

# The report always follows: plots and docs/results.md from whatever JSON the results directory holds.
command -v gnuplot > /dev/null || { echo "results.sh: gnuplot missing (scripts/setup.sh)" >&2; exit 1; }
[[ $page == none || -f $page ]] || cp docs/results.md "$page"
report=(--results "$out" --page "$page")
((quick)) && report+=(--quick)
"$python" scripts/results_report.py "${report[@]}"
