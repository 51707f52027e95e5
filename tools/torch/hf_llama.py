#!/usr/bin/env python3
"""Hugging Face LLaMA directories for boostlm's import/export tests, without `transformers`.

  write-hf      a random LlamaForCausalLM directory: config.json, sharded safetensors with
                model.safetensors.index.json (or one model.safetensors), in fp32, bf16 or fp16
  loss          mean loss over the first K windows of a shard (as `boostlm eval` takes them), by an
                independent PyTorch transcription of HF's LlamaForCausalLM forward
  same-tensors  whether two directories hold the same tensors: names, dtypes, shapes and bytes

The forward is written from transformers' modeling_llama.py (not from boostlm's SPEC): q/k/v
viewed as [B, T, heads, head_dim] and transposed, RoPE by `rotate_half` with cos/sin of the
duplicated frequencies cat(freqs, freqs) (inv_freq in fp32 as HF computes it), `repeat_kv` for
GQA, causal softmax in fp32, RMSNorm with its variance in fp32, down(silu(gate(x)) * up(x)).
safetensors is read and written here by hand (8-byte header length, JSON header, raw bytes):
Debian's python3-torch comes without the safetensors package.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from boostlm_torch import read_shard, window  # noqa: E402  (the llm.c shard format, windows)

DTYPES = {"fp32": (torch.float32, "F32", "float32"), "bf16": (torch.bfloat16, "BF16", "bfloat16"),
          "fp16": (torch.float16, "F16", "float16")}
TORCH_OF = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


# --- safetensors ---------------------------------------------------------------------------------

def tensor_bytes(t):
    if t.dtype == torch.float32:
        return t.contiguous().numpy().astype("<f4").tobytes()
    return t.contiguous().view(torch.int16).numpy().astype("<i2").tobytes()


def write_safetensors(path, tensors, dtype_name):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        b = tensor_bytes(t)
        header[name] = {"dtype": dtype_name, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_safetensors_raw(path):
    """{name: (dtype, shape, bytes)}"""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    return {k: (v["dtype"], v["shape"], data[base + v["data_offsets"][0]:base + v["data_offsets"][1]])
            for k, v in header.items()}


def read_dir_raw(d):
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        files = sorted(set(json.load(open(index))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for f in files:
        out.update(read_safetensors_raw(os.path.join(d, f)))
    return out


def load_fp32(d):
    out = {}
    for name, (dtype, shape, b) in read_dir_raw(d).items():
        if dtype == "F32":
            t = torch.from_numpy(np.frombuffer(b, dtype="<f4").copy())
        else:
            t = torch.from_numpy(np.frombuffer(b, dtype="<i2").copy()).view(TORCH_OF[dtype])
        out[name] = t.reshape(shape).float()
    return out


# --- write-hf ------------------------------------------------------------------------------------

def cmd_write_hf(a):
    g = torch.Generator().manual_seed(a.seed)
    hd = a.hidden // a.heads
    rnd = lambda *shape, std: torch.randn(*shape, generator=g) * std  # noqa: E731
    t = {"model.embed_tokens.weight": rnd(a.vocab, a.hidden, std=0.25)}
    for i in range(a.layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = 1.0 + rnd(a.hidden, std=0.1)
        t[p + "self_attn.q_proj.weight"] = rnd(a.heads * hd, a.hidden, std=a.std)
        t[p + "self_attn.k_proj.weight"] = rnd(a.kv_heads * hd, a.hidden, std=a.std)
        t[p + "self_attn.v_proj.weight"] = rnd(a.kv_heads * hd, a.hidden, std=a.std)
        t[p + "self_attn.o_proj.weight"] = rnd(a.hidden, a.heads * hd, std=a.std)
        t[p + "post_attention_layernorm.weight"] = 1.0 + rnd(a.hidden, std=0.1)
        t[p + "mlp.gate_proj.weight"] = rnd(a.ffn, a.hidden, std=a.std)
        t[p + "mlp.up_proj.weight"] = rnd(a.ffn, a.hidden, std=a.std)
        t[p + "mlp.down_proj.weight"] = rnd(a.hidden, a.ffn, std=a.std)
    t["model.norm.weight"] = 1.0 + rnd(a.hidden, std=0.1)
    if not a.tied:
        t["lm_head.weight"] = rnd(a.vocab, a.hidden, std=a.std)
    torch_dtype, st_dtype, config_dtype = DTYPES[a.dtype]
    t = {k: v.to(torch_dtype) for k, v in t.items()}
    os.makedirs(a.out, exist_ok=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
              "hidden_size": a.hidden, "intermediate_size": a.ffn,
              "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads,
              "num_hidden_layers": a.layers, "vocab_size": a.vocab, "rms_norm_eps": 1e-5,
              "rope_theta": a.rope_theta, "max_position_embeddings": 256,
              "tie_word_embeddings": a.tied, "hidden_act": "silu", "attention_bias": False,
              "mlp_bias": False, "rope_scaling": None, "torch_dtype": config_dtype,
              "bos_token_id": 1, "eos_token_id": 2, "transformers_version": "4.44.0"}
    json.dump(config, open(os.path.join(a.out, "config.json"), "w"), indent=2)
    if a.shards == 1:
        write_safetensors(os.path.join(a.out, "model.safetensors"), t, st_dtype)
        return
    names = list(t)
    weight_map, per = {}, math.ceil(len(names) / a.shards)
    for s in range(a.shards):
        file = f"model-{s + 1:05d}-of-{a.shards:05d}.safetensors"
        part = {n: t[n] for n in names[s * per:(s + 1) * per]}
        write_safetensors(os.path.join(a.out, file), part, st_dtype)
        weight_map.update({n: file for n in part})
    total = sum(len(tensor_bytes(v)) for v in t.values())
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
              open(os.path.join(a.out, "model.safetensors.index.json"), "w"), indent=2)


# --- HF's LlamaForCausalLM forward ---------------------------------------------------------------

def rms_norm(x, w, eps):
    variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(variance + eps))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotary(T, hd, theta):
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    freqs = torch.arange(T, dtype=torch.float32)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def repeat_kv(x, n_rep):
    b, h, t, d = x.shape
    return x if n_rep == 1 else x[:, :, None].expand(b, h, n_rep, t, d).reshape(b, h * n_rep, t, d)


def hf_logits(w, c, tokens, interleaved_rope=False):
    B, T = tokens.shape
    H, Hkv, d = c["num_attention_heads"], c["num_key_value_heads"], c["hidden_size"]
    hd, eps = d // H, c["rms_norm_eps"]
    cos, sin = rotary(T, hd, c.get("rope_theta", 10000.0))
    x = F.embedding(tokens, w["model.embed_tokens.weight"])
    mask = torch.full((T, T), float("-inf")).triu(1)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(B, T, H, hd).transpose(1, 2)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(B, T, Hkv, hd).transpose(1, 2)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(B, T, Hkv, hd).transpose(1, 2)
        if interleaved_rope:  # Meta's original pairing (2i, 2i+1): shows the test can tell
            co, si = cos[:, : hd // 2], sin[:, : hd // 2]
            pairs = [z.reshape(*z.shape[:-1], hd // 2, 2) for z in (q, k)]
            q, k = (torch.stack((z[..., 0] * co - z[..., 1] * si, z[..., 1] * co + z[..., 0] * si),
                                dim=-1).flatten(-2) for z in pairs)
        else:
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
        k, v = repeat_kv(k, H // Hkv), repeat_kv(v, H // Hkv)
        scores = q @ k.transpose(2, 3) / math.sqrt(hd) + mask
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32)
        attn = (probs @ v).transpose(1, 2).reshape(B, T, H * hd)
        x = x + attn @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = F.silu(h @ w[p + "mlp.gate_proj.weight"].T)
        x = x + (gate * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if c.get("tie_word_embeddings") else w["lm_head.weight"]
    return x @ head.T


def cmd_loss(a):
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    c = json.load(open(os.path.join(a.hf, "config.json")))
    w = load_fp32(a.hf)
    tokens = read_shard(a.data)
    total = 0.0
    with torch.no_grad():
        for i in range(a.batches):
            inputs, targets = window(tokens, i, a.batch_size, a.seq_len)
            logits = hf_logits(w, c, inputs, a.interleaved_rope)
            total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                     reduction="mean").item()
    print(json.dumps({"loss": total / a.batches}))


def cmd_same_tensors(a):
    x, y = read_dir_raw(a.a), read_dir_raw(a.b)
    bad = sorted(set(x) ^ set(y))
    bad += [n for n in sorted(set(x) & set(y)) if x[n] != y[n]]
    for n in bad[:5]:
        print(f"differs: {n}: {x.get(n, ('absent',))[:2]} vs {y.get(n, ('absent',))[:2]}")
    print(f"{len(x)} tensors, {len(bad)} differ")
    sys.exit(1 if bad else 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write-hf")
    w.add_argument("--out", required=True)
    for name, default in (("vocab", 320), ("hidden", 64), ("layers", 2), ("heads", 4),
                          ("kv-heads", 2), ("ffn", 96), ("shards", 3), ("seed", 1)):
        w.add_argument("--" + name, type=int, default=default)
    w.add_argument("--std", type=float, default=0.1)
    w.add_argument("--rope-theta", type=float, default=10000.0)
    w.add_argument("--dtype", choices=list(DTYPES), default="bf16")
    w.add_argument("--tied", action="store_true")
    lo = sub.add_parser("loss")
    lo.add_argument("--hf", required=True)
    lo.add_argument("--data", required=True)
    lo.add_argument("-b", "--batch-size", type=int, default=2)
    lo.add_argument("-t", "--seq-len", type=int, default=64)
    lo.add_argument("--batches", type=int, default=2)
    lo.add_argument("--interleaved-rope", action="store_true")
    s = sub.add_parser("same-tensors")
    s.add_argument("a")
    s.add_argument("b")
    a = ap.parse_args()
    {"write-hf": cmd_write_hf, "loss": cmd_loss, "same-tensors": cmd_same_tensors}[a.cmd](a)


if __name__ == "__main__":
    main()
