// Online-RMSNorm's kernels (SPEC §3.4) as one process runs them (D_local = D_total): the composite
// z = RMSNorm(x) A, built from online_norm_input → GEMM → online_norm_pack → online_norm_rstd →
// online_norm_unpack, equals the direct formula, and its backward (latent_backward → GEMM →
// input_backward) matches finite differences for x and γ. Also the column-block kernels.
// Tolerances: GradCheckOptions' defaults (fp32 kernels, loss summed in double).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/activation.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/grad_check.h"
#include "kernels/rmsnorm.h"

namespace boostlm {
namespace {

using test_support::check_gradient;
using test_support::dot;
using test_support::random_vector;

constexpr int64_t kRows = 5, kD = 70, kRank = 6;  // D > 64: two column blocks of dγ
constexpr float kEps = 1e-5f;

// out[r, c] = Σ_j in[r, j] · a[j, c] (in: [rows, D], a: [D, rank], out stride ld).
void matmul(const std::vector<float>& in, const std::vector<float>& a, float* out, int64_t ld) {
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < kRank; ++c) {
      double s = 0;
      for (int64_t j = 0; j < kD; ++j) s += in[r * kD + j] * a[j * kRank + c];
      out[r * ld + c] = static_cast<float>(s);
    }
}

// The forward as BTP runs it on one rank; `rescale` as in bf16 (unit-scale GEMM input).
std::vector<float> online_forward(const std::vector<float>& x, const std::vector<float>& gamma,
                                  const std::vector<float>& a, bool rescale,
                                  std::vector<float>& rstd) {
  std::vector<float> sum_sq(kRows), xg(kRows * kD), packed(kRows * (kRank + 1)), z(kRows * kRank);
  rmsnorm_partial_sum_squares(x.data(), kD, kRows, kD, sum_sq.data());
  online_norm_input(x.data(), gamma.data(), rescale ? sum_sq.data() : nullptr, kRows, kD, kEps,
                    xg.data());
  matmul(xg, a, packed.data(), kRank + 1);
  online_norm_pack(packed.data(), kRank + 1, kRows, kRank, sum_sq.data(), kD, kEps, rescale, true);
  // (the all-reduce over one rank is the identity)
  online_norm_rstd(packed.data(), kRank + 1, kRows, kRank, kD, kEps, rstd.data());
  online_norm_unpack(packed.data(), kRank + 1, kRows, kRank, rstd.data(), z.data(), kRank);
  return z;
}

TEST(OnlineNorm, ForwardIsRmsNormThenTheLatentGemm) {
  auto x = random_vector(kRows * kD, 1), gamma = random_vector(kD, 2),
       a = random_vector(kD * kRank, 3);
  for (bool rescale : {false, true}) {
    std::vector<float> rstd(kRows), y(kRows * kD), rstd_ref(kRows), z_ref(kRows * kRank);
    const auto z = online_forward(x, gamma, a, rescale, rstd);
    rmsnorm_forward(x.data(), kD, gamma.data(), kRows, kD, kEps, y.data(), kD, rstd_ref.data());
    matmul(y, a, z_ref.data(), kRank);
    for (int64_t i = 0; i < kRows * kRank; ++i)
      EXPECT_NEAR(z[i], z_ref[i], 1e-4 * (1 + std::fabs(z_ref[i]))) << "rescale " << rescale;
    for (int64_t r = 0; r < kRows; ++r) EXPECT_FLOAT_EQ(rstd[r], rstd_ref[r]);
  }
}

TEST(OnlineNorm, GradientsMatchFiniteDifferences) {
  auto x = random_vector(kRows * kD, 4), gamma = random_vector(kD, 5),
       a = random_vector(kD * kRank, 6), w = random_vector(kRows * kRank, 7);
  std::vector<float> rstd(kRows);
  auto loss = [&] {
    return dot(online_forward(x, gamma, a, false, rstd).data(), w.data(), kRows * kRank);
  };
  const auto z = online_forward(x, gamma, a, false, rstd);
  // dL/dz = w → dP (in place) and dS; g = dP Aᵀ; then dx (over 0.5: dx_beta = 1 accumulates) and
  // dγ.
  std::vector<float> dp = w, ds(kRows), g(kRows * kD), dx(kRows * kD, 0.5f), dgamma(kD, 0.0f);
  online_norm_latent_backward(z.data(), dp.data(), kRows, kRank, rstd.data(), kD, ds.data());
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t j = 0; j < kD; ++j) {
      double s = 0;
      for (int64_t c = 0; c < kRank; ++c) s += dp[r * kRank + c] * a[j * kRank + c];
      g[r * kD + j] = static_cast<float>(s);
    }
  // With the bf16 copy of dx asked for (bf16 training): the same dx and dγ, and the copy dx rounded.
  std::vector<float> dx2 = dx, dgamma2 = dgamma;
  std::vector<bf16_t> dx16(kRows * kD);
  online_norm_input_backward(g.data(), x.data(), gamma.data(), ds.data(), kRows, kD, 1.0f,
                             dx.data(), dgamma.data());
  online_norm_input_backward(g.data(), x.data(), gamma.data(), ds.data(), kRows, kD, 1.0f,
                             dx2.data(), dgamma2.data(), dx16.data());
  EXPECT_EQ(dx2, dx);
  EXPECT_EQ(dgamma2, dgamma);
  for (int64_t i = 0; i < kRows * kD; ++i) ASSERT_EQ(dx16[i], float_to_bf16(dx[i])) << i;
  for (auto& v : dx) v -= 0.5f;
  EXPECT_TRUE(check_gradient(loss, x.data(), dx.data(), kRows * kD));
  EXPECT_TRUE(check_gradient(loss, gamma.data(), dgamma.data(), kD));
}

