// What one rank does for one micro-batch, op by op, as the engine does it: every GEMM with the
// shape it has on that rank (efficiency depends on shape, SPEC §1: the thin GEMMs of naive-tp run
// worse than btp's), the element-wise passes over activations, the fused attention, and the TP
// collectives (exactly parallel/comm_formulas.h). A block's work is its layout's own description
// (LayoutCost::block_work in parallel/<layout>/cost.cpp, this file's Builder its WorkSink); around
// the blocks it follows engine/model.cpp. tests/plan checks them against the GEMMs the engine
// records.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "kernels/cross_entropy.h"
#include "model/config.h"
#include "parallel/layout.h"
#include "parallel/layout_cost.h"

namespace boostlm::plan {

// C[m, n] = A[m, k] · B[k, n]
struct GemmWork {
  int64_t m = 0, n = 0, k = 0;
  bool own_call = true;  // false: a later member of a batched call (SPEC §3.5), no call of its own
  double flops() const { return 2.0 * m * n * k; }
};

struct Work {
  std::vector<GemmWork> gemms;
  // Element-wise kernels: activation elements read plus written, and the number of kernels.
  double elementwise_elements = 0;
  int64_t elementwise_kernels = 0;
  double residual_elements = 0;  // of elementwise_elements, those of the residual stream
  // Fused causal attention (forward and backward, FlashAttention-style): FLOPs as FlashAttention-2
  // counts them (a backward is 2.5 forwards: five products of the forward's size against two), and
  // of those the backwards' (a device whose kernels run more products prices them,
  // Device::attention_backward_products).
  double attention_flops = 0;
  double attention_backward_flops = 0;
  double attention_elements = 0;  // q, k, v, out (and their gradients) read or written
  int64_t attention_calls = 0;
  CommCounts tp;  // as the engine counts it: 4 bytes per element

  double gemm_flops() const;
  Work& operator+=(const Work& other);
};

// One micro-batch on one rank: the model, the layout and its switches, the tokens, the TP size.
struct MicroBatchShape {
  LayoutKind layout = LayoutKind::btp;
  ModelConfig config;
  BlockOptions options;
  int64_t batch = 1, seq_len = 1;
  int tp = 1;
  // Logit elements per head chunk on the backend that runs it (kernels/cross_entropy.h).
  int64_t logits_chunk_elements = kDeviceLogitsChunkElements;
  int64_t tokens() const { return batch * seq_len; }
};
// Its block as parallel/layout_cost.h's models take it.
BlockSetting block_setting(const MicroBatchShape& mb);

// One block's forward; its backward, without recomputation; what recomputation adds to the
// backward of one block (lowrank: local B GEMMs, attention, SwiGLU; block: the whole forward,
// collectives included; none: nothing).
Work block_forward_work(const MicroBatchShape& mb);
Work block_backward_work(const MicroBatchShape& mb);
Work block_recompute_work(const MicroBatchShape& mb);
// LaX's crossing (model/lax.h) in one block after the first, forward or backward: per projection
// the gate's [r, r] GEMM at the latent columns one rank holds (backward: ∂G and ∂h_{l−1}), the
// norm's and σ's passes, and the collectives the layout adds for it (naive-tp); nothing for
// other architectures.
Work lax_crossing_work(const MicroBatchShape& mb, bool backward);

// Embedding (first stage) and final norm, LM head and parallel cross-entropy (last stage), in the
// engine's row chunks, forward and backward together, TP collectives included.
Work embedding_work(const MicroBatchShape& mb);
// weight_gradient false: without the head's ∂W, which --tp-overlap runs inside the blocks'
// backward (head_weight_gradient_work: that ∂W alone).
Work head_work(const MicroBatchShape& mb, bool weight_gradient = true);
Work head_weight_gradient_work(const MicroBatchShape& mb);
// Rows of the logits the engine materialises at once (logits_chunk_rows, model/config.h).
int64_t head_chunk_rows(const MicroBatchShape& mb);

// A whole forward + backward of the model in one process (no pipeline), the blocks'
// recomputation included: what Model::forward_backward runs.
Work whole_model_work(const MicroBatchShape& mb);

}  // namespace boostlm::plan
