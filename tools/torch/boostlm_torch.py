#!/usr/bin/env python3
"""boostlm_torch: the models of boostlm (SPEC §2) written independently in PyTorch.

Two uses:
  * a correctness oracle: it loads a boostlm checkpoint (config.json + model.safetensors) and
    computes the same losses, gradients and AdamW updates with PyTorch's own kernels and autograd,
    so a bug in boostlm's hand-written forward/backward shows up as a disagreement;
  * a benchmark peer: it trains the same model with PyTorch on this machine's CPU.

Subcommands (run with Debian's interpreter, /usr/bin/python3, which is where python3-torch lives):
  loss          mean loss over the first K evaluation windows of a shard (like `boostlm eval`)
  train         a few exact AdamW steps from a checkpoint (like `boostlm train --schedule
                constant`), one JSON line per step; optionally compares the final weights with a
                boostlm checkpoint
  train-bench   median step time and tokens/s of training with PyTorch, fp32 or bf16 autocast
  random-shard  writes a shard of random tokens in llm.c's format

The model, written from SPEC §2 (no code taken from other projects):
  x = Embed(tokens)
  per block: x += O(Attn(RoPE(Q(n1 x)), RoPE(K(n1 x)), V(n1 x)));  x += Down(act(Gate(n2 x)) * Up(n2 x))
  logits = n_f(x) W_headᵀ;  loss = mean token cross-entropy
with RMSNorm n(x) = x / sqrt(mean(x²) + eps) * γ, RoPE in the rotate-half convention (pairs (i, i +
head_dim/2), inverse frequency theta^(-2i/head_dim)), causal grouped-query attention (query head h
reads kv head h // (n_heads / n_kv_heads)) with scale 1/sqrt(head_dim), and each projection dense
y = x Wᵀ (W [d_out, d_in]), `svd` y = (x A) B or `cola` y = SiLU(x A) B (A [d_in, r], B [r, d_out]).
`lax` (LaX, arXiv 2505.21732, from its authors' lax_vit.py; boostlm's model/lax.h): each
projection's latent crosses into the same projection of the next block,
z = x A (block 0), z = LayerNorm_r(x A + G(h_prev)) (eps 1e-6, affine) after it, h = SiLU(z) (or z
without σ), y = h B, with G the Kronecker gate einsum('...ab,ai,bj->...ij', h as [p, q], P, Q) or a
linear h W.
"""

import argparse
import json
import math
import os
import statistics
import struct
import sys
import time


# ---------------------------------------------------------------------------------------------
# BLAS selection. This must run before torch is imported: OpenBLAS reads OPENBLAS_CORETYPE once,
# when the library is loaded, so it cannot be changed from inside a process that has loaded it.
# ---------------------------------------------------------------------------------------------

