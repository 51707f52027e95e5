// btp: Bottleneck-aware Tensor Parallelism (SPEC §3.3) with BOOST's optimisations (§3.4–3.6).
//
// The residual stream is hidden-sharded: this rank holds columns [i·d/t, (i+1)·d/t) of X. Each
// low-rank projection is split at its bottleneck: A is row-parallel (the rows of this rank's input
// columns) and yields a partial latent x_i A_i [N, r]; one all-reduce of that r-wide latent gives
// every rank the whole latent, σ runs replicated, and B is column-parallel (this rank's heads for
// q/k/v, its d_ff slice for gate/up, its d slice for o/down), so its output is already sharded the
// way the next row-parallel A reads it. Attention runs on local heads, gate⊙up on the local d_ff
// slice, residual adds are local. In backward a latent's gradient dy_i B_iᵀ is partial (B is
// column-parallel): one all-reduce of N·r per latent, after which dA and the input gradient are
// local. Per block: 7 latents of N·r forward and 7 backward; nothing else needs to communicate.
//
// The switches (BlockOptions):
//  - online_norm (§3.4): RMSNorm's per-token Σx² rides in the all-reduce of the latent that reads
//    the norm (one extra column), the latent is divided by the rms afterwards, and backward needs
//    no collective at all. Off: the synchronous norm all-reduces Σx² (N) before each norm and the
//    per-token dot product (N) in each norm's backward.
//  - grouping (§3.5): the A factors that read the same input (q|k|v, gate|up) run as one GEMM on
//    their concatenation and share one all-reduce: 4 forward all-reduces per block of
//    (3r+1, r, 2r+1, r) per token, and 4 backward (3r, r, 2r, r). Off: 7 and 7 (stats ride with q
//    and gate). The B factors of a group, which read column blocks of its all-reduced latent, run
//    as one batched GEMM over the members of one shape (q|k|v; q and k|v under GQA; gate|up),
//    forward and backward: 8 GEMM calls per block forward instead of 14 (9 under GQA).
//  - recompute lowrank (§3.6): a block keeps only x_in, x_mid, the 7 all-reduced latents and 2
//    per-token rms values, ≈ N·(2d/t + 7r); backward recomputes q, k, v, attention, gate/up from
//    them with local GEMMs only. block: backward reruns the whole forward, collectives included.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/activation.h"
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
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

  void allocate(int64_t B, int64_t T) override {
    const int64_t N = B * T, t = tp_.size();
    heads_ = config_.n_heads / t;
    kv_heads_ = config_.n_kv_heads / t;
    dl_ = config_.d_model / t;
    kvl_ = kv_heads_ * config_.head_dim();
    ffl_ = config_.d_ff / t;
    const bool lowrank = options_.recompute == Recompute::lowrank;
    const bool cola = config_.arch == Arch::cola;
    // What a block keeps. With lowrank recomputation the per-block slots hold only the latents,
    // x_mid and the rms values; the rest lives once, in `work_`, rebuilt in backward.
    acts_.assign(slots(), {});
    for (auto& a : acts_) {
      for (const Group& g : kGroups) a.z[g.index].resize(N * group_width(members(first_layer_, g)));
      a.x_mid.resize(N * dl_);
      a.rstd1.resize(N);
      a.rstd2.resize(N);
      if (!lowrank) allocate_intermediates(a, N, cola);
    }
    work_ = Acts{};
    if (lowrank) allocate_intermediates(work_, N, cola);
    stat_.resize(N);
    xg_.resize(N * dl_);
    partial_.resize(N * dl_);
    d_norm_.resize(N * dl_);
    d_qkv_.resize(N * (dl_ + 2 * kvl_));
    d_attn_.resize(N * dl_);
    d_gate_up_.resize(2 * N * ffl_);
    d_hidden_.resize(N * ffl_);
    int64_t widest = 0;
    for (const Group& g : kGroups) widest = std::max(widest, group_width(members(first_layer_, g)));
    packed_.resize(N * (widest + 1));  // + the norm statistic
    d_packed_.resize(N * widest);
  }

  void block_forward(int64_t layer, const float* x_in, float* x_out) override {
    Acts& a = acts_[slot(layer)];
    Acts& w = intermediates(a);
    const BlockWeights& bw = blocks_[layer];
    a.x_in = x_in;
    work_layer_ = layer;
    work_micro_ = micro_;
    const int64_t N = batch_ * seq_len_;
    concatenate_groups(layer);

    // Attention sub-block: norm → q/k/v latents → B → RoPE → attention → o → residual.
    latents_forward(layer, kQkv, x_in, bw.norm1, a.rstd1.data(), w.norm1.data(), a);
    const Qkv qkv = split_qkv(w.qkv);
    up_project(layer, kQkv, a, {qkv.q, qkv.k, qkv.v});
    attention_from_qkv(w);
    latents_forward(layer, kO, w.attn.data(), nullptr, nullptr, nullptr, a);
    up_project(layer, kO, a, {partial_.data()});
    add(x_in, partial_.data(), a.x_mid.data(), N * dl_);

    // MLP sub-block.
    latents_forward(layer, kGateUp, a.x_mid.data(), bw.norm2, a.rstd2.data(), w.norm2.data(), a);
    float *gate = w.gate_up.data(), *up = gate + N * ffl_;
    up_project(layer, kGateUp, a, {gate, up});
    swiglu_forward(gate, up, N * ffl_, config_.mlp_gate_act, w.hidden.data());
    latents_forward(layer, kDown, w.hidden.data(), nullptr, nullptr, nullptr, a);
    up_project(layer, kDown, a, {partial_.data()});
    add(a.x_mid.data(), partial_.data(), x_out, N * dl_);
  }

  void block_backward(int64_t layer, float* dx) override {
    Acts& a = acts_[slot(layer)];
    Acts& w = intermediates(a);
    const BlockWeights& bw = blocks_[layer];
    const int64_t N = batch_ * seq_len_;
    // The shared work area still holds the intermediates of the block forward ran last.
    if (options_.recompute == Recompute::lowrank && (work_layer_ != layer || work_micro_ != micro_))
      recompute(layer, a);
    work_layer_ = -1;  // backward overwrites them

    // MLP.
    latents_backward(layer, kDown, {dx}, w.hidden.data(), nullptr, nullptr, nullptr, a,
                     d_hidden_.data(), 0.0f);
    const float *gate = w.gate_up.data(), *up = gate + N * ffl_;
    float *d_gate = d_gate_up_.data(), *d_up = d_gate + N * ffl_;
    swiglu_backward(d_hidden_.data(), gate, up, N * ffl_, config_.mlp_gate_act, d_gate, d_up);
    latents_backward(layer, kGateUp, {d_gate, d_up}, a.x_mid.data(), bw.norm2, bw.dnorm2,
                     a.rstd2.data(), a, dx, 1.0f, w.norm2.data());
    // Attention.
    latents_backward(layer, kO, {dx}, w.attn.data(), nullptr, nullptr, nullptr, a, d_attn_.data(),
                     0.0f);
    const Qkv qkv = split_qkv(w.qkv), d = split_qkv(d_qkv_);
    const AttentionShape shape{batch_, seq_len_, heads_, kv_heads_, config_.head_dim()};
    attention_backward(shape, qkv.q, dl_, qkv.k, kvl_, qkv.v, kvl_, w.attn.data(), dl_,
                       w.lse.data(), d_attn_.data(), dl_, d.q, dl_, d.k, kvl_, d.v, kvl_);
    rope_backward(d.q, dl_, batch_, seq_len_, heads_, rope_);
    rope_backward(d.k, kvl_, batch_, seq_len_, kv_heads_, rope_);
    latents_backward(layer, kQkv, {d.q, d.k, d.v}, a.x_in, bw.norm1, bw.dnorm1, a.rstd1.data(), a,
                     dx, 1.0f, w.norm1.data());
  }

  int64_t slot_bytes() const override { return acts_.empty() ? 0 : bytes_of(acts_[0]); }

  int64_t activation_bytes() const override {
    int64_t n = bytes_of(work_);
    for (const auto& a : acts_) n += bytes_of(a);
    return n;
  }

 private:
  struct Acts {
    const float* x_in = nullptr;
    // Per group, its latents side by side [N, Σ rank]: all-reduced (normalised) z, and σ(z) (cola).
    std::array<std::vector<float>, kGroupsPerBlock> z, h;
    std::vector<float> x_mid, rstd1, rstd2;
    std::vector<float> norm1, norm2;  // synchronous norm's outputs (the GEMM inputs)
    // q | k | v and gate | up one after the other, so that their B factors' batched GEMM writes
    // evenly spaced outputs.
    std::vector<float> qkv, attn, lse, gate_up, hidden;
  };

  struct Qkv {
    float *q, *k, *v;
  };
  Qkv split_qkv(std::vector<float>& buf) const {
    const int64_t N = batch_ * seq_len_;
    return {buf.data(), buf.data() + N * dl_, buf.data() + N * (dl_ + kvl_)};
  }

  static int64_t bytes_of(const Acts& a) {
    int64_t n = a.x_mid.size() + a.rstd1.size() + a.rstd2.size() + a.norm1.size() + a.norm2.size() +
                a.qkv.size() + a.attn.size() + a.lse.size() + a.gate_up.size() + a.hidden.size();
    for (int g = 0; g < kGroupsPerBlock; ++g) n += a.z[g].size() + a.h[g].size();
    return n * static_cast<int64_t>(sizeof(float));
  }

  void allocate_intermediates(Acts& a, int64_t N, bool cola) {
    if (cola)
      for (const Group& g : kGroups) a.h[g.index].resize(N * group_width(members(first_layer_, g)));
    if (!options_.online_norm) {
      a.norm1.resize(N * dl_);
      a.norm2.resize(N * dl_);
    }
    a.qkv.resize(N * (dl_ + 2 * kvl_));
    a.attn.resize(N * dl_);
    a.lse.resize(N * heads_);
    a.gate_up.resize(2 * N * ffl_);
    a.hidden.resize(N * ffl_);
  }

  // Where q, k, v, attention, gate/up/hidden and σ(z) of a block live.
  Acts& intermediates(Acts& a) { return options_.recompute == Recompute::lowrank ? work_ : a; }

  // The GEMM input of a group: its input x itself, or the norm of x (for a normed group) —
  // synchronous: normalised here with an all-reduce of Σx²; online: x ⊙ γ, whose latent is
  // divided by the rms once the statistic has come back with it (`online_stat` set).
  GemmInput group_input(const Group& g, const float* x, const float* gamma, float* rstd,
                        float* norm_out, bool& online_stat) {
    const int64_t N = batch_ * seq_len_;
    online_stat = false;
    if (!g.normed) return shared_input(x, N, g.first == o_ ? dl_ : ffl_, rounded_);
    rmsnorm_partial_sum_squares(x, dl_, N, dl_, stat_.data());
    if (!options_.online_norm) {
      tp_.all_reduce(stat_.data(), N);
      rmsnorm_rstd(stat_.data(), N, config_.d_model, config_.rms_eps, rstd);
      rmsnorm_apply(x, dl_, gamma, rstd, N, dl_, norm_out, dl_);
      return shared_input(norm_out, N, dl_, rounded_);
    }
    online_stat = true;
    // x ⊙ γ; in bf16 each row is first divided by its local rms so the rounded GEMM input has
    // unit scale (SPEC §3.4), and the partial latent is multiplied back before the all-reduce.
    const bool rescale = compute_ == DType::bf16;
    online_norm_input(x, gamma, rescale ? stat_.data() : nullptr, N, dl_, config_.rms_eps,
                      xg_.data());
    return shared_input(xg_.data(), N, dl_, rounded_);
  }

  // Forward of a group's down halves: partial latents → all-reduce(s) → z (normalised).
  void latents_forward(int64_t layer, const Group& g, const float* x, const float* gamma,
                       float* rstd, float* norm_out, Acts& a) {
    const int64_t N = batch_ * seq_len_;
    bool online = false;
    const GemmInput in = group_input(g, x, gamma, rstd, norm_out, online);
    const ProjectionGroup group = members(layer, g);
    const int64_t width = group_width(group);
    const ConcatenatedA* cat = concatenated(layer, g);
    float* z = a.z[g.index].data();
    // One packed buffer [N, Σr (+1)] per all-reduce: the whole group when grouped, else one per
    // projection; the statistic rides in the first.
    int64_t col = 0;
    for (size_t j = 0; j < group.size();) {
      const ProjectionGroup part = cat ? group : group.subspan(j, 1);
      const int64_t part_width = group_width(part);
      const bool with_stat = online && j == 0;
      const int64_t ld = part_width + (with_stat ? 1 : 0);
      float* buf = packed_.data();
      group_down_forward(part, cat, in, N, buf, ld, compute_);
      // Undo the local normalisation of the bf16 input (every part read it); the statistic
      // rides with the first part.
      if (online)
        online_norm_pack(buf, ld, N, part_width, stat_.data(), dl_, config_.rms_eps,
                         compute_ == DType::bf16, with_stat);
      tp_.all_reduce(buf, N * ld);
      // rms from the summed statistic: Z = P / rms (exactly RMSNorm(x)·A)
      if (with_stat)
        online_norm_rstd(buf, ld, N, part_width, config_.d_model, config_.rms_eps, rstd);
      // Unpack into the group's latents (dividing by the rms for an online-normed group).
      online_norm_unpack(buf, ld, N, part_width, online ? rstd : nullptr, z + col, width);
      col += part_width;
      j += part.size();
    }
  }

  // y_m = σ(z_m) B_m for the group's members (column-parallel B; batched when grouping); σ(z) is
  // kept for backward (cola). Each y_m: [N, d_out] contiguous.
  void up_project(int64_t layer, const Group& g, Acts& a, std::initializer_list<float*> y) {
    const ProjectionGroup group = members(layer, g);
    const int64_t N = batch_ * seq_len_, width = group_width(group);
    const float* latent =
        group_activate(group, a.z[g.index].data(), intermediates(a).h[g.index].data(), N);
    const auto ld = output_strides(group);
    group_up_forward(group, shared_input(latent, N, width, rounded_latent_), N, y.begin(),
                     ld.data(), options_.grouping, compute_);
  }

  static std::array<int64_t, 3> output_strides(ProjectionGroup group) {
    std::array<int64_t, 3> ld{};
    for (size_t m = 0; m < group.size(); ++m) ld[m] = group[m].d_out;
    return ld;
  }

  void attention_from_qkv(Acts& w) {
    const Qkv qkv = split_qkv(w.qkv);
    rope_forward(qkv.q, dl_, batch_, seq_len_, heads_, rope_);
    rope_forward(qkv.k, kvl_, batch_, seq_len_, kv_heads_, rope_);
    const AttentionShape shape{batch_, seq_len_, heads_, kv_heads_, config_.head_dim()};
    attention_forward(shape, qkv.q, dl_, qkv.k, kvl_, qkv.v, kvl_, w.attn.data(), dl_,
                      w.lse.data());
  }

  // Rebuilds what lowrank checkpointing dropped, from the kept latents: local GEMMs only.
  void recompute(int64_t layer, Acts& a) {
    Acts& w = work_;
    const int64_t N = batch_ * seq_len_;
    const Qkv qkv = split_qkv(w.qkv);
    up_project(layer, kQkv, a, {qkv.q, qkv.k, qkv.v});
    attention_from_qkv(w);
    group_activate(members(layer, kO), a.z[kO.index].data(), w.h[kO.index].data(), N);
    float *gate = w.gate_up.data(), *up = gate + N * ffl_;
    up_project(layer, kGateUp, a, {gate, up});
    swiglu_forward(gate, up, N * ffl_, config_.mlp_gate_act, w.hidden.data());
    group_activate(members(layer, kDown), a.z[kDown.index].data(), w.h[kDown.index].data(), N);
    if (!options_.online_norm) {  // the synchronous norms' outputs, from x and the kept 1/rms
      rmsnorm_apply(a.x_in, dl_, blocks_[layer].norm1, a.rstd1.data(), N, dl_, w.norm1.data(), dl_);
      rmsnorm_apply(a.x_mid.data(), dl_, blocks_[layer].norm2, a.rstd2.data(), N, dl_,
                    w.norm2.data(), dl_);
    }
  }

  // Backward of a group: dB and the latents' (partial) gradients, their all-reduce(s), σ', then
  // dA and the input gradient — through the online norm locally, or the synchronous norm.
  // dy: ∂L/∂y_m, [N, d_out] each. x: the group's input (the residual for a normed group);
  // dx = dx_beta·dx + ∂L/∂x.
  void latents_backward(int64_t layer, const Group& g, std::initializer_list<const float*> dy,
                        const float* x, const float* gamma, float* dgamma, const float* rstd,
                        Acts& a, float* dx, float dx_beta, const float* norm_out = nullptr) {
    const int64_t N = batch_ * seq_len_;
    const ProjectionGroup group = members(layer, g);
    const ConcatenatedA* cat = concatenated(layer, g);
    Acts& w = intermediates(a);
    const int64_t width = group_width(group);
    const float* z = a.z[g.index].data();
    const float* latent = w.h[g.index].empty() ? z : w.h[g.index].data();
    // dB += σ(z)ᵀ dy;  dσ = dy Bᵀ → packed [N, Σr];  one all-reduce per packed buffer.
    const auto lddy = output_strides(group);
    group_up_backward(group, shared_input(latent, N, width, rounded_latent_), dy.begin(),
                      lddy.data(), N, d_packed_.data(), width, options_.grouping, compute_);
    if (cat) {
      tp_.all_reduce(d_packed_.data(), N * width);
    } else {  // each projection's own all-reduce: its columns, gathered contiguous
      int64_t c0 = 0;
      for (const ProjectionWeights& p : group) {
        all_reduce_columns(d_packed_.data(), N, width, c0, p.rank);
        c0 += p.rank;
      }
    }
    group_activate_backward(group, z, d_packed_.data(), N);  // dz = dσ ⊙ σ'(z), in place
    const bool online = g.normed && options_.online_norm;
    if (online) {
      // Z = P·rstd: dP = dZ·rstd; the rms term becomes dS (in stat_).
      online_norm_latent_backward(z, d_packed_.data(), N, width, rstd, config_.d_model,
                                  stat_.data());
      // xg = x ⊙ γ: the GEMM input of forward (recomputed: cheaper than keeping it).
      online_norm_input(x, gamma, nullptr, N, dl_, config_.rms_eps, xg_.data());
    }
    // The GEMM input of forward: x (o, down), the synchronous norm's output, or x ⊙ γ.
    const int64_t in_cols = group[0].d_in;
    const float* in = !g.normed ? x : online ? xg_.data() : norm_out;
    // dA_i += inᵀ dP_i ;  g = Σ dP_i A_iᵀ  (one GEMM each when grouped).
    float* g_out = g.normed ? d_norm_.data() : dx;
    group_down_backward(group, cat, shared_input(in, N, in_cols, rounded_), d_packed_.data(), width,
                        N, g_out, in_cols, g.normed ? 0.0f : dx_beta, concatenated_da_, compute_);
    if (!g.normed) return;
    if (online) {
      // dx += g ⊙ γ + 2·dS·x ;  dγ += Σ_rows x ⊙ g   (SPEC §3.4; no collective)
      online_norm_input_backward(d_norm_.data(), x, gamma, stat_.data(), N, dl_, dx_beta, dx,
                                 dgamma);
    } else {
      // Synchronous norm backward: the row term needs Σ dy⊙γ⊙x over the whole row.
      rmsnorm_partial_backward_dot(d_norm_.data(), dl_, x, dl_, gamma, N, dl_, stat_.data());
      tp_.all_reduce(stat_.data(), N);
      BOOSTLM_ASSERT(dx_beta == 1.0f);
      rmsnorm_backward_apply(d_norm_.data(), dl_, x, dl_, gamma, rstd, stat_.data(), N, dl_,
                             config_.d_model, dx, dl_, dgamma, /*accumulate=*/true);
    }
  }

  // All-reduces columns [c0, c0 + cols) of a [N, ld] buffer (an ungrouped projection's latent
  // gradient inside the packed buffer) through a contiguous copy.
  void all_reduce_columns(float* buf, int64_t N, int64_t ld, int64_t c0, int64_t cols) {
    if (cols == ld) {
      tp_.all_reduce(buf, N * cols);
      return;
    }
    column_scratch_.resize(N * cols);
    for (int64_t n = 0; n < N; ++n)
      std::copy_n(buf + n * ld + c0, cols, column_scratch_.data() + n * cols);
    tp_.all_reduce(column_scratch_.data(), N * cols);
    for (int64_t n = 0; n < N; ++n)
      std::copy_n(column_scratch_.data() + n * cols, cols, buf + n * ld + c0);
  }

  std::vector<Acts> acts_;
  Acts work_;                // lowrank recomputation: the intermediates of the block in backward
  int64_t work_layer_ = -1;  // the block (and micro-batch) whose intermediates work_ holds
  int work_micro_ = -1;
  int64_t heads_ = 0, kv_heads_ = 0, dl_ = 0, kvl_ = 0, ffl_ = 0;
  std::vector<float> stat_, xg_, partial_, d_norm_, d_qkv_, d_attn_, d_gate_up_, d_hidden_, packed_,
      d_packed_, column_scratch_;
  std::vector<bf16_t> rounded_, rounded_latent_;
};

}  // namespace

std::unique_ptr<Layout> make_btp(const ModelConfig& config, Communicator& tp) {
  return std::make_unique<Btp>(config, tp);
}

}  // namespace boostlm
