// btp's cost (SPEC §3.3–3.6): BOOST's layout. The residual is hidden-sharded ([N, d/t] per rank),
// A row-parallel and B column-parallel, so only the rank-r latents are all-reduced; the
// code is its block.cpp beside this file.
#include "parallel/layout_cost.h"

namespace boostlm {

namespace {

using Projections = std::array<ProjDims, kProjectionsPerBlock>;

// Σ rank over a group's members: its latent columns.
int64_t group_rank(const Projections& proj, const ProjGroup& g) {
  int64_t width = 0;
  for (int j = 0; j < g.count; ++j) width += proj[g.first + j].rank;
  return width;
}

void group_forward(const BlockSetting& s, const Projections& proj, const ProjGroup& g,
                   WorkSink& sink) {
  const int64_t N = s.tokens, t = s.tp, d_in = proj[g.first].d_in / t;
  const double n = static_cast<double>(N);
  const bool online = g.normed && s.options.online_norm;
  if (g.normed) {
    sink.elementwise(n * d_in, 1, 1);               // Σx² of the local shard (x: the residual)
    sink.elementwise(n * d_in, online ? 2 : 3, 1);  // x ⊙ γ (online), or the synchronous norm
  }
  const int64_t width = group_rank(proj, g);
  if (s.options.grouping && g.count > 1) {
    sink.gemm(N, width, d_in);
    sink.elementwise(static_cast<double>(d_in) * width, 2);  // the concatenated A, each forward
  } else {
    for (int j = 0; j < g.count; ++j) sink.gemm(N, proj[g.first + j].rank, d_in);
  }
  sink.elementwise(n * width, 2);  // unpacking the all-reduced latents (÷ rms when online)
  if (s.config.arch == Arch::cola) sink.elementwise(n * width, 2);  // σ(z), replicated
  for (int j = 0; j < g.count; ++j) {
    const ProjDims& p = proj[g.first + j];
    sink.gemm(N, p.d_out / t, p.rank, !batched_with_previous(s.options, proj, g, j));
  }
}

void group_backward(const BlockSetting& s, const Projections& proj, const ProjGroup& g,
                    WorkSink& sink) {
  const int64_t N = s.tokens, t = s.tp, d_in = proj[g.first].d_in / t;
  const double n = static_cast<double>(N);
  const bool grouped = s.options.grouping && g.count > 1;
  for (int j = 0; j < g.count; ++j) {
    const ProjDims& p = proj[g.first + j];
    const bool own_call = !batched_with_previous(s.options, proj, g, j);
    sink.gemm(p.rank, p.d_out / t, N, own_call);                   // dB
    sink.gemm(N, p.rank, p.d_out / t, own_call);                   // dσ
    if (!grouped && g.count > 1) sink.elementwise(n * p.rank, 4);  // its columns, gathered
  }
  const int64_t width = group_rank(proj, g);
  if (s.config.arch == Arch::cola) sink.elementwise(n * width, 3);  // σ' of the group
  if (g.normed && s.options.online_norm) {
    sink.elementwise(n * width, 3);  // Σ dZ⊙Z per token and dZ·rstd
    sink.elementwise(n * d_in, 2, 1);  // x ⊙ γ again
  }
  if (grouped) {
    sink.gemm(d_in, width, N);
    sink.elementwise(static_cast<double>(d_in) * width, 3);  // each member's dA, taken apart
    sink.gemm(N, d_in, width);
  } else {
    for (int j = 0; j < g.count; ++j) {
      sink.gemm(d_in, proj[g.first + j].rank, N);
      sink.gemm(N, d_in, proj[g.first + j].rank);
    }
  }
  if (g.normed) {
    sink.elementwise(n * d_in, 4, 1);  // dx += … (x: the residual)
    sink.elementwise(n * d_in, 2, 1);  // dγ
  }
}

class BtpCost final : public LayoutCost {
 public:
  // The 7 latents of N·r (each family at its own rank: Σ r = latent_columns) each way, in 4
  // all-reduces grouped (§3.5). Online-RMSNorm (§3.4): each norm's per-token statistic is one more
  // column of the latent all-reduce after it (+2N forward); the synchronous norm instead
  // all-reduces N before each norm and N in each norm's backward.
  CommCounts block_comm(const BlockSetting& s, bool backward) const override {
    CommCounts out;
    const ModelConfig& c = s.config;
    const int64_t N = s.tokens;
    const int64_t calls = s.options.grouping ? 4 : 7;
    const int64_t stats = s.options.online_norm && !backward ? 2 : 0;  // Σx² with q and gate
    // In bf16 training the latents cross as bf16 and the statistics as fp32, in the same calls.
    add_collective(out, Collective::all_reduce, calls, 0);
    out[Collective::all_reduce].bytes += N * latent_columns(c) * activation_bytes(s.options) +
                                         N * stats * 4;
    if (!s.options.online_norm) add_collective(out, Collective::all_reduce, 2, 2 * N);
    return out;
  }