def cpu_flags():
    """The CPU feature flags of /proc/cpuinfo (empty where it cannot be read)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def best_openblas_coretype(flags):
    """The OpenBLAS kernel family for a CPU with these flags, from its instruction sets.

    OpenBLAS's own detection goes by vendor/family/model, so a CPU newer than the OpenBLAS build
    (or an environment that presets OPENBLAS_CORETYPE, as this one does with Haswell) can leave
    AVX-512 unused. Choosing from the instruction sets is right on any vendor. Measured on the
    AMD EPYC (Zen 5) development machine with Debian's OpenBLAS 0.3.21, 2 threads: a
    2048x512x1376 SGEMM ran at 105-134 GFLOP/s with COOPERLAKE or SKYLAKEX (AVX-512), 45-90 with
    HASWELL or ZEN (AVX2), 42 with PRESCOTT; a whole fp32 training step of the 60M models took
    1.45x longer with HASWELL or ZEN than with COOPERLAKE (tools/torch/README.md).
    """
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"} <= flags:
        return "COOPERLAKE"
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "SKYLAKEX"
    if {"avx2", "fma"} <= flags:
        return "HASWELL"
    return None


def configure_openblas(choice):
    """Sets OPENBLAS_CORETYPE for choice 'auto' (from the CPU flags), 'keep' or a kernel name."""
    if choice == "keep":
        return
    name = best_openblas_coretype(cpu_flags()) if choice == "auto" else choice
    if name:
        os.environ["OPENBLAS_CORETYPE"] = name
    else:
        os.environ.pop("OPENBLAS_CORETYPE", None)


if __name__ == "__main__":
    _pre = argparse.ArgumentParser(add_help=False)
    _pre.add_argument("--openblas-coretype", default="auto")
    configure_openblas(_pre.parse_known_args()[0].openblas_coretype)

import numpy as np  # noqa: E402  (after the BLAS environment is set)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402


# ---------------------------------------------------------------------------------------------
# Configuration and checkpoints
# ---------------------------------------------------------------------------------------------

class Config:
    """boostlm's ModelConfig (src/model/config.h), with its defaults."""

    FIELDS = ("arch", "vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff",
              "attn_rank", "mlp_rank", "max_seq_len", "tied_embeddings", "mlp_gate_act",
              "rms_eps", "rope_theta", "lax_gate", "lax_latent_act")
    FAMILIES = ("q", "k", "v", "o", "gate", "up", "down")

    def __init__(self, **kw):
        self.arch = kw["arch"]
        if self.arch not in ("dense", "svd", "cola", "lax"):
            raise ValueError(f"config: unknown arch '{self.arch}'")
        self.vocab_size = int(kw["vocab_size"])
        self.d_model = int(kw["d_model"])
        self.n_layers = int(kw["n_layers"])
        self.n_heads = int(kw["n_heads"])
        self.n_kv_heads = int(kw.get("n_kv_heads") or self.n_heads)
        self.d_ff = int(kw["d_ff"])
        low_rank = self.arch != "dense"
        # Each family's rank: its own (q_rank ... down_rank), else attn_rank (q/k/v/o) or
        # mlp_rank (gate/up/down).
        self.ranks = {}
        for family in self.FAMILIES:
            shorthand = "attn_rank" if family in ("q", "k", "v", "o") else "mlp_rank"
            own = kw.get(family + "_rank")
            self.ranks[family] = int(own if own is not None else kw[shorthand]) if low_rank else 0
        self.attn_rank = int(kw.get("attn_rank") or 0) if low_rank else 0  # the shorthands
        self.mlp_rank = int(kw.get("mlp_rank") or 0) if low_rank else 0
        self.max_seq_len = int(kw.get("max_seq_len", 2048))
        self.tied_embeddings = bool(kw.get("tied_embeddings", False))
        self.mlp_gate_act = bool(kw.get("mlp_gate_act", True))
        self.rms_eps = float(kw.get("rms_eps", 1e-6))
        self.rope_theta = float(kw.get("rope_theta", 10000.0))
        self.lax_gate = kw.get("lax_gate", "kron") if self.arch == "lax" else None
        self.lax_latent_act = bool(kw.get("lax_latent_act", True)) if self.arch == "lax" else None
        if self.lax_gate not in (None, "kron", "linear"):
            raise ValueError(f"config: unknown lax_gate '{self.lax_gate}'")
        if self.d_model % self.n_heads or self.n_heads % self.n_kv_heads:
            raise ValueError("config: d_model % n_heads and n_heads % n_kv_heads must be 0")

    @property
    def head_dim(self):
        return self.d_model // self.n_heads

    @classmethod
    def from_dict(cls, d):
        names = cls.FIELDS + tuple(f + "_rank" for f in cls.FAMILIES)
        return cls(**{k: d[k] for k in names if k in d})

    @classmethod
    def from_hf(cls, j):
        """config.json of a checkpoint: boostlm's own config under "boostlm", else plain LLaMA."""
        if "boostlm" in j:
            return cls.from_dict(j["boostlm"])
        return cls(arch="dense", vocab_size=j["vocab_size"], d_model=j["hidden_size"],
                   n_layers=j["num_hidden_layers"], n_heads=j["num_attention_heads"],
                   n_kv_heads=j.get("num_key_value_heads", j["num_attention_heads"]),
                   d_ff=j["intermediate_size"], rms_eps=j.get("rms_norm_eps", 1e-6),
                   rope_theta=j.get("rope_theta", 10000.0),
                   max_seq_len=j.get("max_position_embeddings", 2048),
                   tied_embeddings=j.get("tie_word_embeddings", False))

    def to_dict(self):
        d = {k: getattr(self, k) for k in self.FIELDS if getattr(self, k) is not None}
        d.update({f + "_rank": r for f, r in self.ranks.items()})
        return d


def resolve_checkpoint(path):
    """A checkpoint directory, or a run directory's checkpoints/latest (as boostlm resolves it)."""
    if any(os.path.exists(os.path.join(path, f))
           for f in ("index.json", "model.safetensors", "checksums.json",
                     "model.safetensors.index.json")):
        return path
    latest = os.path.join(path, "checkpoints", "latest")
    if os.path.exists(latest):
        with open(latest, encoding="utf-8") as f:
            return os.path.join(path, "checkpoints", f.read().strip())
    raise FileNotFoundError(f"'{path}' is neither a checkpoint nor a run directory with "
                            "checkpoints/latest")


