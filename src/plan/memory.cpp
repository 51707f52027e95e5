#include "plan/memory.h"

#include <algorithm>

#include "kernels/attention.h"
#include "parallel/layout_cost.h"

namespace boostlm::plan {

namespace {

// LaX's crossing state of one block (Layout::lax_kept_bytes / 4): kept for every block.
int64_t lax_kept_elements(const MicroBatchShape& mb) {
  const int64_t cols = latent_columns(mb.config);
  return lax_slot_elements(mb.config, mb.tokens(),
                           layout_traits(mb.layout).shards_ranks ? cols / mb.tp : cols);
}

int64_t layout_activation_elements(const MicroBatchShape& mb) {  // Layout::activation_bytes / 4
  const bool block = mb.options.recompute == Recompute::block;
  const int64_t slots = block ? 1 : mb.config.n_layers;
  return block_slot_elements(mb) * slots +
         recompute_area_elements(mb) * (mb.options.recompute == Recompute::lowrank) +
         (block ? (mb.config.n_layers - 1) * lax_kept_elements(mb) : 0);
}

}  // namespace

int64_t block_param_elements(LayoutKind layout, const ModelConfig& c, int tp) {
  return layout_cost(layout).block_param_elements(c, tp);
}

int64_t stage_layers(const ModelConfig& c, int pp, int stage) {
  const auto [first, last] = stage_layer_range(c.n_layers, pp, stage);
  return last - first;
}

int64_t stage_param_elements(LayoutKind layout, const ModelConfig& c, int tp, int pp, int stage) {
  const int64_t vocab_shard = c.vocab_size / tp * c.d_model;
  int64_t n = stage_layers(c, pp, stage) * block_param_elements(layout, c, tp);
  // LaX's gates and latent norms, in every block but the first (model/lax.h).
  const auto [first, last] = stage_layer_range(c.n_layers, pp, stage);
  if (c.arch == Arch::lax)
    n += (last - std::max<int64_t>(first, 1)) * layout_cost(layout).lax_param_elements(c, tp);
  if (stage == 0) n += vocab_shard;
  if (stage == pp - 1) {
    n += c.d_model;  // final norm
    // A tied head is the embedding itself; split over stages it needs its own copy.
    if (!c.tied_embeddings || pp > 1) n += vocab_shard;
  }
  return n;
}

int64_t residual_columns(const MicroBatchShape& mb) {
  return layout_traits(mb.layout).hidden_sharded_residual ? mb.config.d_model / mb.tp
                                                          : mb.config.d_model;
}

int64_t block_slot_elements(const MicroBatchShape& mb) {
  return layout_cost(mb.layout).slot_elements(block_setting(mb));
}

int64_t block_kept_elements(const MicroBatchShape& mb) {
  const int64_t input = mb.tokens() * residual_columns(mb);
  return input + (mb.options.recompute == Recompute::block ? lax_kept_elements(mb)
                                                           : block_slot_elements(mb));
}

int64_t recompute_area_elements(const MicroBatchShape& mb) {
  switch (mb.options.recompute) {
    case Recompute::none:
      return 0;
    case Recompute::lowrank:
      return layout_cost(mb.layout).lowrank_area_elements(block_setting(mb));
    case Recompute::block:
      return block_slot_elements(mb);
  }
  return 0;
}

int64_t model_activation_elements(const MicroBatchShape& mb) {
  const int64_t N = mb.tokens(), d = mb.config.d_model;
  // Residual stream at every block boundary, the final norm and its rstd, and with a
  // hidden-sharded residual the gathered stream.
  const int64_t rc = residual_columns(mb);
  return (mb.config.n_layers + 1) * N * rc + (rc != d ? 2 : 1) * N * d + N +
         layout_activation_elements(mb);
}

int64_t bf16_kept_elements(const MicroBatchShape& mb, int64_t slots) {
  const LayoutCost& cost = layout_cost(mb.layout);
  // The intermediates live in every slot, or in the one area recomputation rebuilds them into;
  // the latents in every slot unless whole blocks are recomputed.
  const Recompute r = mb.options.recompute;
  return mb.tokens() *
         ((r == Recompute::none ? slots : 1) * cost.bf16_kept_columns(mb.config, mb.tp) +
          (r == Recompute::block ? 1 : slots) * cost.bf16_latent_columns(mb.config, mb.tp));
}

bool keeps_bf16_residual(const BlockOptions& options, Arch arch, DType compute, int pp) {
  return compute == DType::bf16 && options.residual.value_or(DType::bf16) == DType::bf16 &&
         !(arch == Arch::lax && pp > 1);
}

bool keeps_bf16_residual(const MicroBatchShape& mb, DType compute, int pp) {
  return keeps_bf16_residual(mb.options, mb.config.arch, compute, pp);
}

int64_t residual_kept_elements(const MicroBatchShape& mb, int64_t blocks, int64_t slots) {
  return mb.tokens() * residual_columns(mb) * (blocks + slots);
}

int64_t model_activation_bytes(const MicroBatchShape& mb, DType compute) {
  const int64_t fp32 = 4 * model_activation_elements(mb);
  if (compute != DType::bf16) return fp32;
  // The final norm's output rounded for the head's GEMMs, and over t > 1 the bf16 messages of the
  // embedding, the head and btp's residual gathers (Model::wire_): N·d bf16 each.
  const int64_t Nd = mb.tokens() * mb.config.d_model;
  const int64_t layers = mb.config.n_layers;
  // A bf16 residual: the layers + 1 block boundaries and each slot's x_mid.
  const int64_t residual =
      keeps_bf16_residual(mb, compute, 1)
          ? residual_kept_elements(mb, layers + 1,
                                   mb.options.recompute == Recompute::block ? 1 : layers)
          : 0;
  return fp32 - 2 * bf16_kept_elements(mb, layers) - 2 * residual + 2 * Nd * (mb.tp > 1 ? 2 : 1);
}

int64_t workspace_elements(const MicroBatchShape& mb) {
  const ModelConfig& c = mb.config;
  const int64_t N = mb.tokens(), d = c.d_model;
  const int64_t rows = head_chunk_rows(mb);
  // Head: logits chunk, input gradient, per-token loss statistics. Block backward: input, q, k,
  // v, attention and MLP gradients at the layout's local widths (≈ one slot's worth).
  // The model holds the larger of the two in one workspace; with --tp-overlap the head's ∂W
  // runs in the blocks' backward from every row's logit gradient: both, side by side.
  const bool deferred = mb.tp > 1 && overlap_chunks_for(mb.options.overlap_chunks, mb.batch) > 1;
  const int64_t head = (deferred ? N : rows) * (c.vocab_size / mb.tp) + N * d + 4 * N;
  const int64_t blocks = N * residual_columns(mb) + block_slot_elements(mb);
  return deferred ? head + blocks : std::max(head, blocks);
}

int64_t attention_ds_scratch_bytes(const MicroBatchShape& mb) {
  const ModelConfig& c = mb.config;
  if (!attention_tensor_core_head_dim(c.head_dim())) return 0;  // the CUDA-core kernels
  const int64_t group = c.n_heads / c.n_kv_heads;
  const int64_t kv_heads = std::max<int64_t>(1, c.n_kv_heads / mb.tp);
  const AttentionShape local{mb.batch, mb.seq_len, kv_heads * group, kv_heads, c.head_dim()};
  return attention_ds_units_per_chunk(local, kAttentionDsBoundBytes) *
         static_cast<int64_t>(attention_ds_unit_bytes(local));
}

}  // namespace boostlm::plan