  void block_work(const BlockSetting& s, bool backward, WorkSink& sink) const override {
    const ModelConfig& c = s.config;
    const auto proj = block_projections(c);
    const double N = static_cast<double>(s.tokens);
    const int64_t t = s.tp, dl = c.d_model / t, kvl = c.kv_dim() / t, ffl = c.d_ff / t;
    for (const ProjGroup& g : kProjGroups) {
      if (backward)
        group_backward(s, proj, g, sink);
      else
        group_forward(s, proj, g, sink);
    }
    sink.attention(c.n_heads / t, c.n_kv_heads / t, backward);
    rope_work(sink, s.tokens, dl, kvl);
    sink.elementwise(N * ffl, backward ? 5 : 3);  // SwiGLU
    if (!backward)
      for (int i = 0; i < 2; ++i) sink.elementwise(N * dl, 3, 2);  // residual adds: x, sum
  }

  // block.cpp's recompute(): B of q, k, v, gate, up, σ of every latent, RoPE, attention, SwiGLU —
  // local work only, no collective (SPEC §3.6).
  void lowrank_recompute_work(const BlockSetting& s, WorkSink& sink) const override {
    const ModelConfig& c = s.config;
    const auto proj = block_projections(c);
    const double N = static_cast<double>(s.tokens);
    const int64_t t = s.tp;
    for (const ProjGroup& g : {kProjGroups[0], kProjGroups[2]})  // q|k|v and gate|up
      for (int j = 0; j < g.count; ++j)
        sink.gemm(s.tokens, proj[g.first + j].d_out / t, proj[g.first + j].rank,
                  !batched_with_previous(s.options, proj, g, j));
    if (c.arch == Arch::cola)  // σ of each group's latents
      for (const ProjGroup& g : kProjGroups) sink.elementwise(N * group_rank(proj, g), 2);
    if (!s.options.online_norm)
      for (int i = 0; i < 2; ++i) sink.elementwise(N * c.d_model / t, 3, 1);
    rope_work(sink, s.tokens, c.d_model / t, c.kv_dim() / t);
    sink.attention(c.n_heads / t, c.n_kv_heads / t, false);
    sink.elementwise(N * c.d_ff / t, 3);
  }

  // The latents z, x_mid and two rstd always; the intermediates too unless lowrank recomputation
  // rebuilds them.
  int64_t slot_elements(const BlockSetting& s) const override {
    const int64_t latents = s.tokens * (latent_columns(s.config) + s.config.d_model / s.tp + 2);
    return latents + lax_slot_elements(s.config, s.tokens, latent_columns(s.config)) +
           (s.options.recompute == Recompute::lowrank ? 0 : intermediates(s));
  }

  int64_t lowrank_area_elements(const BlockSetting& s) const override { return intermediates(s); }

  // The whole latents (r wide on every rank), kept in bf16 in bf16 training.
  int64_t bf16_latent_columns(const ModelConfig& c, int) const override {
    return latent_columns(c);
  }

  // Every projection split, and the norms too (over the hidden dimension).
  int64_t block_param_elements(const ModelConfig& c, int tp) const override {
    return sharded_block_params(c, tp, true);
  }

 private:
  // q, k, v, attn, lse, gate, up at local widths; the synchronous norms' outputs.
  static int64_t intermediates(const BlockSetting& s) {
    const ModelConfig& c = s.config;
    const int64_t t = s.tp;
    const int64_t dl = c.d_model / t, kvl = c.kv_dim() / t, ffl = c.d_ff / t, hl = c.n_heads / t;
    int64_t n = dl + 2 * kvl + dl + hl + 2 * ffl;
    if (!s.options.online_norm) n += 2 * dl;
    return s.tokens * n;
  }
};

}  // namespace

const LayoutCost& btp_cost() {
  static const BtpCost cost;
  return cost;
}

}  // namespace boostlm
