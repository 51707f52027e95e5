#!/usr/bin/env bash
# Hugging Face LLaMA interchange: import (`convert --from-hf`, and HF directories read directly by
# eval), export (`convert --to-hf`), and the refusals, against tools/torch/hf_llama.py (random HF
# directories and an independent transcription of transformers' LlamaForCausalLM forward).
#
#   1. boostlm's loss on an HF directory (read directly, and after convert --from-hf) equals the
#      PyTorch HF forward's to 1e-5 relative (fp32 on both sides, bf16/fp16 weights widened
#      exactly; only summation orders differ: observed ≤ 1e-7). The other RoPE pairing (Meta's
#      interleaved one) moves the loss by ~2e-3 relative, wrong GQA mapping similarly: far outside.
#   2. HF → boostlm → HF is bit-exact: the same tensor names, dtypes, shapes and bytes, for bf16,
#      fp16 and fp32 sources (the export writes back the dtype the import recorded; bf16/fp16 → fp32
#      → bf16/fp16 is exact).
#   3. Unsupported or corrupt directories are refused with a message naming the problem.
#
# Usage: test_hf_llama.sh path/to/boostlm path/to/tools/torch   (exit 77 without PyTorch)
set -uo pipefail
boostlm=$1
tools=$2
python=${BOOSTLM_TORCH_PYTHON:-/usr/bin/python3}
if ! "$python" -c "import torch, numpy" 2>/dev/null; then
  echo "skipped: python3-torch not installed ($python cannot import torch)"
  exit 77
fi
export PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
source "$(dirname "$0")/../cli/lib.sh" hf_llama
hf() { "$python" "$tools/hf_llama.py" "$@"; }
RTOL=1e-5 B=2 T=64

"$python" "$tools/boostlm_torch.py" random-shard --out "$work/eval.bin" --vocab-size 320 \
  --tokens 4000 --seed 2 --repeat 24 > /dev/null || fail "random-shard"

loss_of() { "$boostlm" eval --checkpoint "$1" --data "$work/eval.bin" -b $B -t $T --eval-batches 2 |
  tail -1 | "$python" -c 'import json, sys; print(json.load(sys.stdin)["loss"])'; }
check_close() {  # WHAT THEIRS OURS
  "$python" - "$@" $RTOL <<'PY' || fail "$1: boostlm $3 vs torch $2"
import sys
what, a, b, rtol = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
rel = abs(a - b) / abs(a)
print(f"  {what}: boostlm {b:.9g} torch HF forward {a:.9g} rel {rel:.2e}")
sys.exit(0 if rel <= rtol else 1)
PY
}

run_case() {  # NAME write-hf options...
  local name=$1; shift
  echo "== $name: $*"
  local dir=$work/$name
  hf write-hf --out "$dir/hf" "$@" || { fail "$name: write-hf"; return; }
  local theirs ours
  theirs=$(hf loss --hf "$dir/hf" --data "$work/eval.bin" -b $B -t $T --batches 2 |
    "$python" -c 'import json, sys; print(json.load(sys.stdin)["loss"])') ||
    { fail "$name: torch loss"; return; }
  ours=$(loss_of "$dir/hf") || { fail "$name: boostlm eval of the HF directory"; return; }
  check_close "$name (HF directory read directly)" "$theirs" "$ours"
  "$boostlm" convert --from-hf "$dir/hf" --out "$dir/ckpt" > /dev/null ||
    { fail "$name: convert --from-hf"; return; }
  ours=$(loss_of "$dir/ckpt") || { fail "$name: boostlm eval of the converted checkpoint"; return; }
  check_close "$name (converted checkpoint)" "$theirs" "$ours"
  "$boostlm" convert --to-hf "$dir/ckpt" --out "$dir/back" "${export_options[@]}" > /dev/null ||
    { fail "$name: convert --to-hf"; return; }
  hf same-tensors "$dir/hf" "$dir/back" || fail "$name: HF -> boostlm -> HF is not bit-exact"
  "$python" - "$dir/back/config.json" <<'PY' || fail "$name: exported config.json"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["architectures"] == ["LlamaForCausalLM"] and c["model_type"] == "llama", c
assert "boostlm" not in c and c["rope_scaling"] is None, c
PY
}

export_options=()
run_case untied-bf16-gqa-sharded --dtype bf16 --shards 3 --kv-heads 2
run_case tied-fp16-mha-single --dtype fp16 --shards 1 --kv-heads 4 --tied
run_case tied-fp32-gqa-sharded --dtype fp32 --shards 2 --kv-heads 1 --tied --rope-theta 500000
export_options=(--shard-size 20000)  # sharded on the way out too
run_case untied-bf16-reshard --dtype bf16 --shards 1 --kv-heads 2 --seed 3
[[ -f $work/untied-bf16-reshard/back/model.safetensors.index.json ]] ||
  fail "--shard-size 20000 wrote no shards"

# train --init-from reads an HF directory directly.
mkdir -p "$work/data" && cp "$work/eval.bin" "$work/data/train.bin" && cp "$work/eval.bin" "$work/data/val.bin"
"$boostlm" train --init-from "$work/untied-bf16-gqa-sharded/hf" -d "$work/data" -o "$work/run" \
  -b $B -t $T --steps 1 > "$work/train.log" 2>&1 || fail "train --init-from HF: $(tail -2 "$work/train.log")"

# A low-rank checkpoint exports under the CoLA names with a config that says how to read them.
echo '{"arch": "cola", "vocab_size": 320, "d_model": 64, "n_layers": 1, "n_heads": 4, "d_ff": 96,
  "attn_rank": 16, "mlp_rank": 24}' > "$work/cola.json"
