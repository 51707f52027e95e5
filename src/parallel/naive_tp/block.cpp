// naive-tp: the low-rank model under Megatron TP, the paper's "vanilla" baseline (SPEC §3.2).
//
// Each factorised projection is its own Megatron pair: A column-parallel over the rank, σ local,
// B row-parallel over the rank, then an all-reduce of the projection's full output. q, k and v are
// all-reduced to full width and attention runs over all heads on every rank, as the paper's
// released baseline does; norms and gate⊙up run replicated.
// Per block: forward 7 all-reduces, N·(3d + 2·kv + 2·d_ff) elements (N·(5d + 2·d_ff) without GQA);
// backward 4, N·(3d + d_ff): the partial input gradients of q/k/v are summed and all-reduced once,
// those of gate/up likewise, then o's and down's. With grouping (SPEC §3.5, so the comparison with
// btp stays fair) the projections that read one input run together: their A column shards as one
// GEMM on the concatenation [d, Σ r/t], their B row shards as one batched GEMM over the members of
// one shape (as btp's, forward and backward), and the forward outputs of q|k|v and of gate|up
// share one all-reduce each: 4 forward all-reduces of the same elements.
#include <algorithm>

#include "core/error.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
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

  void allocate(int64_t B, int64_t T) override {
    const int64_t N = B * T, d = config_.d_model, kv = config_.kv_dim(), ff = config_.d_ff;
    acts_.assign(slots(), {});
    int64_t widest = 0;
    for (auto& a : acts_) {
      for (const Group& g : kGroups) {
        const int64_t width = group_width(members(first_layer_, g));  // local: Σ r/t
        widest = std::max(widest, width);
        a.z[g.index].resize(N * width);
        if (config_.arch == Arch::cola) a.h[g.index].resize(N * width);
      }
      a.norm1.resize(N * d);
      a.rstd1.resize(N);
      a.qkv.resize(N * (d + 2 * kv));
      a.attn.resize(N * d);
      a.lse.resize(N * config_.n_heads);
      a.x_mid.resize(N * d);
      a.norm2.resize(N * d);
      a.rstd2.resize(N);
      a.gate_up.resize(2 * N * ff);
      a.hidden.resize(N * ff);
    }
    partial_.resize(N * d);
    d_norm_.resize(N * d);
    d_qkv_.resize(N * (d + 2 * kv));
    d_attn_.resize(N * d);
    d_gate_up_.resize(2 * N * ff);
    d_hidden_.resize(N * ff);
    d_latent_.resize(N * widest);
  }

  void block_forward(int64_t layer, const float* x_in, float* x_out) override {
    Acts& a = acts_[slot(layer)];
    const BlockWeights& w = blocks_[layer];
    a.x_in = x_in;
    const int64_t B = batch_, T = seq_len_, N = B * T;
    const int64_t d = config_.d_model, kv = config_.kv_dim(), ff = config_.d_ff;
    concatenate_groups(layer);

    rmsnorm_forward(x_in, d, w.norm1, N, d, config_.rms_eps, a.norm1.data(), d, a.rstd1.data());
    const GemmInput norm1 = shared_input(a.norm1.data(), N, d, rounded_);
    const Qkv qkv = split_qkv(a.qkv);
    project(layer, kQkv, norm1, a, {qkv.q, qkv.k, qkv.v});
    rope_forward(qkv.q, d, B, T, config_.n_heads, rope_);
    rope_forward(qkv.k, kv, B, T, config_.n_kv_heads, rope_);
    const AttentionShape shape{B, T, config_.n_heads, config_.n_kv_heads, config_.head_dim()};
    attention_forward(shape, qkv.q, d, qkv.k, kv, qkv.v, kv, a.attn.data(), d, a.lse.data());
    project(layer, kO, {a.attn.data(), d}, a, {partial_.data()});
    add(x_in, partial_.data(), a.x_mid.data(), N * d);

    rmsnorm_forward(a.x_mid.data(), d, w.norm2, N, d, config_.rms_eps, a.norm2.data(), d,
                    a.rstd2.data());
    const GemmInput norm2 = shared_input(a.norm2.data(), N, d, rounded_);
    float *gate = a.gate_up.data(), *up = gate + N * ff;
    project(layer, kGateUp, norm2, a, {gate, up});
    swiglu_forward(gate, up, N * ff, config_.mlp_gate_act, a.hidden.data());
    project(layer, kDown, {a.hidden.data(), ff}, a, {partial_.data()});
    add(a.x_mid.data(), partial_.data(), x_out, N * d);
  }

  void block_backward(int64_t layer, float* dx) override {
    Acts& a = acts_[slot(layer)];
    const BlockWeights& w = blocks_[layer];
    const int64_t B = batch_, T = seq_len_, N = B * T;
    const int64_t d = config_.d_model, kv = config_.kv_dim(), ff = config_.d_ff;

    project_backward(layer, kDown, {a.hidden.data(), ff}, a, {dx}, d_hidden_.data());
    tp_.all_reduce(d_hidden_.data(), N * ff);
    const float *gate = a.gate_up.data(), *up = gate + N * ff;
    float *d_gate = d_gate_up_.data(), *d_up = d_gate + N * ff;
    swiglu_backward(d_hidden_.data(), gate, up, N * ff, config_.mlp_gate_act, d_gate, d_up);
    const GemmInput norm2 = shared_input(a.norm2.data(), N, d, rounded_);
    project_backward(layer, kGateUp, norm2, a, {d_gate, d_up}, d_norm_.data());
    tp_.all_reduce(d_norm_.data(), N * d);  // gate and up merged
    rmsnorm_backward(d_norm_.data(), d, a.x_mid.data(), d, w.norm2, a.rstd2.data(), N, d, dx, d,
                     w.dnorm2, /*accumulate=*/true);

    project_backward(layer, kO, {a.attn.data(), d}, a, {dx}, d_attn_.data());
    tp_.all_reduce(d_attn_.data(), N * d);
    const Qkv qkv = split_qkv(a.qkv), dq = split_qkv(d_qkv_);
    const AttentionShape shape{B, T, config_.n_heads, config_.n_kv_heads, config_.head_dim()};
    attention_backward(shape, qkv.q, d, qkv.k, kv, qkv.v, kv, a.attn.data(), d, a.lse.data(),
                       d_attn_.data(), d, dq.q, d, dq.k, kv, dq.v, kv);
    rope_backward(dq.q, d, B, T, config_.n_heads, rope_);
    rope_backward(dq.k, kv, B, T, config_.n_kv_heads, rope_);
    const GemmInput norm1 = shared_input(a.norm1.data(), N, d, rounded_);
    project_backward(layer, kQkv, norm1, a, {dq.q, dq.k, dq.v}, d_norm_.data());
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
      n += a.norm1.size() + a.rstd1.size() + a.qkv.size() + a.attn.size() + a.lse.size() +
           a.x_mid.size() + a.norm2.size() + a.rstd2.size() + a.gate_up.size() + a.hidden.size();
      for (int g = 0; g < kGroupsPerBlock; ++g) n += a.z[g].size() + a.h[g].size();
    }
    return n * static_cast<int64_t>(sizeof(float));
  }

 private:
  struct Acts {
    const float* x_in = nullptr;
    // Per group, its latents side by side [N, Σ r/t]: z, and σ(z) (cola).
    std::array<std::vector<float>, kGroupsPerBlock> z, h;
    // q | k | v and gate | up one after the other (as their gradients), so that the B factors'
    // batched GEMMs in backward read evenly spaced gradients.
    std::vector<float> norm1, rstd1, qkv, attn, lse, x_mid, norm2, rstd2, gate_up, hidden;
  };

  struct Qkv {
    float *q, *k, *v;
  };
  Qkv split_qkv(std::vector<float>& buf) const {
    const int64_t N = batch_ * seq_len_, d = config_.d_model;
    return {buf.data(), buf.data() + N * d, buf.data() + N * (d + config_.kv_dim())};
  }

  // A group's projections, each summed to its full output by an all-reduce: the partial products
  // of this rank's r/t slice of the latents. Grouped: the A shards as one GEMM, the B shards
  // batched, and the outputs side by side in a packed [N, Σ d_out] buffer for one all-reduce.
  void project(int64_t layer, const Group& g, GemmInput x, Acts& a,
               std::initializer_list<float*> outputs) {
    const ProjectionGroup group = members(layer, g);
    const int64_t N = batch_ * seq_len_, width = group_width(group);
    const ConcatenatedA* cat = concatenated(layer, g);
    float* z = a.z[g.index].data();
    group_down_forward(group, cat, x, N, z, width, compute_);
    const GemmInput latent =
        shared_input(group_activate(group, z, a.h[g.index].data(), N), N, width, rounded_latent_);
    std::array<float*, 3> y{};
    std::array<int64_t, 3> ldy{};
    if (!cat) {
      for (size_t m = 0; m < group.size(); ++m) {
        y[m] = outputs.begin()[m];
        ldy[m] = group[m].d_out;
      }
      group_up_forward(group, latent, N, y.data(), ldy.data(), false, compute_);
      for (size_t m = 0; m < group.size(); ++m) tp_.all_reduce(y[m], N * group[m].d_out);
      return;
    }
    int64_t packed_width = 0;
    for (const ProjectionWeights& p : group) packed_width += p.d_out;
    packed_.resize(N * packed_width);
    int64_t c0 = 0;
    for (size_t m = 0; m < group.size(); ++m) {
      y[m] = packed_.data() + c0;
      ldy[m] = packed_width;
      c0 += group[m].d_out;
    }
    group_up_forward(group, latent, N, y.data(), ldy.data(), true, compute_);
    tp_.all_reduce(packed_.data(), N * packed_width);
    c0 = 0;
    for (size_t m = 0; m < group.size(); ++m) {
      const int64_t cols = group[m].d_out;
      copy_columns(packed_.data() + c0, packed_width, N, cols, outputs.begin()[m], cols);
      c0 += cols;
    }
  }

  // Backward of a group: dy (each [N, d_out]) is replicated; the input gradient dx_partial
  // ([N, d_in], overwritten) from this rank's rank slice is partial, summed by the caller.
  void project_backward(int64_t layer, const Group& g, GemmInput x, Acts& a,
                        std::initializer_list<const float*> dy, float* dx_partial) {
    const ProjectionGroup group = members(layer, g);
    const int64_t N = batch_ * seq_len_, width = group_width(group);
    const float* z = a.z[g.index].data();
    const float* latent = a.h[g.index].empty() ? z : a.h[g.index].data();
    std::array<int64_t, 3> lddy{};
    for (size_t m = 0; m < group.size(); ++m) lddy[m] = group[m].d_out;
    group_up_backward(group, shared_input(latent, N, width, rounded_latent_), dy.begin(),
                      lddy.data(), N, d_latent_.data(), width, options_.grouping, compute_);
    group_activate_backward(group, z, d_latent_.data(), N);
    group_down_backward(group, concatenated(layer, g), x, d_latent_.data(), width, N, dx_partial,
                        group[0].d_in, 0.0f, concatenated_da_, compute_);
  }

  std::vector<Acts> acts_;
  std::vector<float> packed_, partial_, d_norm_, d_qkv_, d_attn_, d_gate_up_, d_hidden_, d_latent_;
  std::vector<bf16_t> rounded_, rounded_latent_;
};

}  // namespace

std::unique_ptr<Layout> make_naive_tp(const ModelConfig& config, Communicator& tp) {
  return std::make_unique<NaiveTp>(config, tp);
}

}  // namespace boostlm
