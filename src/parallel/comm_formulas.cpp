#include "parallel/comm_formulas.h"

#include "model/config.h"
#include "model/lax.h"
#include "parallel/layout_cost.h"

namespace boostlm {

// The layout's own description (parallel/<layout>/cost.cpp); with t = 1 nothing is sent. With
// --tp-overlap every collective of a block runs once per chunk on its share of the rows: the calls
// multiply, the bytes are those of the whole micro-batch.
CommCounts block_tp_comm(LayoutKind layout, const ModelConfig& c, int64_t N, int tp, bool backward,
                         const BlockOptions& o) {
  if (tp == 1) return {};
  CommCounts out = layout_cost(layout).block_comm(BlockSetting{c, o, N, tp}, backward);
  for (auto& k : out.by_kind) k.calls *= o.overlap_chunks;
  return out;
}

// LaX's crossing in block `layer` (none in block 0, and none for other architectures): what the
// layout says it adds (parallel/<layout>/cost.cpp's lax_comm), per --tp-overlap chunk.
CommCounts block_lax_comm(LayoutKind layout, const ModelConfig& c, int64_t layer, int64_t N,
                          int tp, bool backward, const BlockOptions& o) {
  if (tp == 1 || !has_lax_crossing(c, layer)) return {};
  CommCounts out = layout_cost(layout).lax_comm(BlockSetting{c, o, N, tp}, backward);
  for (auto& k : out.by_kind) k.calls *= o.overlap_chunks;
  return out;
}

// The vocab-parallel embedding: its all-reduce, and (btp) the gather of its input gradient.
CommCounts embedding_tp_comm(LayoutKind layout, const ModelConfig& c, int64_t N, int tp,
                             bool backward, DType act) {
  CommCounts out;
  if (tp == 1) return out;
  const int64_t e = act == DType::bf16 ? 2 : 4;  // activations: bf16 in bf16 training
  add_collective(out, Collective::all_reduce, 1, N * c.d_model, e);
  if (backward && layout_traits(layout).hidden_sharded_residual)
    add_collective(out, Collective::all_gather, 1, N * c.d_model / tp, e);
  return out;
}

// The final norm (btp gathers its input), the vocab-parallel head and the parallel loss.
CommCounts head_tp_comm(LayoutKind layout, const ModelConfig& c, int64_t N, int tp, int64_t chunks,
                        bool backward, DType act) {
  CommCounts out;
  if (tp == 1) return out;
  const int64_t d = c.d_model;
  add_collective(out, Collective::all_reduce_max, chunks, N);  // loss: row max
  add_collective(out, Collective::all_reduce, chunks, 2 * N);  // loss: Σexp and target logit
  const int64_t e = act == DType::bf16 ? 2 : 4;  // activations: bf16 in bf16 training
  if (layout_traits(layout).hidden_sharded_residual)
    add_collective(out, Collective::all_gather, 1, N * d / tp, e);  // the final norm's input
  if (backward)  // the head's input gradient
    add_collective(out, Collective::all_reduce, chunks, N * d, e);
  return out;
}

CommCounts outer_tp_comm(LayoutKind layout, const ModelConfig& c, int64_t N, int tp, int64_t chunks,
                         bool backward, DType act) {
  CommCounts out = embedding_tp_comm(layout, c, N, tp, backward, act);
  out += head_tp_comm(layout, c, N, tp, chunks, backward, act);
  return out;
}

CommCounts step_tp_comm(LayoutKind layout, const ModelConfig& c, int64_t N, int tp, int64_t chunks,
                        bool backward, const BlockOptions& o) {
  // A training step of one process is the one stage of a one-stage pipeline with one micro-batch.
  if (backward) return stage_tp_comm(layout, c, N, tp, chunks, o, 1, 0, 1);
  CommCounts out = outer_tp_comm(layout, c, N, tp, chunks, false, o.activations);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    out += block_tp_comm(layout, c, N, tp, false, o);
    out += block_lax_comm(layout, c, l, N, tp, false, o);
  }
  return out;
}

CommCounts stage_tp_comm(LayoutKind layout, const ModelConfig& c, int64_t N, int tp, int64_t chunks,
                         const BlockOptions& o, int pp, int stage, int64_t m) {
  CommCounts out;
  const auto [first, last] = stage_layer_range(c.n_layers, pp, stage);
  const bool last_stage = stage + 1 == pp;
  if (stage == 0) out += embedding_tp_comm(layout, c, N, tp, true, o.activations);
  if (last_stage) out += head_tp_comm(layout, c, N, tp, chunks, true, o.activations);
  for (int64_t l = first; l < last; ++l) {
    out += block_tp_comm(layout, c, N, tp, false, o);
    out += block_tp_comm(layout, c, N, tp, true, o);
    out += block_lax_comm(layout, c, l, N, tp, false, o);
    out += block_lax_comm(layout, c, l, N, tp, true, o);
  }
  for (auto& k : out.by_kind) {
    k.calls *= m;
    k.bytes *= m;
  }
  if (o.recompute == Recompute::block) {
    // Every block's forward reruns in backward, except when the backward directly follows the
    // same micro-batch's forward: on the last stage always (1F1B has no warm-up there), elsewhere
    // only with a single micro-batch.
    const int64_t skipped = last_stage ? m : (m == 1 ? 1 : 0);
    const int64_t reruns = m * (last - first) - skipped;
    for (int64_t i = 0; i < reruns; ++i) out += block_tp_comm(layout, c, N, tp, false, o);
    // LaX: a rerun block after the model's first crosses its latents again (the skipped one is
    // the stage's last block).
    for (int64_t l = first; l < last; ++l) {
      const int64_t runs = l + 1 == last ? m - skipped : m;
      for (int64_t i = 0; i < runs; ++i) out += block_lax_comm(layout, c, l, N, tp, false, o);
    }
  }
  return out;
}

CommCounts pipeline_p2p_comm(LayoutKind layout, const ModelConfig& c, int64_t N, int tp, int pp,
                             int stage, int64_t m, bool backward, DType act) {
  CommCounts out;
  // LaX: the seven chains' latents cross with the residual, at the columns a rank holds.
  const int64_t lax_cols = c.arch != Arch::lax                          ? 0
                           : layout_traits(layout).shards_ranks ? latent_columns(c) / tp
                                                                : latent_columns(c);
  const int64_t boundary =
      N * ((layout_traits(layout).hidden_sharded_residual ? c.d_model / tp : c.d_model) + lax_cols);
  const bool has_next = stage + 1 < pp, has_prev = stage > 0;
  const int64_t e = act == DType::bf16 ? 2 : 4;  // bf16 training sends them in bf16
  // Activations go forward: sent to the next stage, received from the previous one.
  if (has_next) add_collective(out, Collective::send, m, m * boundary, e);
  if (has_prev) add_collective(out, Collective::recv, m, m * boundary, e);
  if (backward) {  // their gradients come back
    if (has_prev) add_collective(out, Collective::send, m, m * boundary, e);
    if (has_next) add_collective(out, Collective::recv, m, m * boundary, e);
  }
  return out;
}

}  // namespace boostlm
