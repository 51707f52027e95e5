#!/usr/bin/env python3
"""modeling_boostlm: a model exported by `boostlm convert --to-hf`, in plain PyTorch.

`boostlm convert --to-hf` writes this file beside the weights of a low-rank (svd or CoLA) model, so
that the directory can be evaluated, fine-tuned or served from Python without boostlm. It needs
PyTorch alone (no transformers, no safetensors package) and reads:

  config.json        Hugging Face LLaMA fields (hidden_size, intermediate_size, num_attention_heads,
                     num_key_value_heads, num_hidden_layers, vocab_size, rms_norm_eps, rope_theta,
                     tie_word_embeddings), and for a low-rank model a "cola" section: "ranks" (each
                     projection family's rank: q, k, v, o, gate, up, down), "latent_activation"
                     (silu for CoLA, identity for svd) and "mlp_gate_activation"; for a LaX model
                     (model_type "lax") a "lax" section instead, with the same keys and "gate"
                     (kron or linear) and "norm_eps"
  model.safetensors  or model-0000X-of-0000N.safetensors with model.safetensors.index.json;
                     F32, BF16 or F16 tensors, held as float32

The model (a LLaMA decoder whose projections may be low-rank):
  x = embed(tokens)
  per block: x += O(attention(RoPE(Q(n1 x)), RoPE(K(n1 x)), V(n1 x)))
             x += Down(act(Gate(n2 x)) * Up(n2 x))          act = SiLU, or none (mlp_gate_activation)
  logits = n_f(x) W_head^T                                  W_head = the embedding when tied
  each projection: dense  y = x W^T                         W = `.weight` [out, in]
                   svd    y = (x A) B                       A = `.cola_a` [in, rank],
                   cola   y = SiLU(x A) B                   B = `.cola_b` [rank, out]
  lax: each projection's latent crosses into the same projection of the next block (LaX, arXiv
       2505.21732):  z = x A (block 0),  z = LayerNorm_r(x A + G(h_prev)) after it (`.lax_norm`
       weight and bias [rank], eps norm_eps), h = act(z), y = h B; h_prev is the same family's
       h in the block before. G: kron, h viewed as H [p, q] -> einsum('...ab,ai,bj->...ij', H, P, Q)
       (`.lax_gate.kron_p` [p, p], `.lax_gate.kron_q` [q, q], p * q = rank, p >= q the most
       balanced pair), or linear h W (`.lax_gate.weight` [rank, rank]).
  RMSNorm n(x) = x / sqrt(mean(x^2) + eps) * weight; RoPE in the rotate-half convention (pairs i and
  i + head_dim/2, inverse frequency theta^(-2i/head_dim)); causal attention with grouped-query heads
  (query head h reads key/value head h // (heads / kv_heads)), scale 1/sqrt(head_dim).

In Python:
    import sys; sys.path.insert(0, "export/dir")
    from modeling_boostlm import BoostlmForCausalLM
    model = BoostlmForCausalLM.from_pretrained("export/dir")
    out = model(input_ids, labels=input_ids)   # {"logits": [B, T, V], "loss": mean next-token CE}

From the command line, the mean loss over boostlm's evaluation windows of a token shard (what
`boostlm eval --data SHARD -b B -t T --eval-batches K` reports):
    /usr/bin/python3 modeling_boostlm.py export/dir --data val.bin -b 8 -t 256 --batches 20
"""

import argparse
import json
import math
import os
import struct

import torch
import torch.nn.functional as F
from torch import nn

FAMILIES = ("q", "k", "v", "o", "gate", "up", "down")


# --------------------------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------------------------

_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def read_safetensors(path):
    """{name: float32 tensor} of one safetensors file: an 8-byte little-endian header length n,
    n bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}}, then the data (offsets
    from the end of the header)."""
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
        data = bytearray(f.read())
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(entry["dtype"])
        if dtype is None:
            raise ValueError(f"{path}: tensor '{name}' has dtype {entry['dtype']}; "
                             "expected F32, BF16 or F16")
        begin, end = entry["data_offsets"]
        shape = list(entry["shape"])
        count = math.prod(shape)
        if end - begin != count * torch.tensor([], dtype=dtype).element_size():
            raise ValueError(f"{path}: tensor '{name}' holds {end - begin} bytes, "
                             f"not those of shape {shape}")
        values = torch.frombuffer(data, dtype=dtype, count=count, offset=begin) if count else \
            torch.empty(0, dtype=dtype)
        tensors[name] = values.float().reshape(shape).clone()
    return tensors


