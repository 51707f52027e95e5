// LaX (Zhang et al., "LaX: Boosting Low-Rank Training of Foundation Models via Latent Crossing",
// arXiv 2505.21732) on CoLA's factors. Each low-rank projection P of block l (q, k, v, o, gate, up,
// down: seven chains, each running across the blocks) computes
//     u = x A_l;   z = u (l = 0),   z = LN_r(u + G_l(h_{l−1})) (l ≥ 1);   h_l = σ(z);   y = h_l B_l
// where h_{l−1} is the same projection's latent in the block before (after its σ), LN_r an affine
// LayerNorm over the rank dimension (eps 1e-6) and G_l an r x r gate: Kronecker-factored,
// G(h) = h (P ⊗ Q) with r = p·q the most balanced factor pair (the LaX authors' default), or a full
// linear map G(h) = h W. σ is SiLU (CoLA's), or the identity in the ablation without σ
// (config lax_latent_act false). Block 0 has neither gate nor LayerNorm.
//
// The authors released only their ViT code (lax_vit.py); this LLM variant is inferred from it
// (README, "LaX").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/param_table.h"
#include "model/config.h"

namespace boostlm {

// One LaX tensor of a projection in block l ≥ 1, named after the projection's prefix
// ("model.layers.{l}.self_attn.q_proj"):
//   kron gate  `{prefix}.lax_gate.kron_p` [p, p], `{prefix}.lax_gate.kron_q` [q, q]
//   linear     `{prefix}.lax_gate.weight` [r, r] (stored [in, out], as cola_a: g = h W)
//   norm       `{prefix}.lax_norm.weight`, `{prefix}.lax_norm.bias` [r]
// The gate is Kaiming-uniform initialised as PyTorch's nn.Linear (bound 1/sqrt(fan_in), fan_in
// the factor's side); the norm weight 1, its bias 0.
struct LaxTensor {
  std::string suffix;  // ".lax_gate.kron_p", ...
  std::vector<int64_t> shape;
  Init init;
  float init_scale;  // the uniform bound
  bool weight_decay;
  // Under a layout that splits the latent over r (naive-tp): the axis of this tensor that follows
  // the latent's columns, or -1 for one every rank holds whole (the Kronecker factors).
  int rank_axis;
};
std::vector<LaxTensor> lax_tensors(const ModelConfig& config, int64_t rank);
// Whether block `layer` has LaX tensors (a lax model, layer ≥ 1).
inline bool has_lax_crossing(const ModelConfig& config, int64_t layer) {
  return config.arch == Arch::lax && layer >= 1;
}

// One projection's LaX weights in block l ≥ 1, bound to this rank's shards.
struct LaxWeights {
  int64_t rank = 0;               // r, whole
  int64_t r_local = 0;            // this rank's latent columns (r, or r/t when split over r)
  int64_t r_begin = 0;            // the first of them
  bool kron = true;
  int64_t p = 0, q = 0;           // kron: r = p·q
  const float* kron_p = nullptr;  // [p, p]
  const float* kron_q = nullptr;  // [q, q]
  float* dkron_p = nullptr;
  float* dkron_q = nullptr;
  const float* gate = nullptr;  // linear: [r, r_local], its columns of W
  float* dgate = nullptr;
  const float* norm_weight = nullptr;  // [r_local]
  const float* norm_bias = nullptr;
  float* dnorm_weight = nullptr;
  float* dnorm_bias = nullptr;
};
// grads: nullptr to bind the weights alone (inference).
LaxWeights bind_lax(const ModelConfig& config, const std::string& prefix, int64_t rank,
                    const ParamTable& table, const FlatBuffer& weights, FlatBuffer* grads);

}  // namespace boostlm
