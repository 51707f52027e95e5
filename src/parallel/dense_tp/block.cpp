// dense-tp: Megatron tensor parallelism for the full-rank model (SPEC §3.1, baseline 1).
//
// The residual stream is replicated [N, d]. Q, K, V, Gate, Up are column-parallel (this rank holds
// the output rows of W for its heads / its d_ff slice); O and Down are row-parallel (the input
// columns) and their partial outputs are all-reduced. Norms are replicated.
// Per block: forward 2 all-reduces of N·d (after O and Down); backward 2 all-reduces of N·d (the
// partial input gradients of the column-parallel projections, before each norm's backward).
// Megatron's f and g: g is the all-reduce after a row-parallel group's forward, f the all-reduce
// before a norm's backward; both are in the two functions below.
#include <span>

#include "core/error.h"
#include "kernels/rmsnorm.h"
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

 protected:
  // Normed groups (q|k|v, gate|up): the replicated norm, then each member's column shard.
  // o, down: the row shard's partial output, summed over the group (g).
  void group_forward(int64_t layer, const Group& g, GemmInput x,
                     std::initializer_list<float*> y) override {
    const int64_t N = batch_ * seq_len_, d = config_.d_model;
    if (!g.normed) {
      const ProjectionWeights& p = blocks_[layer].proj[g.first];
      dense_projection_forward(p, x, N, y.begin()[0], p.d_out, compute_);
      all_reduce_activations(tp_, compute_, y.begin()[0], N, d, d, wire_);  // row-parallel: Σ
      return;
    }
    columns_forward(layer, g, x, {fp32_outputs(y).data(), y.size()});
  }

  // Column-parallel q|k|v and gate|up: each rank's outputs are whole, so they can come out in
  // bf16.
  bool bf16_outputs(const Group& g) const override { return g.normed; }
  void group_forward_mixed(int64_t layer, const Group& g, GemmInput x,
                           std::initializer_list<GroupOutput> y) override {
    BOOSTLM_ASSERT(g.normed);
    columns_forward(layer, g, x, y);
  }

  void group_backward(int64_t layer, const Group& g, GemmInput x,
                      std::initializer_list<GemmInput> dy, GroupOutput dx_out) override {
    const int64_t N = batch_ * seq_len_, d = config_.d_model;
    const BlockWeights& w = blocks_[layer];
    if (!g.normed) {  // dy (replicated) is ∂L/∂(output); the input is this rank's shard
      const ProjectionWeights& p = w.proj[g.first];
      // dy is the residual's gradient: in bf16 as the norm's backward above left it.
      GemmInput d = dy.begin()[0];
      if (const bf16_t* copy = residual_gradient_bf16(layer, g, d.f32)) d.bf16 = copy;
      if (dx_out.bf16)
        dense_projection_backward(p, x, N, d, dx_out.bf16, p.d_in);
      else
        dense_projection_backward(p, x, N, d, dx_out.f32, p.d_in, 0.0f, compute_);
      return;
    }
    float* dx = dx_out.f32;
    const Norm n = norm(layer, g);
    const GemmInput in = replicated_norm_output(n);
    for (int m = 0; m < g.count; ++m) {
      const ProjectionWeights& p = w.proj[g.first + m];
      dense_projection_backward(p, in, N, dy.begin()[m], d_norm_.data(), d, m == 0 ? 0.0f : 1.0f,
                                compute_);
    }
    // column-parallel inputs: Σ of partial gradients (f)
    all_reduce_activations(tp_, compute_, d_norm_.data(), N, d, d, wire_);
    replicated_norm_backward(layer, g, n, d_norm_.data(), x, dx);
  }

  // down is row-parallel (Megatron): its input gradient is this rank's d_ff slice, whole.
  bool input_gradient_in_bf16(const Group& g) const override {
    return compute_ == DType::bf16 && g.index == kDown.index;
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
    for (ReplicatedNorms& k : kept_) k.allocate(N, d, compute_);
    d_norm_.resize(N * d);
  }

  int64_t group_slot_bytes() const override { return kept_.empty() ? 0 : kept_[0].bytes(); }
  int64_t group_total_bytes() const override {
    int64_t n = 0;
    for (const ReplicatedNorms& k : kept_) n += k.bytes();
    return n;
  }

 private:
  Norm norm(int64_t layer, const Group& g) { return norm_of(layer, g, kept_[slot(layer)]); }

  // A normed group's forward: the replicated norm, then each member's column shard in fp32 or
  // bf16.
  void columns_forward(int64_t layer, const Group& g, GemmInput x, std::span<const GroupOutput> y) {
    const int64_t N = batch_ * seq_len_;
    const GemmInput in = replicated_norm_forward(norm(layer, g), x);
    for (int m = 0; m < g.count; ++m) {
      const ProjectionWeights& p = blocks_[layer].proj[g.first + m];
      if (y[m].bf16)
        dense_projection_forward_bf16_out(p, in, N, y[m].bf16, p.d_out);
      else
        dense_projection_forward(p, in, N, y[m].f32, p.d_out, compute_);
    }
  }

  std::vector<ReplicatedNorms> kept_;  // per slot
  Buffer<float> d_norm_;
  Buffer<bf16_t> wire_;  // bf16 training: the activations as they cross the TP group
};

}  // namespace

std::unique_ptr<Layout> make_dense_tp(const ModelConfig& config, Communicator& tp) {
  return std::make_unique<DenseTp>(config, tp);
}

}  // namespace boostlm
