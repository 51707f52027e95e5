#!/usr/bin/env python3
"""An independent reader of the GGUF files `boostlm convert --to-gguf` writes, for the tests.

  gguf_reader.py dump FILE.gguf
      the header, every key/value (arrays summarised) and every tensor, as JSON
  gguf_reader.py check FILE.gguf --checkpoint DIR --dtype f32|f16|bf16|q8_0
      reads back every key and every tensor and compares them with the checkpoint: its config.json
      (Hugging Face fields), its model.safetensors and its tokenizer (a tokenizer.model read here
      with a protobuf reader of its own, or a tokenizer.json and its tokenizer_config.json read as
      JSON). Exits 1 naming every difference.

Written from the GGUF v3 specification (ggml docs/gguf.md) and llama.cpp's conventions for the
`llama` architecture, sharing no code with boostlm: struct for the file, numpy for the arithmetic.
What "the same" means, per tensor:
  - norms: f32, bit-exact;
  - matrices: the checkpoint's fp32 values (q and k with each head's rows reordered from rotate-half
    pairs (i, i + hd/2) to adjacent pairs (2i, 2i+1); svd projections multiplied out here in fp64)
    encoded as the dtype: f16 and bf16 by numpy's / the bit pattern's round-to-nearest-even, q8_0
    by ggml's block rule (d = max|x|/127 as fp16, q = roundf(x/d)); then the file's bytes must equal
    these exactly, except for svd products (fp32 products in boostlm against fp64 here: f32
    within 1e-5 of the largest |W|, encoded types within one unit of their last place / one q8_0
    step).
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

GGML_TYPES = {0: "f32", 1: "f16", 8: "q8_0", 30: "bf16"}
FILE_TYPES = {"f32": 0, "f16": 1, "q8_0": 7, "bf16": 32}  # llama.cpp's llama_ftype
VALUE_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                 10: "<Q", 11: "<q", 12: "<d"}
VALUE_NAMES = {0: "uint8", 1: "int8", 2: "uint16", 3: "int16", 4: "uint32", 5: "int32",
               6: "float32", 7: "bool", 8: "string", 9: "array", 10: "uint64", 11: "int64",
               12: "float64"}


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        value = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value[0]

    def string(self):
        n = self.take("<Q")
        s = self.data[self.pos:self.pos + n]
        if len(s) != n:
            raise ValueError("a string runs past the end of the file")
        self.pos += n
        return s.decode("utf-8")

    def value(self, vtype):
        if vtype == 8:
            return self.string()
        if vtype == 9:
            etype, n = self.take("<I"), self.take("<Q")
            return {"type": VALUE_NAMES[etype], "values": [self.value(etype) for _ in range(n)]}
        return self.take(VALUE_FORMATS[vtype])


def read_gguf(path):
    data = open(path, "rb").read()
    r = Reader(data)
    if data[:4] != b"GGUF":
        raise ValueError(f"{path}: magic {data[:4]!r}, not GGUF")
    r.pos = 4
    version, n_tensors, n_kv = r.take("<I"), r.take("<Q"), r.take("<Q")
    kv = {}
    for _ in range(n_kv):
        key = r.string()
        vtype = r.take("<I")
        if key in kv:
            raise ValueError(f"key {key} appears twice")
        kv[key] = (VALUE_NAMES[vtype], r.value(vtype))
    alignment = kv.get("general.alignment", ("uint32", 32))[1]
    tensors = []
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.take("<I")
        ne = [r.take("<Q") for _ in range(n_dims)]
        tensors.append({"name": name, "ne": ne, "type": GGML_TYPES[r.take("<I")],
                        "offset": r.take("<Q")})
    data_start = r.pos + (alignment - r.pos % alignment) % alignment
    if any(data[r.pos:data_start]):
        raise ValueError("the padding before the tensor data is not zero")
    for t in tensors:
        n = math.prod(t["ne"])
        t["bytes"] = {"f32": 4 * n, "f16": 2 * n, "bf16": 2 * n, "q8_0": n // 32 * 34}[t["type"]]
        t["raw"] = data[data_start + t["offset"]:data_start + t["offset"] + t["bytes"]]
    return {"version": version, "alignment": alignment, "kv": kv, "tensors": tensors,
            "data_start": data_start, "size": len(data), "data": data}


# --- the checkpoint, read independently -------------------------------------------------------

def read_safetensors(path):
    data = open(path, "rb").read()
    n = struct.unpack_from("<Q", data, 0)[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", f"{name}: {e['dtype']}"
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + b:8 + n + end], dtype="<f4").reshape(e["shape"])
    return out


def proto_fields(data):
    """(field, wire type, value) of one protobuf message, value raw for length-delimited fields."""
    pos = 0

    def varint():
        nonlocal pos
        shift = value = 0
        while True:
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value
    while pos < len(data):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            yield field, wire, varint()
        elif wire == 1:
            yield field, wire, data[pos:pos + 8]
            pos += 8
        elif wire == 2:
            n = varint()
            yield field, wire, data[pos:pos + n]
            pos += n
        elif wire == 5:
            yield field, wire, data[pos:pos + 4]
            pos += 4
        else:
            raise ValueError(f"protobuf wire type {wire}")


def read_sentencepiece(path):
    """sentencepiece_model.proto: ModelProto {pieces = 1 {piece = 1, score = 2, type = 3},
    trainer_spec = 2 {unk_id = 40, bos_id = 41, eos_id = 42, pad_id = 43},
    normalizer_spec = 3 {add_dummy_prefix = 3, remove_extra_whitespaces = 4}}."""
    pieces, scores, types = [], [], []
    special = {"unk": 0, "bos": 1, "eos": 2, "pad": -1}  # TrainerSpec's defaults
    normalizer = {"add_dummy_prefix": True, "remove_extra_whitespaces": True}
    for field, _, value in proto_fields(open(path, "rb").read()):
        if field == 1:
            piece, score, ptype = "", 0.0, 1
            for f, _, v in proto_fields(value):
                if f == 1:
                    piece = v.decode("utf-8")
                elif f == 2:
                    score = struct.unpack("<f", v)[0]
                elif f == 3:
                    ptype = v
            pieces.append(piece)
            scores.append(score)
            types.append(ptype)
        elif field == 2:
            for f, _, v in proto_fields(value):
                if f in (40, 41, 42, 43):
                    v = v - (1 << 64) if v >= 1 << 63 else v  # int32 -1 as a varint
                    special[{40: "unk", 41: "bos", 42: "eos", 43: "pad"}[f]] = v
        elif field == 3:
            for f, _, v in proto_fields(value):
                if f == 3:
                    normalizer["add_dummy_prefix"] = bool(v)
                elif f == 4:
                    normalizer["remove_extra_whitespaces"] = bool(v)
    return pieces, scores, types, special, normalizer


# llama.cpp's names for the pre-tokenizer patterns of tokenizer.json files (tokenizer.ggml.pre; its
# convert_hf_to_gguf.py names GPT-2's "gpt-2" and LLaMA 3's "llama-bpe").
PRE_TOKENIZERS = {
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+": "gpt-2",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+": "llama-bpe",
}


def read_tokenizer_json(path, vocab_size):
    """The tokenizer.ggml.* keys of llama.cpp's `gpt2` tokenizer for a byte-level BPE: token
    strings (vocabulary entries as written; added tokens' content, control if special, else
    user-defined; "[PADi]" unused for ids without a token, up to the model's vocabulary), merges
    "a b" by rank, the pre-tokenizer's name, BOS and EOS (the post-processor's first token, else
    tokenizer_config.json's bos_token; its eos_token, else the post-processor's last, else
    <|endoftext|>; BOS defaults to EOS), and whether the post-processor adds them."""
    t = json.load(open(path, encoding="utf-8"))
    pre = t["pre_tokenizer"]
    if pre["type"] == "ByteLevel":
        pattern = next(iter(PRE_TOKENIZERS))  # ByteLevel's own regex is GPT-2's
    else:
        pattern = pre["pretokenizers"][0]["pattern"]["Regex"]
    tokens, types = {}, {}
    for text, i in t["model"]["vocab"].items():
        tokens[i], types[i] = text, 1
    ids_of = {}
    for a in t.get("added_tokens") or []:
        tokens[a["id"]], types[a["id"]] = a["content"], 3 if a.get("special") else 4
        ids_of[a["content"]] = a["id"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in t["model"]["merges"]]
    before, after = [], []
    post = t.get("post_processor") or {}
    for p in post.get("processors", [post]):
        if p.get("type") == "TemplateProcessing":
            seen = False
            for item in p["single"]:
                if "Sequence" in item:
                    seen = True
                else:
                    ids = p["special_tokens"][item["SpecialToken"]["id"]]["ids"]
                    (after if seen else before).extend(ids)
    config_path = os.path.join(os.path.dirname(path), "tokenizer_config.json")
    config = json.load(open(config_path)) if os.path.exists(config_path) else {}

    def named(key):
        v = config.get(key)
        return ids_of.get(v if isinstance(v, str) else (v or {}).get("content"))
    bos = before[0] if before else named("bos_token")
    eos = named("eos_token")
    if eos is None:
        eos = after[-1] if after else ids_of.get("<|endoftext|>")
    return {
        "tokenizer.ggml.model": ("string", "gpt2"),
        "tokenizer.ggml.pre": ("string", PRE_TOKENIZERS[pattern]),
        "tokenizer.ggml.tokens": ("array", {"type": "string", "values": [
            tokens.get(i, f"[PAD{i}]") for i in range(vocab_size)]}),
        "tokenizer.ggml.token_type": ("array", {"type": "int32", "values": [
            types.get(i, 5) for i in range(vocab_size)]}),
        "tokenizer.ggml.merges": ("array", {"type": "string", "values": merges}),
        "tokenizer.ggml.bos_token_id": ("uint32", eos if bos is None else bos),
        "tokenizer.ggml.eos_token_id": ("uint32", eos),
        "tokenizer.ggml.add_bos_token": ("bool", bool(before)),
        "tokenizer.ggml.add_eos_token": ("bool", bool(after)),
    }


def checkpoint_dir(path):
    latest = os.path.join(path, "checkpoints", "latest")
    if os.path.isfile(latest):
        return os.path.join(path, "checkpoints", open(latest).read().strip())
    return path


# --- encodings as ggml lays them out -----------------------------------------------------------

def to_bf16_bits(x):
    bits = x.astype("<f4").view("<u4").astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")


def encode(x, dtype):
    x = np.ascontiguousarray(x, dtype=np.float32)
    if dtype == "f32":
        return x.astype("<f4").tobytes()
    if dtype == "f16":
        return x.astype("<f2").tobytes()
    if dtype == "bf16":
        return to_bf16_bits(x).tobytes()
    blocks = x.reshape(-1, 32)
    d = np.abs(blocks).max(axis=1, keepdims=True) / np.float32(127)
    inv = np.where(d == 0, np.float32(0), np.float32(1) / np.where(d == 0, 1, d)).astype(np.float32)
    scaled = (blocks * inv).astype(np.float32)
    q = (np.sign(scaled) * np.floor(np.abs(scaled) + np.float32(0.5))).astype(np.int8)  # roundf
    out = np.zeros((blocks.shape[0], 34), dtype=np.uint8)
    out[:, :2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def decode(raw, dtype, n):
    if dtype == "f32":
        return np.frombuffer(raw, "<f4").astype(np.float64)
    if dtype == "f16":
        return np.frombuffer(raw, "<f2").astype(np.float64)
    if dtype == "bf16":
        return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view("<f4").astype(np.float64)
    b = np.frombuffer(raw, np.uint8).reshape(-1, 34)
    d = b[:, :2].copy().view("<f2").astype(np.float64)
    return (b[:, 2:].copy().view(np.int8).astype(np.float64) * d).reshape(n)


def rope_adjacent(w, heads):
    """HF rows per head (t * hd/2 + i) -> llama.cpp rows (2i + t)."""
    rows, cols = w.shape
    hd = rows // heads
    return w.reshape(heads, 2, hd // 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)


# --- the check ----------------------------------------------------------------------------------

def expected(checkpoint):
    d = checkpoint_dir(checkpoint)
    cfg = json.load(open(os.path.join(d, "config.json")))
    st = read_safetensors(os.path.join(d, "model.safetensors"))
    L, H, KV = cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    tensors = {"token_embd.weight": (st["model.embed_tokens.weight"], False),
               "output_norm.weight": (st["model.norm.weight"], False)}
    if not cfg.get("tie_word_embeddings", False):
        tensors["output.weight"] = (st["lm_head.weight"], False)
    names = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
             "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
             "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    for i in range(L):
        p = f"model.layers.{i}."
        tensors[f"blk.{i}.attn_norm.weight"] = (st[p + "input_layernorm.weight"], False)
        tensors[f"blk.{i}.ffn_norm.weight"] = (st[p + "post_attention_layernorm.weight"], False)
        for gguf, hf in names.items():
            if p + hf + ".weight" in st:
                w, product = st[p + hf + ".weight"].astype(np.float64), False
            else:  # svd: W = (A B)^T, A [d_in, r], B [r, d_out]
                a = st[p + hf + ".cola_a"].astype(np.float64)
                b = st[p + hf + ".cola_b"].astype(np.float64)
                w, product = (a @ b).T, True
            if gguf in ("attn_q", "attn_k"):
                w = rope_adjacent(w, H if gguf == "attn_q" else KV)
            tensors[f"blk.{i}.{gguf}.weight"] = (w, product)
    return d, cfg, tensors


def check(args):
    failures = []
    fail = failures.append
    g = read_gguf(args.gguf)
    d, cfg, tensors = expected(args.checkpoint)
    arch = cfg.get("boostlm", {}).get("arch", "dense")
    kv = g["kv"]

    if g["version"] != 3:
        fail(f"version {g['version']}")
    if g["alignment"] != 32 or kv.get("general.alignment") != ("uint32", 32):
        fail(f"general.alignment {kv.get('general.alignment')}")
    V = cfg["vocab_size"]
    want = {
        "general.alignment": ("uint32", 32),
        "general.architecture": ("string", "llama"),
        "general.file_type": ("uint32", FILE_TYPES[args.dtype]),
        "llama.vocab_size": ("uint32", V),
        "llama.context_length": ("uint32", cfg["max_position_embeddings"]),
        "llama.embedding_length": ("uint32", cfg["hidden_size"]),
        "llama.block_count": ("uint32", cfg["num_hidden_layers"]),
        "llama.feed_forward_length": ("uint32", cfg["intermediate_size"]),
        "llama.attention.head_count": ("uint32", cfg["num_attention_heads"]),
        "llama.attention.head_count_kv": ("uint32", cfg["num_key_value_heads"]),
        "llama.rope.dimension_count": ("uint32", cfg["hidden_size"] // cfg["num_attention_heads"]),
        "llama.rope.freq_base": ("float32", struct.unpack("<f", struct.pack("<f", cfg["rope_theta"]))[0]),
        "llama.attention.layer_norm_rms_epsilon":
            ("float32", struct.unpack("<f", struct.pack("<f", cfg["rms_norm_eps"]))[0]),
    }
    if os.path.exists(os.path.join(d, "tokenizer.model")):
        pieces, scores, types, special, normalizer = read_sentencepiece(
            os.path.join(d, "tokenizer.model"))
        pad = V - len(pieces)
        want.update({
            "tokenizer.ggml.model": ("string", "llama"),
            "tokenizer.ggml.tokens": ("array", {"type": "string", "values": pieces + [
                f"[PAD{i}]" for i in range(len(pieces), V)]}),
            "tokenizer.ggml.scores": ("array", {"type": "float32",
                                                "values": scores + [-1000.0] * pad}),
            "tokenizer.ggml.token_type": ("array", {"type": "int32", "values": types + [5] * pad}),
            "tokenizer.ggml.add_bos_token": ("bool", False),
            "tokenizer.ggml.add_eos_token": ("bool", False),
            "tokenizer.ggml.add_space_prefix": ("bool", normalizer["add_dummy_prefix"]),
            "tokenizer.ggml.remove_extra_whitespaces":
                ("bool", normalizer["remove_extra_whitespaces"]),
        })
        for name, key in (("bos", "bos_token_id"), ("eos", "eos_token_id"),
                          ("unk", "unknown_token_id"), ("pad", "padding_token_id")):
            if special[name] >= 0:
                want["tokenizer.ggml." + key] = ("uint32", special[name])
    else:
        want.update(read_tokenizer_json(os.path.join(d, "tokenizer.json"), V))
    if args.dtype == "q8_0":
        want["general.quantization_version"] = ("uint32", 2)
    # general.name: the one given, else any non-empty name (the exporter's default is the
    # checkpoint directory's name).
    name = kv.get("general.name", ("string", ""))
    want["general.name"] = ("string", args.name) if args.name else name
    if not name[1]:
        fail("general.name is missing or empty")
    for key in sorted(set(want) | set(kv)):
        if key not in kv:
            fail(f"key {key} missing")
        elif key not in want:
            fail(f"key {key} unexpected: {kv[key]}")
        elif kv[key] != want[key]:
            shown = str(kv[key])[:200]
            fail(f"key {key}: {shown}, expected {str(want[key])[:200]}")

    # Tensors: names, shapes (innermost first), types, alignment, values.
    got = {t["name"]: t for t in g["tensors"]}
    if len(got) != len(g["tensors"]):
        fail("a tensor name appears twice")
    if set(got) != set(tensors):
        fail(f"tensors: missing {sorted(set(tensors) - set(got))}, "
             f"unexpected {sorted(set(got) - set(tensors))}")
    end = 0
    for t in sorted(g["tensors"], key=lambda t: t["offset"]):
        if t["offset"] % g["alignment"]:
            fail(f"{t['name']}: offset {t['offset']} not a multiple of the alignment")
        if t["offset"] < end:
            fail(f"{t['name']}: overlaps the tensor before it")
        end = t["offset"] + t["bytes"]
    if g["data_start"] + end > g["size"]:
        fail("the tensor data runs past the end of the file")
    checked = 0
    for name, (w, product) in tensors.items():
        if name not in got:
            continue
        t = got[name]
        if t["ne"] != list(reversed(w.shape)):
            fail(f"{name}: ne {t['ne']}, expected {list(reversed(w.shape))}")
            continue
        want_type = args.dtype if w.ndim == 2 else "f32"
        if want_type == "q8_0" and w.shape[-1] % 32:
            want_type = "f16"  # rows that q8_0's 32-value blocks do not divide, as llama.cpp
        if t["type"] != want_type:
            fail(f"{name}: type {t['type']}, expected {want_type}")
            continue
        if not product:
            if t["raw"] != encode(w, want_type):
                fail(f"{name}: bytes differ from the checkpoint's values encoded as {want_type}")
        else:
            values = decode(t["raw"], want_type, w.size).reshape(w.shape)
            scale = np.abs(w).max()
            # One unit in the last place of the type (f16's subnormal spacing is 2^-24), plus the
            # fp32 product's rounding (a sum of r products: well under 1e-6 of the largest |W|).
            product_error = 1e-6 * scale
            if want_type == "f32":
                step = 1e-5 * scale
            elif want_type == "f16":
                step = np.abs(w) * 2.0**-10 + 2.0**-24 + product_error
            elif want_type == "bf16":
                step = np.abs(w) * 2.0**-7 + product_error
            else:  # one q8_0 step of the block (its scale d, itself rounded to fp16)
                step = (np.abs(w.reshape(-1, 32)).max(axis=1, keepdims=True) / 127 * 1.01 +
                        product_error).repeat(32, axis=1).reshape(w.shape)
            if not np.all(np.abs(values - w) <= step):
                fail(f"{name}: the multiplied-out svd product is off by "
                     f"{np.abs(values - w).max():.3e} (largest |W| {scale:.3e})")
        checked += 1
    print(json.dumps({"gguf": args.gguf, "arch": arch, "dtype": args.dtype, "keys": len(kv),
                      "tensors": checked, "failures": len(failures)}))
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


def dump(args):
    g = read_gguf(args.gguf)
    kv = {k: (t, v if t != "array" else f"{v['type']}[{len(v['values'])}]")
          for k, (t, v) in g["kv"].items()}
    print(json.dumps({"version": g["version"], "alignment": g["alignment"], "kv": kv,
                      "tensors": [{k: t[k] for k in ("name", "ne", "type", "offset")}
                                  for t in g["tensors"]]}, indent=1))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("gguf")
    c = sub.add_parser("check")
    c.add_argument("gguf")
    c.add_argument("--checkpoint", required=True)
    c.add_argument("--dtype", required=True, choices=list(FILE_TYPES))
    c.add_argument("--name", help="the general.name expected (default: any non-empty)")
    args = ap.parse_args()
    sys.exit(dump(args) if args.cmd == "dump" else check(args))


if __name__ == "__main__":
    main()
