// naive-tp: the low-rank model under Megatron TP, the paper's "vanilla" baseline (SPEC §3.2).
//
// Each factorised projection is its own Megatron pair: A column-parallel over the rank, σ local,
// B row-parallel over the rank, then an all-reduce of the projection's full output. q, k and v are
// all-reduced to full width and attention runs over all heads on every rank, as the paper's
// released baseline does; norms and gate⊙up run replicated.
// Per block: forward 7 all-reduces, N·(3d + 2·kv + 2·d_ff) elements (N·(5d + 2·d_ff) without GQA);
// backward 4, N·(3d + d_ff): the partial input gradients of q/k/v are summed and all-reduced once,
// those of gate/up likewise, then o's and down's. With grouping (SPEC §3.5, so the comparison with
// btp stays fair) the forward outputs of q|k|v and of gate|up also share one all-reduce each:
// 4 forward all-reduces of the same elements. (The A factors still run as separate GEMMs.)
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

class NaiveTp final : public Layout {
 public:
  using Layout::Layout;

  LayoutKind kind() const override { return LayoutKind::naive_tp; }

  BlockSharding sharding() const override {
    BlockSharding s;
    s.dense_axis.fill(-1);
    s.a_axis.fill(1);  // A [d_in, r]: column-parallel over r
    s.b_axis.fill(0);  // B [r, d_out]: row-parallel over r
    return s;
  }

  int64_t residual_columns() const override { return config_.d_model; }

  void prepare(int64_t B, int64_t T) override {
    batch_ = B;
    seq_len_ = T;
    rope_ = make_rope_table(T, config_.head_dim(), config_.rope_theta);
    const int64_t N = B * T, d = config_.d_model, kv = config_.kv_dim(), ff = config_.d_ff;
    acts_.assign(slots(), {});
    for (auto& a : acts_) {
      for (int i = 0; i < kProjectionsPerBlock; ++i) {
        const int64_t rank = blocks_[first_layer_].proj[i].rank;  // local: r / t
        a.z[i].resize(N * rank);
        if (config_.arch == Arch::cola) a.h[i].resize(N * rank);
      }
      a.norm1.resize(N * d);
      a.rstd1.resize(N);
      a.q.resize(N * d);
      a.k.resize(N * kv);
      a.v.resize(N * kv);
      a.attn.resize(N * d);
      a.lse.resize(N * config_.n_heads);
      a.x_mid.resize(N * d);
      a.norm2.resize(N * d);
      a.rstd2.resize(N);
      a.gate.resize(N * ff);
      a.up.resize(N * ff);
      a.hidden.resize(N * ff);
    }
    partial_.resize(N * d);
    d_norm_.resize(N * d);
    d_q_.resize(N * d);
    d_k_.resize(N * kv);
    d_v_.resize(N * kv);
    d_attn_.resize(N * d);
    d_gate_.resize(N * ff);
    d_up_.resize(N * ff);
    d_hidden_.resize(N * ff);
    d_latent_.resize(
        N * std::max(blocks_[first_layer_].proj[q_].rank, blocks_[first_layer_].proj[gate_].rank));
  }

  void block_forward(int64_t layer, const float* x_in, float* x_out) override {
    Acts& a = acts_[slot(layer)];
    const BlockWeights& w = blocks_[layer];
    a.x_in = x_in;
    const int64_t B = batch_, T = seq_len_, N = B * T;
    const int64_t d = config_.d_model, kv = config_.kv_dim(), ff = config_.d_ff;
    // The partial product of this rank's r/t slice of the latent, summed to the full output.
    auto project = [&](int i, GemmInput x, float* y) {
      float* h = a.h[i].empty() ? a.z[i].data() : a.h[i].data();
      projection_forward(w.proj[i], x, N, a.z[i].data(), h, y, w.proj[i].d_out, compute_);
      tp_.all_reduce(y, N * w.proj[i].d_out);
    };
    // Grouping: the outputs of projections that read the same input share one all-reduce,
    // through a packed [N, Σ d_out] buffer.
    auto project_group = [&](std::initializer_list<std::pair<int, float*>> outputs, GemmInput x) {
      if (!options_.grouping) {
        for (auto [i, y] : outputs) project(i, x, y);
        return;
      }
      int64_t width = 0;
      for (auto [i, y] : outputs) width += w.proj[i].d_out;
      packed_.resize(N * width);
      int64_t c0 = 0;
      for (auto [i, y] : outputs) {
        float* h = a.h[i].empty() ? a.z[i].data() : a.h[i].data();
        projection_forward(w.proj[i], x, N, a.z[i].data(), h, packed_.data() + c0, width, compute_);
        c0 += w.proj[i].d_out;
      }
      tp_.all_reduce(packed_.data(), N * width);
      c0 = 0;
      for (auto [i, y] : outputs) {
        const int64_t cols = w.proj[i].d_out;
        for (int64_t n = 0; n < N; ++n)
          std::copy_n(packed_.data() + n * width + c0, cols, y + n * cols);
        c0 += cols;
      }
    };

    rmsnorm_forward(x_in, d, w.norm1, N, d, config_.rms_eps, a.norm1.data(), d, a.rstd1.data());
    const GemmInput norm1 = shared_input(a.norm1.data(), N, d, rounded_);
    project_group({{q_, a.q.data()}, {k_, a.k.data()}, {v_, a.v.data()}}, norm1);
    rope_forward(a.q.data(), d, B, T, config_.n_heads, rope_);
    rope_forward(a.k.data(), kv, B, T, config_.n_kv_heads, rope_);
    const AttentionShape shape{B, T, config_.n_heads, config_.n_kv_heads, config_.head_dim()};
    attention_forward(shape, a.q.data(), d, a.k.data(), kv, a.v.data(), kv, a.attn.data(), d,
                      a.lse.data());
    project(o_, {a.attn.data(), d}, partial_.data());
    add(x_in, partial_.data(), a.x_mid.data(), N * d);

    rmsnorm_forward(a.x_mid.data(), d, w.norm2, N, d, config_.rms_eps, a.norm2.data(), d,
                    a.rstd2.data());
    const GemmInput norm2 = shared_input(a.norm2.data(), N, d, rounded_);
    project_group({{gate_, a.gate.data()}, {up_, a.up.data()}}, norm2);
    swiglu_forward(a.gate.data(), a.up.data(), N * ff, config_.mlp_gate_act, a.hidden.data());
    project(down_, {a.hidden.data(), ff}, partial_.data());
    add(a.x_mid.data(), partial_.data(), x_out, N * d);
  }

