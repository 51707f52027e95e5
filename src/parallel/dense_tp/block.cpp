// dense-tp: Megatron tensor parallelism for the full-rank model (SPEC §3.1, baseline 1).
//
// The residual stream is replicated [N, d]. Q, K, V, Gate, Up are column-parallel (this rank holds
// the output rows of W for its heads / its d_ff slice); O and Down are row-parallel (the input
// columns) and their partial outputs are all-reduced. Norms are replicated.
// Per block: forward 2 all-reduces of N·d (after O and Down); backward 2 all-reduces of N·d (the
// partial input gradients of the column-parallel projections, before each norm's backward).
#include <algorithm>

#include "core/error.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/elementwise.h"
#include "parallel/layout.h"

namespace boostlm {

namespace {

class DenseTp final : public Layout {
 public:
  using Layout::Layout;

  LayoutKind kind() const override { return LayoutKind::dense_tp; }

  BlockSharding sharding() const override {
    BlockSharding s;
    s.dense_axis = {0, 0, 0, 1, 0, 0, 1};  // column-parallel q,k,v,gate,up; row-parallel o,down
    s.a_axis.fill(-1);
    s.b_axis.fill(-1);
    return s;
  }

  int64_t residual_columns() const override { return config_.d_model; }

  void allocate(int64_t B, int64_t T) override {
    const int64_t N = B * T, d = config_.d_model, t = tp_.size();
    heads_ = config_.n_heads / t;
    kv_heads_ = config_.n_kv_heads / t;
    const int64_t dl = heads_ * config_.head_dim(), kvl = kv_heads_ * config_.head_dim(),
                  ffl = config_.d_ff / t;
    acts_.assign(slots(), {});
    for (auto& a : acts_) {
      a.norm1.resize(N * d);
      a.rstd1.resize(N);
      a.q.resize(N * dl);
      a.k.resize(N * kvl);
      a.v.resize(N * kvl);
      a.attn.resize(N * dl);
      a.lse.resize(N * heads_);
      a.x_mid.resize(N * d);
      a.norm2.resize(N * d);
      a.rstd2.resize(N);
      a.gate.resize(N * ffl);
      a.up.resize(N * ffl);
      a.hidden.resize(N * ffl);
    }
    partial_.resize(N * d);
    d_norm_.resize(N * d);
    d_q_.resize(N * dl);
    d_k_.resize(N * kvl);
    d_v_.resize(N * kvl);
    d_attn_.resize(N * dl);
    d_gate_.resize(N * ffl);
    d_up_.resize(N * ffl);
    d_hidden_.resize(N * ffl);
  }

  void block_forward(int64_t layer, const float* x_in, float* x_out) override {
    Acts& a = acts_[slot(layer)];
    const BlockWeights& w = blocks_[layer];
    a.x_in = x_in;
    const int64_t B = batch_, T = seq_len_, N = B * T, d = config_.d_model;
    const int64_t dl = a.q.size() / N, kvl = a.k.size() / N, ffl = a.gate.size() / N;
    auto project = [&](int i, GemmInput x, float* y, int64_t ldy) {
      projection_forward(w.proj[i], x, N, nullptr, nullptr, y, ldy, compute_);
    };

    rmsnorm_forward(x_in, d, w.norm1, N, d, config_.rms_eps, a.norm1.data(), d, a.rstd1.data());
    const GemmInput norm1 = shared_input(a.norm1.data(), N, d, rounded_);
    project(q_, norm1, a.q.data(), dl);
    project(k_, norm1, a.k.data(), kvl);
    project(v_, norm1, a.v.data(), kvl);
    rope_forward(a.q.data(), dl, B, T, heads_, rope_);
    rope_forward(a.k.data(), kvl, B, T, kv_heads_, rope_);
    const AttentionShape shape{B, T, heads_, kv_heads_, config_.head_dim()};
    attention_forward(shape, a.q.data(), dl, a.k.data(), kvl, a.v.data(), kvl, a.attn.data(), dl,
                      a.lse.data());
    project(o_, {a.attn.data(), dl}, partial_.data(), d);
    tp_.all_reduce(partial_.data(), N * d);  // row-parallel O: Σ over ranks
    add(x_in, partial_.data(), a.x_mid.data(), N * d);

    rmsnorm_forward(a.x_mid.data(), d, w.norm2, N, d, config_.rms_eps, a.norm2.data(), d,
                    a.rstd2.data());
    const GemmInput norm2 = shared_input(a.norm2.data(), N, d, rounded_);
    project(gate_, norm2, a.gate.data(), ffl);
    project(up_, norm2, a.up.data(), ffl);
    swiglu_forward(a.gate.data(), a.up.data(), N * ffl, config_.mlp_gate_act, a.hidden.data());
    project(down_, {a.hidden.data(), ffl}, partial_.data(), d);
    tp_.all_reduce(partial_.data(), N * d);  // row-parallel Down: Σ over ranks
    add(a.x_mid.data(), partial_.data(), x_out, N * d);
  }

