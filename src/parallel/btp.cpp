// btp: Bottleneck-aware Tensor Parallelism (SPEC §3.3), BOOST's layout.
//
// The residual stream is hidden-sharded: this rank holds columns [i·d/t, (i+1)·d/t) of X. Each
// low-rank projection is split at its bottleneck: A is row-parallel (the rows of this rank's input
// columns) and yields a partial latent x_i A_i [N, r]; one all-reduce of that r-wide latent gives
// every rank the whole latent, σ runs replicated, and B is column-parallel (this rank's heads for
// q/k/v, its d_ff slice for gate/up, its d slice for o/down), so its output is already sharded the
// way the next row-parallel A reads it. Attention runs on local heads, gate⊙up on the local d_ff
// slice, residual adds are local.
// Backward: a latent's gradient dy_i B_iᵀ is partial (B is column-parallel), so each latent gets
// one all-reduce of N·r; dA and the input gradient then need nothing more.
// Per block: 7 all-reduces of N·r forward and 7 backward. The norms here are the plain synchronous
// RMSNorm on a sharded row: one all-reduce of the per-token sum of squares (N) before each norm in
// forward, and one of the per-token dot product (N) in each norm's backward.
#include <algorithm>

#include "core/error.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "parallel/elementwise.h"
#include "parallel/layout.h"

namespace boostlm {

namespace {

class Btp final : public Layout {
 public:
  using Layout::Layout;

  LayoutKind kind() const override { return LayoutKind::btp; }

  BlockSharding sharding() const override {
    BlockSharding s;
    s.dense_axis.fill(-1);
    s.a_axis.fill(0);  // A [d_in, r]: row-parallel over the input
    s.b_axis.fill(1);  // B [r, d_out]: column-parallel over the output
    s.norms_sharded = true;
    return s;
  }

  int64_t residual_columns() const override { return config_.d_model / tp_.size(); }

  void prepare(int64_t B, int64_t T) override {
    batch_ = B;
    seq_len_ = T;
    rope_ = make_rope_table(T, config_.head_dim(), config_.rope_theta);
    const int64_t N = B * T, t = tp_.size();
    heads_ = config_.n_heads / t;
    kv_heads_ = config_.n_kv_heads / t;
    const int64_t dl = config_.d_model / t, kvl = kv_heads_ * config_.head_dim(),
                  ffl = config_.d_ff / t;
    acts_.assign(config_.n_layers, {});
    for (auto& a : acts_) {
      for (int i = 0; i < kProjectionsPerBlock; ++i) {
        a.z[i].resize(N * blocks_[0].proj[i].rank);
        if (config_.arch == Arch::cola) a.h[i].resize(N * blocks_[0].proj[i].rank);
      }
      a.norm1.resize(N * dl);
      a.rstd1.resize(N);
      a.q.resize(N * dl);
      a.k.resize(N * kvl);
      a.v.resize(N * kvl);
      a.attn.resize(N * dl);
      a.lse.resize(N * heads_);
      a.x_mid.resize(N * dl);
      a.norm2.resize(N * dl);
      a.rstd2.resize(N);
      a.gate.resize(N * ffl);
      a.up.resize(N * ffl);
      a.hidden.resize(N * ffl);
    }
    stat_.resize(N);
    partial_.resize(N * dl);
    d_norm_.resize(N * dl);
    d_q_.resize(N * dl);
    d_k_.resize(N * kvl);
    d_v_.resize(N * kvl);
    d_attn_.resize(N * dl);
    d_gate_.resize(N * ffl);
    d_up_.resize(N * ffl);
    d_hidden_.resize(N * ffl);
    d_latent_.resize(N * std::max(config_.attn_rank, config_.mlp_rank));
  }

