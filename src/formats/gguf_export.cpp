#include "formats/gguf_export.h"

#include <cstring>
#include <filesystem>
#include <memory>

#include "core/error.h"
#include "data/tokenizer.h"
#include "formats/gguf_vocab.h"
#include "formats/gguf_writer.h"
#include "kernels/gemm.h"

namespace boostlm {

namespace fs = std::filesystem;

namespace {

// llama.cpp's llama_ftype values for general.file_type.
uint32_t file_type_of(GgmlType type) {
  switch (type) {
    case GgmlType::f32:
      return 0;  // LLAMA_FTYPE_ALL_F32
    case GgmlType::f16:
      return 1;  // LLAMA_FTYPE_MOSTLY_F16
    case GgmlType::q8_0:
      return 7;  // LLAMA_FTYPE_MOSTLY_Q8_0
    case GgmlType::bf16:
      return 32;  // LLAMA_FTYPE_MOSTLY_BF16
  }
  return 0;
}

GgmlType parse_gguf_dtype(const std::string& dtype) {
  if (dtype == "f32") return GgmlType::f32;
  if (dtype == "f16") return GgmlType::f16;
  if (dtype == "bf16") return GgmlType::bf16;
  if (dtype == "q8_0") return GgmlType::q8_0;
  throw error("--dtype ", dtype, ": --to-gguf writes f32, f16, bf16 or q8_0");
}

// The projection `prefix` (…q_proj, …mlp.down_proj) as the Hugging Face matrix W [d_out, d_in]:
// a dense weight as stored, a svd pair multiplied out, W = (A·B)ᵀ = Bᵀ·Aᵀ, in fp32 (each element a
// sum of `rank` products: the factored model's function up to rounding).
std::vector<float> projection_matrix(const ModelTensors& model, const std::string& prefix) {
  const ParamTable& table = *model.table;
  if (table.find(prefix + ".weight")) return model.tensor(prefix + ".weight");
  const ParamInfo& a = table.at(prefix + ".cola_a");  // [d_in, rank]
  const ParamInfo& b = table.at(prefix + ".cola_b");  // [rank, d_out]
  const int64_t d_in = a.shape[0], rank = a.shape[1], d_out = b.shape[1];
  const std::vector<float> va = model.tensor(a.name), vb = model.tensor(b.name);
  std::vector<float> out(d_out * d_in);
  gemm(Trans::T, Trans::T, d_out, d_in, rank, 1.0f, vb.data(), d_out, va.data(), rank, 0.0f,
       out.data(), d_in, DType::f32);
  return out;
}

// q or k [heads · hd, d_in] with each head's rows reordered from rotate-half pairs (i, i + hd/2)
// to adjacent pairs (2i, 2i + 1): new row 2i + t of a head is its old row t · hd/2 + i. (The same
// reordering as llama.cpp's convert_hf_to_gguf.py `permute` for LLaMA's q/k.)
std::vector<float> to_adjacent_rope_pairs(const std::vector<float>& w, int64_t heads,
                                          int64_t head_dim, int64_t d_in) {
  BOOSTLM_ASSERT(head_dim % 2 == 0 && static_cast<int64_t>(w.size()) == heads * head_dim * d_in);
  std::vector<float> out(w.size());
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t t = 0; t < 2; ++t)
        std::memcpy(&out[((h * head_dim) + 2 * i + t) * d_in],
                    &w[((h * head_dim) + t * half + i) * d_in], d_in * sizeof(float));
  return out;
}

struct TensorPlan {
  GgmlType matrix_type;  // what 2-D tensors are written as
  GgufExportSummary* summary;
};

// Adds a [rows, cols] matrix (or a [cols] vector when rows == 0) of row-major fp32 values; `make`
// produces them when the file is written.
void add_tensor(GgufWriter& writer, TensorPlan& plan, const std::string& name, int64_t rows,
                int64_t cols, std::function<std::vector<float>()> make) {
  GgmlType type = rows == 0 ? GgmlType::f32 : plan.matrix_type;  // 1-D (norms): f32, as llama.cpp
  if (type == GgmlType::q8_0 && cols % ggml_block_values(type) != 0) {
    type = GgmlType::f16;  // llama.cpp's converter falls back the same way
    plan.summary->notes.push_back(name + ": rows of " + std::to_string(cols) +
                                  " values are not a multiple of q8_0's 32, written f16");
  }
  std::vector<int64_t> ne =
      rows == 0 ? std::vector<int64_t>{cols} : std::vector<int64_t>{cols, rows};
  const int64_t n_rows = rows == 0 ? 1 : rows;
  writer.add_tensor(name, std::move(ne), type, [make = std::move(make), n_rows, cols, type] {
    const std::vector<float> v = make();
    BOOSTLM_ASSERT(static_cast<int64_t>(v.size()) == n_rows * cols);
    return encode_ggml(v.data(), n_rows, cols, type);
  });
  ++plan.summary->tensors;
}

std::function<std::vector<float>()> stored(const ModelTensors& model, const std::string& name) {
  return [&model, name] { return model.tensor(name); };
}

void add_hyperparameters(GgufWriter& w, const ModelConfig& c, const std::string& name,
                         GgmlType type) {
  w.add_string("general.architecture", "llama");
  w.add_string("general.name", name);
  w.add_uint32("general.file_type", file_type_of(type));
  if (type == GgmlType::q8_0) w.add_uint32("general.quantization_version", 2);  // ggml's current
  // llama.cpp reads these as uint32 and float32 (its converter writes them so).
  w.add_uint32("llama.vocab_size", static_cast<uint32_t>(c.vocab_size));
  w.add_uint32("llama.context_length", static_cast<uint32_t>(c.max_seq_len));
  w.add_uint32("llama.embedding_length", static_cast<uint32_t>(c.d_model));
  w.add_uint32("llama.block_count", static_cast<uint32_t>(c.n_layers));
  w.add_uint32("llama.feed_forward_length", static_cast<uint32_t>(c.d_ff));
  w.add_uint32("llama.attention.head_count", static_cast<uint32_t>(c.n_heads));
  w.add_uint32("llama.attention.head_count_kv", static_cast<uint32_t>(c.n_kv_heads));
  w.add_uint32("llama.rope.dimension_count", static_cast<uint32_t>(c.head_dim()));
  w.add_float32("llama.rope.freq_base", c.rope_theta);
  w.add_float32("llama.attention.layer_norm_rms_epsilon", c.rms_eps);
}

// Entries "[PADi]" of type unused from `from` up to the model's vocabulary (llama.cpp wants one
// token per embedding row).
void pad_vocabulary(std::vector<std::string>& tokens, std::vector<int32_t>& types,
                    int64_t vocab_size, const std::string& tokenizer_path,
                    GgufExportSummary& summary) {
  const auto size = static_cast<int64_t>(tokens.size());
  if (size > vocab_size)
    throw error(tokenizer_path, " holds ", size, " tokens, more than the model's vocabulary of ",
                vocab_size);
  if (size < vocab_size)
    summary.notes.push_back("vocabulary padded from " + std::to_string(size) + " pieces to " +
                            std::to_string(vocab_size) + " tokens with unused [PADi] entries");
  for (int64_t i = size; i < vocab_size; ++i) {
    tokens.push_back("[PAD" + std::to_string(i) + "]");
    types.push_back(static_cast<int32_t>(PieceType::unused));
  }
}

// A SentencePiece model as the `llama` tokenizer.
void add_sentencepiece_tokenizer(GgufWriter& w, const std::string& tokenizer_path,
                                 int64_t vocab_size, GgufExportSummary& summary) {
  SentencePieceVocab v = read_sentencepiece_vocab(tokenizer_path);
  if (v.model_type != "bpe")
    summary.notes.push_back("the tokenizer is a SentencePiece " + v.model_type +
                            " model: llama.cpp tokenizes text by SentencePiece BPE's merge rule, "
                            "which may split some text differently (token ids fed directly are "
                            "unaffected)");
  pad_vocabulary(v.pieces, v.types, vocab_size, tokenizer_path, summary);
  v.scores.resize(v.pieces.size(), -1000.0f);
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_string_array("tokenizer.ggml.tokens", v.pieces);
  w.add_float32_array("tokenizer.ggml.scores", v.scores);
  w.add_int32_array("tokenizer.ggml.token_type", v.types);
  if (v.bos_id >= 0) w.add_uint32("tokenizer.ggml.bos_token_id", v.bos_id);
  if (v.eos_id >= 0) w.add_uint32("tokenizer.ggml.eos_token_id", v.eos_id);
  if (v.unk_id >= 0) w.add_uint32("tokenizer.ggml.unknown_token_id", v.unk_id);
  if (v.pad_id >= 0) w.add_uint32("tokenizer.ggml.padding_token_id", v.pad_id);
  // boostlm neither prepends BOS nor appends EOS when it encodes (documents are separated by EOS
  // in its data), so llama.cpp should not either.
  w.add_bool("tokenizer.ggml.add_bos_token", false);
  w.add_bool("tokenizer.ggml.add_eos_token", false);
  w.add_bool("tokenizer.ggml.add_space_prefix", v.add_dummy_prefix);
  w.add_bool("tokenizer.ggml.remove_extra_whitespaces", v.remove_extra_whitespaces);
}

// A Hugging Face byte-level BPE as the `gpt2` tokenizer, as llama.cpp's convert_hf_to_gguf.py
// writes one: token strings, types and merges, the pre-tokenizer's name, BOS and EOS, and
// whether to add them as the tokenizer's post-processor does.
void add_byte_level_bpe_tokenizer(GgufWriter& w, const std::string& tokenizer_path,
                                  int64_t vocab_size, GgufExportSummary& summary) {
  ByteLevelBpeVocab v = read_byte_level_bpe_vocab(tokenizer_path);
  pad_vocabulary(v.tokens, v.types, vocab_size, tokenizer_path, summary);
  if (v.eos_id < 0)
    throw error(tokenizer_path, ": names no EOS (tokenizer_config.json's eos_token, or a token ",
                "<|endoftext|>); llama.cpp needs one to stop generating");
  int32_t bos = v.bos_id;
  if (bos < 0) {
    // Without the key llama.cpp takes id 11 for a gpt2 tokenizer; GPT-2's own configuration
    // names <|endoftext|> both BOS and EOS.
    bos = v.eos_id;
    summary.notes.push_back("the tokenizer names no BOS: tokenizer.ggml.bos_token_id is its EOS, " +
                            std::to_string(bos) + " (as GPT-2's configuration has it)");
  }
  if (v.ignore_merges != v.llama_ignores_merges)
    summary.notes.push_back(std::string("the tokenizer ") +
                            (v.ignore_merges ? "sets" : "does not set") +
                            " ignore_merges and llama.cpp's " + v.pre + " pre-tokenizer " +
                            (v.llama_ignores_merges ? "does" : "does not") +
                            ": a rare word may be split differently (token ids fed directly are "
                            "unaffected)");
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", v.pre);
  w.add_string_array("tokenizer.ggml.tokens", v.tokens);
  w.add_int32_array("tokenizer.ggml.token_type", v.types);
  w.add_string_array("tokenizer.ggml.merges", v.merges);
  w.add_uint32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(bos));
  w.add_uint32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(v.eos_id));
  w.add_bool("tokenizer.ggml.add_bos_token", v.add_bos);
  w.add_bool("tokenizer.ggml.add_eos_token", v.add_eos);
}

