// LaX's latent kernels (kernels/lax.h): the LayerNorm over the rank dimension against its formula
// and finite differences (for s, w and b), the same norm run in two column pieces whose sums are
// added (what naive-tp's all-reduce does) equal to the whole row, and the Kronecker gate: its
// expansion applied to h equal to the authors' einsum, and its factors' gradients against finite
// differences. Tolerances: GradCheckOptions' defaults (fp32 kernels, losses summed in double).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/grad_check.h"
#include "kernels/lax.h"

namespace boostlm {
namespace {

using test_support::check_gradient;
using test_support::dot;
using test_support::random_vector;

constexpr int64_t kLaxRows = 4, kR = 12;
constexpr float kLaxEps = 1e-6f;

// z = LN(s) over whole rows, through the kernels as one process runs them.
std::vector<float> norm_forward(const std::vector<float>& s, const std::vector<float>& w,
                                const std::vector<float>& b, std::vector<float>& xhat,
                                std::vector<float>& rstd) {
  std::vector<float> stats(2 * kLaxRows), z(kLaxRows * kR);
  lax_norm_partial_stats(s.data(), kR, kLaxRows, kR, stats.data());
  lax_norm_forward(s.data(), kR, stats.data(), kLaxRows, kR, kR, w.data(), b.data(), kLaxEps, z.data(),
                   kR, xhat.data(), kR, rstd.data());
  return z;
}

TEST(LaxNorm, ForwardIsLayerNormOverTheRank) {
  auto s = random_vector(kLaxRows * kR, 1, 2.0f), w = random_vector(kR, 2), b = random_vector(kR, 3);
  for (auto& v : s) v += 0.7f;  // a mean the norm has to remove
  std::vector<float> xhat(kLaxRows * kR), rstd(kLaxRows);
  const auto z = norm_forward(s, w, b, xhat, rstd);
  for (int64_t r = 0; r < kLaxRows; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < kR; ++j) mean += s[r * kR + j];
    mean /= kR;
    for (int64_t j = 0; j < kR; ++j) var += (s[r * kR + j] - mean) * (s[r * kR + j] - mean);
    var /= kR;
    for (int64_t j = 0; j < kR; ++j) {
      const double ref = (s[r * kR + j] - mean) / std::sqrt(var + kLaxEps) * w[j] + b[j];
      EXPECT_NEAR(z[r * kR + j], ref, 1e-5 * (1 + std::fabs(ref)));
    }
  }
  // lax_norm_apply rebuilds z from x̂.
  std::vector<float> again(kLaxRows * kR);
  lax_norm_apply(xhat.data(), kR, kLaxRows, kR, w.data(), b.data(), again.data(), kR);
  EXPECT_EQ(again, z);
}

TEST(LaxNorm, GradientsMatchFiniteDifferences) {
  auto s = random_vector(kLaxRows * kR, 4), w = random_vector(kR, 5), b = random_vector(kR, 6);
  const auto up = random_vector(kLaxRows * kR, 7);  // L = Σ z ⊙ up
  std::vector<float> xhat(kLaxRows * kR), rstd(kLaxRows), sums(2 * kLaxRows), ds(kLaxRows * kR), dw(kR, 0.0f),
      db(kR, 0.0f);
  norm_forward(s, w, b, xhat, rstd);
  lax_norm_partial_backward(up.data(), kR, xhat.data(), kR, kLaxRows, kR, w.data(), sums.data());
  lax_norm_backward(up.data(), kR, xhat.data(), kR, rstd.data(), sums.data(), kLaxRows, kR, kR,
                    w.data(), ds.data(), kR, dw.data(), db.data());
  auto loss = [&] {
    std::vector<float> xh(kLaxRows * kR), rs(kLaxRows);
    const auto z = norm_forward(s, w, b, xh, rs);
    return dot(z.data(), up.data(), kLaxRows * kR);
  };
  EXPECT_TRUE(check_gradient(loss, s.data(), ds.data(), kLaxRows * kR));
  EXPECT_TRUE(check_gradient(loss, w.data(), dw.data(), kR));
  EXPECT_TRUE(check_gradient(loss, b.data(), db.data(), kR));
}

// naive-tp splits the r columns: two pieces with their sums added give the whole row's results.
TEST(LaxNorm, SplitColumnsWithSummedStatisticsEqualTheWholeRow) {
  auto s = random_vector(kLaxRows * kR, 8), w = random_vector(kR, 9), b = random_vector(kR, 10);
  const auto dz = random_vector(kLaxRows * kR, 11);
  std::vector<float> xhat(kLaxRows * kR), rstd(kLaxRows);
  const auto z = norm_forward(s, w, b, xhat, rstd);
  std::vector<float> sums(2 * kLaxRows), ds(kLaxRows * kR), dw(kR, 0.0f), db(kR, 0.0f);
  lax_norm_partial_backward(dz.data(), kR, xhat.data(), kR, kLaxRows, kR, w.data(), sums.data());
  lax_norm_backward(dz.data(), kR, xhat.data(), kR, rstd.data(), sums.data(), kLaxRows, kR, kR,
                    w.data(), ds.data(), kR, dw.data(), db.data());

  const int64_t half = kR / 2;
  std::vector<float> stats(2 * kLaxRows, 0.0f), part(2 * kLaxRows), z2(kLaxRows * kR), xh2(kLaxRows * kR),
      rs2(kLaxRows), ds2(kLaxRows * kR), dw2(kR, 0.0f), db2(kR, 0.0f);
  for (int64_t c0 : {int64_t{0}, half}) {
    lax_norm_partial_stats(s.data() + c0, kR, kLaxRows, half, part.data());
    for (int64_t i = 0; i < 2 * kLaxRows; ++i) stats[i] += part[i];
  }
  for (int64_t c0 : {int64_t{0}, half})
    lax_norm_forward(s.data() + c0, kR, stats.data(), kLaxRows, half, kR, w.data() + c0,
                     b.data() + c0, kLaxEps, z2.data() + c0, kR, xh2.data() + c0, kR, rs2.data());
  std::vector<float> bsums(2 * kLaxRows, 0.0f);
  for (int64_t c0 : {int64_t{0}, half}) {
    lax_norm_partial_backward(dz.data() + c0, kR, xh2.data() + c0, kR, kLaxRows, half, w.data() + c0,
                              part.data());
    for (int64_t i = 0; i < 2 * kLaxRows; ++i) bsums[i] += part[i];
  }
  for (int64_t c0 : {int64_t{0}, half})
    lax_norm_backward(dz.data() + c0, kR, xh2.data() + c0, kR, rs2.data(), bsums.data(), kLaxRows,
                      half, kR, w.data() + c0, ds2.data() + c0, kR, dw2.data() + c0,
                      db2.data() + c0);
  // The sums differ from the whole row's only in their order of addition (fp32 of double sums).
  for (int64_t i = 0; i < kLaxRows * kR; ++i) {
    EXPECT_NEAR(z2[i], z[i], 1e-5 * (1 + std::fabs(z[i])));
    EXPECT_NEAR(ds2[i], ds[i], 1e-5 * (1 + std::fabs(ds[i])));
  }
  for (int64_t j = 0; j < kR; ++j) {
    EXPECT_NEAR(dw2[j], dw[j], 1e-5 * (1 + std::fabs(dw[j])));
    EXPECT_NEAR(db2[j], db[j], 1e-5 * (1 + std::fabs(db[j])));
  }
}

constexpr int64_t kP = 4, kQ = 3;  // r = 12

// g = h (P ⊗ Q) for each row h, with K expanded by the kernel.
std::vector<float> kron_gate(const std::vector<float>& h, const std::vector<float>& p,
                             const std::vector<float>& q) {
  std::vector<float> k(kR * kR), g(kLaxRows * kR, 0.0f);
  kron_expand(p.data(), kP, q.data(), kQ, k.data());
  for (int64_t r = 0; r < kLaxRows; ++r)
    for (int64_t c = 0; c < kR; ++c) {
      double sum = 0;
      for (int64_t i = 0; i < kR; ++i) sum += static_cast<double>(h[r * kR + i]) * k[i * kR + c];
      g[r * kR + c] = static_cast<float>(sum);
    }
  return g;
}

TEST(KronGate, ExpansionIsTheAuthorsEinsum) {
  const auto h = random_vector(kLaxRows * kR, 12), p = random_vector(kP * kP, 13),
             q = random_vector(kQ * kQ, 14);
  const auto g = kron_gate(h, p, q);
  // einsum('nab,ai,bj->nij', H, P, Q) with H = h viewed as [p, q].
  for (int64_t n = 0; n < kLaxRows; ++n)
    for (int64_t i = 0; i < kP; ++i)
      for (int64_t j = 0; j < kQ; ++j) {
        double ref = 0;
        for (int64_t a = 0; a < kP; ++a)
          for (int64_t b = 0; b < kQ; ++b)
            ref += static_cast<double>(h[n * kR + a * kQ + b]) * p[a * kP + i] * q[b * kQ + j];
        EXPECT_NEAR(g[n * kR + i * kQ + j], ref, 1e-5 * (1 + std::fabs(ref)));
      }
}

TEST(KronGate, FactorGradientsMatchFiniteDifferences) {
  auto h = random_vector(kLaxRows * kR, 15), p = random_vector(kP * kP, 16),
       q = random_vector(kQ * kQ, 17);
  const auto up = random_vector(kLaxRows * kR, 18);  // L = Σ g ⊙ up
  // ∂K = hᵀ up, then the factors' gradients.
  std::vector<float> dk(kR * kR, 0.0f), dp(kP * kP, 0.0f), dq(kQ * kQ, 0.0f);
  for (int64_t i = 0; i < kR; ++i)
    for (int64_t c = 0; c < kR; ++c) {
      double sum = 0;
      for (int64_t r = 0; r < kLaxRows; ++r) sum += static_cast<double>(h[r * kR + i]) * up[r * kR + c];
      dk[i * kR + c] = static_cast<float>(sum);
    }
  kron_factor_backward(dk.data(), p.data(), kP, q.data(), kQ, dp.data(), dq.data());
  auto loss = [&] {
    const auto g = kron_gate(h, p, q);
    return dot(g.data(), up.data(), kLaxRows * kR);
  };
  EXPECT_TRUE(check_gradient(loss, p.data(), dp.data(), kP * kP));
  EXPECT_TRUE(check_gradient(loss, q.data(), dq.data(), kQ * kQ));
}

}  // namespace
}  // namespace boostlm
