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
#include <span>

#include "core/error.h"
#include "kernels/activation.h"
#include "kernels/elementwise.h"
#include "kernels/rmsnorm.h"
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

 protected:
  // Every group: its down halves into partial latents, their all-reduce(s) (the norm's statistic
  // riding along), then its up halves locally (latents_forward, up_project below).
  void group_forward(int64_t layer, const Group& g, GemmInput x,
                     std::initializer_list<float*> y) override {
    forward_into(layer, g, x, {fp32_outputs(y).data(), y.size()});
  }

  // The latents' gradients are partial (B is column-parallel): their all-reduce(s), then dA and
  // the input gradient locally — through the online norm without any collective.
  void group_backward(int64_t layer, const Group& g, GemmInput x,
                      std::initializer_list<GemmInput> dy, GroupOutput dx) override {
    Kept& a = kept_[slot(layer)];
    const Norm n = norm(layer, g);
    latents_backward(layer, g, dy, x, n.gamma, n.dgamma, n.rstd, a, dx, g.normed ? 1.0f : 0.0f,
                     n.out);
  }

  // down's input is this rank's d_ff slice (A row-parallel): its gradient is whole here.
  bool input_gradient_in_bf16(const Group& g) const override {
    return compute_ == DType::bf16 && g.index == kDown.index;
  }

  // lowrank (SPEC §3.6): the intermediates are rebuilt from the kept latents with local GEMMs.
  bool recomputes_intermediates() const override {
    return options_.recompute == Recompute::lowrank;
  }

  void group_replay(int64_t layer, const Group& g, GemmInput x,
                    std::initializer_list<float*> y) override {
    replay_into(layer, g, x, {fp32_outputs(y).data(), y.size()});
  }

  // B is column-parallel: each rank's outputs are whole, so v and gate|up can come out in bf16.
  bool bf16_outputs(const Group& g) const override {
    return g.index == kGateUp.index || g.index == kQkv.index;
  }
  void group_forward_mixed(int64_t layer, const Group& g, GemmInput x,
                           std::initializer_list<GroupOutput> y) override {
    forward_into(layer, g, x, y);
  }
  void group_replay_mixed(int64_t layer, const Group& g, GemmInput x,
                          std::initializer_list<GroupOutput> y) override {
    replay_into(layer, g, x, y);
  }

  // A group's forward and its replay (the up halves from the kept latents, and the synchronous
  // norm's output from the kept 1/rms: the online norm keeps none).
  void forward_into(int64_t layer, const Group& g, GemmInput x, std::span<const GroupOutput> y) {
    Kept& a = kept_[slot(layer)];
    const Norm n = norm(layer, g);
    latents_forward(layer, g, x, n.gamma, n.rstd, n.out, a);
    up_project(layer, g, a, y);
  }
  void replay_into(int64_t layer, const Group& g, GemmInput x, std::span<const GroupOutput> y) {
    up_project(layer, g, kept_[slot(layer)], y);
    if (!g.normed || options_.online_norm) return;
    const Norm n = norm(layer, g);
    const int64_t N = batch_ * seq_len_;
    visit_residual(
        x, [&](const auto* xv) { rmsnorm_apply(xv, dl_, n.gamma, n.rstd, N, dl_, n.out, dl_); });
  }

  // bf16 training with the online norm: the residual add and the norm input's pass (Σx², x ⊙ γ
  // at unit scale, rounded) in one pass over this rank's columns; group_input then takes both.
  void residual_add(int64_t layer, const Group& g, Residual x, const float* u,
                    Residual sum) override {
    if (!(g.normed && options_.online_norm && compute_ == DType::bf16)) {
      Layout::residual_add(layer, g, x, u, sum);
      return;
    }
    const int64_t N = batch_ * seq_len_;
    if (rounded_.size() < static_cast<size_t>(N * dl_)) rounded_.resize(N * dl_);
    const float* gamma = norm(layer, g).gamma;
    if (sum.bf16)
      residual_online_norm_input_bf16(x.bf16, u, sum.bf16, gamma, stat_.data(), N, dl_,
                                      config_.rms_eps, rounded_.data());
    else
      residual_online_norm_input_bf16(x.f32, u, sum.f32, gamma, stat_.data(), N, dl_,
                                      config_.rms_eps, rounded_.data());
    prenormed_input_ = sum.data();
  }

  void allocate_groups(int64_t N) override {
    const int t = tp_.size();
    dl_ = config_.d_model / t;
    ffl_ = config_.d_ff / t;
    kept_.clear();
    kept_.resize(slots());
    for (Kept& a : kept_) {
      for (const Group& g : kGroups) {
        const int64_t width = group_width(members(first_layer_, g));
        if (compute_ == DType::bf16)
          a.z16[g.index].resize(N * width);
        else
          a.z[g.index].resize(N * width);
      }
      a.rstd1.resize(N);
      a.rstd2.resize(N);
    }
    // What lowrank recomputation rebuilds lives once; otherwise per slot.
    rebuilt_.clear();
    rebuilt_.resize(recomputes_intermediates() ? 1 : slots());
    for (Rebuilt& r : rebuilt_) {
      if (!options_.online_norm) {
        r.norm1.resize(N * dl_);
        r.norm2.resize(N * dl_);
      }
    }
    stat_.resize(N);
    if (compute_ != DType::bf16)
      xg_.resize(N * dl_);
    else
      xg_ = Buffer<float>();
    d_norm_.resize(N * dl_);
    if (compute_ == DType::bf16 && options_.online_norm)
      d_norm16_.resize(N * dl_);
    else
      d_norm16_ = Buffer<bf16_t>();
    int64_t widest = 0;
    for (const Group& g : kGroups) widest = std::max(widest, group_width(members(first_layer_, g)));
    if (latents_direct())  // the GEMMs write the latents themselves: nothing is packed
      packed_ = Buffer<float>();
    else
      packed_.resize(N * (widest + 1));  // + the norm statistic
    d_packed_.resize(N * widest);
    if (lax())
      lax_u_.resize(N * widest);
    else
      lax_u_ = Buffer<float>();
  }

  int64_t group_slot_bytes() const override {
    if (kept_.empty()) return 0;
    return bytes_of(kept_[0]) + (recomputes_intermediates() ? 0 : bytes_of(rebuilt_[0]));
  }
  int64_t group_total_bytes() const override {
    int64_t n = 0;
    for (const Kept& a : kept_) n += bytes_of(a);
    for (const Rebuilt& r : rebuilt_) n += bytes_of(r);
    return n;
  }

 private:
  // What a block keeps: per group its all-reduced (normalised) latents side by side [N, Σ rank],
  // and each norm's per-token 1/rms.
  // In bf16 training the latents are kept in bf16 (z16): only σ, σ' (fp32 arithmetic), the online
  // norm's backward and bf16 GEMMs read them.
  struct Kept {
    std::array<Buffer<float>, kGroupsPerBlock> z;
    std::array<Buffer<bf16_t>, kGroupsPerBlock> z16;
    Buffer<float> rstd1, rstd2;
  };
  // What lowrank recomputation rebuilds: the synchronous norms' outputs. (σ(z), cola's latent, is
  // never kept: Layout::latent_input computes it where a GEMM reads it.)
  struct Rebuilt {
    Buffer<float> norm1, norm2;
  };
  Rebuilt& rebuilt(int64_t layer) {
    return recomputes_intermediates() ? rebuilt_[0] : rebuilt_[slot(layer)];
  }
  // A normed group's norm: weight, its gradient, the synchronous output, the kept 1/rms.
  Norm norm(int64_t layer, const Group& g) {
    if (!g.normed) return {};
    Kept& a = kept_[slot(layer)];
    Rebuilt& r = rebuilt(layer);
    const BlockWeights& w = blocks_[layer];
    return g.index == kQkv.index ? Norm{w.norm1, w.dnorm1, r.norm1.data(), a.rstd1.data()}
                                 : Norm{w.norm2, w.dnorm2, r.norm2.data(), a.rstd2.data()};
  }
  static int64_t bytes_of(const Kept& a) {
    int64_t n = a.rstd1.size() + a.rstd2.size(), n16 = 0;
    for (const auto& z : a.z) n += z.size();
    for (const auto& z : a.z16) n16 += z.size();
    return n * static_cast<int64_t>(sizeof(float)) + n16 * static_cast<int64_t>(sizeof(bf16_t));
  }
  // f(z) on group g's kept latents, fp32 or bf16; and those latents as GEMM input (z, or σ(z)
  // for cola).
  template <typename F>
  auto with_latents(Kept& a, const Group& g, F f) {
    return compute_ == DType::bf16 ? f(a.z16[g.index].data()) : f(a.z[g.index].data());
  }
  // LaX: the crossed latent z (fp32, from what the block kept), σ(z) or z as B reads it.
  GemmInput latent_of(int64_t layer, ProjectionGroup group, Kept& a, const Group& g) {
    const int64_t N = batch_ * seq_len_;
    if (lax()) return latent_input(group, lax_latent(layer, g), N, rounded_latent_);
    return with_latents(a, g, [&](auto* z) { return latent_input(group, z, N, rounded_latent_); });
  }
  static int64_t bytes_of(const Rebuilt& r) {
    const int64_t n = r.norm1.size() + r.norm2.size();
    return n * static_cast<int64_t>(sizeof(float));
  }

  // The GEMM input of a group: its input x itself, or the norm of x (for a normed group) —
  // synchronous: normalised here with an all-reduce of Σx²; online: x ⊙ γ, whose latent is
  // divided by the rms once the statistic has come back with it (`online_stat` set).
  GemmInput group_input(const Group& g, GemmInput input, const float* gamma, float* rstd,
                        float* norm_out, bool& online_stat) {
    const int64_t N = batch_ * seq_len_;
    online_stat = false;
    if (!g.normed) return shared_input(input, N, g.first == o_ ? dl_ : ffl_, rounded_);
    const void* x = input.f32 ? static_cast<const void*>(input.f32) : input.bf16;
    if (options_.online_norm && compute_ == DType::bf16) {
      // x ⊙ γ with each row divided by its local rms, so the rounded GEMM input has unit scale
      // (SPEC §3.4); the partial latent is multiplied back before the all-reduce. Σx², the
      // product and the rounding in one pass over x.
      online_stat = true;
      if (prenormed_input_ == x) {  // made by the residual add that wrote x
        prenormed_input_ = nullptr;
        return {nullptr, rounded_.data(), dl_};
      }
      return {nullptr, online_input_bf16(input, gamma, stat_.data()), dl_};
    }
    if (!options_.online_norm) {
      visit_residual(input, [&](const auto* xv) {
        rmsnorm_partial_sum_squares(xv, dl_, N, dl_, stat_.data());
        tp_.all_reduce(stat_.data(), N);
        rmsnorm_rstd(stat_.data(), N, config_.d_model, config_.rms_eps, rstd);
        rmsnorm_apply(xv, dl_, gamma, rstd, N, dl_, norm_out, dl_);
      });
      return shared_input(norm_out, N, dl_, rounded_);
    }
    rmsnorm_partial_sum_squares(input.f32, dl_, N, dl_, stat_.data());  // fp32 training
    online_stat = true;
    online_norm_input(input.f32, gamma, nullptr, N, dl_, config_.rms_eps, xg_.data());  // x ⊙ γ
    return {xg_.data(), dl_};
  }

  // bf16: x ⊙ γ (divided by each row's local rms, whose Σx² goes to sum_sq, when sum_sq is
  // given) rounded into rounded_ as it is computed; x the residual, fp32 or bf16.
  const bf16_t* online_input_bf16(GemmInput x, const float* gamma, float* sum_sq) {
    const int64_t N = batch_ * seq_len_;
    if (rounded_.size() < static_cast<size_t>(N * dl_)) rounded_.resize(N * dl_);
    visit_residual(x, [&](const auto* xv) {
      online_norm_input_bf16(xv, gamma, sum_sq, N, dl_, config_.rms_eps, rounded_.data());
    });
    return rounded_.data();
  }

  // Forward of a group's down halves: partial latents → all-reduce(s) → z (normalised).
  void latents_forward(int64_t layer, const Group& g, GemmInput x, const float* gamma, float* rstd,
                       float* norm_out, Kept& a) {
    const int64_t N = batch_ * seq_len_;
    bool online = false;
    const GemmInput in = group_input(g, x, gamma, rstd, norm_out, online);
    const ProjectionGroup group = members(layer, g);
    const int64_t width = group_width(group);
    const ConcatenatedA* cat = concatenated(layer, g);
    if (latents_direct()) {
      latents_forward_direct(g, group, cat, in, online, rstd, a);
      return;
    }
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
      if (bf16_wire()) {
        // bf16 on the wire (issue 60): the partial latents rounded as they are packed (the online
        // norm's rescale in the same pass), the statistic beside them in fp32, one collective.
        const RowMessage m = tp_.row_message(N, part_width, with_stat ? 1 : 0);
        if (wire_.size() < static_cast<size_t>(m.bytes / 2)) wire_.resize(m.bytes / 2);
        void* message = wire_.data();
        online_norm_pack_bf16(buf, ld, N, part_width, stat_.data(), dl_, config_.rms_eps,
                              online && compute_ == DType::bf16, m.values_in(message), m.values_ld,
                              m.stats_in(message), m.stats_ld);
        tp_.all_reduce_rows(message, m);
        if (with_stat)
          online_norm_rstd(m.stats_in(message), m.stats_ld, N, 0, config_.d_model, config_.rms_eps,
                           rstd);
        const bf16_t* summed = m.values_in(message);
        with_latents(a, g, [&](auto* z) {
          online_norm_unpack(summed, m.values_ld, N, part_width, online ? rstd : nullptr, z + col,
                             width);
        });
        if (lax())
          online_norm_unpack(summed, m.values_ld, N, part_width, online ? rstd : nullptr,
                             lax_u_.data() + col, width);
        col += part_width;
        j += part.size();
        continue;
      }
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
      with_latents(a, g, [&](auto* z) {
        online_norm_unpack(buf, ld, N, part_width, online ? rstd : nullptr, z + col, width);
      });
      // LaX crosses the whole latent in fp32 (in bf16 training z is kept rounded).
      if (lax())
        online_norm_unpack(buf, ld, N, part_width, online ? rstd : nullptr, lax_u_.data() + col,
                           width);
      col += part_width;
      j += part.size();
    }
    // LaX: the latent is replicated now, so its gate and norm run here with no collective.
    if (lax()) lax_forward(layer, g, lax_u_.data(), width);
  }

  // bf16 training on one rank (no TP group), without LaX: nothing to all-reduce, so the down
  // GEMMs write the kept bf16 latents themselves, with no packing pass and no unpacking pass. The
  // online norm's input was divided by its rows' rms already (group_input), which on one rank is
  // the whole row's: the GEMM's output is Z = RMSNorm(x)·A itself, and 1/rms comes from Σx².
  bool latents_direct() const { return compute_ == DType::bf16 && tp_.size() == 1 && !lax(); }
  void latents_forward_direct(const Group& g, ProjectionGroup group, const ConcatenatedA* cat,
                              GemmInput in, bool online, float* rstd, Kept& a) {
    const int64_t N = batch_ * seq_len_, width = group_width(group), d_in = group[0].d_in;
    bf16_t* z = a.z16[g.index].data();
    if (cat) {
      gemm_batched_bf16_out(Trans::N, Trans::N, N, width, d_in, 1.0f, in, cat->input(), z, width,
                            GemmBatch{});
    } else {
      int64_t c0 = 0;
      for (const ProjectionWeights& p : group) {
        gemm_batched_bf16_out(Trans::N, Trans::N, N, p.rank, d_in, 1.0f, in,
                              {p.a, p.a_bf16, p.rank}, z + c0, width, GemmBatch{});
        c0 += p.rank;
      }
    }
    if (online) online_norm_rstd(stat_.data(), 1, N, 0, config_.d_model, config_.rms_eps, rstd);
  }

  // y_m = σ(z_m) B_m for the group's members (column-parallel B; batched when grouping). Each
  // y_m: [N, d_out] contiguous, in fp32 or in bf16 (bf16 training: the GEMMs' own rounding); the
  // members of one output type in a row are one call.
  void up_project(int64_t layer, const Group& g, Kept& a, std::span<const GroupOutput> y) {
    const ProjectionGroup group = members(layer, g);
    BOOSTLM_ASSERT(y.size() == group.size());
    const int64_t N = batch_ * seq_len_;
    const GemmInput latent = latent_of(layer, group, a, g);
    int64_t column = 0;
    for (size_t first = 0, end; first < group.size(); first = end) {
      const bool bf16 = y[first].bf16 != nullptr;
      for (end = first + 1; end < group.size() && (y[end].bf16 != nullptr) == bf16;) ++end;
      const ProjectionGroup run = group.subspan(first, end - first);
      std::array<float*, 3> f32{};
      std::array<bf16_t*, 3> b16{};
      for (size_t m = 0; m < run.size(); ++m) {
        f32[m] = y[first + m].f32;
        b16[m] = y[first + m].bf16;
      }
      const auto ld = output_strides(run);
      if (bf16)
        group_up_forward_bf16_out(run, latent.at(column), N, b16.data(), ld.data(),
                                  options_.grouping);
      else
        group_up_forward(run, latent.at(column), N, f32.data(), ld.data(), options_.grouping,
                         compute_);
      column += group_width(run);
    }
  }

  static std::array<int64_t, 3> output_strides(ProjectionGroup group) {
    std::array<int64_t, 3> ld{};
    for (size_t m = 0; m < group.size(); ++m) ld[m] = group[m].d_out;
    return ld;
  }

  // Backward of a group: dB and the latents' (partial) gradients, their all-reduce(s), σ', then
  // dA and the input gradient — through the online norm locally, or the synchronous norm.
  // dy: ∂L/∂y_m, [N, d_out] each. x: the group's input (the residual for a normed group);
  // dx = dx_beta·dx + ∂L/∂x (dx.f32), or ∂L/∂x in bf16 only (dx.bf16: an unnormed group, beta 0).
  void latents_backward(int64_t layer, const Group& g, std::initializer_list<GemmInput> dy,
                        GemmInput input, const float* gamma, float* dgamma, const float* rstd,
                        Kept& a, GroupOutput dx_out, float dx_beta,
                        const float* norm_out = nullptr) {
    float* dx = dx_out.f32;
    const int64_t N = batch_ * seq_len_;
    const ProjectionGroup group = members(layer, g);
    const ConcatenatedA* cat = concatenated(layer, g);
    const int64_t width = group_width(group);
    // dB += σ(z)ᵀ dy;  dσ = dy Bᵀ → packed [N, Σr];  one all-reduce per packed buffer. o's and
    // down's dy, the residual's gradient, in bf16 as the norm's backward above left it.
    GemmInput residual_dy = *dy.begin();
    const bf16_t* copy = residual_gradient_bf16(layer, g, residual_dy.f32);
    if (copy) residual_dy.bf16 = copy;
    BOOSTLM_ASSERT(!copy || group.size() == 1);  // o and down
    group_up_backward(group, latent_of(layer, group, a, g), copy ? &residual_dy : dy.begin(), N,
                      d_packed_.data(), width, options_.grouping, compute_);
    if (cat) {
      all_reduce_activations(tp_, compute_, d_packed_.data(), N, width, width, wire_);
    } else {  // each projection's own all-reduce: its columns, gathered contiguous
      int64_t c0 = 0;
      for (const ProjectionWeights& p : group) {
        all_reduce_columns(d_packed_.data(), N, width, c0, p.rank);
        c0 += p.rank;
      }
    }
    const bool online = g.normed && options_.online_norm;
    // LaX: the chain's gradient from the block above joins, then σ', the latent's norm and the
    // gate (replicated: no collective), leaving ∂L/∂u.
    if (lax()) lax_backward(layer, g, d_packed_.data());
    // The latents' gradient as the down GEMMs read it: in bf16 training written in bf16 by the
    // pass that makes it (σ' and the online norm's in one pass), in rounded_latent_, free once the
    // up half's GEMMs above have read σ(z) from it.
    GemmInput dp{d_packed_.data(), width};
    if (compute_ == DType::bf16) {
      const bf16_t* z = a.z16[g.index].data();
      if (rounded_latent_.size() < static_cast<size_t>(N * width))
        rounded_latent_.resize(N * width);
      bf16_t* dp16 = rounded_latent_.data();
      if (online) {
        online_norm_latent_backward_to_bf16(z, d_packed_.data(), !lax() && group[0].latent_act, N,
                                            width, rstd, config_.d_model, stat_.data(), dp16);
        dp = {nullptr, dp16, width};
      } else if (!lax()) {
        dp = group_activate_backward_to_bf16(group, z, d_packed_.data(), N, dp16);
      }
    } else {
      with_latents(a, g, [&](const auto* z) {
        // dz = dσ ⊙ σ'(z), in place
        if (!lax()) group_activate_backward(group, z, d_packed_.data(), N);
        // Z = P·rstd: dP = dZ·rstd; the rms term becomes dS (in stat_).
        if (online)
          online_norm_latent_backward(z, d_packed_.data(), N, width, rstd, config_.d_model,
                                      stat_.data());
      });
    }
    // The GEMM input of forward: x (o, down), the synchronous norm's output, or x ⊙ γ
    // (recomputed: cheaper than keeping it; unscaled, as dA = (x ⊙ γ)ᵀ dP).
    const int64_t in_cols = group[0].d_in;
    GemmInput in = !g.normed ? input : GemmInput(norm_out, in_cols);
    if (online && compute_ == DType::bf16) {
      in = {nullptr, online_input_bf16(input, gamma, nullptr), in_cols};
    } else if (online) {
      online_norm_input(input.f32, gamma, nullptr, N, dl_, config_.rms_eps, xg_.data());
      in = {xg_.data(), in_cols};
    }
    // dA_i += inᵀ dP_i ;  g = Σ dP_i A_iᵀ  (one GEMM each when grouped).
    if (dx_out.bf16) {
      BOOSTLM_ASSERT(!g.normed && dx_beta == 0.0f);
      group_down_backward(group, cat, shared_input(in, N, in_cols, rounded_), dp, N, dx_out.bf16,
                          in_cols, concatenated_da_);
      return;
    }
    // In bf16 training with the online norm (and the bf16 residual), g = ∂L/∂(x ⊙ γ) is bf16 and
    // the norm's backward reads it so: written so by the GEMM (grouped, or a group of one), else
    // (the ungrouped ablation, its members' products summed in fp32) rounded once after the sum,
    // so that grouping changes no value's precision.
    const bool g16 = online && compute_ == DType::bf16 && input.bf16 != nullptr;
    if (g16 && (cat || group.size() == 1)) {
      group_down_backward(group, cat, shared_input(in, N, in_cols, rounded_), dp, N,
                          d_norm16_.data(), in_cols, concatenated_da_);
    } else {
      float* g_out = g.normed ? d_norm_.data() : dx;
      group_down_backward(group, cat, shared_input(in, N, in_cols, rounded_), dp, N, g_out,
                          in_cols, g.normed ? 0.0f : dx_beta, concatenated_da_, compute_);
      if (g16) round_to_bf16(d_norm_.data(), N, dl_, dl_, d_norm16_.data());
    }
    if (!g.normed) return;
    if (online) {
      // dx += g ⊙ γ + 2·dS·x ;  dγ += Σ_rows x ⊙ g   (SPEC §3.4; no collective)
      bf16_t* dx16 = keep_residual_gradient_bf16(layer, g, dx);
      if (g16) {
        online_norm_input_backward(d_norm16_.data(), input.bf16, gamma, stat_.data(), N, dl_,
                                   dx_beta, dx, dgamma, dx16);
        return;
      }
      visit_residual(input, [&](const auto* x) {
        online_norm_input_backward(d_norm_.data(), x, gamma, stat_.data(), N, dl_, dx_beta, dx,
                                   dgamma, dx16);
      });
    } else {
      // Synchronous norm backward: the row term needs Σ dy⊙γ⊙x over the whole row.
      BOOSTLM_ASSERT(dx_beta == 1.0f);
      visit_residual(input, [&](const auto* x) {
        rmsnorm_partial_backward_dot(d_norm_.data(), dl_, x, dl_, gamma, N, dl_, stat_.data());
        tp_.all_reduce(stat_.data(), N);
        rmsnorm_backward_apply(d_norm_.data(), dl_, x, dl_, gamma, rstd, stat_.data(), N, dl_,
                               config_.d_model, dx, dl_, dgamma, /*accumulate=*/true);
      });
    }
  }

  // All-reduces columns [c0, c0 + cols) of a [N, ld] buffer (an ungrouped projection's latent
  // gradient inside the packed buffer) through a contiguous copy.
  void all_reduce_columns(float* buf, int64_t N, int64_t ld, int64_t c0, int64_t cols) {
    // Whole rows, or bf16 (rounded out of, and widened back into, the columns): no copy.
    if (bf16_wire() || cols == ld) {
      all_reduce_activations(tp_, compute_, buf + c0, N, cols, ld, wire_);
      return;
    }
    column_scratch_.resize(N * cols);
    copy_columns(buf + c0, ld, N, cols, column_scratch_.data(), cols);
    tp_.all_reduce(column_scratch_.data(), N * cols);
    copy_columns(column_scratch_.data(), cols, N, cols, buf + c0, ld);
  }

  // Whether the activation collectives carry bf16 (bf16 training on a TP group, issue 60).
  bool bf16_wire() const { return compute_ == DType::bf16 && tp_.size() > 1; }

  std::vector<Kept> kept_;
  std::vector<Rebuilt> rebuilt_;
  int64_t dl_ = 0, ffl_ = 0;
  Buffer<float> stat_, xg_, d_norm_, packed_, d_packed_, column_scratch_;
  const void* prenormed_input_ = nullptr;  // the residual whose norm input residual_add made
  Buffer<float> lax_u_;  // LaX: the group's whole latent u in fp32, before its crossing
  Buffer<bf16_t> rounded_, rounded_latent_;
  Buffer<bf16_t> d_norm16_;  // bf16 training, online norm: ∂L/∂(x ⊙ γ) as the GEMM wrote it
  Buffer<bf16_t> wire_;      // bf16 training: a latent message as it crosses the TP group
};

}  // namespace

std::unique_ptr<Layout> make_btp(const ModelConfig& config, Communicator& tp) {
  return std::make_unique<Btp>(config, tp);
}

}  // namespace boostlm
