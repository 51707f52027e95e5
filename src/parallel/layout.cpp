#include "parallel/layout.h"

#include "core/error.h"

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
    }
  }
}

void Layout::bind(const ParamTable& table, FlatBuffer& weights, FlatBuffer& grads,
                  const bf16_t* weights_bf16) {
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
    for (int i = 0; i < kProjectionsPerBlock; ++i)
      bw.proj[i] = bind_projection(dims[i], l, config_.arch == Arch::cola, table, weights, grads,
                                   weights_bf16);
    blocks_[l] = bw;
  }
}

void Layout::concatenate_groups(int64_t layer) {
  if (!options_.grouping) return;
  concatenated_.resize(config_.n_layers);
  for (const Group& g : kGroups)
    if (g.count > 1) concatenate_a(members(layer, g), compute_, concatenated_[layer][g.index]);
}

const ConcatenatedA* Layout::concatenated(int64_t layer, const Group& g) const {
  if (!options_.grouping || g.count == 1) return nullptr;
  return &concatenated_[layer][g.index];
}

GemmInput Layout::shared_input(const float* x, int64_t rows, int64_t cols,
                               std::vector<bf16_t>& scratch) {
  if (compute_ != DType::bf16) return {x, cols};
  if (scratch.size() < static_cast<size_t>(rows * cols)) scratch.resize(rows * cols);
  round_to_bf16(x, rows, cols, cols, scratch.data());
  return {x, scratch.data(), cols};
}

}  // namespace boostlm
