// Checkpoints as Hugging Face model directories (`boostlm convert --to-hf`).
//
// A dense checkpoint becomes a standard LLaMA directory that `transformers` loads without code
// (LlamaForCausalLM): config.json, model.safetensors (or shards with model.safetensors.index.json
// when larger than shard_bytes) and tokenizer.model or tokenizer.json. A low-rank checkpoint keeps
// its factors under the CoLA names (`….cola_a` [d_in, r], `….cola_b` [r, d_out]) with model_type
// "cola", architectures ["BoostlmForCausalLM"] and a "cola" section in config.json that says how to
// read them (each family's rank, the latent's activation), and ships modeling_boostlm.py beside
// them: a PyTorch module with that class, which loads the directory and runs the forward pass
// without boostlm (README, "Bring your own model"). boostlm imports such a directory again
// (hf_import.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace boostlm {

struct HfExportOptions {
  // "auto" (the dtype the checkpoint was imported from, else float32), "float32", "bfloat16" or
  // "float16". bf16 and fp16 round to nearest even; values imported from them come back exactly.
  std::string dtype = "auto";
  int64_t shard_bytes = int64_t{5} << 30;  // larger models are written in shards of at most this
};

// The text of src/train/modeling_boostlm.py, compiled in (CMakeLists.txt).
std::string_view modeling_boostlm_py();
inline constexpr const char* kModelingFile = "modeling_boostlm.py";

// Writes `out` (which must not exist, or be an empty directory) from the checkpoint `checkpoint`.
// Returns the torch dtype written.
std::string export_to_hf(const std::string& checkpoint, const std::string& out,
                         const HfExportOptions& options);

}  // namespace boostlm
