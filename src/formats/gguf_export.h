// Checkpoints as GGUF files for llama.cpp (`boostlm convert --to-gguf`), written against the GGUF
// v3 specification (formats/gguf_writer.h) with llama.cpp's names for the `llama` architecture:
//
//   token_embd.weight  blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate,
//   ffn_up, ffn_down}.weight  output_norm.weight  output.weight (absent when tied)
//
// with every hyperparameter llama.cpp reads (llama.*) and the tokenizer embedded (tokenizer.ggml.*:
// a SentencePiece model as model "llama", a Hugging Face byte-level BPE as model "gpt2";
// formats/gguf_vocab.h). q and k are written with the rows of each head reordered from
// boostlm's rotate-half RoPE pairs (i, i + hd/2) to the adjacent pairs (2i, 2i + 1) that
// llama.cpp's `llama` RoPE rotates, as llama.cpp's own converter does for Hugging Face checkpoints;
// the model then computes the same function.
//
// A `svd` model is written dense: every projection W = (A·B)ᵀ, multiplied out in fp32, which equals
// the factored model up to rounding. A `cola` model cannot be: σ sits between its factors
// (y = σ(x A) B), so no single matrix computes it, and it is refused.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/params.h"

namespace boostlm {

struct GgufExportOptions {
  // The tensors' type: "f32", "f16", "bf16" or "q8_0". 1-D tensors (the norms) stay f32 whatever
  // it is, and a q8_0 matrix whose rows are not a multiple of 32 values is written f16, as
  // llama.cpp's converter does.
  std::string dtype = "f32";
  std::string name;  // general.name (convert: the checkpoint directory's name)
};

struct GgufExportSummary {
  std::string file_type;  // what general.file_type says: f32, f16, bf16, q8_0
  int64_t tensors = 0;
  uint64_t bytes = 0;
  std::vector<std::string> notes;  // svd multiplied out, vocabulary padded, f16 fallbacks...
};

// What keeps a model from llama.cpp's `llama` architecture (a cola model, no SiLU on the MLP gate,
// an odd head dimension): throws Error naming `dir`, the checkpoint it comes from, and why.
// Checked before any weight is read, as are the two below.
void check_gguf_exportable(const ModelConfig& config, const std::string& dir);

// The tokenizer file a GGUF export of the checkpoint `dir` embeds (tokenizer.model, else
// tokenizer.json); throws Error when it has none.
std::string gguf_tokenizer_of(const std::string& dir);

// Throws Error for a dtype other than f32, f16, bf16 or q8_0, or an `out` that exists.
void check_gguf_out(const std::string& out, const GgufExportOptions& options);

// Writes `out` (a file that must not exist yet) from `model` with `tokenizer` (tokenizer.model or
// tokenizer.json) embedded. Throws Error naming what cannot be exported and why.
GgufExportSummary export_to_gguf(const ModelTensors& model, const std::string& tokenizer,
                                 const std::string& out, const GgufExportOptions& options);

}  // namespace boostlm