// Every tensor, in llama.cpp's names and order: the embedding, per block its norms and
// projections (q and k reordered for llama.cpp's RoPE), the final norm and the head.
void add_model_tensors(GgufWriter& writer, TensorPlan& plan, const ModelTensors& m) {
  const ModelConfig& c = *m.config;
  add_tensor(writer, plan, "token_embd.weight", c.vocab_size, c.d_model,
             stored(m, "model.embed_tokens.weight"));
  struct Projection {
    const char *hf, *gguf;
    int64_t d_out, d_in;
    int64_t rope_heads;  // > 0: q or k, reordered for llama.cpp's RoPE
  };
  const Projection attention[] = {
      {"self_attn.q_proj", "attn_q", c.d_model, c.d_model, c.n_heads},
      {"self_attn.k_proj", "attn_k", c.kv_dim(), c.d_model, c.n_kv_heads},
      {"self_attn.v_proj", "attn_v", c.kv_dim(), c.d_model, 0},
      {"self_attn.o_proj", "attn_output", c.d_model, c.d_model, 0}};
  const Projection mlp[] = {{"mlp.gate_proj", "ffn_gate", c.d_ff, c.d_model, 0},
                            {"mlp.up_proj", "ffn_up", c.d_ff, c.d_model, 0},
                            {"mlp.down_proj", "ffn_down", c.d_model, c.d_ff, 0}};
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string hf = "model.layers." + std::to_string(l) + ".";
    const std::string blk = "blk." + std::to_string(l) + ".";
    auto add_projection = [&](const Projection& p) {
      const std::string prefix = hf + p.hf;
      const int64_t heads = p.rope_heads, hd = c.head_dim(), d_in = p.d_in;
      add_tensor(writer, plan, blk + p.gguf + ".weight", p.d_out, p.d_in,
                 [&m, prefix, heads, hd, d_in] {
                   std::vector<float> w = projection_matrix(m, prefix);
                   return heads > 0 ? to_adjacent_rope_pairs(w, heads, hd, d_in) : w;
                 });
    };
    add_tensor(writer, plan, blk + "attn_norm.weight", 0, c.d_model,
               stored(m, hf + "input_layernorm.weight"));
    for (const Projection& p : attention) add_projection(p);
    add_tensor(writer, plan, blk + "ffn_norm.weight", 0, c.d_model,
               stored(m, hf + "post_attention_layernorm.weight"));
    for (const Projection& p : mlp) add_projection(p);
  }
  add_tensor(writer, plan, "output_norm.weight", 0, c.d_model, stored(m, "model.norm.weight"));
  if (!c.tied_embeddings)  // else llama.cpp reads the head from token_embd
    add_tensor(writer, plan, "output.weight", c.vocab_size, c.d_model, stored(m, "lm_head.weight"));
}

}  // namespace

