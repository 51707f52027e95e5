// Model configuration (SPEC §2): a LLaMA-style decoder whose seven projections per block are
// dense, plain low-rank (`svd`) or CoLA low-rank (`cola`, SiLU on the latent).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <nlohmann/json_fwd.hpp>

namespace boostlm {

enum class Arch { dense, svd, cola };
std::string to_string(Arch arch);
Arch parse_arch(const std::string& text);  // throws Error

struct ModelConfig {
  Arch arch = Arch::cola;
  int64_t vocab_size = 0;
  int64_t d_model = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;  // defaults to n_heads
  int64_t d_ff = 0;
  int64_t attn_rank = 0;  // q/k/v/o rank (low-rank architectures only)
  int64_t mlp_rank = 0;   // gate/up/down rank
  int64_t max_seq_len = 2048;
  bool tied_embeddings = false;
  bool mlp_gate_act = true;  // SiLU on the gate; CoLA variants may drop it (latents carry σ)
  float rms_eps = 1e-6f;
  float rope_theta = 10000.0f;

  bool low_rank() const { return arch != Arch::dense; }
  int64_t head_dim() const { return d_model / n_heads; }
  int64_t kv_dim() const { return n_kv_heads * head_dim(); }

  // Throws Error with a message naming the field when the configuration is unusable.
  void validate() const;

  static ModelConfig from_json(const nlohmann::json& json);  // validates
  static ModelConfig load(const std::string& path);          // validates
  nlohmann::json to_json() const;
};

// The blocks of pipeline stage `stage` of `stages`, [first, last): as even as the layers allow,
// the first n_layers % stages stages one more. The engine's stages and the planner's both.
std::pair<int64_t, int64_t> stage_layer_range(int64_t n_layers, int stages, int stage);

// Rows of the logits the head computes at once, of `tokens` rows of `vocab_columns` (the rank's
// vocabulary slice): at most 16 Mi elements (64 MiB in fp32), so [N, V] is never held whole.
int64_t logits_chunk_rows(int64_t vocab_columns, int64_t tokens);

}  // namespace boostlm