def read_safetensors(path):
    """{name: float32 torch.Tensor} from a safetensors file (F32, BF16 or F16 tensors).

    The format: an 8-byte little-endian header length n, n bytes of JSON header
    {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the raw
    little-endian data, offsets relative to the end of the header. Debian 12 has no
    python3-safetensors, and this is all it takes.
    """
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + header_len)
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = data[begin:end]
        shape = tuple(entry["shape"])
        if entry["dtype"] == "F32":
            arr = raw.view("<f4")
        elif entry["dtype"] == "BF16":  # bf16 is the top half of an fp32
            arr = (raw.view("<u2").astype("<u4") << 16).view("<f4")
        elif entry["dtype"] == "F16":
            arr = raw.view("<f2").astype("<f4")
        else:
            raise ValueError(f"{path}: tensor '{name}' has unsupported dtype {entry['dtype']}")
        if arr.size != math.prod(shape):
            raise ValueError(f"{path}: tensor '{name}' has {arr.size} elements, shape {shape}")
        tensors[name] = torch.from_numpy(np.array(arr, dtype=np.float32).reshape(shape))
    return tensors


def read_checkpoint_weights(directory):
    """{name: full float32 tensor} of a checkpoint's weights (SPEC §2's names, no moments).

    A checkpoint written by several ranks keeps each tensor in pieces: index.json gives every
    tensor's full shape and, per piece, its file and where it lies (a range along one axis, and
    optionally a flat range of that box). Files are read one at a time (memory-mapped), each
    piece copied into its tensor, so nothing but the weights themselves is ever held. A
    checkpoint from before sharding has no index: its model.safetensors holds whole tensors.
    """
    index_path = os.path.join(directory, "index.json")
    hf_index = os.path.join(directory, "model.safetensors.index.json")
    if not os.path.exists(index_path) and os.path.exists(hf_index):  # a Hugging Face export
        with open(hf_index, encoding="utf-8") as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        tensors = {}
        for file in files:
            tensors.update(read_safetensors(os.path.join(directory, file)))
        return tensors
    if not os.path.exists(index_path):
        return read_safetensors(os.path.join(directory, "model.safetensors"))
    with open(index_path, encoding="utf-8") as f:
        index = json.load(f)
    if index.get("format") != "boostlm-sharded" or index.get("version") != 1:
        raise ValueError(f"{index_path}: not a boostlm-sharded index of version 1")
    moment = (".exp_avg", ".exp_avg_sq")
    wanted = {n: t for n, t in index["tensors"].items() if not n.endswith(moment)}
    tensors = {n: torch.empty(tuple(t["shape"]), dtype=torch.float32) for n, t in wanted.items()}
    by_file = {}
    for name, t in wanted.items():
        for piece in t["pieces"]:
            by_file.setdefault(piece["file"], []).append((name, piece))
    for file, pieces in sorted(by_file.items()):
        stored = read_safetensors(os.path.join(directory, file))
        for name, piece in pieces:
            full = tensors[name]
            box = full if "axis" not in piece else full.narrow(piece["axis"], piece["begin"],
                                                                piece["size"])
            data = stored[name]
            if "flat" in piece:
                lo, hi = piece["flat"]
                flat = box.contiguous().reshape(-1)
                flat[lo:hi] = data.reshape(-1)
                box.copy_(flat.reshape(box.shape))
            else:
                box.copy_(data.reshape(box.shape))
        del stored
    return tensors


def load_checkpoint(path):
    """(Config, CausalLM in fp32 with the checkpoint's weights) from a boostlm checkpoint."""
    directory = resolve_checkpoint(path)
    with open(os.path.join(directory, "config.json"), encoding="utf-8") as f:
        config = Config.from_hf(json.load(f))
    model = CausalLM(config)
    weights = read_checkpoint_weights(directory)
    # strict: every tensor of SPEC §2's table is present, with its shape, and nothing else.
    model.load_state_dict(weights, strict=True)
    return config, model


# ---------------------------------------------------------------------------------------------
# Token shards (llm.c format) and windows
# ---------------------------------------------------------------------------------------------

SHARD_HEADER_WORDS = 256
SHARD_FORMATS = {20240520: (1, np.uint16), 20240801: (7, np.uint32)}  # magic: (version, dtype)


