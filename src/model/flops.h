// Model FLOPs of one training step, counted from the architecture (SPEC §4).
//
// Every matmul counts 2·m·n·k; low-rank projections count their two thin factors, r·(d_in + d_out)
// per token, not the dense d_in·d_out. Causal attention counts only the unmasked half:
// 2·head_dim·T(T+1) per sequence and head for QKᵀ and PV together. Backward is twice forward (the
// usual convention; recomputation is not model work), so a training step is 3× forward.
#pragma once

#include <cstdint>

#include "model/config.h"

namespace boostlm {

struct ModelFlops {
  double projections = 0;  // the seven block projections, all layers
  double head = 0;         // LM head
  double attention = 0;    // QKᵀ and PV
  double forward() const { return projections + head + attention; }
  double training() const { return 3.0 * forward(); }
};

ModelFlops model_flops(const ModelConfig& config, int64_t batch, int64_t seq_len);

}  // namespace boostlm
