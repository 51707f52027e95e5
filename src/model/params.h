// The parameter contract of SPEC §2: names, full shapes and initialisation of every tensor.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/param_table.h"
#include "model/config.h"

namespace boostlm {

// One of a block's seven projections: y = x W (dense) or y = σ(x A) B (low-rank), x: [N, d_in].
struct ProjDims {
  ProjKind kind;
  const char* module;  // "self_attn.q_proj", ..., "mlp.down_proj"
  int64_t d_in, d_out;
  int64_t rank;  // 0 for dense
};

std::array<ProjDims, kProjectionsPerBlock> block_projections(const ModelConfig& config);

// "model.layers.{layer}.{module}"
std::string projection_prefix(int64_t layer, const ProjDims& proj);

// Std of a low-rank factor (SPEC §2): r^(−1/4) · (d_in + d_out)^(−1/4).
float low_rank_factor_std(int64_t d_in, int64_t d_out, int64_t rank);

// All tensors of the model, whole (unsharded), in a fixed order: embedding, then per layer
// input_layernorm, q, k, v, o, post_attention_layernorm, gate, up, down (a lax projection after
// block 0 followed by its gate and latent norm, model/lax.h), then model.norm, lm_head.
ParamTable build_param_table(const ModelConfig& config);

// A model's configuration and its full fp32 tensors, laid out by build_param_table(*config): what
// one process holds of it, and what the converters of formats/ other programs' files are written
// from. The tensors are either in memory (`weights`) or read one at a time as a converter asks
// for them (`read`: a checkpoint on disk, never the whole model in memory at once).
struct ModelTensors {
  const ModelConfig* config = nullptr;
  const ParamTable* table = nullptr;
  const FlatBuffer* weights = nullptr;
  std::function<void(const ParamInfo&, float*)> read;  // used when weights is null
  // The full tensor `name`, from whichever.
  std::vector<float> tensor(const std::string& name) const;
};

}  // namespace boostlm