// The checkpoint's tokenizer file (find_tokenizer: tokenizer.model, else tokenizer.json).
std::string gguf_tokenizer_of(const std::string& dir) {
  const std::string path = find_tokenizer(dir);
  if (path.empty())
    throw error("convert --to-gguf: ", dir, " has no tokenizer.model or tokenizer.json, and a ",
                "GGUF file must embed its tokenizer: export a checkpoint trained on data from ",
                "`boostlm prepare`, or one made by `boostlm init --tokenizer FILE`");
  return path;
}

void check_gguf_exportable(const ModelConfig& c, const std::string& dir) {
  if (c.arch == Arch::cola)
    throw error("convert --to-gguf: ", dir, " is a cola model, y = σ(x A) B with σ = SiLU between ",
                "the factors: no single matrix W computes it, so it cannot be multiplied out into ",
                "llama.cpp's dense `llama` architecture (svd and dense models can)");
  if (c.arch == Arch::lax)
    throw error("convert --to-gguf: ", dir, " is a lax model: each projection's latent crosses ",
                "into the next block's through a gate and a LayerNorm over the rank (LaX), which ",
                "no single matrix W per projection computes and llama.cpp's `llama` architecture ",
                "has no place for (export it with --to-hf instead)");
  if (!c.mlp_gate_act)
    throw error("convert --to-gguf: ", dir, " has no SiLU on the MLP gate (mlp_gate_act false), ",
                "which llama.cpp's `llama` architecture always applies");
  if (c.head_dim() % 2 != 0)
    throw error("convert --to-gguf: ", dir, " has an odd head dimension (", c.head_dim(),
                "), which RoPE cannot pair");
}