  void block_backward(int64_t layer, float* dx) override {
    Acts& a = acts_[slot(layer)];
    const BlockWeights& w = blocks_[layer];
    const int64_t B = batch_, T = seq_len_, N = B * T, d = config_.d_model;
    const int64_t dl = a.q.size() / N, kvl = a.k.size() / N, ffl = a.gate.size() / N;
    auto back = [&](int i, GemmInput x, const float* dy, int64_t lddy, float* dxi, int64_t lddx,
                    float beta) {
      projection_backward(w.proj[i], x, N, nullptr, nullptr, dy, lddy, dxi, lddx, beta, nullptr,
                          compute_);
    };

    // MLP. dx (replicated) is ∂L/∂(Down output); Down's input is this rank's d_ff slice.
    back(down_, {a.hidden.data(), ffl}, dx, d, d_hidden_.data(), ffl, 0.0f);
    swiglu_backward(d_hidden_.data(), a.gate.data(), a.up.data(), N * ffl, config_.mlp_gate_act,
                    d_gate_.data(), d_up_.data());
    const GemmInput norm2 = shared_input(a.norm2.data(), N, d, rounded_);
    back(gate_, norm2, d_gate_.data(), ffl, d_norm_.data(), d, 0.0f);
    back(up_, norm2, d_up_.data(), ffl, d_norm_.data(), d, 1.0f);
    tp_.all_reduce(d_norm_.data(), N * d);  // column-parallel inputs: Σ of partial gradients
    rmsnorm_backward(d_norm_.data(), d, a.x_mid.data(), d, w.norm2, a.rstd2.data(), N, d, dx, d,
                     w.dnorm2, /*accumulate=*/true);

    // Attention.
    back(o_, {a.attn.data(), dl}, dx, d, d_attn_.data(), dl, 0.0f);
    const AttentionShape shape{B, T, heads_, kv_heads_, config_.head_dim()};
    attention_backward(shape, a.q.data(), dl, a.k.data(), kvl, a.v.data(), kvl, a.attn.data(), dl,
                       a.lse.data(), d_attn_.data(), dl, d_q_.data(), dl, d_k_.data(), kvl,
                       d_v_.data(), kvl);
    rope_backward(d_q_.data(), dl, B, T, heads_, rope_);
    rope_backward(d_k_.data(), kvl, B, T, kv_heads_, rope_);
    const GemmInput norm1 = shared_input(a.norm1.data(), N, d, rounded_);
    back(q_, norm1, d_q_.data(), dl, d_norm_.data(), d, 0.0f);
    back(k_, norm1, d_k_.data(), kvl, d_norm_.data(), d, 1.0f);
    back(v_, norm1, d_v_.data(), kvl, d_norm_.data(), d, 1.0f);
    tp_.all_reduce(d_norm_.data(), N * d);
    rmsnorm_backward(d_norm_.data(), d, a.x_in, d, w.norm1, a.rstd1.data(), N, d, dx, d, w.dnorm1,
                     /*accumulate=*/true);
  }

  int64_t slot_bytes() const override {
    return acts_.empty() ? 0 : activation_bytes() / static_cast<int64_t>(acts_.size());
  }

  int64_t activation_bytes() const override {
    int64_t n = 0;
    for (const auto& a : acts_)
      n += a.norm1.size() + a.rstd1.size() + a.q.size() + a.k.size() + a.v.size() + a.attn.size() +
           a.lse.size() + a.x_mid.size() + a.norm2.size() + a.rstd2.size() + a.gate.size() +
           a.up.size() + a.hidden.size();
    return n * static_cast<int64_t>(sizeof(float));
  }

 private:
  struct Acts {
    const float* x_in = nullptr;
    std::vector<float> norm1, rstd1, q, k, v, attn, lse, x_mid, norm2, rstd2, gate, up, hidden;
  };
  std::vector<Acts> acts_;
  int64_t heads_ = 0, kv_heads_ = 0;
  std::vector<float> partial_, d_norm_, d_q_, d_k_, d_v_, d_attn_, d_gate_, d_up_, d_hidden_;
  std::vector<bf16_t> rounded_;
};

}  // namespace

std::unique_ptr<Layout> make_dense_tp(const ModelConfig& config, Communicator& tp) {
  return std::make_unique<DenseTp>(config, tp);
}

}  // namespace boostlm