def read_shard(path):
    """Tokens of a shard: 256 little-endian int32 header words (magic, version, count), then the
    tokens, uint16 (magic 20240520, version 1) or uint32 (magic 20240801, version 7)."""
    header = np.fromfile(path, dtype="<i4", count=SHARD_HEADER_WORDS)
    if header.size != SHARD_HEADER_WORDS or int(header[0]) not in SHARD_FORMATS:
        raise ValueError(f"{path}: not an llm.c token shard")
    version, dtype = SHARD_FORMATS[int(header[0])]
    if int(header[1]) != version:
        raise ValueError(f"{path}: magic {header[0]} with version {header[1]}")
    count = int(header[2])
    tokens = np.fromfile(path, dtype=np.dtype(dtype).newbyteorder("<"), count=count,
                         offset=SHARD_HEADER_WORDS * 4)
    if tokens.size != count:
        raise ValueError(f"{path}: header says {count} tokens, file holds {tokens.size}")
    return tokens.astype(np.int64)


def write_shard(path, tokens, vocab_size):
    """Writes tokens in llm.c's format, uint16 when vocab_size <= 65536 (as boostlm does)."""
    tokens = np.asarray(tokens)
    magic = 20240520 if vocab_size <= 65536 else 20240801
    version, dtype = SHARD_FORMATS[magic]
    header = np.zeros(SHARD_HEADER_WORDS, dtype="<i4")
    header[:3] = (magic, version, tokens.size)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype(np.dtype(dtype).newbyteorder("<")).tobytes())


def window(tokens, index, batch_size, seq_len):
    """(inputs, targets) [B, T] of window `index`: B·T+1 tokens from index·B·T, circular (the
    evaluation windows, and the training windows of an unshuffled one-process run)."""
    n = batch_size * seq_len
    positions = (index * n + np.arange(n + 1)) % tokens.size
    chunk = torch.from_numpy(tokens[positions])
    return chunk[:-1].view(batch_size, seq_len), chunk[1:].view(batch_size, seq_len)


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------

class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        # In fp32 even under bf16 autocast, as boostlm (its norms never leave fp32).
        xf = x.float()
        return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def kron_factors(rank):
    """The most balanced factor pair p * q = rank, p >= q (256: 16 x 16, 96: 12 x 8)."""
    q = max(f for f in range(1, math.isqrt(rank) + 1) if rank % f == 0)
    return rank // q, q


class LaxGate(nn.Module):
    """LaX's r x r gate: Kronecker-factored, h viewed as H [p, q] (row-major) mapped to
    einsum('...ab,ai,bj->...ij', H, P, Q) (`kron_p` [p, p], `kron_q` [q, q]), or linear h W
    (`weight` [r, r], stored [in, out])."""

    def __init__(self, kind, rank):
        super().__init__()
        self.rank = rank
        if kind == "kron":
            self.p, self.q = kron_factors(rank)
            self.kron_p = nn.Parameter(torch.empty(self.p, self.p))
            self.kron_q = nn.Parameter(torch.empty(self.q, self.q))
        else:
            self.weight = nn.Parameter(torch.empty(rank, rank))

    def forward(self, h):
        if hasattr(self, "weight"):
            return torch.matmul(h, self.weight)
        H = h.reshape(*h.shape[:-1], self.p, self.q)
        return torch.einsum("...ab,ai,bj->...ij", H, self.kron_p, self.kron_q).reshape(h.shape)


class Projection(nn.Module):
    """One of q/k/v/o/gate/up/down: dense `weight` [d_out, d_in] (y = x Wᵀ), or the low-rank
    factors `cola_a` [d_in, r], `cola_b` [r, d_out] (y = σ(x A) B, σ = SiLU for cola, identity
    for svd). lax after block 0 adds `lax_gate` and `lax_norm` (a LayerNorm over r) between
    them: y = σ(LN(x A + G(h_prev))) B. The attribute names are the checkpoint's tensor names.
    forward returns y and the latent h the same projection of the next block reads (lax)."""

    def __init__(self, arch, d_in, d_out, rank, lax_gate=None, latent_act=None):
        super().__init__()
        self.latent_act = arch == "cola" or (arch == "lax" and latent_act)
        if arch == "dense":
            self.weight = nn.Parameter(torch.empty(d_out, d_in))
        else:
            self.cola_a = nn.Parameter(torch.empty(d_in, rank))
            self.cola_b = nn.Parameter(torch.empty(rank, d_out))
        if lax_gate is not None:
            self.lax_gate = LaxGate(lax_gate, rank)
            self.lax_norm = nn.LayerNorm(rank, eps=1e-6)

    def forward(self, x, h_prev=None):
        if hasattr(self, "weight"):
            return F.linear(x, self.weight), None
        z = torch.matmul(x, self.cola_a)
        if hasattr(self, "lax_gate"):
            # In fp32 even under bf16 autocast, as boostlm's latent norm.
            z = self.lax_norm((z + self.lax_gate(h_prev)).float())
        if self.latent_act:
            z = F.silu(z)
        return torch.matmul(z, self.cola_b), z


