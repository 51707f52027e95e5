// Dense → low rank by truncated SVD (model/lowrank_convert.h).
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "engine/model.h"
#include "kernels/svd.h"
#include "test_util.h"
#include "model/lowrank_convert.h"

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

// --energy: each projection's chosen rank is the smallest keeping the target, and a family's
// rank is the largest chosen among its layers, so every projection keeps at least the target.
TEST(LowRankConvert, EnergyRuleSetsTheRanksItReports) {
  Model dense(dense_model(), DType::f32);
  dense.init_weights(5);
  LowRankOptions o;
  o.arch = Arch::cola;
  o.energy = 0.8;
  const LowRankResult r = to_low_rank(dense.config(), dense.weights(), o);
  std::array<int64_t, kProjectionsPerBlock> largest{};
  const auto projections = block_projections(dense.config());
  for (size_t i = 0; i < r.report.size(); ++i) {
    const ProjDims& dims = projections[i % kProjectionsPerBlock];
    const ProjectionReport& p = r.report[i];
    int64_t& family = largest[static_cast<int>(dims.kind)];
    family = std::max(family, p.chosen_rank);
    EXPECT_EQ(p.rank, r.config.rank(dims.kind)) << p.name;
    EXPECT_GE(p.kept_energy, 0.8 - 1e-12) << p.name;
    EXPECT_LT(p.chosen_rank, 32) << p.name;  // random weights: 0.8 needs fewer than all
  }
  EXPECT_EQ(r.config.ranks(), largest);
  EXPECT_EQ(r.config.arch, Arch::cola);
}

// The GQA model: q/o 64×64, k/v 64×32. At --energy 1.0 each family takes its own full
// rank (q 64, k 32), so every projection keeps all its energy (≥ 1 − 1e-6; one rank for all four
// attention families gave q rank 32 and 0.899), and the svd model's loss is the dense one's within
// 1e-4 relative (the factors are rounded to fp32 once; observed ~1e-7).
ModelConfig gqa_dense_model() {
  ModelConfig c;
  c.arch = Arch::dense;
  c.vocab_size = 64;
  c.d_model = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;  // k/v: 64 -> 32
  c.d_ff = 96;
  c.max_seq_len = 16;
  c.validate();
  return c;
}

TEST(LowRankConvert, EnergyOneKeepsEveryProjectionOfAGqaModelWhole) {
  Model dense(gqa_dense_model(), DType::f32);
  dense.init_weights(6);
  for (int64_t i = 0; i < dense.weights().size(); ++i) dense.weights().data()[i] *= 4.0f;
  LowRankOptions o;
  o.arch = Arch::svd;
  o.energy = 1.0;
  const LowRankResult r = to_low_rank(dense.config(), dense.weights(), o);
  for (const auto& p : r.report) EXPECT_GE(p.kept_energy, 1.0 - 1e-6) << p.name;
  EXPECT_EQ(r.config.ranks(),
            (std::array<int64_t, kProjectionsPerBlock>{64, 32, 32, 64, 64, 64, 64}));
  const float before = loss_of(dense.config(), dense.weights());
  const float after = loss_of(r.config, r.weights);
  EXPECT_NEAR(after, before, 1e-4 * before);
}

// --attn-rank 64 on that model: q and o at 64, k and v at their full rank 32 (refused before,
// when one rank was shared by the four); a family's own rank above its full rank is refused.
TEST(LowRankConvert, ShorthandRanksStopAtEachFamilysFullRank) {
  Model dense(gqa_dense_model(), DType::f32);
  dense.init_weights(7);
  LowRankOptions o;
  o.arch = Arch::cola;
  o.attn_rank = 64;
  o.mlp_rank = 16;
  const LowRankResult r = to_low_rank(dense.config(), dense.weights(), o);
  EXPECT_EQ(r.config.ranks(),
            (std::array<int64_t, kProjectionsPerBlock>{64, 32, 32, 64, 16, 16, 16}));
  EXPECT_EQ(r.config.ranks_text(), "q 64, k 32, v 32, o 64, mlp 16");
  o.family_ranks[static_cast<int>(ProjKind::k)] = 40;
  try {
    to_low_rank(dense.config(), dense.weights(), o);
    ADD_FAILURE() << "k rank 40 of a 64x32 projection accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("k_rank=40 exceeds"), std::string::npos) << e.what();
  }
}

TEST(LowRankConvert, RankListSetsFamiliesAndShorthands) {
  LowRankOptions o;
  parse_rank_list("q=64,k=32,v=16,mlp=48,down=8", o);
  EXPECT_EQ(o.family_ranks, (std::array<int64_t, kProjectionsPerBlock>{64, 32, 16, 0, 0, 0, 8}));
  EXPECT_EQ(o.mlp_rank, 48);
  EXPECT_EQ(o.attn_rank, 0);
  auto refused = [](const std::string& text, const std::string& fragment) {
    LowRankOptions x;
    try {
      parse_rank_list(text, x);
      ADD_FAILURE() << text << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  refused("q=64,qq=3", "unknown projection family 'qq'");
  refused("q=64,q=32", "q given twice");
  refused("k=0", "k=0 is not a positive integer");
  refused("k=3x", "k=3x is not a positive integer");
  refused("k", "'k' is not FAMILY=RANK");
  // A family with no rank at all is named, with the flags that give it one.
  Model dense(gqa_dense_model(), DType::f32);
  LowRankOptions partial;
  parse_rank_list("q=8,k=8,v=8,o=8", partial);
  try {
    to_low_rank(dense.config(), dense.weights(), partial);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no rank for the gate projections: give --mlp-rank or "
                                         "--rank gate=R, or --energy"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace boostlm
