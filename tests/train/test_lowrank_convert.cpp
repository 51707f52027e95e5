// Dense → low rank by truncated SVD (train/lowrank_convert.h).
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/svd.h"
#include "engine/model.h"
#include "test_util.h"
#include "train/lowrank_convert.h"

namespace boostlm {
namespace {

// U diag(σ) Vᵀ reproduces the matrix, σ descending, for tall and wide shapes (fp64: 1e-10).
TEST(Svd, ReconstructsTallAndWideMatrices) {
  for (auto [m, n] : {std::pair<int64_t, int64_t>{40, 24}, {24, 40}, {33, 33}}) {
    Rng rng(m * 100 + n);
    std::vector<double> M(m * n);
    for (auto& x : M) x = rng.normal();
    const SvdResult s = svd(M, m, n);
    double err = 0, norm = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double r = 0;
        for (int64_t k = 0; k < s.k; ++k) r += s.u[i * s.k + k] * s.sigma[k] * s.v[j * s.k + k];
        err += (r - M[i * n + j]) * (r - M[i * n + j]);
        norm += M[i * n + j] * M[i * n + j];
      }
    EXPECT_LT(std::sqrt(err / norm), 1e-10) << m << "x" << n;
    for (int64_t k = 1; k < s.k; ++k) EXPECT_GE(s.sigma[k - 1], s.sigma[k]);
  }
}

TEST(LowRankConvert, EnergyRulePicksTheSmallestRankReachingTheTarget) {
  const std::vector<double> sigma = {3, 2, 1, 1};  // σ²: 9, 4, 1, 1 of 15
  EXPECT_EQ(rank_for_energy(sigma, 0.5), 1);       // 9/15 = 0.6
  EXPECT_EQ(rank_for_energy(sigma, 0.6), 1);
  EXPECT_EQ(rank_for_energy(sigma, 0.61), 2);  // 13/15
  EXPECT_EQ(rank_for_energy(sigma, 0.9), 3);   // 14/15
  EXPECT_EQ(rank_for_energy(sigma, 1.0), 4);
}

ModelConfig dense_model() {
  ModelConfig c = small_model(Arch::dense);  // d 32, d_ff 48, MHA: every projection ≥ 32 wide
  c.validate();
  return c;
}

float loss_of(const ModelConfig& config, const FlatBuffer& weights) {
  Model model(config, DType::f32);
  std::copy_n(weights.data(), weights.size(), model.weights().data());
  const auto tokens = random_tokens(2 * 16 + 1, config.vocab_size, 9);
  return model.forward(tokens.data(), tokens.data() + 1, 2, 16);
}

// At full rank the svd model is the dense one: the loss agrees to 1e-4 relative (observed ~1e-7;
// the factors are rounded to fp32 once).
TEST(LowRankConvert, FullRankSvdReproducesTheDenseLoss) {
  Model dense(dense_model(), DType::f32);
  dense.init_weights(4);
  for (int64_t i = 0; i < dense.weights().size(); ++i) dense.weights().data()[i] *= 4.0f;
  LowRankOptions o;
  o.arch = Arch::svd;
  o.attn_rank = o.mlp_rank = 32;
  const LowRankResult r = to_low_rank(dense.config(), dense.weights(), o);
  const float before = loss_of(dense.config(), dense.weights());
  const float after = loss_of(r.config, r.weights);
  EXPECT_NEAR(after, before, 1e-4 * before);
  for (const auto& p : r.report) {
    EXPECT_NEAR(p.kept_energy, 1.0, 1e-9) << p.name;
    EXPECT_LT(p.relative_error, 1e-6) << p.name;
  }
  o.attn_rank = o.mlp_rank = 8;  // truncated: an approximation, and its error is reported
  const LowRankResult t = to_low_rank(dense.config(), dense.weights(), o);
  for (const auto& p : t.report) {
    EXPECT_LT(p.kept_energy, 1.0) << p.name;
    // Eckart–Young: the Frobenius error of the best rank-r approximation is √(1 − kept energy).
    EXPECT_NEAR(p.relative_error, std::sqrt(1.0 - p.kept_energy), 1e-5) << p.name;
  }
}

// --energy: each projection's chosen rank is the smallest keeping the target, and the config's
// rank per kind is the largest chosen, so every projection keeps at least the target.
TEST(LowRankConvert, EnergyRuleSetsTheRanksItReports) {
  Model dense(dense_model(), DType::f32);
  dense.init_weights(5);
  LowRankOptions o;
  o.arch = Arch::cola;
  o.energy = 0.8;
  const LowRankResult r = to_low_rank(dense.config(), dense.weights(), o);
  int64_t attn = 0, mlp = 0;
  for (const auto& p : r.report) {
    const bool attention = p.name.find("self_attn") != std::string::npos;
    (attention ? attn : mlp) = std::max(attention ? attn : mlp, p.chosen_rank);
    EXPECT_EQ(p.rank, attention ? r.config.attn_rank : r.config.mlp_rank);
    EXPECT_GE(p.kept_energy, 0.8 - 1e-12) << p.name;
    EXPECT_LT(p.chosen_rank, 32) << p.name;  // random weights: 0.8 needs fewer than all
  }
  EXPECT_EQ(r.config.attn_rank, attn);
  EXPECT_EQ(r.config.mlp_rank, mlp);
  EXPECT_EQ(r.config.arch, Arch::cola);
}

}  // namespace
}  // namespace boostlm