def rope_tables(seq_len, head_dim, theta):
    """cos, sin [T, head_dim/2] of angle p·theta^(-2i/head_dim), computed in float64 (fp32 angles
    lose accuracy at large positions) and then rounded to fp32, as boostlm's table is."""
    half = head_dim // 2
    inv_freq = theta ** (-2.0 * torch.arange(half, dtype=torch.float64) / head_dim)
    angle = torch.arange(seq_len, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return angle.cos().float(), angle.sin().float()


def apply_rope(x, cos, sin):
    """Rotate-half RoPE of x [B, T, H, hd]: the pair (x_i, x_{i+hd/2}) turns by angle (p, i)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


def causal_attention(q, k, v):
    """softmax(q kᵀ / sqrt(hd), causal) v for q [B, H, T, hd], k/v [B, H_kv, T, hd]."""
    group = q.shape[1] // k.shape[1]
    if group > 1:  # query head h reads kv head h // group
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    if hasattr(F, "scaled_dot_product_attention"):  # PyTorch >= 2.0; its default scale matches
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    # PyTorch 1.13 (Debian 12) has no fused attention: the plain formula.
    T = q.shape[2]
    scores = torch.matmul(q * (1.0 / math.sqrt(q.shape[-1])), k.transpose(-2, -1))
    mask = torch.ones(T, T, dtype=torch.bool).triu_(1)
    scores = scores.float().masked_fill(mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1).to(v.dtype), v)


def projection(c, layer, family, d_in, d_out):
    """Projection `family` of block `layer` (lax: crossing after block 0)."""
    lax = c.arch == "lax" and layer >= 1
    return Projection(c.arch, d_in, d_out, c.ranks[family], c.lax_gate if lax else None,
                      c.lax_latent_act)


class Attention(nn.Module):
    def __init__(self, c, layer):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = c.n_heads, c.n_kv_heads, c.head_dim
        kv = c.n_kv_heads * c.head_dim
        self.q_proj = projection(c, layer, "q", c.d_model, c.d_model)
        self.k_proj = projection(c, layer, "k", c.d_model, kv)
        self.v_proj = projection(c, layer, "v", c.d_model, kv)
        self.o_proj = projection(c, layer, "o", c.d_model, c.d_model)

    def forward(self, x, cos, sin, chain):
        """chain: each family's latent of the block before (lax), replaced by this block's."""
        B, T, _ = x.shape
        q, chain["q"] = self.q_proj(x, chain.get("q"))
        k, chain["k"] = self.k_proj(x, chain.get("k"))
        v, chain["v"] = self.v_proj(x, chain.get("v"))
        q = apply_rope(q.view(B, T, self.n_heads, self.head_dim), cos, sin)
        k = apply_rope(k.view(B, T, self.n_kv_heads, self.head_dim), cos, sin)
        v = v.view(B, T, self.n_kv_heads, self.head_dim)
        dtype = v.dtype  # under autocast q/k are fp32 after RoPE's fp32 tables
        out = causal_attention(q.to(dtype).transpose(1, 2), k.to(dtype).transpose(1, 2),
                               v.transpose(1, 2))
        y, chain["o"] = self.o_proj(out.transpose(1, 2).reshape(B, T, -1), chain.get("o"))
        return y


class MLP(nn.Module):
    def __init__(self, c, layer):
        super().__init__()
        self.gate_act = c.mlp_gate_act
        self.gate_proj = projection(c, layer, "gate", c.d_model, c.d_ff)
        self.up_proj = projection(c, layer, "up", c.d_model, c.d_ff)
        self.down_proj = projection(c, layer, "down", c.d_ff, c.d_model)

    def forward(self, x, chain):
        gate, chain["gate"] = self.gate_proj(x, chain.get("gate"))
        if self.gate_act:
            gate = F.silu(gate)
        up, chain["up"] = self.up_proj(x, chain.get("up"))
        y, chain["down"] = self.down_proj(gate * up, chain.get("down"))
        return y


class Block(nn.Module):
    def __init__(self, c, layer):
        super().__init__()
        self.input_layernorm = RMSNorm(c.d_model, c.rms_eps)
        self.self_attn = Attention(c, layer)
        self.post_attention_layernorm = RMSNorm(c.d_model, c.rms_eps)
        self.mlp = MLP(c, layer)

    def forward(self, x, cos, sin, chain):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, chain)
        return x + self.mlp(self.post_attention_layernorm(x), chain)


class Decoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.d_model)
        self.layers = nn.ModuleList(Block(c, layer) for layer in range(c.n_layers))
        self.norm = RMSNorm(c.d_model, c.rms_eps)


class CausalLM(nn.Module):
    """The whole model; its state_dict names are SPEC §2's checkpoint names."""

    def __init__(self, c):
        super().__init__()
        self.config = c
        self.model = Decoder(c)
        if not c.tied_embeddings:
            self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self._rope = {}

    def head_weight(self):
        return self.model.embed_tokens.weight if self.config.tied_embeddings \
            else self.lm_head.weight

    def rope(self, T):
        if T not in self._rope:
            self._rope[T] = rope_tables(T, self.config.head_dim, self.config.rope_theta)
        return self._rope[T]

    def forward(self, tokens, targets):
        """Mean cross-entropy over the B·T tokens of tokens/targets [B, T]."""
        T = tokens.shape[1]
        if T > self.config.max_seq_len:
            raise ValueError(f"sequence length {T} exceeds max_seq_len={self.config.max_seq_len}")
        cos, sin = self.rope(T)
        x = self.model.embed_tokens(tokens)
        chain = {}  # lax: each family's latent, from one block to the next
        for block in self.model.layers:
            x = block(x, cos, sin, chain)
        logits = F.linear(self.model.norm(x), self.head_weight())
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))

    def init_weights(self, generator=None):
        """SPEC §2's distributions (not boostlm's random streams): dense weights and embedding
        N(0, 0.02), factors N(0, (r^(-1/4)(d_in+d_out)^(-1/4))²), norms 1. For benchmarks."""
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith(".cola_a") or name.endswith(".cola_b"):
                    prefix = name[: -len("cola_a")]
                    (d_in, r), d_out = (self.get_parameter(prefix + "cola_a").shape,
                                        self.get_parameter(prefix + "cola_b").shape[1])
                    p.normal_(0.0, r ** -0.25 * (d_in + d_out) ** -0.25, generator=generator)
                elif ".lax_gate." in name:  # nn.Linear's Kaiming-uniform, fan_in = its side
                    bound = 1.0 / math.sqrt(p.shape[0])
                    p.uniform_(-bound, bound, generator=generator)
                elif name.endswith(".lax_norm.bias"):
                    p.zero_()
                elif p.dim() == 2:
                    p.normal_(0.0, 0.02, generator=generator)
                else:
                    p.fill_(1.0)


