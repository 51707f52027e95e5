// The row reductions of the CPU kernels against a double-precision reference at V = 128 k (issue
// 37): the cross-entropy's log-sum-exp (whole row, fused forward-backward, vocabulary shards) and
// RMSNorm's sums, within 1e-6 relative. A plain fp32 `omp simd` sum over such a row was 1.1e-4 off
// on AVX2; vec_math.h's accurate_sum and exp_sum_row add blocks of a few lanes' sums in double.
// This file is also built into boostlm_kernel_tests_avx2 (tests/kernels/CMakeLists.txt), where
// the kernels are compiled without AVX-512, so every ISA path the machine can run is held to it.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "kernels/cross_entropy.h"
#include "kernels/rmsnorm.h"

namespace boostlm {
namespace {

constexpr int64_t kVocab = 128 * 1024 + 3;  // a tail that is no whole vector
// exp_vec and exp16 are within ~2e-7 of exp per term, and a sum of positive terms keeps that
// relative error; the sums' own rounding adds ~1e-7. A plain fp32 reduction fails this by 10-100x.
constexpr double kRelative = 1e-6;

std::vector<float> logits_row(int64_t rows, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(rows * kVocab);
  for (auto& x : v) x = 4.0f * rng.normal();
  return v;
}

double reference_lse(const float* row, int64_t n) {
  double max = -INFINITY;
  for (int64_t j = 0; j < n; ++j) max = std::max(max, static_cast<double>(row[j]));
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) sum += std::exp(static_cast<double>(row[j]) - max);
  return max + std::log(sum);
}

// The relative error of the Σexp itself (log-sum-exp hides it behind the max): exp(lse − ref) − 1.
double sum_error(double lse, double reference) {
  return std::abs(std::expm1(lse - reference));
}

TEST(ReductionPrecision, CrossEntropyLogSumExpAt128k) {
  const int64_t rows = 3;
  const std::vector<float> logits = logits_row(rows, 7);
  std::vector<int32_t> targets = {0, 5, static_cast<int32_t>(kVocab - 1)};
  std::vector<float> losses(rows), lse(rows);
  cross_entropy_forward(logits.data(), kVocab, targets.data(), rows, kVocab, losses.data(),
                        lse.data());
  for (int64_t r = 0; r < rows; ++r) {
    const double ref = reference_lse(logits.data() + r * kVocab, kVocab);
    EXPECT_LT(sum_error(lse[r], ref), kRelative) << "row " << r;
    EXPECT_NEAR(losses[r], ref - logits[r * kVocab + targets[r]], kRelative * std::abs(ref) + 1e-5);
  }
}

TEST(ReductionPrecision, FusedCrossEntropyLossAt128k) {
  const int64_t rows = 2;
  std::vector<float> logits = logits_row(rows, 8);
  const std::vector<float> kept = logits;
  std::vector<int32_t> targets = {3, 70000};
  std::vector<float> losses(rows);
  cross_entropy_forward_backward(logits.data(), kVocab, targets.data(), rows, kVocab, 1.0f,
                                 losses.data(), nullptr, 0);
  for (int64_t r = 0; r < rows; ++r) {
    const double lse = reference_lse(kept.data() + r * kVocab, kVocab);
    const double loss = lse - kept[r * kVocab + targets[r]];
    EXPECT_LT(sum_error(losses[r] + kept[r * kVocab + targets[r]], lse), 4 * kRelative);
    EXPECT_NEAR(losses[r], loss, kRelative * std::abs(lse) + 1e-5);
    // The gradient row sums to zero (softmax − one-hot), to the sum's precision.
    double g = 0.0;
    for (int64_t j = 0; j < kVocab; ++j) g += logits[r * kVocab + j];
    EXPECT_NEAR(g, 0.0, 1e-5);
  }
}

TEST(ReductionPrecision, VocabularyShardStatsAt128k) {
  const std::vector<float> logits = logits_row(1, 9);
  const int32_t target = 12345;
  float max = 0.0f, stats[2] = {0, 0};
  cross_entropy_shard_max(logits.data(), kVocab, 1, kVocab, &max);
  cross_entropy_shard_stats(logits.data(), kVocab, &target, 1, kVocab, 0, &max, stats);
  double ref = 0.0;
  for (int64_t j = 0; j < kVocab; ++j) ref += std::exp(static_cast<double>(logits[j]) - max);
  EXPECT_LT(std::abs(stats[0] - ref) / ref, kRelative);
  EXPECT_EQ(stats[1], logits[target]);
}

TEST(ReductionPrecision, RmsNormSumsAt128k) {
  Rng rng(10);
  std::vector<float> x(kVocab), dy(kVocab), gamma(kVocab);
  for (int64_t j = 0; j < kVocab; ++j) {
    x[j] = rng.normal();
    dy[j] = rng.normal();
    gamma[j] = 1.0f + 0.1f * rng.normal();
  }
  double squares = 0.0, dot = 0.0, dot_abs = 0.0;
  for (int64_t j = 0; j < kVocab; ++j) {
    squares += static_cast<double>(x[j]) * x[j];
    const double t = static_cast<double>(dy[j]) * gamma[j] * x[j];
    dot += t;
    dot_abs += std::abs(t);
  }
  float sum_sq = 0.0f, dot_out = 0.0f;
  rmsnorm_partial_sum_squares(x.data(), kVocab, 1, kVocab, &sum_sq);
  EXPECT_LT(std::abs(sum_sq - squares) / squares, kRelative);
  rmsnorm_partial_backward_dot(dy.data(), kVocab, x.data(), kVocab, gamma.data(), 1, kVocab,
                               &dot_out);
  // A sum of mixed signs is held relative to Σ|terms| (its condition), as any summation is.
  EXPECT_LT(std::abs(dot_out - dot) / dot_abs, kRelative);
}

}  // namespace
}  // namespace boostlm
