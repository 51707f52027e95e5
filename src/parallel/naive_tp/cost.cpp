// naive-tp's cost (SPEC §3.2): every factorised projection is (d_in → r/t → d_out) on every rank,
// A column-parallel and B row-parallel, so each projection's output is all-reduced; attention,
// norms, RoPE and SwiGLU run replicated at full width. The code is its block.cpp beside this file.
#include "parallel/layout_cost.h"

namespace boostlm {

namespace {

class NaiveTpCost final : public LayoutCost {
 public:
  // Forward: every projection's output, N·(3d + 2·kv + 2·d_ff) = N·(5d + 2·d_ff) without GQA, in
  // 7 all-reduces or 4 grouped (q|k|v and gate|up share one). Backward: 4, N·(3d + d_ff), the
  // q/k/v and gate/up input gradients merged.
  CommCounts block_comm(const BlockSetting& s, bool backward) const override {
    CommCounts out;
    const ModelConfig& c = s.config;
    const int64_t N = s.tokens, d = c.d_model, kv = c.kv_dim(), ff = c.d_ff;
    if (!backward)
      add_collective(out, Collective::all_reduce, s.options.grouping ? 4 : 7,
                     N * (3 * d + 2 * kv + 2 * ff), activation_bytes(s.options));
    else
      add_collective(out, Collective::all_reduce, 4, N * (3 * d + ff), activation_bytes(s.options));
    return out;
  }

  // With grouping a group's A shards run as one GEMM on their concatenation (rebuilt each
  // forward; dA taken apart in backward); σ runs per group.
  void block_work(const BlockSetting& s, bool backward, WorkSink& sink) const override {
    const ModelConfig& c = s.config;
    const double N = static_cast<double>(s.tokens);
    const auto proj = block_projections(c);
    for (const ProjGroup& g : kProjGroups) {
      if (backward)
        group_backward(s, proj, g, sink);
      else
        group_forward(s, proj, g, sink);
    }
    if (!backward && s.options.grouping) {  // unpacking the shared all-reduces
      sink.elementwise(N * (c.d_model + 2 * c.kv_dim()), 2);
      sink.elementwise(N * 2 * c.d_ff, 2);
    }
    sink.attention(c.n_heads, c.n_kv_heads, backward);
    norms_rope_swiglu_work(sink, s.tokens, c.d_model, c.d_model, c.kv_dim(), c.d_ff, c.d_model,
                           backward);
  }

  // Replicated at full width: norm1, q, k, v, attn, lse (all heads), x_mid, norm2, gate, up,
  // hidden, two rstd; and this rank's latents z (and σ(z) under CoLA).
  int64_t slot_elements(const BlockSetting& s) const override {
    const ModelConfig& c = s.config;
    const int64_t d = c.d_model, kv = c.kv_dim();
    const int64_t latents = latent_columns(c) / s.tp;
    return s.tokens * (5 * d + 2 * kv + c.n_heads + 2 * c.d_ff + 2 + latents) +
           lax_slot_elements(c, s.tokens, latents);
  }

  // LaX's crossing on a latent split over r (parallel/lax_chain.cpp), per projection of rank r:
  // forward the all-gather of h_{l−1} (N·r/t from each rank) and the all-reduce of the norm's
  // [Σs, Σs²] (2N); backward h_{l−1}'s all-gather again, the norm's [Σg, Σg·x̂] (2N), the
  // reduce-scatter of ∂L/∂h_{l−1} (N·r sent) and, Kronecker gate, the all-reduce of its factors'
  // gradients (p² + q², whole on every rank: once per --tp-overlap chunk, whatever its rows).
  CommCounts lax_comm(const BlockSetting& s, bool backward) const override {
    CommCounts out;
    const int64_t N = s.tokens;
    for (const auto& p : block_projections(s.config)) {
      // h travels in bf16 in bf16 training; the statistics and gradients stay fp32.
      add_collective(out, Collective::all_gather, 1, N * p.rank / s.tp,
                     activation_bytes(s.options));
      add_collective(out, Collective::all_reduce, 1, 2 * N);
      if (!backward) continue;
      add_collective(out, Collective::reduce_scatter, 1, N * p.rank);
      if (s.config.lax_gate == LaxGate::kron) {
        const auto [kp, kq] = kron_factors(p.rank);
        add_collective(out, Collective::all_reduce, 1,
                       (kp * kp + kq * kq) * s.options.overlap_chunks);
      }
    }
    return out;
  }

  // The norms and the linear gate follow the latent's columns; the Kronecker factors are whole.
  int64_t lax_param_elements(const ModelConfig& c, int tp) const override {
    return lax_block_params(c, tp, true);
  }

  // Attention and SwiGLU run replicated, over all heads and all of d_ff; the two replicated norms'
  // outputs too.
  int64_t bf16_kept_columns(const ModelConfig& c, int) const override {
    return 2 * c.d_model + 2 * c.kv_dim() + 2 * c.d_ff + 2 * c.d_model;
  }

  int64_t block_param_elements(const ModelConfig& c, int tp) const override {
    return sharded_block_params(c, tp, false);
  }

 private:
  using Projections = std::array<ProjDims, kProjectionsPerBlock>;

  static int64_t width(const BlockSetting& s, const Projections& proj, const ProjGroup& g) {
    int64_t w = 0;
    for (int j = 0; j < g.count; ++j) w += proj[g.first + j].rank / s.tp;
    return w;
  }

  static void group_forward(const BlockSetting& s, const Projections& proj, const ProjGroup& g,
                            WorkSink& sink) {
    const int64_t N = s.tokens, t = s.tp, d_in = proj[g.first].d_in, w = width(s, proj, g);
    if (s.options.grouping && g.count > 1) {
      sink.gemm(N, w, d_in);  // z = x [A…]
      sink.elementwise(static_cast<double>(d_in) * w, 2);
    } else {
      for (int j = 0; j < g.count; ++j) sink.gemm(N, proj[g.first + j].rank / t, d_in);
    }
    if (s.config.arch == Arch::cola) sink.elementwise(static_cast<double>(N) * w, 2);
    for (int j = 0; j < g.count; ++j)
      sink.gemm(N, proj[g.first + j].d_out, proj[g.first + j].rank / t,  // y = σ(z) B
                !batched_with_previous(s.options, proj, g, j));
  }

  static void group_backward(const BlockSetting& s, const Projections& proj, const ProjGroup& g,
                             WorkSink& sink) {
    const int64_t N = s.tokens, t = s.tp, d_in = proj[g.first].d_in, w = width(s, proj, g);
    for (int j = 0; j < g.count; ++j) {
      const ProjDims& p = proj[g.first + j];
      const bool own_call = !batched_with_previous(s.options, proj, g, j);
      sink.gemm(p.rank / t, p.d_out, N, own_call);  // dB
      sink.gemm(N, p.rank / t, p.d_out, own_call);  // dσ
    }
    if (s.config.arch == Arch::cola) sink.elementwise(static_cast<double>(N) * w, 3);
    if (s.options.grouping && g.count > 1) {
      sink.gemm(d_in, w, N);  // dA of the concatenation
      sink.elementwise(static_cast<double>(d_in) * w, 3);
      sink.gemm(N, d_in, w);  // dx
    } else {
      for (int j = 0; j < g.count; ++j) {
        sink.gemm(d_in, proj[g.first + j].rank / t, N);
        sink.gemm(N, d_in, proj[g.first + j].rank / t);
      }
    }
  }
};

}  // namespace

const LayoutCost& naive_tp_cost() {
  static const NaiveTpCost cost;
  return cost;
}

}  // namespace boostlm