// bf16's fused input: the statistic as rmsnorm_partial_sum_squares gives it and online_norm_input
// rounded, bit for bit, with and without the per-row rescaling (its derivative is
// online_norm_input's, checked above).
TEST(OnlineNorm, Bf16InputIsTheRoundedInputAndItsStatistic) {
  const int64_t rows = 7, D = 37;
  const auto x = test_support::random_vector(rows * D, 11, 2.0f);
  const auto gamma = test_support::random_vector(D, 12);
  std::vector<float> sum_sq(rows), fused_sum(rows), plain(rows * D);
  std::vector<bf16_t> fused(rows * D);
  rmsnorm_partial_sum_squares(x.data(), D, rows, D, sum_sq.data());
  for (bool rescale : {true, false}) {
    online_norm_input(x.data(), gamma.data(), rescale ? sum_sq.data() : nullptr, rows, D, 1e-6f,
                      plain.data());
    online_norm_input_bf16(x.data(), gamma.data(), rescale ? fused_sum.data() : nullptr, rows, D,
                           1e-6f, fused.data());
    if (rescale) {
      EXPECT_EQ(fused_sum, sum_sq);
    }
    for (int64_t i = 0; i < rows * D; ++i) ASSERT_EQ(fused[i], float_to_bf16(plain[i])) << i;
  }
}

// The fused residual add + norm input (issue 60): the bits of add() followed by the unfused
// kernel — the sum, the statistic or 1/rms, and the rounded output — for the online norm's input
// (btp) and the replicated RMSNorm (dense-tp, naive-tp). The gradients are the unfused kernels'
// (their finite-difference checks above and in test_elementwise).
TEST(OnlineNorm, ResidualAddFusedIntoTheNormIsTheAddThenTheNorm) {
  for (const int64_t D : {1, 37, 512}) {
    SCOPED_TRACE(D);
    const int64_t rows = 9;
    const auto x = test_support::random_vector(rows * D, 21, 2.0f);
    const auto u = test_support::random_vector(rows * D, 22, 1.5f);
    const auto gamma = test_support::random_vector(D, 23);
    std::vector<float> sum(rows * D), fused_sum(rows * D, -1.0f);
    add(x.data(), u.data(), sum.data(), rows * D);
    std::vector<float> sum_sq(rows), fused_sq(rows);
    std::vector<bf16_t> in(rows * D), fused_in(rows * D);
    online_norm_input_bf16(sum.data(), gamma.data(), sum_sq.data(), rows, D, 1e-6f, in.data());
    residual_online_norm_input_bf16(x.data(), u.data(), fused_sum.data(), gamma.data(),
                                    fused_sq.data(), rows, D, 1e-6f, fused_in.data());
    EXPECT_EQ(fused_sum, sum);
    EXPECT_EQ(fused_sq, sum_sq);
    EXPECT_EQ(fused_in, in);

    std::vector<float> rstd(rows), fused_rstd(rows);
    std::vector<bf16_t> y(rows * D), fused_y(rows * D);
    std::fill(fused_sum.begin(), fused_sum.end(), -1.0f);
    rmsnorm_forward_bf16(sum.data(), D, gamma.data(), rows, D, 1e-6f, y.data(), D, rstd.data());
    residual_rmsnorm_forward_bf16(x.data(), u.data(), fused_sum.data(), gamma.data(), rows, D,
                                  1e-6f, fused_y.data(), fused_rstd.data());
    EXPECT_EQ(fused_sum, sum);
    EXPECT_EQ(fused_rstd, rstd);
    EXPECT_EQ(fused_y, y);
  }
}