void check_gguf_out(const std::string& out, const GgufExportOptions& options) {
  parse_gguf_dtype(options.dtype);
  if (fs::exists(out))
    throw error("convert --to-gguf: --out ", out, " exists; remove it or give another path");
}

GgufExportSummary export_to_gguf(const ModelTensors& model, const std::string& tokenizer,
                                 const std::string& out, const GgufExportOptions& options) {
  const GgmlType type = parse_gguf_dtype(options.dtype);
  const ModelConfig& config = *model.config;
  check_gguf_out(out, options);

  GgufExportSummary summary;
  summary.file_type = to_string(type);
  if (config.arch == Arch::svd)
    summary.notes.push_back(
        "svd factors multiplied out: each projection written as W = (A·B)ᵀ "
        "(fp32; the factored model's function up to rounding)");
  GgufWriter writer;
  add_hyperparameters(writer, config, options.name, type);
  if (tokenizer_file_name(tokenizer) == "tokenizer.json") {
    add_byte_level_bpe_tokenizer(writer, tokenizer, config.vocab_size, summary);
  } else {
    add_sentencepiece_tokenizer(writer, tokenizer, config.vocab_size, summary);
  }
  TensorPlan plan{type, &summary};

  add_model_tensors(writer, plan, model);
  const fs::path parent = fs::absolute(out).parent_path();
  fs::create_directories(parent);
  summary.bytes = writer.write(out);
  return summary;
}

}  // namespace boostlm