  void block_forward(int64_t layer, const float* x_in, float* x_out) override {
    Acts& a = acts_[layer];
    const BlockWeights& w = blocks_[layer];
    a.x_in = x_in;
    const int64_t B = batch_, T = seq_len_, N = B * T;
    const int64_t dl = a.q.size() / N, kvl = a.k.size() / N, ffl = a.gate.size() / N;
    // Row-parallel A, all-reduce of the latent, σ, column-parallel B.
    auto project = [&](int i, GemmInput x, float* y, int64_t ldy) {
      const ProjectionWeights& p = w.proj[i];
      lowrank_down_forward(p, x, N, a.z[i].data(), compute_);
      tp_.all_reduce(a.z[i].data(), N * p.rank);
      const float* latent = lowrank_activate(p, a.z[i].data(), a.h[i].data(), N);
      lowrank_up_forward(p, latent, N, y, ldy, compute_);
    };

    norm_forward(x_in, w.norm1, a.norm1.data(), a.rstd1.data());
    const GemmInput norm1 = shared_input(a.norm1.data(), N, dl, rounded_);
    project(q_, norm1, a.q.data(), dl);
    project(k_, norm1, a.k.data(), kvl);
    project(v_, norm1, a.v.data(), kvl);
    rope_forward(a.q.data(), dl, B, T, heads_, rope_);
    rope_forward(a.k.data(), kvl, B, T, kv_heads_, rope_);
    const AttentionShape shape{B, T, heads_, kv_heads_, config_.head_dim()};
    attention_forward(shape, a.q.data(), dl, a.k.data(), kvl, a.v.data(), kvl, a.attn.data(), dl,
                      a.lse.data());
    project(o_, {a.attn.data(), dl}, partial_.data(), dl);
    add(x_in, partial_.data(), a.x_mid.data(), N * dl);

    norm_forward(a.x_mid.data(), w.norm2, a.norm2.data(), a.rstd2.data());
    const GemmInput norm2 = shared_input(a.norm2.data(), N, dl, rounded_);
    project(gate_, norm2, a.gate.data(), ffl);
    project(up_, norm2, a.up.data(), ffl);
    swiglu_forward(a.gate.data(), a.up.data(), N * ffl, config_.mlp_gate_act, a.hidden.data());
    project(down_, {a.hidden.data(), ffl}, partial_.data(), dl);
    add(a.x_mid.data(), partial_.data(), x_out, N * dl);
  }

  void block_backward(int64_t layer, float* dx) override {
    Acts& a = acts_[layer];
    const BlockWeights& w = blocks_[layer];
    const int64_t B = batch_, T = seq_len_, N = B * T;
    const int64_t dl = a.q.size() / N, kvl = a.k.size() / N, ffl = a.gate.size() / N;
    // dB += latentᵀ dy;  the latent's gradient dy Bᵀ is partial: all-reduce it;  then dA and the
    // input gradient (this rank's input columns) locally.
    auto back = [&](int i, GemmInput x, const float* dy, int64_t lddy, float* dxi, int64_t lddx,
                    float beta) {
      const ProjectionWeights& p = w.proj[i];
      const float* latent = a.h[i].empty() ? a.z[i].data() : a.h[i].data();
      lowrank_up_backward(p, latent, dy, lddy, N, d_latent_.data(), compute_);
      tp_.all_reduce(d_latent_.data(), N * p.rank);
      lowrank_down_backward(p, x, a.z[i].data(), d_latent_.data(), N, dxi, lddx, beta, compute_);
    };

    back(down_, {a.hidden.data(), ffl}, dx, dl, d_hidden_.data(), ffl, 0.0f);
    swiglu_backward(d_hidden_.data(), a.gate.data(), a.up.data(), N * ffl, config_.mlp_gate_act,
                    d_gate_.data(), d_up_.data());
    const GemmInput norm2 = shared_input(a.norm2.data(), N, dl, rounded_);
    back(gate_, norm2, d_gate_.data(), ffl, d_norm_.data(), dl, 0.0f);
    back(up_, norm2, d_up_.data(), ffl, d_norm_.data(), dl, 1.0f);
    norm_backward(d_norm_.data(), a.x_mid.data(), w.norm2, w.dnorm2, a.rstd2.data(), dx);

    back(o_, {a.attn.data(), dl}, dx, dl, d_attn_.data(), dl, 0.0f);
    const AttentionShape shape{B, T, heads_, kv_heads_, config_.head_dim()};
    attention_backward(shape, a.q.data(), dl, a.k.data(), kvl, a.v.data(), kvl, a.attn.data(), dl,
                       a.lse.data(), d_attn_.data(), dl, d_q_.data(), dl, d_k_.data(), kvl,
                       d_v_.data(), kvl);
    rope_backward(d_q_.data(), dl, B, T, heads_, rope_);
    rope_backward(d_k_.data(), kvl, B, T, kv_heads_, rope_);
    const GemmInput norm1 = shared_input(a.norm1.data(), N, dl, rounded_);
    back(q_, norm1, d_q_.data(), dl, d_norm_.data(), dl, 0.0f);
    back(k_, norm1, d_k_.data(), kvl, d_norm_.data(), dl, 1.0f);
    back(v_, norm1, d_v_.data(), kvl, d_norm_.data(), dl, 1.0f);
    norm_backward(d_norm_.data(), a.x_in, w.norm1, w.dnorm1, a.rstd1.data(), dx);
  }