// btp's latents kept in bf16: unpacking rounds what the fp32 unpacking gives, and the latent
// backward on them is the fp32 one on their values.
TEST(OnlineNorm, Bf16LatentsAreTheRoundedLatents) {
  const int64_t rows = 5, width = 24, ld = width + 1;
  const auto summed = test_support::random_vector(rows * ld, 13, 3.0f);
  const auto rstd = test_support::random_vector(rows, 14);
  std::vector<float> z(rows * width), zr(rows * width);
  std::vector<bf16_t> z16(rows * width);
  online_norm_unpack(summed.data(), ld, rows, width, rstd.data(), z.data(), width);
  online_norm_unpack(summed.data(), ld, rows, width, rstd.data(), z16.data(), width);
  for (int64_t i = 0; i < rows * width; ++i) {
    ASSERT_EQ(z16[i], float_to_bf16(z[i])) << i;
    zr[i] = bf16_to_float(z16[i]);
  }
  auto dz = test_support::random_vector(rows * width, 15), dz16 = dz;
  std::vector<float> ds(rows), ds16(rows);
  online_norm_latent_backward(zr.data(), dz.data(), rows, width, rstd.data(), 64, ds.data());
  online_norm_latent_backward(z16.data(), dz16.data(), rows, width, rstd.data(), 64, ds16.data());
  EXPECT_EQ(dz16, dz);
  EXPECT_EQ(ds16, ds);
}

// bf16 training's latent gradient in one pass (issue 60): σ' (cola) or none (svd), the online
// norm's latent backward and the rounding of dP give the bits of the three passes it replaces, at
// widths with and without a 16-lane tail; dlatent is left as it was.
TEST(OnlineNorm, LatentBackwardToBf16IsTheUnfusedPassesRounded) {
  for (int64_t width : {1, 24, 37}) {
    const int64_t rows = 6;
    const auto zf = test_support::random_vector(rows * width, 31, 3.0f);
    const auto rstd = test_support::random_vector(rows, 32);
    const auto dlatent = test_support::random_vector(rows * width, 33);
    std::vector<bf16_t> z(rows * width);
    for (int64_t i = 0; i < rows * width; ++i) z[i] = float_to_bf16(zf[i]);
    for (bool silu : {true, false}) {
      std::vector<float> dz = dlatent, ds(rows), fused_ds(rows);
      if (silu) silu_backward(dlatent.data(), z.data(), rows, width, dz.data());
      online_norm_latent_backward(z.data(), dz.data(), rows, width, rstd.data(), 64, ds.data());
      std::vector<bf16_t> dp(rows * width);
      const auto unchanged = dlatent;
      online_norm_latent_backward_to_bf16(z.data(), dlatent.data(), silu, rows, width,
                                          rstd.data(), 64, fused_ds.data(), dp.data());
      EXPECT_EQ(fused_ds, ds) << width << " " << silu;
      for (int64_t i = 0; i < rows * width; ++i)
        ASSERT_EQ(dp[i], float_to_bf16(dz[i])) << width << " " << silu << " " << i;
      EXPECT_EQ(dlatent, unchanged);
    }
  }
}

