// Checkpoints as Hugging Face model directories (`boostlm convert --to-hf`).
//
// A dense checkpoint becomes a standard LLaMA directory that `transformers` loads without code
// (LlamaForCausalLM): config.json, model.safetensors (or shards with model.safetensors.index.json
// when larger than shard_bytes) and tokenizer.model or tokenizer.json. A low-rank checkpoint keeps
// its factors under the CoLA names (`….cola_a` [d_in, r], `….cola_b` [r, d_out]) with model_type
// "cola", architectures ["BoostlmForCausalLM"] and a "cola" section in config.json that says how to
// read them (each family's rank, the latent's activation) — a lax checkpoint model_type "lax" and
// a "lax" section instead, which also names its gate, Kronecker factors and norm (model/lax.h) —
// and ships modeling_boostlm.py beside
// them: a PyTorch module with that class, which loads the directory and runs the forward pass
// without boostlm (README, "Bring your own model"). boostlm imports such a directory again
// (hf_import.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/params.h"

namespace boostlm {

struct HfExportOptions {
  // "auto" (the dtype the checkpoint was imported from, else float32), "float32", "bfloat16" or
  // "float16". bf16 and fp16 round to nearest even; values imported from them come back exactly.
  std::string dtype = "auto";
  int64_t shard_bytes = int64_t{5} << 30;  // larger models are written in shards of at most this
};

// The text of src/formats/modeling_boostlm.py, compiled in (CMakeLists.txt).
std::string_view modeling_boostlm_py();
inline constexpr const char* kModelingFile = "modeling_boostlm.py";

// config.json's fields for `config` under Hugging Face's names (model_type, architectures, the
// LLaMA shape, a low-rank model's ranks), with boostlm's own configuration under "boostlm": what
// every boostlm checkpoint's config.json holds (train/checkpoint.h), and an export's without it.
nlohmann::json hf_config(const ModelConfig& config);

// Throws Error when `config` cannot be written as a Hugging Face directory (a dense MLP with no
// SiLU on its gate, which LLaMA has) or `options` cannot be used; called before weights are read.
void check_hf_exportable(const ModelConfig& config, const HfExportOptions& options);

// Writes `out` (which must not exist, or be an empty directory) from `model`, with `tokenizer`
// (tokenizer.model or tokenizer.json, and the tokenizer_config.json beside it; empty: none) copied
// in. `imported_dtype` is the torch dtype the model was imported from, which dtype "auto" writes.
// Returns the torch dtype written.
std::string export_to_hf(const ModelTensors& model, const std::string& tokenizer,
                         const std::string& imported_dtype, const std::string& out,
                         const HfExportOptions& options);

}  // namespace boostlm