  int64_t activation_bytes() const override {
    int64_t n = 0;
    for (const auto& a : acts_) {
      n += a.norm1.size() + a.rstd1.size() + a.q.size() + a.k.size() + a.v.size() + a.attn.size() +
           a.lse.size() + a.x_mid.size() + a.norm2.size() + a.rstd2.size() + a.gate.size() +
           a.up.size() + a.hidden.size();
      for (int i = 0; i < kProjectionsPerBlock; ++i) n += a.z[i].size() + a.h[i].size();
    }
    return n * static_cast<int64_t>(sizeof(float));
  }

 private:
  // Synchronous RMSNorm of a hidden-sharded row: Σx² over this rank's columns, all-reduced.
  void norm_forward(const float* x, const float* gamma, float* y, float* rstd) {
    const int64_t N = batch_ * seq_len_, dl = residual_columns();
    rmsnorm_partial_sum_squares(x, dl, N, dl, stat_.data());
    tp_.all_reduce(stat_.data(), N);
    rmsnorm_rstd(stat_.data(), N, config_.d_model, config_.rms_eps, rstd);
    rmsnorm_apply(x, dl, gamma, rstd, N, dl, y, dl);
  }

  // dx += ∂L/∂x; its row term needs Σ dy⊙γ⊙x over the whole row: one all-reduce of N.
  void norm_backward(const float* dy, const float* x, const float* gamma, float* dgamma,
                     const float* rstd, float* dx) {
    const int64_t N = batch_ * seq_len_, dl = residual_columns();
    rmsnorm_partial_backward_dot(dy, dl, x, dl, gamma, N, dl, stat_.data());
    tp_.all_reduce(stat_.data(), N);
    rmsnorm_backward_apply(dy, dl, x, dl, gamma, rstd, stat_.data(), N, dl, config_.d_model, dx, dl,
                           dgamma, /*accumulate=*/true);
  }

  struct Acts {
    const float* x_in = nullptr;
    std::array<std::vector<float>, kProjectionsPerBlock> z, h;  // all-reduced latents, [N, r]
    std::vector<float> norm1, rstd1, q, k, v, attn, lse, x_mid, norm2, rstd2, gate, up, hidden;
  };
  std::vector<Acts> acts_;
  int64_t heads_ = 0, kv_heads_ = 0;
  RopeTable rope_;
  std::vector<float> stat_, partial_, d_norm_, d_q_, d_k_, d_v_, d_attn_, d_gate_, d_up_, d_hidden_,
      d_latent_;
  std::vector<bf16_t> rounded_;
};

}  // namespace

std::unique_ptr<Layout> make_btp(const ModelConfig& config, Communicator& tp) {
  return std::make_unique<Btp>(config, tp);
}

}  // namespace boostlm