def read_weights(directory):
    """Every tensor of the directory: model.safetensors, or the shards its index names."""
    index = os.path.join(directory, "model.safetensors.index.json")
    if not os.path.exists(index):
        return read_safetensors(os.path.join(directory, "model.safetensors"))
    with open(index, encoding="utf-8") as f:
        weight_map = json.load(f)["weight_map"]
    tensors = {}
    for shard in sorted(set(weight_map.values())):
        tensors.update(read_safetensors(os.path.join(directory, shard)))
    return tensors


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------

class BoostlmConfig:
    """The fields of config.json the model needs."""

    def __init__(self, j):
        self.vocab_size = int(j["vocab_size"])
        self.hidden_size = int(j["hidden_size"])
        self.intermediate_size = int(j["intermediate_size"])
        self.num_hidden_layers = int(j["num_hidden_layers"])
        self.num_attention_heads = int(j["num_attention_heads"])
        self.num_key_value_heads = int(j.get("num_key_value_heads") or self.num_attention_heads)
        self.rms_norm_eps = float(j.get("rms_norm_eps", 1e-6))
        self.rope_theta = float(j.get("rope_theta", 10000.0))
        self.tie_word_embeddings = bool(j.get("tie_word_embeddings", False))
        self.lax_gate, self.lax_norm_eps = None, 1e-6
        if j.get("rope_scaling"):
            raise ValueError("config.json: rope_scaling is not implemented here")
        self.lax = j.get("model_type") == "lax"
        low_rank = j.get("lax") if self.lax else j.get("cola")
        if self.lax:
            self.lax_gate = low_rank.get("gate", "kron")
            self.lax_norm_eps = float(low_rank.get("norm_eps", 1e-6))
            if self.lax_gate not in ("kron", "linear"):
                raise ValueError(f"config.json: lax.gate '{self.lax_gate}' (expected kron or "
                                 "linear)")
        if low_rank:
            self.ranks = {f: int(low_rank["ranks"][f]) for f in FAMILIES}
            self.latent_activation = low_rank.get("latent_activation", "silu")
            self.mlp_gate_activation = low_rank.get("mlp_gate_activation", "silu")
        else:  # a dense LLaMA directory
            self.ranks = {f: 0 for f in FAMILIES}
            self.latent_activation = "identity"
            self.mlp_gate_activation = "silu"
        for name, value in (("latent_activation", self.latent_activation),
                            ("mlp_gate_activation", self.mlp_gate_activation)):
            if value not in ("silu", "identity"):
                raise ValueError(f"config.json: {name} '{value}' (expected silu or identity)")
        if self.hidden_size % self.num_attention_heads or \
                self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("config.json: hidden_size must divide into num_attention_heads, and "
                             "those into num_key_value_heads")

    @property
    def head_dim(self):
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_pretrained(cls, directory):
        with open(os.path.join(directory, "config.json"), encoding="utf-8") as f:
            return cls(json.load(f))


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------

class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def kron_factors(rank):
    """The most balanced factor pair p * q = rank, p >= q."""
    q = max(f for f in range(1, math.isqrt(rank) + 1) if rank % f == 0)
    return rank // q, q


class LaxGate(nn.Module):
    """LaX's gate: kron (h as H [p, q] -> einsum('...ab,ai,bj->...ij', H, P, Q)) or linear h W."""

    def __init__(self, kind, rank):
        super().__init__()
        if kind == "kron":
            self.p, self.q = kron_factors(rank)
            self.kron_p = nn.Parameter(torch.zeros(self.p, self.p))
            self.kron_q = nn.Parameter(torch.zeros(self.q, self.q))
        else:
            self.weight = nn.Parameter(torch.zeros(rank, rank))

    def forward(self, h):
        if hasattr(self, "weight"):
            return h @ self.weight
        H = h.reshape(*h.shape[:-1], self.p, self.q)
        return torch.einsum("...ab,ai,bj->...ij", H, self.kron_p, self.kron_q).reshape(h.shape)


