// dense-tp's cost (SPEC §3.1): the dense model under Megatron TP, q, k, v, gate, up
// column-parallel and o, down row-parallel; the code is its block.cpp beside this file.
#include "parallel/layout_cost.h"

namespace boostlm {

namespace {

class DenseTpCost final : public LayoutCost {
 public:
  // One all-reduce of N·d after o and one after down; their transposes in backward.
  CommCounts block_comm(const BlockSetting& s, bool backward) const override {
    CommCounts out;
    add_collective(out, Collective::all_reduce, 2, 2 * s.tokens * s.config.d_model,
                   activation_bytes(s.options));
    return out;
  }

  // W local [d_in, d_out]: forward y = x W; backward dW = dyᵀ x, dx = dy W.
  void block_work(const BlockSetting& s, bool backward, WorkSink& sink) const override {
    const ModelConfig& c = s.config;
    const int64_t N = s.tokens, t = s.tp, d = c.d_model, kv = c.kv_dim(), ff = c.d_ff;
    for (const auto& [d_in, d_out] : local_dims(c, t)) {
      if (backward) {
        sink.gemm(d_out, d_in, N);
        sink.gemm(N, d_in, d_out);
      } else {
        sink.gemm(N, d_out, d_in);
      }
    }
    sink.attention(c.n_heads / t, c.n_kv_heads / t, backward);
    norms_rope_swiglu_work(sink, N, d, d / t, kv / t, ff / t, d, backward);
  }

  // norm1, q, k, v, attn, lse, x_mid, norm2, gate, up, hidden, two rstd (block.cpp's Acts).
  int64_t slot_elements(const BlockSetting& s) const override {
    const ModelConfig& c = s.config;
    const int64_t N = s.tokens, d = c.d_model, t = s.tp;
    const int64_t dl = d / t, kvl = c.kv_dim() / t, ffl = c.d_ff / t, hl = c.n_heads / t;
    return N * (d + dl + 2 * kvl + dl + hl + d + d + 2 * ffl + 2);
  }

  // The local intermediates, and the two replicated norms' outputs (whole rows).
  int64_t bf16_kept_columns(const ModelConfig& c, int tp) const override {
    return LayoutCost::bf16_kept_columns(c, tp) + 2 * c.d_model;
  }

  // Every projection split, the norms replicated.
  int64_t block_param_elements(const ModelConfig& c, int tp) const override {
    return sharded_block_params(c, tp, false);
  }

 private:
  // The local (d_in, d_out) of each projection in block_projections() order.
  static std::array<std::pair<int64_t, int64_t>, kProjectionsPerBlock> local_dims(
      const ModelConfig& c, int64_t t) {
    const int64_t d = c.d_model, kv = c.kv_dim(), ff = c.d_ff;
    return {
        {{d, d / t}, {d, kv / t}, {d, kv / t}, {d / t, d}, {d, ff / t}, {d, ff / t}, {ff / t, d}}};
  }
};

}  // namespace

const LayoutCost& dense_tp_cost() {
  static const DenseTpCost cost;
  return cost;
}

}  // namespace boostlm
