#include "model/params.h"

#include "core/error.h"

#include <cmath>

#include "model/lax.h"

namespace boostlm {

namespace {
constexpr float kDenseStd = 0.02f;  // SPEC §2: dense weights and embedding N(0, 0.02)
}

std::array<ProjDims, kProjectionsPerBlock> block_projections(const ModelConfig& c) {
  using enum ProjKind;
  const int64_t d = c.d_model, kv = c.kv_dim(), ff = c.d_ff;
  return {{{q, "self_attn.q_proj", d, d, c.rank(q)},
           {k, "self_attn.k_proj", d, kv, c.rank(k)},
           {v, "self_attn.v_proj", d, kv, c.rank(v)},
           {o, "self_attn.o_proj", d, d, c.rank(o)},
           {gate, "mlp.gate_proj", d, ff, c.rank(gate)},
           {up, "mlp.up_proj", d, ff, c.rank(up)},
           {down, "mlp.down_proj", ff, d, c.rank(down)}}};
}

std::string projection_prefix(int64_t layer, const ProjDims& proj) {
  return "model.layers." + std::to_string(layer) + "." + proj.module;
}

float low_rank_factor_std(int64_t d_in, int64_t d_out, int64_t rank) {
  return static_cast<float>(std::pow(static_cast<double>(rank), -0.25) *
                            std::pow(static_cast<double>(d_in + d_out), -0.25));
}

ParamTable build_param_table(const ModelConfig& c) {
  ParamTable t;
  const int64_t d = c.d_model;
  t.add("model.embed_tokens.weight", {c.vocab_size, d}, Init::normal, kDenseStd, true);
  const auto projections = block_projections(c);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string layer = "model.layers." + std::to_string(l);
    for (const auto& p : projections) {
      if (p.kind == ProjKind::q)
        t.add(layer + ".input_layernorm.weight", {d}, Init::ones, 0, false);
      if (p.kind == ProjKind::gate)
        t.add(layer + ".post_attention_layernorm.weight", {d}, Init::ones, 0, false);
      const std::string prefix = projection_prefix(l, p);
      if (p.rank == 0) {
        t.add(prefix + ".weight", {p.d_out, p.d_in}, Init::normal, kDenseStd, true);  // HF layout
      } else {
        const float std = low_rank_factor_std(p.d_in, p.d_out, p.rank);
        t.add(prefix + ".cola_a", {p.d_in, p.rank}, Init::normal, std, true);
        t.add(prefix + ".cola_b", {p.rank, p.d_out}, Init::normal, std, true);
        if (has_lax_crossing(c, l))
          for (const LaxTensor& x : lax_tensors(c, p.rank))
            t.add(prefix + x.suffix, x.shape, x.init, x.init_scale, x.weight_decay);
      }
    }
  }
  t.add("model.norm.weight", {d}, Init::ones, 0, false);
  if (!c.tied_embeddings) t.add("lm_head.weight", {c.vocab_size, d}, Init::normal, kDenseStd, true);
  return t;
}

std::vector<float> ModelTensors::tensor(const std::string& name) const {
  const ParamInfo& p = table->at(name);
  if (weights) {
    const float* v = weights->view(p);
    return {v, v + p.numel};
  }
  BOOSTLM_ASSERT_MSG(static_cast<bool>(read), "ModelTensors: neither weights nor a reader");
  std::vector<float> out(static_cast<size_t>(p.numel));
  read(p, out.data());
  return out;
}

}  // namespace boostlm