class Projection(nn.Module):
    """y = x W^T (rank 0), or y = act(x A) B with A = cola_a [in, rank], B = cola_b [rank, out];
    with a LaX crossing (lax_gate set) y = act(LayerNorm(x A + G(h_prev))) B. forward returns y
    and the latent act(...) that the same projection of the next block reads."""

    def __init__(self, d_in, d_out, rank, latent_activation, lax_gate=None, lax_norm_eps=1e-6):
        super().__init__()
        self.latent_silu = latent_activation == "silu"
        if rank == 0:
            self.weight = nn.Parameter(torch.zeros(d_out, d_in))
        else:
            self.cola_a = nn.Parameter(torch.zeros(d_in, rank))
            self.cola_b = nn.Parameter(torch.zeros(rank, d_out))
        if lax_gate is not None:
            self.lax_gate = LaxGate(lax_gate, rank)
            self.lax_norm = nn.LayerNorm(rank, eps=lax_norm_eps)

    def forward(self, x, h_prev=None):
        if hasattr(self, "weight"):
            return F.linear(x, self.weight), None
        latent = x @ self.cola_a
        if hasattr(self, "lax_gate"):
            latent = self.lax_norm(latent + self.lax_gate(h_prev))
        if self.latent_silu:
            latent = F.silu(latent)
        return latent @ self.cola_b, latent


def projection(c, layer, family, d_in, d_out):
    """Projection `family` of block `layer` (lax: with its crossing after block 0)."""
    lax = c.lax and layer >= 1
    return Projection(d_in, d_out, c.ranks[family], c.latent_activation,
                      c.lax_gate if lax else None, c.lax_norm_eps if lax else 1e-6)


def rope_tables(seq_len, head_dim, theta, device):
    """cos, sin [T, head_dim/2] of the angles p * theta^(-2i/head_dim), computed in float64 and
    rounded to float32 once."""
    half = head_dim // 2
    inv_freq = theta ** (-2.0 * torch.arange(half, dtype=torch.float64) / head_dim)
    angle = torch.arange(seq_len, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return angle.cos().float().to(device), angle.sin().float().to(device)


def rotate(x, cos, sin):
    """RoPE of x [B, T, heads, head_dim], rotate-half pairing."""
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat((first * c - second * s, second * c + first * s), dim=-1)


def causal_attention(q, k, v):
    """softmax(q k^T / sqrt(head_dim), causal) v; q [B, H, T, hd], k and v [B, H_kv, T, hd]."""
    repeat = q.shape[1] // k.shape[1]
    if repeat > 1:
        k = k.repeat_interleave(repeat, dim=1)
        v = v.repeat_interleave(repeat, dim=1)
    T = q.shape[2]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu_(1)
    return torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ v


class Attention(nn.Module):
    def __init__(self, c, layer):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = (c.num_attention_heads,
                                                    c.num_key_value_heads, c.head_dim)
        d, kv = c.hidden_size, c.num_key_value_heads * c.head_dim
        self.q_proj = projection(c, layer, "q", d, d)
        self.k_proj = projection(c, layer, "k", d, kv)
        self.v_proj = projection(c, layer, "v", d, kv)
        self.o_proj = projection(c, layer, "o", d, d)

    def forward(self, x, cos, sin, chain):
        """chain: each family's latent of the block before (lax), replaced by this block's."""
        B, T, _ = x.shape
        q, chain["q"] = self.q_proj(x, chain.get("q"))
        k, chain["k"] = self.k_proj(x, chain.get("k"))
        v, chain["v"] = self.v_proj(x, chain.get("v"))
        q = rotate(q.view(B, T, self.heads, self.head_dim), cos, sin)
        k = rotate(k.view(B, T, self.kv_heads, self.head_dim), cos, sin)
        v = v.view(B, T, self.kv_heads, self.head_dim)
        out = causal_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        y, chain["o"] = self.o_proj(out.transpose(1, 2).reshape(B, T, -1), chain.get("o"))
        return y


class MLP(nn.Module):
    def __init__(self, c, layer):
        super().__init__()
        d, ff = c.hidden_size, c.intermediate_size
        self.gate_silu = c.mlp_gate_activation == "silu"
        self.gate_proj = projection(c, layer, "gate", d, ff)
        self.up_proj = projection(c, layer, "up", d, ff)
        self.down_proj = projection(c, layer, "down", ff, d)

    def forward(self, x, chain):
        gate, chain["gate"] = self.gate_proj(x, chain.get("gate"))
        if self.gate_silu:
            gate = F.silu(gate)
        up, chain["up"] = self.up_proj(x, chain.get("up"))
        y, chain["down"] = self.down_proj(gate * up, chain.get("down"))
        return y


class DecoderLayer(nn.Module):
    def __init__(self, c, layer):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = Attention(c, layer)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MLP(c, layer)

    def forward(self, x, cos, sin, chain):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, chain)
        return x + self.mlp(self.post_attention_layernorm(x), chain)


class BoostlmModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c, layer)
                                    for layer in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class BoostlmForCausalLM(nn.Module):
    """The whole model; its state_dict names are the checkpoint's tensor names."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = BoostlmModel(config)
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    @classmethod
    def from_pretrained(cls, directory):
        model = cls(BoostlmConfig.from_pretrained(directory))
        weights = read_weights(directory)
        if model.config.tie_word_embeddings:
            weights.pop("lm_head.weight", None)  # the embedding, when a writer stored it too
        # strict: every tensor present with its shape, and nothing else
        model.load_state_dict(weights, strict=True)
        return model.eval()

    def forward(self, input_ids, labels=None):
        """logits [B, T, V] of input_ids [B, T]; with labels [B, T] (usually input_ids), also the
        mean cross-entropy of predicting labels[:, t + 1] at position t (-100: ignored)."""
        B, T = input_ids.shape
        cos, sin = rope_tables(T, self.config.head_dim, self.config.rope_theta,
                               input_ids.device)
        x = self.model.embed_tokens(input_ids)
        chain = {}  # lax: each family's latent, from one block to the next
        for layer in self.model.layers:
            x = layer(x, cos, sin, chain)
        x = self.model.norm(x)
        head = self.model.embed_tokens.weight if self.config.tie_word_embeddings \
            else self.lm_head.weight
        logits = F.linear(x, head)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                          labels[:, 1:].reshape(-1), ignore_index=-100)
        return out


# --------------------------------------------------------------------------------------------
# Evaluation on boostlm's token shards
# --------------------------------------------------------------------------------------------

def read_shard(path):
    """The tokens of a shard in llm.c's format: 256 little-endian int32 header words (magic
    20240520 with uint16 tokens, or 20240801 with uint32; version; token count), then tokens."""
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        formats = {20240520: (1, torch.int16, 0xFFFF), 20240801: (7, torch.int32, 0xFFFFFFFF)}
        if header[0] not in formats or formats[header[0]][0] != header[1]:
            raise ValueError(f"{path}: not a token shard (magic {header[0]}, "
                             f"version {header[1]})")
        _, dtype, mask = formats[header[0]]
        width = torch.tensor([], dtype=dtype).element_size()
        data = bytearray(f.read(header[2] * width))
    if len(data) != header[2] * width:
        raise ValueError(f"{path}: the header says {header[2]} tokens; the file is shorter")
    if not data:
        return torch.empty(0, dtype=torch.long)
    # Unsigned values through the signed type of their width (little-endian, as written).
    return torch.frombuffer(data, dtype=dtype).long() & mask


@torch.no_grad()
def evaluate(model, tokens, batch_size, seq_len, batches):
    """Mean loss over windows 0..batches-1: window k is the B*T+1 tokens from k*B*T (wrapping
    around), sequence b of it the tokens from b*T, predicting each next one (boostlm eval's
    windows)."""
    n = batch_size * seq_len
    losses = []
    for k in range(batches):
        positions = (k * n + torch.arange(n + 1)) % tokens.numel()
        chunk = tokens[positions]
        # Each sequence with the token after it: T + 1 inputs, whose T predictions are scored.
        starts = torch.arange(batch_size)[:, None] * seq_len + torch.arange(seq_len + 1)[None, :]
        ids = chunk[starts]
        losses.append(model(ids, labels=ids)["loss"].item())
    return sum(losses) / len(losses)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("directory", help="the exported model directory")
    parser.add_argument("--data", required=True, help="a token shard (llm.c format)")
    parser.add_argument("-b", "--batch-size", type=int, default=8)
    parser.add_argument("-t", "--seq-len", type=int, default=256)
    parser.add_argument("--batches", type=int, default=20, help="evaluation windows")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = BoostlmForCausalLM.from_pretrained(args.directory)
    tokens = read_shard(args.data)
    loss = evaluate(model, tokens, args.batch_size, args.seq_len, args.batches)
    print(json.dumps({"loss": loss, "batches": args.batches, "batch_size": args.batch_size,
                      "seq_len": args.seq_len}))


if __name__ == "__main__":
    main()
