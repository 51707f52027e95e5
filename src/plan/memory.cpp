#include "plan/memory.h"

#include <algorithm>

#include "model/params.h"

namespace boostlm::plan {

namespace {

int64_t latent_elements(const ModelConfig& c) {  // Σ over the seven projections of their rank
  int64_t r = 0;
  for (const auto& p : block_projections(c)) r += p.rank;
  return r;
}

// The intermediates a block recomputes (or keeps when nothing is recomputed), per layout.
int64_t dense_tp_slot(const MicroBatch& mb) {
  const ModelConfig& c = mb.config;
  const int64_t N = mb.tokens(), d = c.d_model, t = mb.tp;
  const int64_t dl = d / t, kvl = c.kv_dim() / t, ffl = c.d_ff / t, hl = c.n_heads / t;
  // norm1, q, k, v, attn, lse, x_mid, norm2, gate, up, hidden, two rstd
  return N * (d + dl + 2 * kvl + dl + hl + d + d + 3 * ffl + 2);
}

int64_t naive_tp_slot(const MicroBatch& mb) {
  const ModelConfig& c = mb.config;
  const int64_t N = mb.tokens(), d = c.d_model, kv = c.kv_dim();
  const int64_t latents = latent_elements(c) / mb.tp * (c.arch == Arch::cola ? 2 : 1);  // z, h
  // Replicated at full width: norm1, q, k, v, attn, lse (all heads), x_mid, norm2, gate, up,
  // hidden, two rstd.
  return N * (5 * d + 2 * kv + c.n_heads + 3 * c.d_ff + 2 + latents);
}

// btp: the intermediates (rebuilt by lowrank recomputation), and the rest of a slot.
int64_t btp_intermediates(const MicroBatch& mb) {
  const ModelConfig& c = mb.config;
  const int64_t N = mb.tokens(), t = mb.tp;
  const int64_t dl = c.d_model / t, kvl = c.kv_dim() / t, ffl = c.d_ff / t, hl = c.n_heads / t;
  int64_t n = dl + 2 * kvl + dl + hl + 3 * ffl;       // q, k, v, attn, lse, gate, up, hidden
  if (c.arch == Arch::cola) n += latent_elements(c);  // σ(z)
  if (!mb.options.online_norm) n += 2 * dl;           // the synchronous norms' outputs
  return N * n;
}

int64_t btp_latents(const MicroBatch& mb) {  // z, x_mid, two rstd
  return mb.tokens() * (latent_elements(mb.config) + mb.config.d_model / mb.tp + 2);
}

int64_t layout_activation_elements(const MicroBatch& mb) {  // Layout::activation_bytes / 4
  const int64_t slots = mb.options.recompute == Recompute::block ? 1 : mb.config.n_layers;
  return block_slot_elements(mb) * slots +
         recompute_area_elements(mb) * (mb.options.recompute == Recompute::lowrank);
}

}  // namespace

int64_t block_param_elements(LayoutKind layout, const ModelConfig& c, int tp) {
  int64_t projections = 0;
  for (const auto& p : block_projections(c))
    projections += p.rank == 0 ? p.d_in * p.d_out : p.rank * (p.d_in + p.d_out);
  // Every layout shards each projection over TP; only btp shards the two norms.
  const int64_t norms =
      layout_traits(layout).hidden_sharded_residual ? 2 * c.d_model / tp : 2 * c.d_model;
  return projections / tp + norms;
}

int64_t stage_layers(const ModelConfig& c, int pp, int stage) {
  const auto [first, last] = stage_layer_range(c.n_layers, pp, stage);
  return last - first;
}

int64_t stage_param_elements(LayoutKind layout, const ModelConfig& c, int tp, int pp, int stage) {
  const int64_t vocab_shard = c.vocab_size / tp * c.d_model;
  int64_t n = stage_layers(c, pp, stage) * block_param_elements(layout, c, tp);
  if (stage == 0) n += vocab_shard;
  if (stage == pp - 1) {
    n += c.d_model;  // final norm
    // A tied head is the embedding itself; split over stages it needs its own copy.
    if (!c.tied_embeddings || pp > 1) n += vocab_shard;
  }
  return n;
}

int64_t residual_columns(const MicroBatch& mb) {
  return layout_traits(mb.layout).hidden_sharded_residual ? mb.config.d_model / mb.tp
                                                          : mb.config.d_model;
}

int64_t block_slot_elements(const MicroBatch& mb) {
  switch (mb.layout) {
    case LayoutKind::dense_tp:
      return dense_tp_slot(mb);
    case LayoutKind::naive_tp:
      return naive_tp_slot(mb);
    case LayoutKind::btp:
      return btp_latents(mb) +
             (mb.options.recompute == Recompute::lowrank ? 0 : btp_intermediates(mb));
  }
  return 0;
}

int64_t block_kept_elements(const MicroBatch& mb) {
  const int64_t input = mb.tokens() * residual_columns(mb);
  return input + (mb.options.recompute == Recompute::block ? 0 : block_slot_elements(mb));
}

int64_t recompute_area_elements(const MicroBatch& mb) {
  switch (mb.options.recompute) {
    case Recompute::none:
      return 0;
    case Recompute::lowrank:
      return btp_intermediates(mb);
    case Recompute::block:
      return block_slot_elements(mb);
  }
  return 0;
}

int64_t model_activation_elements(const MicroBatch& mb) {
  const int64_t N = mb.tokens(), d = mb.config.d_model;
  // Residual stream at every block boundary, the gathered stream, the final norm and its rstd.
  return (mb.config.n_layers + 1) * N * residual_columns(mb) + 2 * N * d + N +
         layout_activation_elements(mb);
}

int64_t workspace_elements(const MicroBatch& mb) {
  const ModelConfig& c = mb.config;
  const int64_t N = mb.tokens(), d = c.d_model;
  const int64_t rows = head_chunk_rows(mb);
  // Head: logits chunk, input gradient, per-token loss statistics. Block backward: input, q, k,
  // v, attention and MLP gradients at the layout's local widths (≈ one slot's worth).
  const int64_t head = rows * (c.vocab_size / mb.tp) + N * d + 4 * N;
  return head + N * residual_columns(mb) + block_slot_elements(mb);
}

}  // namespace boostlm::plan
