#include "parallel/layout_cost.h"

#include "model/lax.h"

#include "core/error.h"

namespace boostlm {

void LayoutCost::lowrank_recompute_work(const BlockSetting&, WorkSink&) const {
  // check_options refuses --recompute lowrank for a layout without keeps_latents.
  BOOSTLM_ASSERT_MSG(false, "lowrank recomputation asked of a layout that keeps no latents");
}

int64_t LayoutCost::lowrank_area_elements(const BlockSetting&) const {
  BOOSTLM_ASSERT_MSG(false, "lowrank recomputation asked of a layout that keeps no latents");
  return 0;
}

void add_collective(CommCounts& counts, Collective kind, int64_t calls, int64_t elements,
                    int64_t element_bytes) {
  counts[kind].calls += calls;
  counts[kind].bytes += elements * element_bytes;
}

bool batched_with_previous(const BlockOptions& options,
                           const std::array<ProjDims, kProjectionsPerBlock>& proj,
                           const ProjGroup& g, int j) {
  if (!options.grouping || j == 0) return false;
  const ProjDims &p = proj[g.first + j - 1], &q = proj[g.first + j];
  return p.rank == q.rank && p.d_out == q.d_out;
}

int64_t LayoutCost::lax_param_elements(const ModelConfig& config, int tp) const {
  return lax_block_params(config, tp, false);
}

int64_t lax_slot_elements(const ModelConfig& c, int64_t tokens, int64_t latent_cols) {
  if (c.arch != Arch::lax) return 0;
  return tokens * (latent_cols + kProjectionsPerBlock);
}

int64_t lax_block_params(const ModelConfig& c, int tp, bool split) {
  if (c.arch != Arch::lax) return 0;
  int64_t n = 0;
  for (const auto& p : block_projections(c))
    for (const LaxTensor& x : lax_tensors(c, p.rank)) {
      int64_t numel = 1;
      for (int64_t dim : x.shape) numel *= dim;
      n += split && x.rank_axis >= 0 ? numel / tp : numel;
    }
  return n;
}

int64_t latent_columns(const ModelConfig& c) {
  int64_t r = 0;
  for (const auto& p : block_projections(c)) r += p.rank;
  return r;
}

int64_t sharded_block_params(const ModelConfig& c, int tp, bool norms_sharded) {
  int64_t projections = 0;
  for (const auto& p : block_projections(c))
    projections += p.rank == 0 ? p.d_in * p.d_out : p.rank * (p.d_in + p.d_out);
  const int64_t norms = norms_sharded ? 2 * c.d_model / tp : 2 * c.d_model;
  return projections / tp + norms;
}

void rope_work(WorkSink& sink, int64_t tokens, int64_t q_cols, int64_t k_cols) {
  sink.elementwise(static_cast<double>(tokens) * (q_cols + k_cols), 2);
}

void norms_rope_swiglu_work(WorkSink& sink, int64_t tokens, int64_t norm_cols, int64_t q_cols,
                            int64_t k_cols, int64_t ff_cols, int64_t resid_cols, bool backward) {
  const double N = static_cast<double>(tokens);
  // The norms read the residual x (forward: x, out; backward: dy, x, dx read and written).
  for (int i = 0; i < 2; ++i) sink.elementwise(N * norm_cols, backward ? 4 : 2, 1);
  rope_work(sink, tokens, q_cols, k_cols);
  sink.elementwise(N * ff_cols, backward ? 5 : 3);
  if (!backward)
    for (int i = 0; i < 2; ++i) sink.elementwise(N * resid_cols, 3, 2);  // x + u: x, sum
}

}  // namespace boostlm