// bf16 on the wire (issue 60): packing into a row message rounds what the fp32 pack gives (the
// statistic exact, at its own stride), unpacking a bf16 message is the fp32 unpack of its widened
// values, and widen_bf16 is exact.
TEST(OnlineNorm, Bf16MessagePackAndUnpackAreTheFp32OnesRounded) {
  const int64_t rows = 7, width = 9, ld = width + 1, D = 32;
  const int64_t ld_values = width + 3, ld_stats = 2;  // a message's strides (comm/bf16_sum.h)
  const float eps = 1e-5f;
  const auto p = test_support::random_vector(rows * ld, 21, 2.0f);
  auto sum_sq = test_support::random_vector(rows, 22, 4.0f);
  for (float& v : sum_sq) v = std::abs(v) + 0.5f;
  for (bool rescale : {false, true}) {
    std::vector<float> packed = p;
    online_norm_pack(packed.data(), ld, rows, width, sum_sq.data(), D, eps, rescale, true);
    std::vector<bf16_t> values(rows * ld_values, 0);
    std::vector<float> stats(rows * ld_stats, -1.0f);
    online_norm_pack_bf16(p.data(), ld, rows, width, sum_sq.data(), D, eps, rescale,
                          values.data(), ld_values, stats.data(), ld_stats);
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_EQ(stats[r * ld_stats], sum_sq[r]) << r;
      ASSERT_EQ(stats[r * ld_stats + 1], -1.0f) << r;  // nothing between the strides
      for (int64_t c = 0; c < width; ++c)
        ASSERT_EQ(values[r * ld_values + c], float_to_bf16(packed[r * ld + c])) << r << " " << c;
    }
    // Unpack from bf16: the fp32 unpack of the widened values (to fp32 exactly, to bf16 rounded).
    std::vector<float> widened(rows * ld, 0.0f);
    widen_bf16(values.data(), rows, width, ld_values, widened.data(), ld);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < width; ++c)
        ASSERT_EQ(widened[r * ld + c], bf16_to_float(values[r * ld_values + c]));
    const auto rstd = test_support::random_vector(rows, 23);
    std::vector<float> want(rows * width), got(rows * width);
    std::vector<bf16_t> want16(rows * width), got16(rows * width);
    online_norm_unpack(widened.data(), ld, rows, width, rstd.data(), want.data(), width);
    online_norm_unpack(widened.data(), ld, rows, width, rstd.data(), want16.data(), width);
    online_norm_unpack(values.data(), ld_values, rows, width, rstd.data(), got.data(), width);
    online_norm_unpack(values.data(), ld_values, rows, width, rstd.data(), got16.data(), width);
    EXPECT_EQ(got, want);
    EXPECT_EQ(got16, want16);
  }
  // Without statistics only values are written.
  std::vector<bf16_t> values(rows * width);
  online_norm_pack_bf16(p.data(), ld, rows, width, nullptr, D, eps, false, values.data(), width,
                        nullptr, 0);
  EXPECT_EQ(values[width + 2], float_to_bf16(p[ld + 2]));
}

