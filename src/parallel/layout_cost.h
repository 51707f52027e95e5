// A layout's cost model, stated once beside its code (src/parallel/<layout>/cost.cpp) and handed to
// the registry (layout.h's LayoutTraits::cost): the TP collectives of one block, the work of one
// block on one rank (GEMM shapes, element-wise passes, attention), what a block keeps for backward
// and its parameters. comm_formulas.cpp and the planner (src/plan) ask it instead of switching on
// the layout's kind, so a new layout brings its own figures. The planner sits a floor above and
// supplies the WorkSink; nothing here knows the planner.
#pragma once

#include <array>
#include <cstdint>

#include "comm/communicator.h"
#include "model/config.h"
#include "model/params.h"
#include "parallel/layout.h"

namespace boostlm {

// One block of one micro-batch on one rank of a TP group.
struct BlockSetting {
  const ModelConfig& config;
  BlockOptions options;
  int64_t tokens = 0;  // N = B·T
  int tp = 1;
};

// Where a layout's description of a block's work goes (the planner's Work builder).
class WorkSink {
 public:
  virtual ~WorkSink() = default;
  // C[m, n] = A[m, k] · B[k, n]; own_call false: a later member of a batched call (SPEC §3.5).
  virtual void gemm(int64_t m, int64_t n, int64_t k, bool own_call = true) = 0;
  // One element-wise kernel touching `elements` × `passes` elements (reads plus writes), of which
  // `residual_passes` of the passes are over the residual stream (priced in its dtype: bf16 in
  // bf16 training unless --residual-dtype fp32, issue 60).
  virtual void elementwise(double elements, double passes, double residual_passes = 0) = 0;
  // Fused causal attention over `heads` query heads and `kv_heads` kv heads on this rank.
  virtual void attention(int64_t heads, int64_t kv_heads, bool backward) = 0;
};

class LayoutCost {
 public:
  virtual ~LayoutCost() = default;
  // The TP collectives of one block's forward or backward for tp > 1 (SPEC §3), without
  // recomputation (stage_tp_comm adds the reruns), elements as fp32 (add_collective).
  virtual CommCounts block_comm(const BlockSetting& s, bool backward) const = 0;
  // One block's forward or backward on one rank, without its collectives and recomputation.
  virtual void block_work(const BlockSetting& s, bool backward, WorkSink& sink) const = 0;
  // What --recompute lowrank adds to one block's backward (layouts that keep latents only).
  virtual void lowrank_recompute_work(const BlockSetting& s, WorkSink& sink) const;
  // Elements of one block's activation slot (Layout::slot_bytes / 4): what it keeps besides its
  // input under s.options.recompute.
  virtual int64_t slot_elements(const BlockSetting& s) const = 0;
  // Elements of the shared area lowrank recomputation rebuilds a block's intermediates into, held
  // once (layouts that keep latents only).
  virtual int64_t lowrank_area_elements(const BlockSetting& s) const;
  // Parameter elements of one block on one TP rank (LaX's gates and norms apart, below).
  virtual int64_t block_param_elements(const ModelConfig& config, int tp) const = 0;
  // LaX (model/lax.h), in each block after the first: the TP collectives its crossing adds to the
  // block's forward or backward (none by default: a layout whose latents are whole on every rank
  // after their all-reduce, btp, crosses them locally), and its parameters on one rank (all whole
  // by default).
  virtual CommCounts lax_comm(const BlockSetting&, bool) const { return {}; }
  virtual int64_t lax_param_elements(const ModelConfig& config, int tp) const;
  // Columns per token of a block's slot that bf16 training keeps in bf16 (Layout::BlockActs, and
  // a layout's replicated norms' outputs): q | k | v, the attention output and gate | up at the
  // widths one rank computes — its 1/t of the heads and of d_ff by default.
  virtual int64_t bf16_kept_columns(const ModelConfig& config, int tp) const {
    return (2 * config.d_model + 2 * config.kv_dim() + 2 * config.d_ff) / tp;
  }
  // Columns per token of the latents a layout keeps per slot (even under lowrank recomputation)
  // in bf16 in bf16 training: none by default.
  virtual int64_t bf16_latent_columns(const ModelConfig&, int) const { return 0; }
};

// The three layouts' descriptions (parallel/dense_tp/, naive_tp/, btp/cost.cpp).
const LayoutCost& dense_tp_cost();
const LayoutCost& naive_tp_cost();
const LayoutCost& btp_cost();

// Helpers the descriptions share.

// `calls` collectives of `kind` moving `elements` fp32 elements in all (4 bytes each, as the
// engine counts them).
void add_collective(CommCounts& counts, Collective kind, int64_t calls, int64_t elements,
                    int64_t element_bytes = 4);
// The bytes of one activation element on the wire: 2 in bf16 training, else 4 (issue 60).
inline int64_t activation_bytes(const BlockOptions& options) {
  return options.activations == DType::bf16 ? 2 : 4;
}

// A block's projections in groups that read one input (SPEC §3.5): q|k|v (norm1), o, gate|up
// (norm2), down; first and count index block_projections().
struct ProjGroup {
  int first, count;
  bool normed;  // reads a norm's output
};
inline constexpr std::array<ProjGroup, 4> kProjGroups = {
    {{0, 3, true}, {3, 1, false}, {4, 2, true}, {6, 1, false}}};

// Whether member j of group g joins member j−1's batched call for the B factors (grouping: the
// engine batches consecutive members of one shape, whose weights then lie evenly spaced).
bool batched_with_previous(const BlockOptions& options,
                           const std::array<ProjDims, kProjectionsPerBlock>& proj,
                           const ProjGroup& g, int j);

// LaX's per-slot state (Layout::LaxKept) for a block: per token each projection's normalised
// latent at the columns one rank holds and one 1/std per projection; 0 for other architectures.
int64_t lax_slot_elements(const ModelConfig& config, int64_t tokens, int64_t latent_columns);
// LaX's tensors of one block after the first, each of the seven projections' whole or (split)
// with the tensors that follow the latent's columns divided by tp.
int64_t lax_block_params(const ModelConfig& config, int tp, bool split);
// Σ over the seven projections of their rank (the latent columns of one token).
int64_t latent_columns(const ModelConfig& config);

// Every projection split evenly over TP, plus the two block norms, split (norms_sharded) or not.
int64_t sharded_block_params(const ModelConfig& config, int tp, bool norms_sharded);

// RoPE on `q_cols` + `k_cols` columns of every token: read and write.
void rope_work(WorkSink& sink, int64_t tokens, int64_t q_cols, int64_t k_cols);

// The element-wise work around the GEMMs at local widths: two norms (forward read + write;
// backward reads dy, x, dx and writes dx), RoPE on q and k, SwiGLU (3 passes forward, 5
// backward), two residual adds (3 passes, forward).
void norms_rope_swiglu_work(WorkSink& sink, int64_t tokens, int64_t norm_cols, int64_t q_cols,
                            int64_t k_cols, int64_t ff_cols, int64_t resid_cols, bool backward);

}  // namespace boostlm
