#include "parallel/layout.h"

#include "core/error.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/rmsnorm.h"

namespace boostlm {

std::string to_string(Recompute recompute) {
  switch (recompute) {
    case Recompute::none:
      return "none";
    case Recompute::lowrank:
      return "lowrank";
    case Recompute::block:
      return "block";
  }
  return "?";
}

Recompute parse_recompute(const std::string& text) {
  if (text == "none") return Recompute::none;
  if (text == "lowrank") return Recompute::lowrank;
  if (text == "block") return Recompute::block;
  throw error("unknown recomputation '", text, "' (expected none, lowrank or block)");
}

Layout::Layout(const ModelConfig& config, Communicator& tp)
    : config_(config), tp_(tp), last_layer_(config.n_layers) {}

// ---------------------------------------------------------------------------------------------
// The block, written once. What differs between layouts — how a group of projections is sharded,
// where its collective sits, what it keeps — is behind group_forward / group_backward; the
// skeleton below is the same for all of them: attention runs on this rank's heads, SwiGLU on its
// MLP columns, and the residual adds on its residual columns.

void Layout::block_forward(int64_t layer, Residual x_in, Residual x_out) {
  BlockActs& a = acts_[slot(layer)];
  BlockActs& w = intermediates(a);
  a.x_in = x_in;
  work_layer_ = layer;
  work_micro_ = micro_;
  const int64_t N = batch_ * seq_len_, rc = residual_columns();
  concatenate_groups(layer);

  // Attention sub-block.
  const bool v_in_bf16 = qkv(layer, a, w, /*replay=*/false);
  group_forward(layer, kO, attention(w, v_in_bf16), {partial_.data()});
  residual_add(layer, kGateUp, x_in, partial_.data(), mid(a));

  // MLP sub-block.
  const bool kept = gate_up(layer, a, w, /*replay=*/false);
  group_forward(layer, kDown, mlp_hidden(w, /*fresh=*/!kept), {partial_.data()});
  if (x_out.bf16)
    add(a.x_mid16.data(), partial_.data(), x_out.bf16, N * rc);
  else
    add(a.x_mid.data(), partial_.data(), x_out.f32, N * rc);
}

void Layout::block_backward(int64_t layer, float* dx) {
  BlockActs& a = acts_[slot(layer)];
  BlockActs& w = intermediates(a);
  const int64_t N = batch_ * seq_len_, ff = widths_.ff, rc = residual_columns();
  const int64_t hd = config_.head_dim(), ql = widths_.heads * hd, kvl = widths_.kv_heads * hd;
  concatenate_groups(layer);
  // The shared work area still holds the intermediates of the block forward ran last.
  if (backward_recomputes(layer)) replay(layer, a);
  work_layer_ = -1;  // backward overwrites them

  // MLP. In bf16 SwiGLU's backward writes the gate|up gradients in bf16 only: the group's GEMMs
  // are all that read them. Its own input, SwiGLU's output gradient, comes in bf16 where the
  // layout has it whole: written over SwiGLU's output, which down's weight gradient has read by
  // then (the GEMM that writes dh runs after the one that reads h).
  const bool bf16 = compute_ == DType::bf16;
  const bool act = config_.mlp_gate_act;
  const GemmInput hidden = mlp_hidden(w, /*fresh=*/false);
  const bool dh16 = bf16 && input_gradient_in_bf16(kDown);
  if (dh16)
    group_backward(layer, kDown, hidden, {{dx, rc}}, {nullptr, hidden_bf16_.data()});
  else
    group_backward(layer, kDown, hidden, {{dx, rc}}, {d_hidden_.data()});
  if (bf16) {
    const bf16_t *gate = w.gate_up16.data(), *up = gate + N * ff;
    bf16_t *d_gate = d_bf16_.data(), *d_up = d_gate + N * ff;
    if (dh16)
      swiglu_backward_bf16(hidden_bf16_.data(), gate, up, N * ff, act, d_gate, d_up);
    else
      swiglu_backward_bf16(d_hidden_.data(), gate, up, N * ff, act, d_gate, d_up);
    group_backward(layer, kGateUp, mid(a).input(rc), {{nullptr, d_gate, ff}, {nullptr, d_up, ff}},
                   {dx});
  } else {
    const float *gate = w.gate_up.data(), *up = gate + N * ff;
    float *d_gate = d_gate_up_.data(), *d_up = d_gate + N * ff;
    swiglu_backward(d_hidden_.data(), gate, up, N * ff, act, d_gate, d_up);
    group_backward(layer, kGateUp, mid(a).input(rc), {{d_gate, ff}, {d_up, ff}}, {dx});
  }

  // Attention.
  const GemmInput attn =
      bf16 ? GemmInput(nullptr, w.attn16.data(), ql) : GemmInput(w.attn.data(), ql);
  group_backward(layer, kO, attn, {{dx, rc}}, {d_attn_.data()});
  const Qkv d = split_qkv(d_qkv_.data());
  const AttentionShape shape{batch_, seq_len_, widths_.heads, widths_.kv_heads, hd, compute_};
  if (bf16) {
    const bf16_t *q = w.qkv16.data(), *k = q + N * ql, *v = k + N * kvl;
    attention_backward(shape, q, ql, k, kvl, v, kvl, w.attn16.data(), ql, w.lse.data(),
                       d_attn_.data(), ql, d.q, ql, d.k, kvl, d.v, kvl);
    // RoPE's adjoint rounds dq and dk as it rotates them; dv is rounded alone.
    bf16_t *dq = d_bf16_.data(), *dk = dq + N * ql, *dv = dk + N * kvl;
    rope_backward_bf16(d.q, ql, batch_, seq_len_, widths_.heads, rope_, dq, ql);
    rope_backward_bf16(d.k, kvl, batch_, seq_len_, widths_.kv_heads, rope_, dk, kvl);
    round_to_bf16(d.v, N, kvl, kvl, dv);
    group_backward(layer, kQkv, a.x_in.input(rc),
                   {{nullptr, dq, ql}, {nullptr, dk, kvl}, {nullptr, dv, kvl}}, {dx});
    return;
  }
  const Qkv qkv = split_qkv(w.qkv.data());
  attention_backward(shape, qkv.q, ql, qkv.k, kvl, qkv.v, kvl, w.attn.data(), ql, w.lse.data(),
                     d_attn_.data(), ql, d.q, ql, d.k, kvl, d.v, kvl);
  rope_backward(d.q, ql, batch_, seq_len_, widths_.heads, rope_);
  rope_backward(d.k, kvl, batch_, seq_len_, widths_.kv_heads, rope_);
  group_backward(layer, kQkv, a.x_in.input(rc), {{d.q, ql}, {d.k, kvl}, {d.v, kvl}}, {dx});
}

// In bf16 the GEMMs' fp32 outputs are rounded into the kept copies at once, so their work areas
// can be the backward's gradient buffers of the same shapes: nothing in backward reads them after
// the gradients are written (lowrank and whole-block recomputation write them first).
float* Layout::qkv_output(BlockActs& w) {
  return compute_ == DType::bf16 ? d_qkv_.data() : w.qkv.data();
}

float* Layout::gate_up_output(BlockActs& w) {
  return compute_ == DType::bf16 ? d_gate_up_.data() : w.gate_up.data();
}

GemmInput Layout::mlp_hidden(BlockActs& w, bool fresh) {
  const int64_t ff = widths_.ff, n = batch_ * seq_len_ * ff;
  const bool act = config_.mlp_gate_act;
  if (compute_ != DType::bf16) {
    swiglu_forward(w.gate_up.data(), w.gate_up.data() + n, n, act, hidden_.data());
    return {hidden_.data(), ff};
  }
  bf16_t *gate = w.gate_up16.data(), *up = gate + n;
  if (fresh)
    swiglu_forward_bf16(gate_up_output(w), gate_up_output(w) + n, n, act, gate, up,
                        hidden_bf16_.data());
  else
    swiglu_forward_bf16(gate, up, n, act, hidden_bf16_.data());
  return {nullptr, hidden_bf16_.data(), ff};
}

// RoPE on q and k where they were produced, then causal attention over this rank's heads. In bf16,
// q | k | v are kept rounded (the tiles read them so) and the output is written in bf16.
GemmInput Layout::attention(BlockActs& w, bool v_in_bf16) {
  const int64_t N = batch_ * seq_len_;
  const int64_t hd = config_.head_dim(), ql = widths_.heads * hd, kvl = widths_.kv_heads * hd;
  const Qkv qkv = split_qkv(qkv_output(w));
  const AttentionShape shape{batch_, seq_len_, widths_.heads, widths_.kv_heads, hd, compute_};
  if (compute_ != DType::bf16) {
    rope_forward(qkv.q, ql, batch_, seq_len_, widths_.heads, rope_);
    rope_forward(qkv.k, kvl, batch_, seq_len_, widths_.kv_heads, rope_);
    attention_forward(shape, qkv.q, ql, qkv.k, kvl, qkv.v, kvl, w.attn.data(), ql, w.lse.data());
    return {w.attn.data(), ql};
  }
  bf16_t *q = w.qkv16.data(), *k = q + N * ql, *v = k + N * kvl;
  rope_forward_bf16(qkv.q, ql, batch_, seq_len_, widths_.heads, rope_, q, ql);
  rope_forward_bf16(qkv.k, kvl, batch_, seq_len_, widths_.kv_heads, rope_, k, kvl);
  if (!v_in_bf16) round_to_bf16(qkv.v, N, kvl, kvl, v);
  attention_forward(shape, q, ql, k, kvl, v, kvl, w.attn16.data(), ql, w.lse.data());
  return {nullptr, w.attn16.data(), ql};
}

// Rebuilds the intermediates of block `layer` from what it kept: the layout's groups replay their
// up halves from the kept latents, locally; attention and SwiGLU run again.
void Layout::replay(int64_t layer, BlockActs& a) {
  BlockActs& w = work_;
  attention(w, qkv(layer, a, w, /*replay=*/true));
  // In bf16, gate|up as forward kept them: rounded (SwiGLU's output is recomputed by backward).
  if (!gate_up(layer, a, w, /*replay=*/true) && compute_ == DType::bf16)
    mlp_hidden(w, /*fresh=*/true);
}

bool Layout::gate_up_in_bf16() const {
  return compute_ == DType::bf16 && bf16_outputs(kGateUp);
}

bool Layout::gate_up(int64_t layer, BlockActs& a, BlockActs& w, bool replay) {
  const int64_t n = batch_ * seq_len_ * widths_.ff;
  const GemmInput x = mid(a).input(residual_columns());
  if (gate_up_in_bf16()) {
    bf16_t *gate = w.gate_up16.data(), *up = gate + n;
    replay ? group_replay_mixed(layer, kGateUp, x, {{nullptr, gate}, {nullptr, up}})
           : group_forward_mixed(layer, kGateUp, x, {{nullptr, gate}, {nullptr, up}});
    return true;
  }
  float *gate = gate_up_output(w), *up = gate + n;
  replay ? group_replay(layer, kGateUp, x, {gate, up})
         : group_forward(layer, kGateUp, x, {gate, up});
  return false;
}

bool Layout::qkv(int64_t layer, BlockActs& a, BlockActs& w, bool replay) {
  const Qkv out = split_qkv(qkv_output(w));
  const GemmInput x = a.x_in.input(residual_columns());
  if (compute_ == DType::bf16 && bf16_outputs(kQkv)) {
    const int64_t N = batch_ * seq_len_, hd = config_.head_dim();
    bf16_t* v = w.qkv16.data() + N * (widths_.heads + widths_.kv_heads) * hd;
    replay ? group_replay_mixed(layer, kQkv, x, {{out.q}, {out.k}, {nullptr, v}})
           : group_forward_mixed(layer, kQkv, x, {{out.q}, {out.k}, {nullptr, v}});
    return true;
  }
  replay ? group_replay(layer, kQkv, x, {out.q, out.k, out.v})
         : group_forward(layer, kQkv, x, {out.q, out.k, out.v});
  return false;
}

void Layout::ReplicatedNorms::allocate(int64_t N, int64_t d, DType compute) {
  if (compute == DType::bf16) {
    norm1_16.resize(N * d);
    norm2_16.resize(N * d);
  } else {
    norm1.resize(N * d);
    norm2.resize(N * d);
  }
  rstd1.resize(N);
  rstd2.resize(N);
}

int64_t Layout::ReplicatedNorms::bytes() const {
  return static_cast<int64_t>(norm1.size() + rstd1.size() + norm2.size() + rstd2.size()) *
             static_cast<int64_t>(sizeof(float)) +
         static_cast<int64_t>(norm1_16.size() + norm2_16.size()) *
             static_cast<int64_t>(sizeof(bf16_t));
}

Layout::Norm Layout::norm_of(int64_t layer, const Group& g, ReplicatedNorms& kept) const {
  const BlockWeights& w = blocks_[layer];
  return g.index == kQkv.index
             ? Norm{w.norm1, w.dnorm1, kept.norm1.data(), kept.rstd1.data(), kept.norm1_16.data()}
             : Norm{w.norm2, w.dnorm2, kept.norm2.data(), kept.rstd2.data(), kept.norm2_16.data()};
}

void Layout::residual_add(int64_t, const Group&, Residual x, const float* u, Residual sum) {
  const int64_t n = batch_ * seq_len_ * residual_columns();
  if (sum.bf16)
    add(x.bf16, u, sum.bf16, n);
  else
    add(x.f32, u, sum.f32, n);
}

void Layout::replicated_residual_norm(const Norm& n, Residual x, const float* u, Residual sum) {
  const int64_t N = batch_ * seq_len_, d = config_.d_model;
  if (compute_ != DType::bf16) {  // fp32: the add alone, the norm in its group's forward
    add(x.f32, u, sum.f32, N * d);
    return;
  }
  BOOSTLM_ASSERT(residual_columns() == d);
  if (sum.bf16)
    residual_rmsnorm_forward_bf16(x.bf16, u, sum.bf16, n.gamma, N, d, config_.rms_eps, n.out16,
                                  n.rstd);
  else
    residual_rmsnorm_forward_bf16(x.f32, u, sum.f32, n.gamma, N, d, config_.rms_eps, n.out16,
                                  n.rstd);
  prenormed_ = n.out16;
}

GemmInput Layout::replicated_norm_forward(const Norm& n, GemmInput x) {
  const int64_t N = batch_ * seq_len_, d = config_.d_model;
  if (compute_ == DType::bf16 && prenormed_ == n.out16) {  // made by its residual add
    prenormed_ = nullptr;
    return replicated_norm_output(n);
  }
  if (compute_ == DType::bf16)
    visit_residual(x, [&](const auto* xv) {
      rmsnorm_forward_bf16(xv, d, n.gamma, N, d, config_.rms_eps, n.out16, d, n.rstd);
    });
  else
    rmsnorm_forward(x.f32, d, n.gamma, N, d, config_.rms_eps, n.out, d, n.rstd);
  return replicated_norm_output(n);
}

GemmInput Layout::replicated_norm_output(const Norm& n) const {
  const int64_t d = config_.d_model;
  return compute_ == DType::bf16 ? GemmInput(nullptr, n.out16, d) : GemmInput(n.out, d);
}

void Layout::replicated_norm_backward(int64_t layer, const Group& g, const Norm& n, const float* dy,
                                      GemmInput x, float* dx) {
  const int64_t N = batch_ * seq_len_, d = config_.d_model;
  bf16_t* dx16 = keep_residual_gradient_bf16(layer, g, dx);
  visit_residual(x, [&](const auto* xv) {
    rmsnorm_backward(dy, d, xv, d, n.gamma, n.rstd, N, d, dx, d, n.dgamma, /*accumulate=*/true,
                     dx16);
  });
}

bf16_t* Layout::keep_residual_gradient_bf16(int64_t layer, const Group& g, const float* dx) {
  dx16_of_ = nullptr;
  if (compute_ != DType::bf16) return nullptr;
  const int64_t reader_layer = g.first == gate_ ? layer : layer - 1;
  if (reader_layer < first_layer_) return nullptr;  // the stage's gradient leaves it
  const int64_t n = batch_ * seq_len_ * residual_columns();
  if (dx16_.size() < static_cast<size_t>(n)) dx16_.resize(n);
  dx16_of_ = dx;
  dx16_reader_ = {reader_layer, g.first == gate_ ? o_ : down_, micro_};
  return dx16_.data();
}

const bf16_t* Layout::residual_gradient_bf16(int64_t layer, const Group& g, const float* dy) {
  const Reader& r = dx16_reader_;
  const bool mine =
      dy && dy == dx16_of_ && r.layer == layer && r.group == g.first && r.micro == micro_;
  dx16_of_ = nullptr;
  return mine ? dx16_.data() : nullptr;
}

void Layout::group_replay(int64_t, const Group&, GemmInput, std::initializer_list<float*>) {
  BOOSTLM_ASSERT_MSG(false, "this layout keeps its intermediates; it has nothing to replay");
}

void Layout::group_forward_mixed(int64_t, const Group&, GemmInput,
                                 std::initializer_list<GroupOutput>) {
  BOOSTLM_ASSERT_MSG(false, "this layout writes its outputs in fp32 (bf16_outputs)");
}

void Layout::group_replay_mixed(int64_t, const Group&, GemmInput,
                                std::initializer_list<GroupOutput>) {
  BOOSTLM_ASSERT_MSG(false, "this layout writes its outputs in fp32 (bf16_outputs)");
}

std::array<Layout::GroupOutput, 3> Layout::fp32_outputs(std::initializer_list<float*> y) {
  BOOSTLM_ASSERT(y.size() <= 3);
  std::array<GroupOutput, 3> out{};
  for (size_t m = 0; m < y.size(); ++m) out[m].f32 = y.begin()[m];
  return out;
}

Layout::Qkv Layout::split_qkv(float* qkv) const {
  const int64_t N = batch_ * seq_len_, hd = config_.head_dim();
  const int64_t ql = widths_.heads * hd, kvl = widths_.kv_heads * hd;
  return {qkv, qkv + N * ql, qkv + N * (ql + kvl)};
}

void Layout::allocate(int64_t B, int64_t T) {
  const int64_t N = B * T, rc = residual_columns(), hd = config_.head_dim();
  widths_ = local_widths();
  const int64_t ql = widths_.heads * hd, kvl = widths_.kv_heads * hd, ff = widths_.ff;
  acts_.clear();
  acts_.resize(slots());
  const bool bf16_residual = residual_dtype() == DType::bf16;
  for (BlockActs& a : acts_) {
    if (bf16_residual)
      a.x_mid16.resize(N * rc);
    else
      a.x_mid.resize(N * rc);
    if (!recomputes_intermediates()) allocate_intermediates(a, N);
  }
  work_ = BlockActs{};
  if (recomputes_intermediates()) allocate_intermediates(work_, N);
  work_layer_ = -1;
  const bool bf16 = compute_ == DType::bf16;
  work_plan_ = WorkspacePlan();
  work_plan_.add(partial_, N * rc);
  work_plan_.add(d_qkv_, N * (ql + 2 * kvl));
  work_plan_.add(d_attn_, N * ql);
  work_plan_.add(d_gate_up_, gate_up_in_bf16() ? 0 : 2 * N * ff);  // fp32 gradients, or outputs
  work_plan_.add(d_hidden_, N * ff);
  work_plan_.add(hidden_, bf16 ? 0 : N * ff);
  work_plan_.add(hidden_bf16_, bf16 ? N * ff : 0);
  work_plan_.add(d_bf16_, bf16 ? N * std::max(2 * ff, ql + 2 * kvl) : 0);
  allocate_groups(N);
  allocate_lax(N);
}

void Layout::allocate_intermediates(BlockActs& a, int64_t N) {
  const int64_t hd = config_.head_dim();
  const int64_t ql = widths_.heads * hd, kvl = widths_.kv_heads * hd, ff = widths_.ff;
  a.lse.resize(N * widths_.heads);
  if (compute_ == DType::bf16) {
    a.qkv16.resize(N * (ql + 2 * kvl));
    a.attn16.resize(N * ql);
    a.gate_up16.resize(2 * N * ff);
  } else {
    a.qkv.resize(N * (ql + 2 * kvl));
    a.attn.resize(N * ql);
    a.gate_up.resize(2 * N * ff);
  }
}

int64_t Layout::bytes_of(const BlockActs& a) {
  const size_t fp32 =
      a.x_mid.size() + a.qkv.size() + a.attn.size() + a.lse.size() + a.gate_up.size();
  const size_t bf16 = a.x_mid16.size() + a.qkv16.size() + a.attn16.size() + a.gate_up16.size();
  return static_cast<int64_t>(fp32 * sizeof(float) + bf16 * sizeof(bf16_t));
}

int64_t Layout::slot_bytes() const {
  return acts_.empty() ? 0 : bytes_of(acts_[0]) + group_slot_bytes() + lax_kept_bytes();
}

int64_t Layout::activation_bytes() const {
  int64_t n = bytes_of(work_) + group_total_bytes();
  for (const BlockActs& a : acts_) n += bytes_of(a);
  for (const LaxKept& k : lax_kept_) n += lax_bytes(k);
  return n;
}

void Layout::add_block_params(ParamTable& table, int64_t layer) const {
  const BlockSharding s = sharding();
  const int t = tp_.size(), rank = tp_.rank();
  // A slice [rank·size/t, (rank+1)·size/t) of `axis`, or the whole tensor for axis −1 or t = 1.
  auto add = [&](const std::string& name, std::vector<int64_t> shape, Init init, float std,
                 bool decay, int axis) {
    if (axis < 0 || t == 1) {
      table.add(name, shape, init, std, decay);
    } else {
      const int64_t part = shape[axis] / t;
      table.add(name, shape, init, std, decay, axis, part * rank, part);
    }
  };
  const std::string prefix = "model.layers." + std::to_string(layer);
  const auto dims = block_projections(config_);
  for (int i = 0; i < kProjectionsPerBlock; ++i) {
    const ProjDims& p = dims[i];
    if (i == q_)
      add(prefix + ".input_layernorm.weight", {config_.d_model}, Init::ones, 0, false,
          s.norms_sharded ? 0 : -1);
    if (i == gate_)
      add(prefix + ".post_attention_layernorm.weight", {config_.d_model}, Init::ones, 0, false,
          s.norms_sharded ? 0 : -1);
    const std::string name = projection_prefix(layer, p);
    if (p.rank == 0) {
      add(name + ".weight", {p.d_out, p.d_in}, Init::normal, 0.02f, true, s.dense_axis[i]);
    } else {
      const float std = low_rank_factor_std(p.d_in, p.d_out, p.rank);
      add(name + ".cola_a", {p.d_in, p.rank}, Init::normal, std, true, s.a_axis[i]);
      add(name + ".cola_b", {p.rank, p.d_out}, Init::normal, std, true, s.b_axis[i]);
      if (has_lax_crossing(config_, layer))
        for (const LaxTensor& x : lax_tensors(config_, p.rank))
          add(name + x.suffix, x.shape, x.init, x.init_scale, x.weight_decay,
              s.latents_split ? x.rank_axis : -1);
    }
  }
}

void Layout::bind(const ParamTable& table, FlatBuffer& weights, FlatBuffer& grads,
                  const RoundedWeights& rounded) {
  const auto dims = block_projections(config_);
  blocks_.assign(config_.n_layers, BlockWeights{});  // indexed by layer; this stage's are bound
  for (int64_t l = first_layer_; l < last_layer_; ++l) {
    const std::string prefix = "model.layers." + std::to_string(l);
    BlockWeights bw;
    const ParamInfo& n1 = table.at(prefix + ".input_layernorm.weight");
    const ParamInfo& n2 = table.at(prefix + ".post_attention_layernorm.weight");
    bw.norm1 = weights.view(n1);
    bw.dnorm1 = grads.view(n1);
    bw.norm2 = weights.view(n2);
    bw.dnorm2 = grads.view(n2);
    for (int i = 0; i < kProjectionsPerBlock; ++i) {
      bw.proj[i] =
          bind_projection(dims[i], l, config_.latent_act(), table, weights, grads, rounded);
      if (has_lax_crossing(config_, l))
        bw.lax[i] =
            bind_lax(config_, projection_prefix(l, dims[i]), dims[i].rank, table, weights, &grads);
    }
    blocks_[l] = bw;
  }
}

void Layout::concatenate_groups(int64_t layer) {
  if (!options_.grouping || !config_.low_rank()) return;
  for (const Group& g : kGroups)
    if (g.count > 1) concatenate_a(members(layer, g), compute_, concatenated_[g.index]);
  concatenated_layer_ = layer;
}

const ConcatenatedA* Layout::concatenated(int64_t layer, const Group& g) const {
  if (!options_.grouping || g.count == 1) return nullptr;
  BOOSTLM_ASSERT_MSG(concatenated_layer_ == layer, "the block did not concatenate its groups");
  return &concatenated_[g.index];
}

GemmInput Layout::shared_input(const float* x, int64_t rows, int64_t cols,
                               Buffer<bf16_t>& scratch) {
  return rounded_input(compute_, x, rows, cols, scratch);
}

GemmInput Layout::shared_input(GemmInput x, int64_t rows, int64_t cols, Buffer<bf16_t>& scratch) {
  if (x.bf16 || compute_ != DType::bf16) return x;
  BOOSTLM_ASSERT(x.ld == cols);
  return rounded_input(compute_, x.f32, rows, cols, scratch);
}

GemmInput Layout::latent_input(ProjectionGroup group, const float* z, int64_t N,
                               Buffer<bf16_t>& rounded) {
  const int64_t width = group_width(group);
  if (!group[0].latent_act) return shared_input(z, N, width, rounded);
  if (compute_ == DType::bf16) {
    if (rounded.size() < static_cast<size_t>(N * width)) rounded.resize(N * width);
    silu_forward_bf16(z, N, width, rounded.data());
    return {nullptr, rounded.data(), width};
  }
  if (latent_.size() < static_cast<size_t>(N * width)) latent_.resize(N * width);
  return {group_activate(group, z, latent_.data(), N), width};
}

GemmInput Layout::latent_input(ProjectionGroup group, const bf16_t* z, int64_t N,
                               Buffer<bf16_t>& rounded) {
  const int64_t width = group_width(group);
  if (!group[0].latent_act) return {nullptr, z, width};
  if (rounded.size() < static_cast<size_t>(N * width)) rounded.resize(N * width);
  silu_forward_bf16(z, N, width, rounded.data());
  return {nullptr, rounded.data(), width};
}

void all_reduce_activations(Communicator& tp, DType wire, float* x, int64_t rows, int64_t cols,
                            int64_t ld, Buffer<bf16_t>& scratch) {
  if (tp.size() == 1) return;
  if (wire != DType::bf16) {
    BOOSTLM_ASSERT_MSG(cols == ld, "all_reduce_activations: fp32 columns need a contiguous block");
    tp.all_reduce(x, rows * cols);
    return;
  }
  if (scratch.size() < static_cast<size_t>(rows * cols)) scratch.resize(rows * cols);
  round_to_bf16(x, rows, cols, ld, scratch.data());
  tp.all_reduce(scratch.data(), rows * cols);
  widen_bf16(scratch.data(), rows, cols, cols, x, ld);
}

void all_gather_columns_bf16(Communicator& tp, const float* local, int64_t ld_local, int64_t rows,
                             int64_t c, bf16_t* wire, float* full, int64_t ld_full) {
  bf16_t* mine = wire + tp.rank() * rows * c;
  round_to_bf16(local, rows, c, ld_local, mine);
  tp.all_gather(mine, rows * c, wire);
  for (int r = 0; r < tp.size(); ++r)
    widen_bf16(wire + r * rows * c, rows, c, c, full + r * c, ld_full);
}

}  // namespace boostlm