  void block_backward(int64_t layer, float* dx) override {
    Acts& a = acts_[slot(layer)];
    const BlockWeights& w = blocks_[layer];
    const int64_t B = batch_, T = seq_len_, N = B * T;
    const int64_t d = config_.d_model, kv = config_.kv_dim(), ff = config_.d_ff;
    // dy is replicated; the input gradient from this rank's rank-slice is partial.
    auto back = [&](int i, GemmInput x, const float* dy, float* dxi, float beta) {
      const float* h = a.h[i].empty() ? a.z[i].data() : a.h[i].data();
      projection_backward(w.proj[i], x, N, a.z[i].data(), h, dy, w.proj[i].d_out, dxi,
                          w.proj[i].d_in, beta, d_latent_.data(), compute_);
    };

    back(down_, {a.hidden.data(), ff}, dx, d_hidden_.data(), 0.0f);
    tp_.all_reduce(d_hidden_.data(), N * ff);
    swiglu_backward(d_hidden_.data(), a.gate.data(), a.up.data(), N * ff, config_.mlp_gate_act,
                    d_gate_.data(), d_up_.data());
    const GemmInput norm2 = shared_input(a.norm2.data(), N, d, rounded_);
    back(gate_, norm2, d_gate_.data(), d_norm_.data(), 0.0f);
    back(up_, norm2, d_up_.data(), d_norm_.data(), 1.0f);
    tp_.all_reduce(d_norm_.data(), N * d);  // gate and up merged
    rmsnorm_backward(d_norm_.data(), d, a.x_mid.data(), d, w.norm2, a.rstd2.data(), N, d, dx, d,
                     w.dnorm2, /*accumulate=*/true);

    back(o_, {a.attn.data(), d}, dx, d_attn_.data(), 0.0f);
    tp_.all_reduce(d_attn_.data(), N * d);
    const AttentionShape shape{B, T, config_.n_heads, config_.n_kv_heads, config_.head_dim()};
    attention_backward(shape, a.q.data(), d, a.k.data(), kv, a.v.data(), kv, a.attn.data(), d,
                       a.lse.data(), d_attn_.data(), d, d_q_.data(), d, d_k_.data(), kv,
                       d_v_.data(), kv);
    rope_backward(d_q_.data(), d, B, T, config_.n_heads, rope_);
    rope_backward(d_k_.data(), kv, B, T, config_.n_kv_heads, rope_);
    const GemmInput norm1 = shared_input(a.norm1.data(), N, d, rounded_);
    back(q_, norm1, d_q_.data(), d_norm_.data(), 0.0f);
    back(k_, norm1, d_k_.data(), d_norm_.data(), 1.0f);
    back(v_, norm1, d_v_.data(), d_norm_.data(), 1.0f);
    tp_.all_reduce(d_norm_.data(), N * d);  // q, k and v merged
    rmsnorm_backward(d_norm_.data(), d, a.x_in, d, w.norm1, a.rstd1.data(), N, d, dx, d, w.dnorm1,
                     /*accumulate=*/true);
  }

  int64_t slot_bytes() const override {
    return acts_.empty() ? 0 : activation_bytes() / static_cast<int64_t>(acts_.size());
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
  struct Acts {
    const float* x_in = nullptr;
    std::array<std::vector<float>, kProjectionsPerBlock> z, h;  // latents, [N, r/t]
    std::vector<float> norm1, rstd1, q, k, v, attn, lse, x_mid, norm2, rstd2, gate, up, hidden;
  };
  std::vector<Acts> acts_;
  RopeTable rope_;
  std::vector<float> packed_, partial_, d_norm_, d_q_, d_k_, d_v_, d_attn_, d_gate_, d_up_,
      d_hidden_, d_latent_;
  std::vector<bf16_t> rounded_;
};

}  // namespace

std::unique_ptr<Layout> make_naive_tp(const ModelConfig& config, Communicator& tp) {
  return std::make_unique<NaiveTp>(config, tp);
}

}  // namespace boostlm
