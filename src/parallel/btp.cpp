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
//    and gate).
//  - recompute lowrank (§3.6): a block keeps only x_in, x_mid, the 7 all-reduced latents and 2
//    per-token rms values, ≈ N·(2d/t + 7r); backward recomputes q, k, v, attention, gate/up from
//    them with local GEMMs only. block: backward reruns the whole forward, collectives included.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/activation.h"
#include "kernels/adamw.h"
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
    dl_ = config_.d_model / t;
    kvl_ = kv_heads_ * config_.head_dim();
    ffl_ = config_.d_ff / t;
    const bool lowrank = options_.recompute == Recompute::lowrank;
    const bool cola = config_.arch == Arch::cola;
    // What a block keeps. With lowrank recomputation the per-block slots hold only the latents,
    // x_mid and the rms values; the rest lives once, in `work_`, rebuilt in backward.
    acts_.assign(slots(), {});
    for (auto& a : acts_) {
      for (int i = 0; i < kProjectionsPerBlock; ++i) a.z[i].resize(N * rank(i));
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
    d_q_.resize(N * dl_);
    d_k_.resize(N * kvl_);
    d_v_.resize(N * kvl_);
    d_attn_.resize(N * dl_);
    d_gate_.resize(N * ffl_);
    d_up_.resize(N * ffl_);
    d_hidden_.resize(N * ffl_);
    const int64_t widest = 3 * config_.attn_rank + 1 + 2 * config_.mlp_rank;
    packed_.resize(N * widest);
    d_packed_.resize(N * widest);
    scratch_h_.resize(N * std::max(config_.attn_rank, config_.mlp_rank));
    grouped_a_.assign(config_.n_layers, {});
  }

  void block_forward(int64_t layer, const float* x_in, float* x_out) override {
    Acts& a = acts_[slot(layer)];
    Acts& w = intermediates(a);
    const BlockWeights& bw = blocks_[layer];
    a.x_in = x_in;
    work_layer_ = layer;
    work_micro_ = micro_index_;
    const int64_t N = batch_ * seq_len_;
    build_grouped_a(layer);

    // Attention sub-block: norm → q/k/v latents → B → RoPE → attention → o → residual.
    latents_forward(layer, kQkv, x_in, bw.norm1, a.rstd1.data(), w.norm1.data(), a);
    up_project(layer, q_, a, w.q.data(), dl_, w.h[q_].data());
    up_project(layer, k_, a, w.k.data(), kvl_, w.h[k_].data());
    up_project(layer, v_, a, w.v.data(), kvl_, w.h[v_].data());
    attention_from_qkv(w);
    latents_forward(layer, kO, w.attn.data(), nullptr, nullptr, nullptr, a);
    up_project(layer, o_, a, partial_.data(), dl_, w.h[o_].data());
    add(x_in, partial_.data(), a.x_mid.data(), N * dl_);

    // MLP sub-block.
    latents_forward(layer, kGateUp, a.x_mid.data(), bw.norm2, a.rstd2.data(), w.norm2.data(), a);
    up_project(layer, gate_, a, w.gate.data(), ffl_, w.h[gate_].data());
    up_project(layer, up_, a, w.up.data(), ffl_, w.h[up_].data());
    swiglu_forward(w.gate.data(), w.up.data(), N * ffl_, config_.mlp_gate_act, w.hidden.data());
    latents_forward(layer, kDown, w.hidden.data(), nullptr, nullptr, nullptr, a);
    up_project(layer, down_, a, partial_.data(), dl_, w.h[down_].data());
    add(a.x_mid.data(), partial_.data(), x_out, N * dl_);
  }

  void block_backward(int64_t layer, float* dx) override {
    Acts& a = acts_[slot(layer)];
    Acts& w = intermediates(a);
    const BlockWeights& bw = blocks_[layer];
    const int64_t N = batch_ * seq_len_;
    // The shared work area still holds the intermediates of the block forward ran last.
    if (options_.recompute == Recompute::lowrank &&
        (work_layer_ != layer || work_micro_ != micro_index_))
      recompute(layer, a);
    work_layer_ = -1;  // backward overwrites them

    // MLP.
    {
      const float* dy[] = {dx};
      latents_backward(layer, kDown, dy, w.hidden.data(), nullptr, nullptr, nullptr, a,
                       d_hidden_.data(), 0.0f);
    }
    swiglu_backward(d_hidden_.data(), w.gate.data(), w.up.data(), N * ffl_, config_.mlp_gate_act,
                    d_gate_.data(), d_up_.data());
    {
      const float* dy[] = {d_gate_.data(), d_up_.data()};
      latents_backward(layer, kGateUp, dy, a.x_mid.data(), bw.norm2, bw.dnorm2, a.rstd2.data(), a,
                       dx, 1.0f, w.norm2.data());
    }
    // Attention.
    {
      const float* dy[] = {dx};
      latents_backward(layer, kO, dy, w.attn.data(), nullptr, nullptr, nullptr, a, d_attn_.data(),
                       0.0f);
    }
    const AttentionShape shape{batch_, seq_len_, heads_, kv_heads_, config_.head_dim()};
    attention_backward(shape, w.q.data(), dl_, w.k.data(), kvl_, w.v.data(), kvl_, w.attn.data(),
                       dl_, w.lse.data(), d_attn_.data(), dl_, d_q_.data(), dl_, d_k_.data(), kvl_,
                       d_v_.data(), kvl_);
    rope_backward(d_q_.data(), dl_, batch_, seq_len_, heads_, rope_);
    rope_backward(d_k_.data(), kvl_, batch_, seq_len_, kv_heads_, rope_);
    {
      const float* dy[] = {d_q_.data(), d_k_.data(), d_v_.data()};
      latents_backward(layer, kQkv, dy, a.x_in, bw.norm1, bw.dnorm1, a.rstd1.data(), a, dx, 1.0f,
                       w.norm1.data());
    }
  }

  int64_t slot_bytes() const override { return acts_.empty() ? 0 : bytes_of(acts_[0]); }

  int64_t activation_bytes() const override {
    int64_t n = bytes_of(work_);
    for (const auto& a : acts_) n += bytes_of(a);
    return n;
  }

 private:
  // The four groups of projections that read one input: q|k|v (norm1), o, gate|up (norm2), down.
  struct Group {
    int first, count;
    bool normed;  // reads a norm's output
  };
  static constexpr Group kQkv{0, 3, true}, kO{3, 1, false}, kGateUp{4, 2, true}, kDown{6, 1, false};

  struct Acts {
    const float* x_in = nullptr;
    std::array<std::vector<float>, kProjectionsPerBlock> z;  // all-reduced latents (normalised)
    std::array<std::vector<float>, kProjectionsPerBlock> h;  // σ(z) (cola)
    std::vector<float> x_mid, rstd1, rstd2;
    std::vector<float> norm1, norm2;  // synchronous norm's outputs (the GEMM inputs)
    std::vector<float> q, k, v, attn, lse, gate, up, hidden;
  };

  int64_t rank(int i) const { return blocks_[first_layer_].proj[i].rank; }

  static int64_t bytes_of(const Acts& a) {
    int64_t n = a.x_mid.size() + a.rstd1.size() + a.rstd2.size() + a.norm1.size() + a.norm2.size() +
                a.q.size() + a.k.size() + a.v.size() + a.attn.size() + a.lse.size() +
                a.gate.size() + a.up.size() + a.hidden.size();
    for (int i = 0; i < kProjectionsPerBlock; ++i) n += a.z[i].size() + a.h[i].size();
    return n * static_cast<int64_t>(sizeof(float));
  }

  void allocate_intermediates(Acts& a, int64_t N, bool cola) {
    if (cola)
      for (int i = 0; i < kProjectionsPerBlock; ++i) a.h[i].resize(N * rank(i));
    if (!options_.online_norm) {
      a.norm1.resize(N * dl_);
      a.norm2.resize(N * dl_);
    }
    a.q.resize(N * dl_);
    a.k.resize(N * kvl_);
    a.v.resize(N * kvl_);
    a.attn.resize(N * dl_);
    a.lse.resize(N * heads_);
    a.gate.resize(N * ffl_);
    a.up.resize(N * ffl_);
    a.hidden.resize(N * ffl_);
  }

  // Where q, k, v, attention, gate/up/hidden and σ(z) of a block live.
  Acts& intermediates(Acts& a) { return options_.recompute == Recompute::lowrank ? work_ : a; }

  // The concatenated A factors of a group [d_in, Σr] (grouping), rebuilt at every forward because
  // the weights change between steps; their bf16 rounding alongside.
  struct GroupedA {
    std::vector<float> qkv, gate_up;
    std::vector<bf16_t> qkv_bf16, gate_up_bf16;
  };
  void build_grouped_a(int64_t layer) {
    if (!options_.grouping) return;
    GroupedA& g = grouped_a_[layer];
    auto build = [&](const Group& grp, std::vector<float>& out, std::vector<bf16_t>& rounded) {
      const ProjectionWeights* p = blocks_[layer].proj.data() + grp.first;
      int64_t cols = 0;
      for (int j = 0; j < grp.count; ++j) cols += p[j].rank;
      const int64_t rows = p[0].d_in;
      out.resize(rows * cols);
      int64_t c0 = 0;
      for (int j = 0; j < grp.count; ++j) {
        for (int64_t r = 0; r < rows; ++r)
          std::copy_n(p[j].a + r * p[j].rank, p[j].rank, out.data() + r * cols + c0);
        c0 += p[j].rank;
      }
      if (compute_ == DType::bf16) {
        rounded.resize(out.size());
        round_to_bf16(out.data(), 1, out.size(), out.size(), rounded.data());
      }
    };
    build(kQkv, g.qkv, g.qkv_bf16);
    build(kGateUp, g.gate_up, g.gate_up_bf16);
  }

  // Σ over a group of its ranks.
  int64_t group_width(int64_t layer, const Group& g) const {
    int64_t w = 0;
    for (int j = 0; j < g.count; ++j) w += blocks_[layer].proj[g.first + j].rank;
    return w;
  }

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
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float s = rescale ? 1.0f / std::sqrt(stat_[n] / dl_ + config_.rms_eps) : 1.0f;
      for (int64_t j = 0; j < dl_; ++j) xg_[n * dl_ + j] = x[n * dl_ + j] * gamma[j] * s;
    }
    return shared_input(xg_.data(), N, dl_, rounded_);
  }

  // Forward of a group's down halves: partial latents → all-reduce(s) → z (normalised).
  void latents_forward(int64_t layer, const Group& g, const float* x, const float* gamma,
                       float* rstd, float* norm_out, Acts& a) {
    const int64_t N = batch_ * seq_len_;
    bool online = false;
    const GemmInput in = group_input(g, x, gamma, rstd, norm_out, online);
    const bool grouped = options_.grouping && g.count > 1;
    const ProjectionWeights* p = blocks_[layer].proj.data() + g.first;
    // One packed buffer [N, Σr (+1)] per all-reduce: the whole group when grouped, else one per
    // projection; the statistic rides in the first.
    int64_t col = 0;
    for (int j = 0; j < g.count;) {
      const int members = grouped ? g.count : 1;
      int64_t width = 0;
      for (int m = 0; m < members; ++m) width += p[j + m].rank;
      const int64_t ld = width + (online && j == 0 ? 1 : 0);
      float* buf = packed_.data();
      if (grouped) {
        const GroupedA& ga = grouped_a_[layer];
        const bool qkv = g.first == q_;
        gemm(Trans::N, Trans::N, N, width, p[0].d_in, 1.0f, in,
             {qkv ? ga.qkv.data() : ga.gate_up.data(),
              compute_ == DType::bf16 ? (qkv ? ga.qkv_bf16.data() : ga.gate_up_bf16.data())
                                      : nullptr,
              width},
             0.0f, buf, ld, compute_);
      } else {
        gemm(Trans::N, Trans::N, N, width, p[j].d_in, 1.0f, in, {p[j].a, p[j].a_bf16, width}, 0.0f,
             buf, ld, compute_);
      }
      if (online && j == 0) {
        const bool rescale = compute_ == DType::bf16;
        for (int64_t n = 0; n < N; ++n) {
          if (rescale) {  // undo the local normalisation of the bf16 input
            const float s = std::sqrt(stat_[n] / dl_ + config_.rms_eps);
            for (int64_t c = 0; c < width; ++c) buf[n * ld + c] *= s;
          }
          buf[n * ld + width] = stat_[n];
        }
      }
      tp_.all_reduce(buf, N * ld);
      if (online && j == 0)  // rms from the summed statistic: Z = P / rms (exactly RMSNorm(x)·A)
        for (int64_t n = 0; n < N; ++n)
          rstd[n] = 1.0f / std::sqrt(buf[n * ld + width] / config_.d_model + config_.rms_eps);
      // Unpack into each projection's latent (dividing by the rms for an online-normed group).
      int64_t c0 = 0;
      for (int m = 0; m < members; ++m) {
        const int64_t r = p[j + m].rank;
        float* z = a.z[g.first + j + m].data();
#pragma omp parallel for schedule(static)
        for (int64_t n = 0; n < N; ++n) {
          const float s = online ? rstd[n] : 1.0f;
          for (int64_t c = 0; c < r; ++c) z[n * r + c] = buf[n * ld + c0 + c] * s;
        }
        c0 += r;
      }
      col += width;
      j += members;
    }
  }

  // y = σ(z_i) B_i (column-parallel B). h: where σ(z) is kept (cola), or scratch.
  void up_project(int64_t layer, int i, Acts& a, float* y, int64_t ldy, float* h) {
    const ProjectionWeights& p = blocks_[layer].proj[i];
    const int64_t N = batch_ * seq_len_;
    float* hh = h ? h : scratch_h_.data();
    const float* latent = lowrank_activate(p, a.z[i].data(), hh, N);
    lowrank_up_forward(p, latent, N, y, ldy, compute_);
  }

  void attention_from_qkv(Acts& w) {
    rope_forward(w.q.data(), dl_, batch_, seq_len_, heads_, rope_);
    rope_forward(w.k.data(), kvl_, batch_, seq_len_, kv_heads_, rope_);
    const AttentionShape shape{batch_, seq_len_, heads_, kv_heads_, config_.head_dim()};
    attention_forward(shape, w.q.data(), dl_, w.k.data(), kvl_, w.v.data(), kvl_, w.attn.data(),
                      dl_, w.lse.data());
  }

  // Rebuilds what lowrank checkpointing dropped, from the kept latents: local GEMMs only.
  void recompute(int64_t layer, Acts& a) {
    Acts& w = work_;
    const int64_t N = batch_ * seq_len_;
    up_project(layer, q_, a, w.q.data(), dl_, w.h[q_].data());
    up_project(layer, k_, a, w.k.data(), kvl_, w.h[k_].data());
    up_project(layer, v_, a, w.v.data(), kvl_, w.h[v_].data());
    attention_from_qkv(w);
    if (!w.h[o_].empty())
      silu_forward(a.z[o_].data(), rank(o_), N, rank(o_), w.h[o_].data(), rank(o_));
    up_project(layer, gate_, a, w.gate.data(), ffl_, w.h[gate_].data());
    up_project(layer, up_, a, w.up.data(), ffl_, w.h[up_].data());
    swiglu_forward(w.gate.data(), w.up.data(), N * ffl_, config_.mlp_gate_act, w.hidden.data());
    if (!w.h[down_].empty())
      silu_forward(a.z[down_].data(), rank(down_), N, rank(down_), w.h[down_].data(), rank(down_));
    if (!options_.online_norm) {  // the synchronous norms' outputs, from x and the kept 1/rms
      rmsnorm_apply(a.x_in, dl_, blocks_[layer].norm1, a.rstd1.data(), N, dl_, w.norm1.data(), dl_);
      rmsnorm_apply(a.x_mid.data(), dl_, blocks_[layer].norm2, a.rstd2.data(), N, dl_,
                    w.norm2.data(), dl_);
    }
  }

  // Backward of a group: dB and the latents' (partial) gradients, their all-reduce(s), σ', then
  // dA and the input gradient — through the online norm locally, or the synchronous norm.
  // x: the group's input (the residual for a normed group); dx = dx_beta·dx + ∂L/∂x.
  void latents_backward(int64_t layer, const Group& g, const float* const* dy, const float* x,
                        const float* gamma, float* dgamma, const float* rstd, Acts& a, float* dx,
                        float dx_beta, const float* norm_out = nullptr) {
    const int64_t N = batch_ * seq_len_;
    const bool grouped = options_.grouping && g.count > 1;
    const ProjectionWeights* p = blocks_[layer].proj.data() + g.first;
    Acts& w = intermediates(a);
    const int64_t width = group_width(layer, g);
    // dB += σ(z)ᵀ dy;  dσ = dy Bᵀ → packed [N, Σr];  one all-reduce per packed buffer.
    int64_t c0 = 0;
    for (int m = 0; m < g.count; ++m) {
      const int i = g.first + m;
      const float* latent = w.h[i].empty() ? a.z[i].data() : w.h[i].data();
      gemm(Trans::T, Trans::N, p[m].rank, p[m].d_out, N, 1.0f, {latent, p[m].rank},
           {dy[m], p[m].d_out}, 1.0f, p[m].db, p[m].d_out, compute_);
      gemm(Trans::N, Trans::T, N, p[m].rank, p[m].d_out, 1.0f, {dy[m], p[m].d_out},
           {p[m].b, p[m].b_bf16, p[m].d_out}, 0.0f, d_packed_.data() + c0, width, compute_);
      if (!grouped) {  // this projection's own all-reduce: its columns, gathered contiguous
        all_reduce_columns(d_packed_.data(), N, width, c0, p[m].rank);
      }
      c0 += p[m].rank;
    }
    if (grouped) tp_.all_reduce(d_packed_.data(), N * width);
    // dz = dσ ⊙ σ'(z) (cola), in place.
    c0 = 0;
    for (int m = 0; m < g.count; ++m) {
      if (p[m].latent_act)
        silu_backward(d_packed_.data() + c0, width, a.z[g.first + m].data(), p[m].rank, N,
                      p[m].rank, d_packed_.data() + c0, width);
      c0 += p[m].rank;
    }
    const bool online = g.normed && options_.online_norm;
    if (online) {
      // Z = P·rstd: dP = dZ·rstd; the rms term drms = −Σ dZ⊙Z / rms becomes dS below.
#pragma omp parallel for schedule(static)
      for (int64_t n = 0; n < N; ++n) {
        float dot = 0.0f;
        int64_t col = 0;
        for (int m = 0; m < g.count; ++m) {
          const int64_t r = p[m].rank;
          const float* z = a.z[g.first + m].data() + n * r;
          const float* dz = d_packed_.data() + n * width + col;
          for (int64_t c = 0; c < r; ++c) dot += dz[c] * z[c];
          col += r;
        }
        // rms = 1/rstd; drms = −dot·rstd; dS = drms / (2·d·rms) = −dot·rstd² / (2d).
        stat_[n] = -dot * rstd[n] * rstd[n] / (2.0f * config_.d_model);
        float* dzr = d_packed_.data() + n * width;
        for (int64_t c = 0; c < width; ++c) dzr[c] *= rstd[n];
      }
      // xg = x ⊙ γ: the GEMM input of forward (recomputed: cheaper than keeping it).
#pragma omp parallel for schedule(static)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t j = 0; j < dl_; ++j) xg_[n * dl_ + j] = x[n * dl_ + j] * gamma[j];
    }
    // The GEMM input of forward: x (o, down), the synchronous norm's output, or x ⊙ γ.
    const int64_t in_cols = p[0].d_in;
    const float* in = !g.normed ? x : online ? xg_.data() : norm_out;
    const GemmInput input = shared_input(in, N, in_cols, rounded_);
    // dA_i += inᵀ dP_i ;  g = Σ dP_i A_iᵀ  (one GEMM each when grouped).
    float* g_out = g.normed ? d_norm_.data() : dx;
    const float g_beta = g.normed ? 0.0f : dx_beta;
    if (grouped) {
      const GroupedA& ga = grouped_a_[layer];
      const bool qkv = g.first == q_;
      const std::vector<float>& cat = qkv ? ga.qkv : ga.gate_up;
      d_grouped_a_.assign(cat.size(), 0.0f);
      gemm(Trans::T, Trans::N, in_cols, width, N, 1.0f, input, {d_packed_.data(), width}, 0.0f,
           d_grouped_a_.data(), width, compute_);
      c0 = 0;
      for (int m = 0; m < g.count; ++m) {
        for (int64_t r = 0; r < in_cols; ++r)
          for (int64_t c = 0; c < p[m].rank; ++c)
            p[m].da[r * p[m].rank + c] += d_grouped_a_[r * width + c0 + c];
        c0 += p[m].rank;
      }
      gemm(
          Trans::N, Trans::T, N, in_cols, width, 1.0f, {d_packed_.data(), width},
          {cat.data(),
           compute_ == DType::bf16 ? (qkv ? ga.qkv_bf16 : ga.gate_up_bf16).data() : nullptr, width},
          g_beta, g_out, in_cols, compute_);
    } else {
      c0 = 0;
      for (int m = 0; m < g.count; ++m) {
        gemm(Trans::T, Trans::N, in_cols, p[m].rank, N, 1.0f, input, {d_packed_.data() + c0, width},
             1.0f, p[m].da, p[m].rank, compute_);
        gemm(Trans::N, Trans::T, N, in_cols, p[m].rank, 1.0f, {d_packed_.data() + c0, width},
             {p[m].a, p[m].a_bf16, p[m].rank}, m == 0 ? g_beta : 1.0f, g_out, in_cols, compute_);
        c0 += p[m].rank;
      }
    }
    if (!g.normed) return;
    if (online) {
      // dx += g ⊙ γ + 2·dS·x ;  dγ += Σ_rows x ⊙ g   (SPEC §3.4; no collective)
#pragma omp parallel for schedule(static)
      for (int64_t n = 0; n < N; ++n) {
        const float two_ds = 2.0f * stat_[n];
        const float* gr = d_norm_.data() + n * dl_;
        const float* xr = x + n * dl_;
        float* dxr = dx + n * dl_;
        for (int64_t j = 0; j < dl_; ++j)
          dxr[j] = dx_beta * dxr[j] + gr[j] * gamma[j] + two_ds * xr[j];
      }
      // Column blocks per thread, rows inner: contiguous reads, no two threads on one element.
      constexpr int64_t kCols = 64;
#pragma omp parallel for schedule(static)
      for (int64_t j0 = 0; j0 < dl_; j0 += kCols) {
        const int64_t j1 = std::min(dl_, j0 + kCols);
        float acc[kCols] = {};
        for (int64_t n = 0; n < N; ++n) {
          const float* xr = x + n * dl_;
          const float* gr = d_norm_.data() + n * dl_;
#pragma omp simd
          for (int64_t j = j0; j < j1; ++j) acc[j - j0] += xr[j] * gr[j];
        }
        for (int64_t j = j0; j < j1; ++j) dgamma[j] += acc[j - j0];
      }
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
  std::vector<GroupedA> grouped_a_;
  int64_t heads_ = 0, kv_heads_ = 0, dl_ = 0, kvl_ = 0, ffl_ = 0;
  RopeTable rope_;
  std::vector<float> stat_, xg_, partial_, d_norm_, d_q_, d_k_, d_v_, d_attn_, d_gate_, d_up_,
      d_hidden_, packed_, d_packed_, scratch_h_, d_grouped_a_, column_scratch_;
  std::vector<bf16_t> rounded_;
};

}  // namespace

std::unique_ptr<Layout> make_btp(const ModelConfig& config, Communicator& tp) {
  return std::make_unique<Btp>(config, tp);
}

}  // namespace boostlm