"$boostlm" init --config "$work/cola.json" --out "$work/cola" > /dev/null || fail "init cola"
"$boostlm" convert --to-hf "$work/cola" --out "$work/cola-hf" > /dev/null || fail "export cola"
"$python" - "$work/cola-hf" "$tools" <<'PY' || fail "low-rank export"
import json, sys
sys.path.insert(0, sys.argv[2])
from hf_llama import read_dir_raw
c = json.load(open(sys.argv[1] + "/config.json"))
assert c["model_type"] == "cola" and c["cola"]["latent_activation"] == "silu", c
t = read_dir_raw(sys.argv[1])
assert t["model.layers.0.self_attn.q_proj.cola_a"][1] == [64, 16], t.keys()
assert t["model.layers.0.mlp.down_proj.cola_b"][1] == [24, 64]
PY

# Refusals: each names what is wrong.
good=$work/untied-bf16-gqa-sharded/hf
bad() {  # NAME: a copy of the good directory to spoil
  rm -rf "$work/bad-$1"; cp -r "$good" "$work/bad-$1"; echo "$work/bad-$1"; }
edit_config() {  # DIR PYTHON-EXPRESSION-ON-c
  "$python" -c "import json,sys; p=sys.argv[1]+'/config.json'; c=json.load(open(p)); $2; json.dump(c, open(p,'w'))" "$1"; }
d=$(bad type); edit_config "$d" 'c["model_type"]="mistral"'
expect_error "model_type" 'model_type "mistral" is not supported' "$boostlm" convert --from-hf "$d" --out "$work/x"
d=$(bad scaling); edit_config "$d" 'c["rope_scaling"]={"type":"linear","factor":2.0}'
expect_error "rope_scaling" "rope_scaling is not supported" "$boostlm" eval --checkpoint "$d" --data "$work/eval.bin"
d=$(bad abias); edit_config "$d" 'c["attention_bias"]=True'
expect_error "attention_bias" "attention_bias is not supported" "$boostlm" convert --from-hf "$d" --out "$work/x"
d=$(bad mbias); edit_config "$d" 'c["mlp_bias"]=True'
expect_error "mlp_bias" "mlp_bias is not supported" "$boostlm" convert --from-hf "$d" --out "$work/x"
d=$(bad act); edit_config "$d" 'c["hidden_act"]="gelu"'
expect_error "hidden_act" 'hidden_act "gelu" is not supported' "$boostlm" convert --from-hf "$d" --out "$work/x"
d=$(bad field); edit_config "$d" 'del c["intermediate_size"]'
expect_error "missing field" "intermediate_size" "$boostlm" convert --from-hf "$d" --out "$work/x"
d=$(bad shape); edit_config "$d" 'c["intermediate_size"]=128'
expect_error "shape" "has shape [96, 64], the config implies [128, 64]" "$boostlm" convert --from-hf "$d" --out "$work/x"
d=$(bad missing-shard); rm "$d/model-00002-of-00003.safetensors"
expect_error "missing shard" "model-00002-of-00003.safetensors, which is missing" "$boostlm" convert --from-hf "$d" --out "$work/x"
d=$(bad truncated); truncate -s -100 "$d/model-00003-of-00003.safetensors"
expect_error "truncated shard" "model-00003-of-00003.safetensors: not a valid safetensors file" "$boostlm" convert --from-hf "$d" --out "$work/x"
d=$(bad index); "$python" -c "import json,sys; p=sys.argv[1]; j=json.load(open(p)); j['weight_map']['model.norm.weight']='model-00001-of-00003.safetensors'; json.dump(j, open(p,'w'))" "$d/model.safetensors.index.json"
expect_error "index disagrees" "places tensor 'model.norm.weight' in model-00001-of-00003.safetensors, which lacks it" "$boostlm" convert --from-hf "$d" --out "$work/x"
d=$(bad escape); "$python" -c "import json,sys; p=sys.argv[1]; j=json.load(open(p)); j['weight_map']['model.norm.weight']='../x.safetensors'; json.dump(j, open(p,'w'))" "$d/model.safetensors.index.json"
expect_error "shard outside the directory" "not a file in" "$boostlm" convert --from-hf "$d" --out "$work/x"
d=$(bad bias-tensor); hf write-hf --out "$d/biased" --shards 1 > /dev/null
"$python" - "$d" <<'PY'
import os, shutil, sys
sys.path.insert(0, os.environ.get("TOOLS", ""))
d = sys.argv[1]
for f in os.listdir(d):
    if f.endswith(".safetensors") or f.endswith(".json"):
        os.remove(os.path.join(d, f))
for f in os.listdir(d + "/biased"):
    shutil.move(os.path.join(d, "biased", f), d)
PY
TOOLS=$tools "$python" - "$d/model.safetensors" <<'PY'
import os, sys, torch
sys.path.insert(0, os.environ["TOOLS"])
from hf_llama import load_fp32, write_safetensors
t = load_fp32(os.path.dirname(sys.argv[1]))
t["model.layers.0.self_attn.q_proj.bias"] = torch.zeros(64)
write_safetensors(sys.argv[1], {k: v.to(torch.bfloat16) for k, v in t.items()}, "BF16")
PY
expect_error "bias tensor" "tensor 'model.layers.0.self_attn.q_proj.bias' is a bias" "$boostlm" convert --from-hf "$d" --out "$work/x"
expect_error "not an HF directory" "not a Hugging Face model directory" "$boostlm" convert --from-hf "$work" --out "$work/x"
mkdir -p "$work/full" && touch "$work/full/keep"
expect_error "export over a directory" "exists and is not an empty directory" "$boostlm" convert --to-hf "$work/untied-bf16-gqa-sharded/ckpt" --out "$work/full"

finish "hf llama interchange: all checks passed"