// A bf16 residual stream (issue 60): every kernel that reads the residual x in bf16 gives the
// bits of its fp32 form on the widened x; the fused residual adds write the sum rounded and norm
// the rounded sum (the bits of the bf16 add, then the unfused bf16-x norm); add onto a bf16
// residual rounds the fp32 sum. Widths with and without a 16-lane tail, strided rows.
TEST(OnlineNorm, Bf16ResidualFormsAreTheFp32FormsOnTheWidenedResidual) {
  for (int64_t D : {16, 37, 70}) {
    const int64_t rows = 5, ld = D + 3;
    const float eps = 1e-5f;
    const auto xf = random_vector(rows * ld, 41, 2.0f);
    std::vector<bf16_t> x16(rows * ld);
    std::vector<float> xw(rows * ld);
    for (int64_t i = 0; i < rows * ld; ++i) {
      x16[i] = float_to_bf16(xf[i]);
      xw[i] = bf16_to_float(x16[i]);
    }
    const auto gamma = random_vector(D, 42);
    const auto dy = random_vector(rows * ld, 43);
    const auto g = random_vector(rows * D, 44);
    const auto u = random_vector(rows * D, 45);
    auto ds = random_vector(rows, 46);
    auto rstd_in = random_vector(rows, 47);
    for (float& v : rstd_in) v = std::abs(v) + 0.5f;
    SCOPED_TRACE(D);
    {  // whole-row norm, fp32 and bf16 outputs
      std::vector<float> y(rows * ld), y_w(rows * ld), rstd(rows), rstd_w(rows);
      rmsnorm_forward(x16.data(), ld, gamma.data(), rows, D, eps, y.data(), ld, rstd.data());
      rmsnorm_forward(xw.data(), ld, gamma.data(), rows, D, eps, y_w.data(), ld, rstd_w.data());
      EXPECT_EQ(y, y_w);
      EXPECT_EQ(rstd, rstd_w);
      std::vector<bf16_t> b(rows * ld), b_w(rows * ld);
      rmsnorm_forward_bf16(x16.data(), ld, gamma.data(), rows, D, eps, b.data(), ld, rstd.data());
      rmsnorm_forward_bf16(xw.data(), ld, gamma.data(), rows, D, eps, b_w.data(), ld,
                           rstd_w.data());
      EXPECT_EQ(b, b_w);
      EXPECT_EQ(rstd, rstd_w);
    }
    for (bool accumulate : {false, true}) {  // whole-row backward and its split pieces
      std::vector<float> dx(rows * ld, 0.5f), dx_w = dx, dg(D, 0.25f), dg_w = dg;
      std::vector<bf16_t> dx16(rows * D);  // the residual gradient's copy, as the GEMMs read it
      rmsnorm_backward(dy.data(), ld, x16.data(), ld, gamma.data(), rstd_in.data(), rows, D,
                       dx.data(), ld, dg.data(), accumulate, dx16.data());
      rmsnorm_backward(dy.data(), ld, xw.data(), ld, gamma.data(), rstd_in.data(), rows, D,
                       dx_w.data(), ld, dg_w.data(), accumulate);
      EXPECT_EQ(dx, dx_w);
      EXPECT_EQ(dg, dg_w);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < D; ++j)
          ASSERT_EQ(dx16[r * D + j], float_to_bf16(dx[r * ld + j])) << r << " " << j;
      std::vector<float> dot(rows), dot_w(rows);
      rmsnorm_partial_backward_dot(dy.data(), ld, x16.data(), ld, gamma.data(), rows, D,
                                   dot.data());
      rmsnorm_partial_backward_dot(dy.data(), ld, xw.data(), ld, gamma.data(), rows, D,
                                   dot_w.data());
      EXPECT_EQ(dot, dot_w);
      rmsnorm_backward_apply(dy.data(), ld, x16.data(), ld, gamma.data(), rstd_in.data(),
                             dot.data(), rows, D, 2 * D, dx.data(), ld, dg.data(), accumulate);
      rmsnorm_backward_apply(dy.data(), ld, xw.data(), ld, gamma.data(), rstd_in.data(),
                             dot.data(), rows, D, 2 * D, dx_w.data(), ld, dg_w.data(),
                             accumulate);
      EXPECT_EQ(dx, dx_w);
      EXPECT_EQ(dg, dg_w);
    }
    {  // split statistics and apply
      std::vector<float> ss(rows), ss_w(rows), y(rows * D), y_w(rows * D);
      rmsnorm_partial_sum_squares(x16.data(), ld, rows, D, ss.data());
      rmsnorm_partial_sum_squares(xw.data(), ld, rows, D, ss_w.data());
      EXPECT_EQ(ss, ss_w);
      rmsnorm_apply(x16.data(), ld, gamma.data(), rstd_in.data(), rows, D, y.data(), D);
      rmsnorm_apply(xw.data(), ld, gamma.data(), rstd_in.data(), rows, D, y_w.data(), D);
      EXPECT_EQ(y, y_w);
    }
    // The contiguous kernels (Online-RMSNorm's, the fused adds, add) on rows of D.
    std::vector<bf16_t> c16(rows * D);
    std::vector<float> cw(rows * D);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < D; ++j) {
        c16[r * D + j] = x16[r * ld + j];
        cw[r * D + j] = xw[r * ld + j];
      }
    for (bool with_stat : {false, true}) {
      std::vector<float> ss(rows, -1.0f), ss_w(rows, -1.0f);
      std::vector<bf16_t> out(rows * D), out_w(rows * D);
      online_norm_input_bf16(c16.data(), gamma.data(), with_stat ? ss.data() : nullptr, rows, D,
                             eps, out.data());
      online_norm_input_bf16(cw.data(), gamma.data(), with_stat ? ss_w.data() : nullptr, rows, D,
                             eps, out_w.data());
      EXPECT_EQ(out, out_w);
      EXPECT_EQ(ss, ss_w);
    }
    for (bool copy : {false, true}) {
      std::vector<float> dx(rows * D, 0.5f), dx_w = dx, dg(D), dg_w(D);
      std::vector<bf16_t> d16(rows * D), d16_w(rows * D);
      online_norm_input_backward(g.data(), c16.data(), gamma.data(), ds.data(), rows, D, 1.0f,
                                 dx.data(), dg.data(), copy ? d16.data() : nullptr);
      online_norm_input_backward(g.data(), cw.data(), gamma.data(), ds.data(), rows, D, 1.0f,
                                 dx_w.data(), dg_w.data(), copy ? d16_w.data() : nullptr);
      EXPECT_EQ(dx, dx_w);
      EXPECT_EQ(dg, dg_w);
      EXPECT_EQ(d16, d16_w);
    }
    {  // g in bf16 (btp's latent GEMM writes it so): the fp32-g form on the widened g
      std::vector<bf16_t> g16(rows * D);
      std::vector<float> gw(rows * D);
      for (int64_t i = 0; i < rows * D; ++i) {
        g16[i] = float_to_bf16(g[i]);
        gw[i] = bf16_to_float(g16[i]);
      }
      std::vector<float> dx(rows * D, 0.5f), dx_w = dx, dg(D), dg_w(D);
      std::vector<bf16_t> d16(rows * D), d16_w(rows * D);
      online_norm_input_backward(g16.data(), c16.data(), gamma.data(), ds.data(), rows, D, 1.0f,
                                 dx.data(), dg.data(), d16.data());
      online_norm_input_backward(gw.data(), c16.data(), gamma.data(), ds.data(), rows, D, 1.0f,
                                 dx_w.data(), dg_w.data(), d16_w.data());
      EXPECT_EQ(dx, dx_w);
      EXPECT_EQ(dg, dg_w);
      EXPECT_EQ(d16, d16_w);
    }
    // add onto a bf16 residual, and the fused adds: the sum rounded, then the norm of it.
    std::vector<bf16_t> sum(rows * D), want_sum(rows * D);
    add(c16.data(), u.data(), sum.data(), rows * D);
    for (int64_t i = 0; i < rows * D; ++i) want_sum[i] = float_to_bf16(cw[i] + u[i]);
    EXPECT_EQ(sum, want_sum);
    std::vector<bf16_t> in_place = c16;
    add(in_place.data(), u.data(), in_place.data(), rows * D);  // out may alias a
    EXPECT_EQ(in_place, want_sum);
    std::vector<float> sum_w(rows * D);
    for (int64_t i = 0; i < rows * D; ++i) sum_w[i] = bf16_to_float(want_sum[i]);
    {
      std::vector<bf16_t> fsum(rows * D), y(rows * D), y_w(rows * D);
      std::vector<float> rstd(rows), rstd_w(rows);
      residual_rmsnorm_forward_bf16(c16.data(), u.data(), fsum.data(), gamma.data(), rows, D, eps,
                                    y.data(), rstd.data());
      rmsnorm_forward_bf16(sum_w.data(), D, gamma.data(), rows, D, eps, y_w.data(), D,
                           rstd_w.data());
      EXPECT_EQ(fsum, want_sum);
      EXPECT_EQ(y, y_w);
      EXPECT_EQ(rstd, rstd_w);
    }
    {
      std::vector<bf16_t> fsum(rows * D), out(rows * D), out_w(rows * D);
      std::vector<float> ss(rows), ss_w(rows);
      residual_online_norm_input_bf16(c16.data(), u.data(), fsum.data(), gamma.data(), ss.data(),
                                      rows, D, eps, out.data());
      online_norm_input_bf16(sum_w.data(), gamma.data(), ss_w.data(), rows, D, eps,
                             out_w.data());
      EXPECT_EQ(fsum, want_sum);
      EXPECT_EQ(out, out_w);
      EXPECT_EQ(ss, ss_w);
    }
  }
}

TEST(ColumnBlocks, CopyAndAddTakeAStridedBlock) {
  const int64_t rows = 3, cols = 4, ld_src = 9, ld_dst = 5;
  auto src = random_vector(rows * ld_src, 8);
  std::vector<float> dst(rows * ld_dst, 1.0f);
  copy_columns(src.data() + 2, ld_src, rows, cols, dst.data(), ld_dst);
  add_columns(src.data() + 2, ld_src, rows, cols, dst.data(), ld_dst);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(dst[r * ld_dst + c], 2 * src[r * ld_src + 2 + c]);
    EXPECT_EQ(dst[r * ld_dst + cols], 1.0f);  // beyond the block: untouched
  }
}

}  // namespace
}  // namespace boostlm