# ---------------------------------------------------------------------------------------------
# Optimizer: boostlm's AdamW (src/train/optimizer.cpp)
# ---------------------------------------------------------------------------------------------

def make_optimizer(model, lr, weight_decay=0.1, beta1=0.9, beta2=0.95, eps=1e-8, foreach=None):
    """torch.optim.AdamW with boostlm's parameter groups: weight decay on matrices only (the
    embedding, head, dense weights and factors), none on the norms (ParamInfo::weight_decay).
    torch's update p ← p·(1 − lr·wd) − lr·m̂/(sqrt(v̂) + eps) is boostlm's p ← p − lr·(m̂/(sqrt(v̂)
    + eps) + wd·p) exactly."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(beta1, beta2), eps=eps, foreach=foreach)


def clip_grad_norm(model, max_norm):
    """Global gradient norm (Σg² in float64, as boostlm), grads scaled by max_norm/norm when it
    exceeds max_norm. (torch's clip_grad_norm_ divides by norm + 1e-6: close, but not boostlm.)"""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads))
    if max_norm > 0 and norm > max_norm:
        for g in grads:
            g.mul_(max_norm / norm)
    return norm


# ---------------------------------------------------------------------------------------------
# Environment report
# ---------------------------------------------------------------------------------------------

def loaded_libraries(fragments=("blas", "dnnl", "gomp", "mkl")):
    """Shared libraries of this process whose path contains one of the fragments."""
    try:
        with open("/proc/self/maps", encoding="ascii", errors="replace") as f:
            paths = {line.split()[-1] for line in f if "/" in line}
    except OSError:
        return []
    return sorted(p for p in paths if any(s in os.path.basename(p) for s in fragments))


def openblas_corename():
    """The kernel family the loaded OpenBLAS uses (None when the BLAS is not OpenBLAS)."""
    import ctypes
    for path in loaded_libraries(("openblas",)):
        try:
            lib = ctypes.CDLL(path)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return lib.openblas_get_corename().decode()
        except (OSError, AttributeError):
            continue
    return None


def environment():
    torch.zeros(2, 2) @ torch.zeros(2, 2)  # make sure the BLAS is loaded
    return {"torch": torch.__version__, "threads": torch.get_num_threads(),
            "mkldnn": torch.backends.mkldnn.is_available(),
            "openblas_coretype_env": os.environ.get("OPENBLAS_CORETYPE"),
            "openblas_core": openblas_corename(),
            "libraries": loaded_libraries()}


# ---------------------------------------------------------------------------------------------
# Subcommands
# ---------------------------------------------------------------------------------------------

def cmd_loss(args):
    directory = resolve_checkpoint(args.checkpoint)
    config, model = load_checkpoint(directory)
    model.eval()
    tokens = read_shard(args.data)
    if tokens.size and tokens.max() >= config.vocab_size:
        raise ValueError(f"{args.data}: token {tokens.max()} >= vocab_size {config.vocab_size}")
    available = (tokens.size - 1) // (args.batch_size * args.seq_len)
    if available < 1:
        raise ValueError(f"{args.data} holds {tokens.size} tokens, fewer than one window")
    n = min(args.batches, available)
    total = 0.0  # boostlm: fp32 loss per window, summed in double
    with torch.no_grad():
        for i in range(n):
            inputs, targets = window(tokens, i, args.batch_size, args.seq_len)
            total += float(model(inputs, targets))
    # The same line as `boostlm eval` prints (nlohmann::json: sorted keys, no spaces).
    print(json.dumps({"checkpoint": directory, "data": args.data, "batches": args.batches,
                      "loss": total / n}, sort_keys=True, separators=(",", ":")))


def compare_weights(model, reference_dir, initial, lr):
    """How far the model's weights are from a boostlm checkpoint's.

    update_rel_diff: max over tensors of ‖W_torch − W_boostlm‖ / ‖W_boostlm − W_init‖, the
    disagreement relative to how far training moved the tensor. elements_off: how many elements
    differ by more than lr/10. Adam's update m̂/(sqrt(v̂) + eps) is ≈ ±1 per element whatever the
    gradient's size, so an element whose gradient is within rounding of zero (|g| ~ eps) can move
    by up to lr differently; once the weights differ slightly (after step 1) the next gradients
    differ slightly too, and a few such elements appear. A wrong gradient moves a large share of
    the elements differently instead.
    """
    reference = read_checkpoint_weights(resolve_checkpoint(reference_dir))
    worst_rel, worst_name, max_abs, off, total = 0.0, None, 0.0, 0, 0
    for name, p in model.state_dict().items():
        ref = reference[name]
        diff = (p - ref).abs()
        moved = float((ref - initial[name]).norm())
        rel = float(diff.norm()) / moved if moved > 0 else (0.0 if diff.max() == 0 else math.inf)
        max_abs = max(max_abs, float(diff.max()))
        off += int((diff > lr / 10).sum())
        total += diff.numel()
        if rel >= worst_rel:
            worst_rel, worst_name = rel, name
    return {"update_rel_diff": worst_rel, "worst_tensor": worst_name, "max_abs_diff": max_abs,
            "elements_off": off, "elements": total}


def cmd_train(args):
    """Exact AdamW steps from a checkpoint, as `boostlm train --init-from CKPT --schedule constant
    --warmup 0` runs them without --shuffle: step k reads training window k (token k·B·T).
    With --compare RUN, the weights after step k are compared with RUN/checkpoints/step_k (those
    that exist; `boostlm train --save-interval 1` writes them all)."""
    _, model = load_checkpoint(args.checkpoint)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    tokens = read_shard(args.data)
    # boostlm holds the hyper-parameters as fp32: use the same rounded values.
    f32 = lambda x: float(np.float32(x))  # noqa: E731
    optimizer = make_optimizer(model, f32(args.lr), f32(args.weight_decay), f32(0.9),
                               f32(args.beta2), f32(1e-8))
    for step in range(1, args.steps + 1):
        inputs, targets = window(tokens, step - 1, args.batch_size, args.seq_len)
        optimizer.zero_grad(set_to_none=True)
        loss = model(inputs, targets)
        loss.backward()
        norm = clip_grad_norm(model, args.grad_clip)
        optimizer.step()
        line = {"step": step, "loss": float(loss), "grad_norm": norm, "lr": args.lr}
        reference = args.compare and os.path.join(args.compare, "checkpoints", f"step_{step:06d}")
        if reference and os.path.isdir(reference):
            line.update(compare_weights(model, reference, initial, args.lr))
        print(json.dumps(line), flush=True)


def cmd_train_bench(args):
    if args.checkpoint:
        config, model = load_checkpoint(args.checkpoint)
    else:
        with open(args.config, encoding="utf-8") as f:
            config = Config.from_dict(json.load(f))
        model = CausalLM(config)
        model.init_weights(torch.Generator().manual_seed(args.seed))
    model.train()
    B, T = args.batch_size, args.seq_len
    tokens = read_shard(args.data) if args.data else None
    generator = torch.Generator().manual_seed(args.seed)
    optimizer = make_optimizer(model, args.lr, foreach=True)
    step_fn = model
    if args.compile:
        if not hasattr(torch, "compile"):
            raise SystemExit(f"--compile: torch {torch.__version__} has no torch.compile "
                             "(it arrived in PyTorch 2.0)")
        step_fn = torch.compile(model)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16")

    times, losses = [], []
    for step in range(args.warmup_steps + args.steps):
        if tokens is not None:
            inputs, targets = window(tokens, step, B, T)
        else:
            chunk = torch.randint(0, config.vocab_size, (B, T + 1), generator=generator)
            inputs, targets = chunk[:, :-1], chunk[:, 1:]
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            loss = step_fn(inputs, targets)
        loss.backward()
        # PyTorch's own clipping here (what a PyTorch user runs); clip_grad_norm's float64
        # norm costs a conversion pass over every gradient, which is exactness the oracle needs
        # and a benchmark does not.
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        elapsed = time.perf_counter() - t0
        losses.append(float(loss))
        if step >= args.warmup_steps:
            times.append(elapsed)
        if args.verbose:
            print(f"step {step}: loss {losses[-1]:.4f} {elapsed * 1e3:.0f} ms", file=sys.stderr)
    median = statistics.median(times)
    print(json.dumps({
        "arch": config.arch, "precision": args.precision, "batch_size": B, "seq_len": T,
        "parameters": sum(p.numel() for p in model.parameters()),
        "warmup_steps": args.warmup_steps, "steps": args.steps,
        "median_step_ms": median * 1e3, "min_step_ms": min(times) * 1e3,
        "tokens_per_s": B * T / median, "compile": bool(args.compile),
        "losses": [round(x, 4) for x in losses], **environment()}))


def cmd_random_shard(args):
    """Uniform random tokens; with --repeat L, runs of L random tokens each written twice, so
    that a model can learn to copy (which needs attention, causality and positions)."""
    rng = np.random.default_rng(args.seed)
    if args.repeat > 0:
        runs = rng.integers(0, args.vocab_size, (args.tokens // (2 * args.repeat) + 1, args.repeat))
        tokens = np.concatenate([runs, runs], axis=1).reshape(-1)[: args.tokens]
    else:
        tokens = rng.integers(0, args.vocab_size, args.tokens)
    write_shard(args.out, tokens, args.vocab_size)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--openblas-coretype", default="auto",
                        help="OpenBLAS kernels: auto (from the CPU's instruction sets), keep "
                             "(the environment's OPENBLAS_CORETYPE), or a name (SKYLAKEX, ...)")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="intra-op threads (default: every CPU)")
    sub = parser.add_subparsers(dest="command", required=True)

    def windows(p):
        p.add_argument("--data", required=True, help="token shard")
        p.add_argument("--batch-size", "-b", type=int, default=8)
        p.add_argument("--seq-len", "-t", type=int, default=256)

    p = sub.add_parser("loss", help="mean loss over the first K windows (like boostlm eval)")
    p.add_argument("--checkpoint", required=True)
    windows(p)
    p.add_argument("--batches", type=int, default=20)
    p.set_defaults(func=cmd_loss)

    p = sub.add_parser("train", help="exact AdamW steps from a checkpoint, per-step JSON")
    p.add_argument("--checkpoint", required=True)
    windows(p)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--lr", type=float, required=True, help="constant learning rate")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--compare", help="boostlm run directory to compare the weights with")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("train-bench", help="median training step time with PyTorch")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", help="start from a checkpoint (e.g. `boostlm init`)")
    source.add_argument("--config", help="model preset; weights initialised here")
    p.add_argument("--data", help="token shard (default: random tokens)")
    p.add_argument("--batch-size", "-b", type=int, default=8)
    p.add_argument("--seq-len", "-t", type=int, default=256)
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--steps", type=int, default=5, help="measured steps")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--compile", action="store_true", help="torch.compile (PyTorch >= 2.0)")
    p.add_argument("--verbose", "-v", action="store_true")
    p.set_defaults(func=cmd_train_bench)

    p = sub.add_parser("random-shard", help="write a shard of uniformly random tokens")
    p.add_argument("--out", required=True)
    p.add_argument("--vocab-size", type=int, required=True)
    p.add_argument("--tokens", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", type=int, default=0, help="write runs of this length twice")
    p.set_defaults(func=cmd_random_shard)

    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, args.threads))
    args.func(args)


if __name__ == "__main__":
    main()
