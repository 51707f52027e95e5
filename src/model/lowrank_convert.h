// Dense → low rank (`boostlm convert --to svd|cola`): each projection W [d_out, d_in] is replaced
// by the truncated SVD of Wᵀ = U Σ Vᵀ, split evenly: A = U_r √Σ_r [d_in, r], B = √Σ_r V_rᵀ
// [r, d_out] (SPEC §2's cola_a, cola_b), so that x A B ≈ x Wᵀ.
//
// For `svd` this approximates the dense function (exactly at full rank). For `cola` the same
// factors sit around a SiLU (σ(x A) B), which the dense model never had: the conversion is an
// initialisation that keeps W's principal subspaces, and continued training has to recover the
// function (README, "Bring your own model").
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/param_table.h"
#include "model/config.h"

namespace boostlm {

struct LowRankOptions {
  Arch arch = Arch::svd;
  // Explicit ranks: a family's own (0: none), else its kind's shorthand (attention: q/k/v/o,
  // MLP: gate/up/down). A shorthand above a family's full rank min(d_in, d_out) gives that family
  // its full rank; a family's own rank above it is refused. Or:
  int64_t attn_rank = 0, mlp_rank = 0;
  std::array<int64_t, kProjectionsPerBlock> family_ranks{};
  double energy = 0;  // (0, 1]: per family, the smallest rank keeping this share of every Σσ²
};

// "q=64,k=32,gate=96" (any of q, k, v, o, gate, up, down, each at most once; attn= and mlp= set
// the shorthands) into `options`; throws Error naming the bad item.
void parse_rank_list(const std::string& text, LowRankOptions& options);

struct ProjectionReport {
  std::string name;           // "model.layers.0.self_attn.q_proj"
  int64_t chosen_rank = 0;    // by the energy rule (or the explicit rank)
  int64_t rank = 0;           // used (the config's rank for its kind)
  double kept_energy = 0;     // Σ_{j<rank} σ² / Σ σ²
  double relative_error = 0;  // ‖Wᵀ − A B‖_F / ‖W‖_F, measured
};

struct LowRankResult {
  ModelConfig config;
  ParamTable table;
  FlatBuffer weights;
  std::vector<ProjectionReport> report;
};

// The smallest r with Σ_{j<r} σ_j² ≥ energy · Σ σ² (σ descending; at least 1).
int64_t rank_for_energy(const std::vector<double>& sigma, double energy);

// dense: a dense config and its full weights laid out by build_param_table(dense). With an energy
// target every projection's rank is chosen from its own spectrum; a family has one rank across
// the layers, the largest chosen among its projections, so every projection keeps at least the
// target (and no family's rank exceeds its full rank).
LowRankResult to_low_rank(const ModelConfig& dense, const FlatBuffer& weights,
                          const LowRankOptions& options);

}  // namespace boostlm
