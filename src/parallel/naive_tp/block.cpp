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
#include "kernels/elementwise.h"
#include "kernels/rmsnorm.h"
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
    s.latents_split = true;
    return s;
  }

  int64_t residual_columns() const override { return config_.d_model; }

  // Every rank computes attention over all heads and SwiGLU over all of d_ff, replicated.
  LocalWidths local_widths() const override {
    return {config_.n_heads, config_.n_kv_heads, config_.d_ff};
  }

 protected:
  // Every group: its projections' full outputs, each all-reduced (project(), below); a normed
  // group first runs the replicated norm.
  void group_forward(int64_t layer, const Group& g, GemmInput x,
                     std::initializer_list<float*> y) override {
    Kept& a = kept_[slot(layer)];
    if (!g.normed) {
      project(layer, g, x, a, y);
      return;
    }
    const Norm n = norm(layer, g);
    project(layer, g, replicated_norm_forward(n, x), a, y);
  }

  // The input gradient from this rank's rank slice is partial: one all-reduce per group (q, k and
  // v merged; gate and up merged), before the norm's backward where there is one.
  void group_backward(int64_t layer, const Group& g, GemmInput x,
                      std::initializer_list<GemmInput> dy, GroupOutput dx_out) override {
    const int64_t N = batch_ * seq_len_, d = config_.d_model;
    Kept& a = kept_[slot(layer)];
    float* dx = dx_out.f32;  // input_gradient_in_bf16: never (its partial dx are all-reduced)
    BOOSTLM_ASSERT(dx);
    if (!g.normed) {
      const int64_t in_cols = members(layer, g)[0].d_in;
      // dy is the residual's gradient: in bf16 as the norm's backward above left it.
      GemmInput d = dy.begin()[0];
      if (const bf16_t* copy = residual_gradient_bf16(layer, g, d.f32)) d.bf16 = copy;
      project_backward(layer, g, x, a, {d}, dx);
      all_reduce_activations(tp_, compute_, dx, N, in_cols, in_cols, wire_);
      return;
    }
    const Norm n = norm(layer, g);
    project_backward(layer, g, replicated_norm_output(n), a, dy, d_norm_.data());
    all_reduce_activations(tp_, compute_, d_norm_.data(), N, d, d, wire_);
    replicated_norm_backward(layer, g, n, d_norm_.data(), x, dx);
  }

  // bf16 training: the residual add and the replicated norm that reads it in one pass.
  void residual_add(int64_t layer, const Group& g, Residual x, const float* u,
                    Residual sum) override {
    replicated_residual_norm(norm(layer, g), x, u, sum);
  }

  void allocate_groups(int64_t N) override {
    const int64_t d = config_.d_model;
    kept_.clear();
    kept_.resize(slots());
    int64_t widest = 0;
    for (Kept& a : kept_) {
      for (const Group& g : kGroups) {
        const int64_t width = group_width(members(first_layer_, g));  // local: Σ r/t
        widest = std::max(widest, width);
        a.z[g.index].resize(N * width);
      }
      a.norms.allocate(N, d, compute_);
    }
    d_norm_.resize(N * d);
    d_latent_.resize(N * widest);
  }

  int64_t group_slot_bytes() const override { return kept_.empty() ? 0 : bytes_of(kept_[0]); }
  int64_t group_total_bytes() const override {
    int64_t n = 0;
    for (const Kept& a : kept_) n += bytes_of(a);
    return n;
  }

 private:
  // Per block: per group its latents side by side [N, Σ r/t] (σ(z) is computed again in
  // backward); the norms.
  struct Kept {
    std::array<Buffer<float>, kGroupsPerBlock> z;
    ReplicatedNorms norms;
  };
  Norm norm(int64_t layer, const Group& g) { return norm_of(layer, g, kept_[slot(layer)].norms); }
  static int64_t bytes_of(const Kept& a) {
    int64_t n = 0;
    for (int g = 0; g < kGroupsPerBlock; ++g) n += a.z[g].size();
    return n * static_cast<int64_t>(sizeof(float)) + a.norms.bytes();
  }

  // A group's projections, each summed to its full output by an all-reduce: the partial products
  // of this rank's r/t slice of the latents. Grouped: the A shards as one GEMM, the B shards
  // batched, and the outputs side by side in a packed [N, Σ d_out] buffer for one all-reduce.
  void project(int64_t layer, const Group& g, GemmInput x, Kept& a,
               std::initializer_list<float*> outputs) {
    const ProjectionGroup group = members(layer, g);
    const int64_t N = batch_ * seq_len_, width = group_width(group);
    const ConcatenatedA* cat = concatenated(layer, g);
    float* z = a.z[g.index].data();
    group_down_forward(group, cat, x, N, z, width, compute_);
    // LaX: the crossing of this rank's r/t columns (it gathers and reduces what it needs).
    const GemmInput latent =
        latent_input(group, lax() ? lax_forward(layer, g, z, width) : z, N, rounded_latent_);
    std::array<float*, 3> y{};
    std::array<int64_t, 3> ldy{};
    if (!cat) {
      for (size_t m = 0; m < group.size(); ++m) {
        y[m] = outputs.begin()[m];
        ldy[m] = group[m].d_out;
      }
      group_up_forward(group, latent, N, y.data(), ldy.data(), false, compute_);
      for (size_t m = 0; m < group.size(); ++m)
        all_reduce_activations(tp_, compute_, y[m], N, group[m].d_out, group[m].d_out, wire_);
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
    if (compute_ == DType::bf16 && tp_.size() > 1) {
      // bf16 on the wire (issue 60): rounded, summed, and widened straight into each output.
      if (wire_.size() < static_cast<size_t>(N * packed_width)) wire_.resize(N * packed_width);
      round_to_bf16(packed_.data(), N, packed_width, packed_width, wire_.data());
      tp_.all_reduce(wire_.data(), N * packed_width);
      c0 = 0;
      for (size_t m = 0; m < group.size(); ++m) {
        const int64_t cols = group[m].d_out;
        widen_bf16(wire_.data() + c0, N, cols, packed_width, outputs.begin()[m], cols);
        c0 += cols;
      }
      return;
    }
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
  void project_backward(int64_t layer, const Group& g, GemmInput x, Kept& a,
                        std::initializer_list<GemmInput> dy, float* dx_partial) {
    const ProjectionGroup group = members(layer, g);
    const int64_t N = batch_ * seq_len_, width = group_width(group);
    const float* z = lax() ? lax_latent(layer, g) : a.z[g.index].data();
    group_up_backward(group, latent_input(group, z, N, rounded_latent_), dy.begin(), N,
                      d_latent_.data(), width, options_.grouping, compute_);
    // dz as the down GEMMs read it: in bf16 training σ' writes it in bf16 (rounded_latent_, free
    // once the up half's GEMMs have read σ(z) from it).
    GemmInput dz{d_latent_.data(), width};
    if (lax()) {
      lax_backward(layer, g, d_latent_.data());
    } else if (compute_ == DType::bf16) {
      if (rounded_latent_.size() < static_cast<size_t>(N * width))
        rounded_latent_.resize(N * width);
      dz = group_activate_backward_to_bf16(group, z, d_latent_.data(), N, rounded_latent_.data());
    } else {
      group_activate_backward(group, z, d_latent_.data(), N);
    }
    group_down_backward(group, concatenated(layer, g), x, dz, N, dx_partial, group[0].d_in, 0.0f,
                        concatenated_da_, compute_);
  }

  std::vector<Kept> kept_;
  Buffer<float> packed_, d_norm_, d_latent_;
  Buffer<bf16_t> rounded_latent_;
  Buffer<bf16_t> wire_;  // bf16 training: the activations as they cross the TP group
};

}  // namespace

std::unique_ptr<Layout> make_naive_tp(const ModelConfig& config, Communicator& tp) {
  return std::make_unique<NaiveTp>(config, tp);
}

}  // namespace boostlm
