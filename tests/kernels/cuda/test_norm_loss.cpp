// The CUDA split-row RMSNorm, Online-RMSNorm and cross-entropy kernels against the CPU backend's
// functions on the same inputs, ragged shapes and padded strides included; the chunked linear
// cross-entropy against the CPU's head and loss. They skip, with the reason, where no GPU is
// visible.
//
// Tolerances: the kernels share the per-row formulas of kernels/math.h with the CPU backend.
// Results that are products of the same inputs in the same order, or IEEE division and square
// root (rstd, apply, pack, unpack, the rescales) are compared exactly. Row and column sums run in
// another order (CUB's trees vs the CPU's SIMD lanes): ~sqrt(n)·2^-24 relative, stated per check.
// The cross-entropy's exp is libm's expf on the GPU and a polynomial within 3 ulp on the CPU.
// bf16 results are bit for bit the rounding of the same kernel's fp32 values, and within 1 bf16
// ulp of the CPU's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "comm/bf16_sum.h"
#include "kernels/cross_entropy.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/kernels.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/rmsnorm.h"

namespace boostlm {
namespace {

using cuda::testing::all_near;
using cuda::testing::all_within_bf16_ulps;
using cuda::testing::DeviceArray;
using cuda::testing::DeviceTest;
using cuda::testing::random_floats;
using cuda::testing::rounded;

using CudaSplitNorm = DeviceTest;
using CudaOnlineNorm = DeviceTest;
using CudaCrossEntropy = DeviceTest;

using cuda::testing::kRowShapes;
using cuda::testing::RowShape;

std::vector<int32_t> random_targets(int64_t n, int64_t V, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng.uniform() * static_cast<double>(V)) % V;
  return t;
}

TEST_F(CudaSplitNorm, PiecesMatchTheCpuBackend) {
  const float eps = 1e-5f;
  for (const RowShape& s : kRowShapes) {
    SCOPED_TRACE(::testing::Message() << s.rows << "x" << s.D << "+" << s.pad);
    const int64_t ld = s.D + s.pad, D_total = 2 * s.D + 3;  // this rank's share of a wider row
    const auto x = random_floats(s.rows * ld, 1), dy = random_floats(s.rows * ld, 2),
               gamma = random_floats(s.D, 3), dx0 = random_floats(s.rows * ld, 4),
               dgamma0 = random_floats(s.D, 5);
    DeviceArray<float> gx(x), gdy(dy), ggamma(gamma);

    // Σx² per row: CUB's tree vs the CPU's lanes, ≤ 4099 terms: 1e-5 relative.
    std::vector<float> sum_sq(s.rows);
    rmsnorm_partial_sum_squares(x.data(), ld, s.rows, s.D, sum_sq.data());
    DeviceArray<float> gsum(s.rows);
    cuda::rmsnorm_partial_sum_squares(gx.get(), ld, s.rows, s.D, gsum.get(), stream);
    sync();
    EXPECT_TRUE(all_near(gsum.download(), sum_sq, 0, 1e-5));

    // From the same Σx²: rstd, then y, exactly.
    std::vector<float> rstd(s.rows), y(s.rows * ld, -7.0f);
    rmsnorm_rstd(sum_sq.data(), s.rows, D_total, eps, rstd.data());
    rmsnorm_apply(x.data(), ld, gamma.data(), rstd.data(), s.rows, s.D, y.data(), ld);
    DeviceArray<float> gss(sum_sq), grstd(s.rows), gy(std::vector<float>(s.rows * ld, -7.0f));
    cuda::rmsnorm_rstd(gss.get(), s.rows, D_total, eps, grstd.get(), stream);
    sync();
    EXPECT_TRUE(all_near(grstd.download(), rstd, 0, 0));
    DeviceArray<float> grstd_cpu(rstd);
    cuda::rmsnorm_apply(gx.get(), ld, ggamma.get(), grstd_cpu.get(), s.rows, s.D, gy.get(), ld,
                        stream);
    sync();
    EXPECT_TRUE(all_near(gy.download(), y, 0, 0));  // padding untouched too

    // Σ dy⊙γ⊙x: 1e-5 relative plus 1e-5 absolute (sums of signed terms can cancel).
    std::vector<float> dot(s.rows);
    rmsnorm_partial_backward_dot(dy.data(), ld, x.data(), ld, gamma.data(), s.rows, s.D,
                                 dot.data());
    DeviceArray<float> gdot(s.rows);
    cuda::rmsnorm_partial_backward_dot(gdy.get(), ld, gx.get(), ld, ggamma.get(), s.rows, s.D,
                                       gdot.get(), stream);
    sync();
    EXPECT_TRUE(all_near(gdot.download(), dot, 1e-5, 1e-5));

    // dx (overwritten and accumulated) from the same dot and rstd: a few ulps (the compilers
    // fuse the multiply-subtract differently); dγ += a column sum over rows in another order.
    DeviceArray<float> gdot_cpu(dot);
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(accumulate);
      std::vector<float> dx = dx0, dgamma = dgamma0;
      rmsnorm_backward_apply(dy.data(), ld, x.data(), ld, gamma.data(), rstd.data(), dot.data(),
                             s.rows, s.D, D_total, dx.data(), ld, dgamma.data(), accumulate);
      DeviceArray<float> gdx(dx0), gdgamma(dgamma0);
      const size_t bytes = cuda::rmsnorm_backward_apply_workspace_bytes(s.rows, s.D);
      DeviceArray<char> work(bytes);
      cuda::rmsnorm_backward_apply(gdy.get(), ld, gx.get(), ld, ggamma.get(), grstd_cpu.get(),
                                   gdot_cpu.get(), s.rows, s.D, D_total, gdx.get(), ld,
                                   gdgamma.get(), accumulate, work.get(), bytes, stream);
      sync();
      EXPECT_TRUE(all_near(gdx.download(), dx, 1e-6, 1e-5));
      EXPECT_TRUE(all_near(gdgamma.download(), dgamma, 1e-5, 1e-4));  // ≤ 1000 rows
    }
  }
}

TEST_F(CudaOnlineNorm, ForwardPiecesMatchTheCpuBackend) {
  const float eps = 1e-5f;
  for (const RowShape& s : kRowShapes) {
    SCOPED_TRACE(::testing::Message() << s.rows << "x" << s.D);
    const int64_t D = s.D, width = 5 + s.pad, ld = width + 1, D_total = 2 * D;
    const auto x = random_floats(s.rows * D, 11), gamma = random_floats(D, 12),
               p = random_floats(s.rows * ld, 13);
    std::vector<float> sum_sq(s.rows);
    rmsnorm_partial_sum_squares(x.data(), D, s.rows, D, sum_sq.data());
    DeviceArray<float> gx(x), ggamma(gamma), gss(sum_sq);

    // x ⊙ γ · s, with and without the statistic: products in the CPU's order, exact.
    for (bool with_sum : {false, true}) {
      std::vector<float> out(s.rows * D);
      online_norm_input(x.data(), gamma.data(), with_sum ? sum_sq.data() : nullptr, s.rows, D, eps,
                        out.data());
      DeviceArray<float> gout(s.rows * D);
      cuda::online_norm_input(gx.get(), ggamma.get(), with_sum ? gss.get() : nullptr, s.rows, D,
                              eps, gout.get(), stream);
      sync();
      EXPECT_TRUE(all_near(gout.download(), out, 0, 0)) << with_sum;
    }

    // The bf16 input and its statistic in one pass: Σx² to 1e-5, the rounded values to 1 ulp.
    std::vector<float> ss16(s.rows);
    std::vector<bf16_t> in16(s.rows * D);
    online_norm_input_bf16(x.data(), gamma.data(), ss16.data(), s.rows, D, eps, in16.data());
    DeviceArray<float> gss16(s.rows);
    DeviceArray<bf16_t> gin16(s.rows * D);
    cuda::online_norm_input_bf16(gx.get(), ggamma.get(), gss16.get(), s.rows, D, eps, gin16.get(),
                                 stream);
    sync();
    EXPECT_TRUE(all_near(gss16.download(), ss16, 0, 1e-5));
    EXPECT_TRUE(all_within_bf16_ulps(gin16.download(), in16));

    // The residual add fused into either norm (issue 60): on the device the bits of the device's
    // add then its unfused kernel, and the sum exactly the CPU's.
    {
      const auto u = random_floats(s.rows * D, 17);
      std::vector<float> sum(s.rows * D);
      add(x.data(), u.data(), sum.data(), s.rows * D);
      DeviceArray<float> gu(u), gsum(s.rows * D), gfsum(s.rows * D), gsq(s.rows), gfsq(s.rows);
      DeviceArray<bf16_t> gin(s.rows * D), gfin(s.rows * D);
      cuda::add(gx.get(), gu.get(), gsum.get(), s.rows * D, stream);
      cuda::online_norm_input_bf16(gsum.get(), ggamma.get(), gsq.get(), s.rows, D, eps, gin.get(),
                                   stream);
      cuda::residual_online_norm_input_bf16(gx.get(), gu.get(), gfsum.get(), ggamma.get(),
                                            gfsq.get(), s.rows, D, eps, gfin.get(), stream);
      sync();
      EXPECT_TRUE(all_near(gfsum.download(), sum, 0, 0));
      EXPECT_TRUE(all_near(gfsq.download(), gsq.download(), 0, 0));
      EXPECT_EQ(gfin.download(), gin.download());
      DeviceArray<float> grs(s.rows), gfrs(s.rows), gfsum2(s.rows * D);
      DeviceArray<bf16_t> gy(s.rows * D), gfy(s.rows * D);
      cuda::rmsnorm_forward_bf16(gsum.get(), D, ggamma.get(), s.rows, D, eps, gy.get(), D,
                                 grs.get(), stream);
      cuda::residual_rmsnorm_forward_bf16(gx.get(), gu.get(), gfsum2.get(), ggamma.get(), s.rows, D,
                                          eps, gfy.get(), gfrs.get(), stream);
      sync();
      EXPECT_TRUE(all_near(gfsum2.download(), sum, 0, 0));
      EXPECT_TRUE(all_near(gfrs.download(), grs.download(), 0, 0));
      EXPECT_EQ(gfy.download(), gy.download());
    }

    // pack (rescale and statistic column), rstd, unpack (fp32, bf16, plain copy): exact.
    std::vector<float> packed = p;
    online_norm_pack(packed.data(), ld, s.rows, width, sum_sq.data(), D, eps, true, true);
    DeviceArray<float> gp(p);
    cuda::online_norm_pack(gp.get(), ld, s.rows, width, gss.get(), D, eps, true, true, stream);
    sync();
    EXPECT_TRUE(all_near(gp.download(), packed, 0, 0));
    std::vector<float> stat_only = p;
    online_norm_pack(stat_only.data(), ld, s.rows, width, sum_sq.data(), D, eps, false, true);
    DeviceArray<float> gstat(p);
    cuda::online_norm_pack(gstat.get(), ld, s.rows, width, gss.get(), D, eps, false, true, stream);
    sync();
    EXPECT_TRUE(all_near(gstat.download(), stat_only, 0, 0));

    std::vector<float> rstd(s.rows), z(s.rows * width), copy(s.rows * width);
    std::vector<bf16_t> z16(s.rows * width);
    online_norm_rstd(packed.data(), ld, s.rows, width, D_total, eps, rstd.data());
    online_norm_unpack(packed.data(), ld, s.rows, width, rstd.data(), z.data(), width);
    online_norm_unpack(packed.data(), ld, s.rows, width, rstd.data(), z16.data(), width);
    online_norm_unpack(packed.data(), ld, s.rows, width, nullptr, copy.data(), width);
    DeviceArray<float> grstd(s.rows), gz(s.rows * width), gcopy(s.rows * width);
    DeviceArray<bf16_t> gz16(s.rows * width);
    cuda::online_norm_rstd(gp.get(), ld, s.rows, width, D_total, eps, grstd.get(), stream);
    cuda::online_norm_unpack(gp.get(), ld, s.rows, width, grstd.get(), gz.get(), width, stream);
    cuda::online_norm_unpack(gp.get(), ld, s.rows, width, grstd.get(), gz16.get(), width, stream);
    cuda::online_norm_unpack(gp.get(), ld, s.rows, width, nullptr, gcopy.get(), width, stream);
    sync();
    EXPECT_TRUE(all_near(grstd.download(), rstd, 0, 0));
    EXPECT_TRUE(all_near(gz.download(), z, 0, 0));
    EXPECT_TRUE(all_within_bf16_ulps(gz16.download(), z16, 0));
    EXPECT_TRUE(all_near(gcopy.download(), copy, 0, 0));
  }
}

// bf16 messages (issue 60): pack into the device's split format, rstd from its statistics,
// unpack from its bf16 values, and widen_bf16: exact against the CPU backend (bf16 within 0 ulps).
TEST_F(CudaOnlineNorm, Bf16MessagePiecesMatchTheCpuBackend) {
  const float eps = 1e-5f;
  for (const RowShape& s : kRowShapes) {
    SCOPED_TRACE(::testing::Message() << s.rows << "x" << s.D);
    const int64_t D = s.D, width = 5 + s.pad, ld = width + 1, D_total = 2 * D;
    const auto x = random_floats(s.rows * D, 11), p = random_floats(s.rows * ld, 13);
    std::vector<float> sum_sq(s.rows);
    rmsnorm_partial_sum_squares(x.data(), D, s.rows, D, sum_sq.data());
    const RowMessage m = split_rows(s.rows, width, 1);
    std::vector<bf16_t> message(m.bytes / 2);
    online_norm_pack_bf16(p.data(), ld, s.rows, width, sum_sq.data(), D, eps, true,
                          m.values_in(message.data()), m.values_ld, m.stats_in(message.data()),
                          m.stats_ld);
    DeviceArray<float> gp(p), gss(sum_sq);
    DeviceArray<bf16_t> gmessage(m.bytes / 2);
    cuda::online_norm_pack_bf16(gp.get(), ld, s.rows, width, gss.get(), D, eps, true,
                                m.values_in(gmessage.get()), m.values_ld,
                                m.stats_in(gmessage.get()), m.stats_ld, stream);
    sync();
    const std::vector<bf16_t> got = gmessage.download();
    for (int64_t i = 0; i < s.rows * width; ++i) ASSERT_EQ(got[i], message[i]) << i;
    for (int64_t r = 0; r < s.rows; ++r)
      ASSERT_EQ(m.stats_in(const_cast<bf16_t*>(got.data()))[r], sum_sq[r]) << r;

    std::vector<float> rstd(s.rows), z(s.rows * width), wide(s.rows * ld, 0.0f);
    std::vector<bf16_t> z16(s.rows * width);
    online_norm_rstd(m.stats_in(message.data()), m.stats_ld, s.rows, 0, D_total, eps, rstd.data());
    online_norm_unpack(m.values_in(message.data()), m.values_ld, s.rows, width, rstd.data(),
                       z.data(), width);
    online_norm_unpack(m.values_in(message.data()), m.values_ld, s.rows, width, rstd.data(),
                       z16.data(), width);
    widen_bf16(m.values_in(message.data()), s.rows, width, m.values_ld, wide.data(), ld);
    DeviceArray<float> grstd(s.rows), gz(s.rows * width), gwide(std::vector<float>(s.rows * ld));
    DeviceArray<bf16_t> gz16(s.rows * width);
    cuda::online_norm_rstd(m.stats_in(gmessage.get()), m.stats_ld, s.rows, 0, D_total, eps,
                           grstd.get(), stream);
    cuda::online_norm_unpack(m.values_in(gmessage.get()), m.values_ld, s.rows, width, grstd.get(),
                             gz.get(), width, stream);
    cuda::online_norm_unpack(m.values_in(gmessage.get()), m.values_ld, s.rows, width, grstd.get(),
                             gz16.get(), width, stream);
    cuda::widen_bf16(m.values_in(gmessage.get()), s.rows, width, m.values_ld, gwide.get(), ld,
                     stream);
    sync();
    EXPECT_TRUE(all_near(grstd.download(), rstd, 0, 0));
    EXPECT_TRUE(all_near(gz.download(), z, 0, 0));
    EXPECT_TRUE(all_within_bf16_ulps(gz16.download(), z16, 0));
    EXPECT_TRUE(all_near(gwide.download(), wide, 0, 0));
  }
}

TEST_F(CudaOnlineNorm, BackwardPiecesMatchTheCpuBackend) {
  for (const RowShape& s : kRowShapes) {
    SCOPED_TRACE(::testing::Message() << s.rows << "x" << s.D);
    const int64_t D = s.D, width = 3 + s.D % 200, D_total = 2 * D;
    const auto z = random_floats(s.rows * width, 21), dz = random_floats(s.rows * width, 22),
               rstd_raw = random_floats(s.rows, 23);
    std::vector<float> rstd(s.rows);
    for (int64_t r = 0; r < s.rows; ++r) rstd[r] = 0.5f + std::fabs(rstd_raw[r]);
    DeviceArray<float> gz(z), grstd(rstd);
    const std::vector<bf16_t> z16 = rounded(z);
    DeviceArray<bf16_t> gz16(z16);

    // ds from Σ dz ⊙ z (1e-5 relative + 1e-6 absolute: a signed sum of ≤ 202 terms); dz ·= rstd
    // exactly.
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE(bf16);
      std::vector<float> dzc = dz, ds(s.rows);
      if (bf16)
        online_norm_latent_backward(z16.data(), dzc.data(), s.rows, width, rstd.data(), D_total,
                                    ds.data());
      else
        online_norm_latent_backward(z.data(), dzc.data(), s.rows, width, rstd.data(), D_total,
                                    ds.data());
      DeviceArray<float> gdz(dz), gds(s.rows);
      if (bf16)
        cuda::online_norm_latent_backward(gz16.get(), gdz.get(), s.rows, width, grstd.get(),
                                          D_total, gds.get(), stream);
      else
        cuda::online_norm_latent_backward(gz.get(), gdz.get(), s.rows, width, grstd.get(), D_total,
                                          gds.get(), stream);
      sync();
      EXPECT_TRUE(all_near(gds.download(), ds, 1e-6, 1e-5));
      EXPECT_TRUE(all_near(gdz.download(), dzc, 0, 0));
    }

    // bf16 training's latent gradient in one pass (σ' or not, the latent backward, dP rounded):
    // the device's three unfused passes bit for bit, and the CPU's within its ds tolerance.
    for (bool silu : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "to bf16, silu " << silu);
      DeviceArray<float> gdl(dz), gdz(dz), gds(s.rows), gfused_ds(s.rows);
      DeviceArray<bf16_t> gdp(s.rows * width), gdp_unfused(s.rows * width);
      if (silu) cuda::silu_backward(gdl.get(), gz16.get(), s.rows, width, gdz.get(), stream);
      cuda::online_norm_latent_backward(gz16.get(), gdz.get(), s.rows, width, grstd.get(), D_total,
                                        gds.get(), stream);
      cuda::round_to_bf16(gdz.get(), s.rows, width, width, gdp_unfused.get(), stream);
      cuda::online_norm_latent_backward_to_bf16(gz16.get(), gdl.get(), silu, s.rows, width,
                                                grstd.get(), D_total, gfused_ds.get(), gdp.get(),
                                                stream);
      sync();
      EXPECT_TRUE(all_near(gfused_ds.download(), gds.download(), 0, 0));
      EXPECT_TRUE(all_within_bf16_ulps(gdp.download(), gdp_unfused.download(), 0));
      EXPECT_TRUE(all_near(gdl.download(), dz, 0, 0));  // dlatent is not written
      std::vector<float> ds(s.rows);
      std::vector<bf16_t> dp(s.rows * width);
      online_norm_latent_backward_to_bf16(z16.data(), dz.data(), silu, s.rows, width, rstd.data(),
                                          D_total, ds.data(), dp.data());
      EXPECT_TRUE(all_near(gfused_ds.download(), ds, 1e-6, 1e-5));
    }

    // dx = β·dx + g ⊙ γ + 2·ds·x (a few ulps: fused differently) and dγ += Σ x ⊙ g (column sums
    // over ≤ 1000 rows in another order).
    const auto g = random_floats(s.rows * D, 24), x = random_floats(s.rows * D, 25),
               gamma = random_floats(D, 26), ds = random_floats(s.rows, 27),
               dx0 = random_floats(s.rows * D, 28), dgamma0 = random_floats(D, 29);
    DeviceArray<float> gg(g), gx(x), ggamma(gamma), gds(ds);
    for (float beta : {0.0f, 1.0f}) {
      SCOPED_TRACE(beta);
      std::vector<float> dx = dx0, dgamma = dgamma0;
      online_norm_input_backward(g.data(), x.data(), gamma.data(), ds.data(), s.rows, D, beta,
                                 dx.data(), dgamma.data());
      DeviceArray<float> gdx(dx0), gdgamma(dgamma0);
      const size_t bytes = cuda::online_norm_input_backward_workspace_bytes(s.rows, D);
      DeviceArray<char> work(bytes);
      cuda::online_norm_input_backward(gg.get(), gx.get(), ggamma.get(), gds.get(), s.rows, D, beta,
                                       gdx.get(), gdgamma.get(), work.get(), bytes, stream);
      sync();
      EXPECT_TRUE(all_near(gdx.download(), dx, 1e-6, 1e-5));
      EXPECT_TRUE(all_near(gdgamma.download(), dgamma, 1e-5, 1e-4));
      // With dx's bf16 copy: the same dx, and the copy the device's dx rounded.
      DeviceArray<float> gdx2(dx0), gdgamma2(dgamma0);
      DeviceArray<bf16_t> gdx16(s.rows * D);
      cuda::online_norm_input_backward(gg.get(), gx.get(), ggamma.get(), gds.get(), s.rows, D, beta,
                                       gdx2.get(), gdgamma2.get(), work.get(), bytes, stream,
                                       gdx16.get());
      sync();
      EXPECT_EQ(gdx2.download(), gdx.download());
      EXPECT_EQ(gdx16.download(), rounded(gdx.download()));
    }
  }
}

// ---- Cross-entropy.

struct VocabShape {
  int64_t rows, V, pad;
};
// Rows of each block size, a vocabulary wider than a block's 4 columns per thread many times over,
// odd widths, padded strides.
const VocabShape kVocabShapes[] = {
    {1, 2, 0}, {7, 100, 3}, {33, 1001, 0}, {4, 32003, 5}, {200, 257, 1}};

// lse within 1e-5 relative (a different exp and order of the sum), losses within 2e-5 absolute
// plus that (lse − target logit can cancel), dlogits within 1e-5 relative plus 1e-9 absolute.
TEST_F(CudaCrossEntropy, ForwardAndBackwardMatchTheCpuBackend) {
  for (const VocabShape& s : kVocabShapes) {
    SCOPED_TRACE(::testing::Message() << s.rows << "x" << s.V << "+" << s.pad);
    const int64_t ld = s.V + s.pad;
    const auto logits = random_floats(s.rows * ld, 31, 3.0f);
    const auto targets = random_targets(s.rows, s.V, 32);
    const float scale = 1.0f / static_cast<float>(s.rows);
    std::vector<float> losses(s.rows), lse(s.rows), dl(s.rows * ld, -7.0f);
    cross_entropy_forward(logits.data(), ld, targets.data(), s.rows, s.V, losses.data(),
                          lse.data());
    cross_entropy_backward(logits.data(), ld, targets.data(), lse.data(), s.rows, s.V, scale,
                           dl.data(), ld);
    DeviceArray<float> gl(logits), glosses(s.rows), glse(s.rows),
        gdl(std::vector<float>(s.rows * ld, -7.0f));
    DeviceArray<int32_t> gt(targets);
    cuda::cross_entropy_forward(gl.get(), ld, gt.get(), s.rows, s.V, glosses.get(), glse.get(),
                                stream);
    DeviceArray<float> glse_cpu(lse);
    cuda::cross_entropy_backward(gl.get(), ld, gt.get(), glse_cpu.get(), s.rows, s.V, scale,
                                 gdl.get(), ld, stream);
    sync();
    EXPECT_TRUE(all_near(glse.download(), lse, 0, 1e-5));
    EXPECT_TRUE(all_near(glosses.download(), losses, 2e-5, 1e-5));
    EXPECT_TRUE(all_near(gdl.download(), dl, 1e-9, 1e-5));

    // The fused form: the same losses as the forward kernel bit for bit (the same statistics and
    // operations), the gradient as the CPU's; its bf16 copy, in a buffer of its own or over the
    // logits, bit for bit the rounding of the fp32 gradient, and within 1 ulp of the CPU's.
    std::vector<float> fused = logits, flosses(s.rows);
    std::vector<bf16_t> cpu16(s.rows * s.V);
    cross_entropy_forward_backward(fused.data(), ld, targets.data(), s.rows, s.V, scale,
                                   flosses.data(), cpu16.data(), s.V);
    DeviceArray<float> gf(logits), gflosses(s.rows), gover(logits), golosses(s.rows);
    DeviceArray<bf16_t> g16(s.rows * s.V);
    cuda::cross_entropy_forward_backward(gf.get(), ld, gt.get(), s.rows, s.V, scale, gflosses.get(),
                                         g16.get(), s.V, stream);
    cuda::cross_entropy_forward_backward(gover.get(), ld, gt.get(), s.rows, s.V, scale,
                                         golosses.get(), bf16_over(gover.get()), 2 * ld, stream);
    sync();
    EXPECT_TRUE(all_near(gflosses.download(), glosses.download(), 0, 0));
    EXPECT_TRUE(all_near(golosses.download(), glosses.download(), 0, 0));
    const std::vector<float> gfused = gf.download();
    EXPECT_TRUE(all_near(gfused, fused, 1e-9, 1e-5));
    std::vector<bf16_t> expected16(s.rows * s.V), over16(s.rows * s.V);
    const std::vector<float> over_bytes = gover.download();
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t j = 0; j < s.V; ++j) {
        expected16[r * s.V + j] = float_to_bf16(gfused[r * ld + j]);
        over16[r * s.V + j] = reinterpret_cast<const bf16_t*>(over_bytes.data() + r * ld)[j];
      }
    EXPECT_TRUE(all_within_bf16_ulps(g16.download(), expected16, 0));
    EXPECT_TRUE(all_within_bf16_ulps(over16, expected16, 0));
    EXPECT_TRUE(all_within_bf16_ulps(g16.download(), cpu16, 1));
  }
}

// The vocab-parallel pieces over two shards of the vocabulary, the all-reduces done on the host
// between them (max, then sums), against the CPU's pieces; and the mean loss, summed in double.
TEST_F(CudaCrossEntropy, ShardPiecesMatchTheCpuBackend) {
  const int64_t rows = 19, V = 3001, split = 1400;
  const auto logits = random_floats(rows * V, 41, 3.0f);
  const auto targets = random_targets(rows, V, 42);
  const float scale = 0.25f;
  DeviceArray<int32_t> gt(targets);
  const int64_t begins[2] = {0, split}, widths[2] = {split, V - split};
  // CPU and GPU, each shard's max, then its stats from the combined max.
  std::vector<float> cpu_max(rows, -INFINITY), gpu_max(rows, -INFINITY);
  for (int shard = 0; shard < 2; ++shard) {
    std::vector<float> m(rows);
    cross_entropy_shard_max(logits.data() + begins[shard], V, rows, widths[shard], m.data());
    DeviceArray<float> gl(logits), gm(rows);
    cuda::cross_entropy_shard_max(gl.get() + begins[shard], V, rows, widths[shard], gm.get(),
                                  stream);
    sync();
    const auto gmv = gm.download();
    EXPECT_TRUE(all_near(gmv, m, 0, 0));  // a max is exact
    for (int64_t r = 0; r < rows; ++r) {
      cpu_max[r] = std::max(cpu_max[r], m[r]);
      gpu_max[r] = std::max(gpu_max[r], gmv[r]);
    }
  }
  std::vector<float> cpu_stats(2 * rows, 0.0f), gpu_stats(2 * rows, 0.0f);
  DeviceArray<float> gmax(gpu_max);
  for (int shard = 0; shard < 2; ++shard) {
    std::vector<float> st(2 * rows);
    cross_entropy_shard_stats(logits.data() + begins[shard], V, targets.data(), rows, widths[shard],
                              begins[shard], cpu_max.data(), st.data());
    DeviceArray<float> gl(logits), gst(2 * rows);
    cuda::cross_entropy_shard_stats(gl.get() + begins[shard], V, gt.get(), rows, widths[shard],
                                    begins[shard], gmax.get(), gst.get(), stream);
    sync();
    const auto gsv = gst.download();
    EXPECT_TRUE(all_near(gsv, st, 1e-6, 1e-5));
    for (int64_t i = 0; i < 2 * rows; ++i) {
      cpu_stats[i] += st[i];
      gpu_stats[i] += gsv[i];
    }
  }
  std::vector<float> lse(rows), losses(rows);
  cross_entropy_shard_loss(cpu_max.data(), cpu_stats.data(), rows, lse.data(), losses.data());
  DeviceArray<float> gstats(gpu_stats), glse(rows), glosses(rows);
  cuda::cross_entropy_shard_loss(gmax.get(), gstats.get(), rows, glse.get(), glosses.get(), stream);
  sync();
  EXPECT_TRUE(all_near(glse.download(), lse, 0, 1e-5));
  EXPECT_TRUE(all_near(glosses.download(), losses, 2e-5, 1e-5));

  // The shard backward from the same lse, fp32 in place and bf16 over the logits.
  DeviceArray<float> glse_cpu(lse);
  for (int shard = 0; shard < 2; ++shard) {
    std::vector<float> grad = logits;
    cross_entropy_shard_backward(grad.data() + begins[shard], V, targets.data(), rows,
                                 widths[shard], begins[shard], lse.data(), scale);
    DeviceArray<float> gl(logits);
    cuda::cross_entropy_shard_backward(gl.get() + begins[shard], V, gt.get(), rows, widths[shard],
                                       begins[shard], glse_cpu.get(), scale, nullptr, 0, stream);
    sync();
    EXPECT_TRUE(all_near(gl.download(), grad, 1e-9, 1e-5));
  }

  // The mean: double sums in another order, rounded once to fp32.
  float gpu_mean = 0.0f;
  DeviceArray<float> gmean(1), glosses_cpu(losses);
  cuda::mean_loss(glosses_cpu.get(), rows, gmean.get(), stream);
  sync();
  gpu_mean = gmean.download()[0];
  EXPECT_NEAR(gpu_mean, mean_loss(losses.data(), rows), 1e-6 * std::fabs(gpu_mean));
}

// Every cross-entropy kernel is deterministic: the same inputs give the same bits.
TEST_F(CudaCrossEntropy, IsDeterministic) {
  const int64_t rows = 64, V = 50021;
  const auto logits = random_floats(rows * V, 51, 3.0f);
  const auto targets = random_targets(rows, V, 52);
  DeviceArray<int32_t> gt(targets);
  std::vector<float> first, first_losses;
  for (int run = 0; run < 2; ++run) {
    DeviceArray<float> gl(logits), glosses(rows);
    cuda::cross_entropy_forward_backward(gl.get(), V, gt.get(), rows, V, 0.5f, glosses.get(),
                                         nullptr, 0, stream);
    sync();
    if (run == 0) {
      first = gl.download();
      first_losses = glosses.download();
    } else {
      EXPECT_TRUE(all_near(gl.download(), first, 0, 0));
      EXPECT_TRUE(all_near(glosses.download(), first_losses, 0, 0));
    }
  }
}

// ---- The chunked linear cross-entropy, its GEMMs on cuda::reference_gemm through the DeviceGemm
// seam, against the CPU's head: logits = x·Wᵀ, the fused loss and gradient, dW += dlogitsᵀ·x,
// dx = dlogits·W.
struct HeadResult {
  std::vector<float> losses, dx, dw;
};

HeadResult cpu_head(const std::vector<float>& x, const std::vector<float>& w,
                    const std::vector<int32_t>& targets, const std::vector<float>& dw0,
                    int64_t rows, int64_t d, int64_t V, float scale, DType compute) {
  HeadResult r{std::vector<float>(rows), std::vector<float>(rows * d), dw0};
  std::vector<float> logits(rows * V);
  gemm(Trans::N, Trans::T, rows, V, d, 1.0f, x.data(), d, w.data(), d, 0.0f, logits.data(), V,
       compute);
  const bool bf16 = compute == DType::bf16;
  bf16_t* g16 = bf16 ? bf16_over(logits.data()) : nullptr;
  cross_entropy_forward_backward(logits.data(), V, targets.data(), rows, V, scale, r.losses.data(),
                                 g16, 2 * V);
  const GemmInput dl = bf16 ? GemmInput(nullptr, g16, 2 * V) : GemmInput(logits.data(), V);
  gemm(Trans::T, Trans::N, V, d, rows, 1.0f, dl, GemmInput(x.data(), d), 1.0f, r.dw.data(), d,
       compute);
  gemm(Trans::N, Trans::N, rows, d, V, 1.0f, dl, GemmInput(w.data(), d), 0.0f, r.dx.data(), d,
       compute);
  return r;
}

using cuda::testing::relative_error;

TEST_F(CudaCrossEntropy, ChunkedLinearCrossEntropyMatchesTheCpuHead) {
  const int64_t rows = 37, d = 24, V = 301;
  const auto x = random_floats(rows * d, 61), w = random_floats(V * d, 62, 0.3f),
             dw0 = random_floats(V * d, 63, 1e-3f);  // small: its ulps stay far below dW's
  const auto targets = random_targets(rows, V, 64);
  const float scale = 1.0f / rows;
  DeviceArray<float> gx(x), gw(w);
  DeviceArray<int32_t> gt(targets);
  const cuda::DeviceGemm gemm_on_device = cuda::reference_gemm;
  for (DType compute : {DType::f32, DType::bf16}) {
    HeadResult cpu = cpu_head(x, w, targets, dw0, rows, d, V, scale, compute);
    for (size_t i = 0; i < cpu.dw.size(); ++i) cpu.dw[i] -= dw0[i];
    std::vector<float> first_losses, first_dx;
    for (int64_t chunk : {16, 37, 100}) {
      SCOPED_TRACE(::testing::Message()
                   << (compute == DType::bf16 ? "bf16" : "f32") << " chunk " << chunk);
      cuda::LinearCrossEntropyShape s;
      s.rows = rows;
      s.d = d;
      s.V = V;
      s.chunk_rows = chunk;
      s.compute = compute;
      const size_t bytes = cuda::linear_cross_entropy_workspace_bytes(s);
      DeviceArray<char> work(bytes);
      DeviceArray<float> glosses(rows), gdx(rows * d), gdw(dw0), gfwd(rows);
      cuda::linear_cross_entropy(s, GemmInput(gx.get(), d), GemmInput(gw.get(), d), gt.get(), scale,
                                 glosses.get(), gdx.get(), gdw.get(), gemm_on_device, work.get(),
                                 bytes, stream);
      cuda::linear_cross_entropy(s, GemmInput(gx.get(), d), GemmInput(gw.get(), d), gt.get(), scale,
                                 gfwd.get(), nullptr, nullptr, gemm_on_device, work.get(), bytes,
                                 stream);
      sync();
      const auto losses = glosses.download(), dx = gdx.download();
      // dW's increment (dW starts from dw0, which would hide an error in the sum).
      std::vector<float> dw = gdw.download();
      for (size_t i = 0; i < dw.size(); ++i) dw[i] -= dw0[i];
      // The forward alone gives the same losses bit for bit.
      EXPECT_TRUE(all_near(gfwd.download(), losses, 0, 0));
      if (compute == DType::f32) {
        // fp32: GEMM sums of ≤ 301 terms in another order, 1e-5 relative in norm; losses as the
        // cross-entropy's.
        EXPECT_TRUE(all_near(losses, cpu.losses, 2e-5, 1e-5));
        EXPECT_LT(relative_error(dx, cpu.dx), 1e-5);
        EXPECT_LT(relative_error(dw, cpu.dw), 1e-5);
        // Rows do not depend on the chunk they fall in: losses and dx bit for bit.
        if (first_losses.empty()) {
          first_losses = losses;
          first_dx = dx;
        } else {
          EXPECT_TRUE(all_near(losses, first_losses, 0, 0));
          EXPECT_TRUE(all_near(dx, first_dx, 0, 0));
        }
      } else {
        // bf16 inputs to every GEMM (one bf16 rounding, 2^-9 relative, of each operand and of
        // dlogits): within 1% in norm of the CPU's bf16 head, losses within 1e-2.
        EXPECT_TRUE(all_near(losses, cpu.losses, 1e-2, 0));
        EXPECT_LT(relative_error(dx, cpu.dx), 1e-2);
        EXPECT_LT(relative_error(dw, cpu.dw), 1e-2);
      }
    }
  }
}

// A bf16 residual stream (issue 60): each kernel's bf16-x form on the device gives the bits of its
// fp32 form on the widened x (the same kernel, the same reduction order; dγ within 1e-6, below),
// and the fused residual adds those of the bf16 add followed by the unfused norm of the rounded
// sum.
TEST_F(CudaOnlineNorm, Bf16ResidualFormsAreTheFp32FormsOnTheWidenedResidual) {
  const float eps = 1e-5f;
  for (const RowShape& s :
       {RowShape{3, 7, 5}, RowShape{17, 100, 3}, RowShape{4, 1500, 11}, RowShape{300, 64, 2}}) {
    SCOPED_TRACE(::testing::Message() << s.rows << "x" << s.D << "+" << s.pad);
    const int64_t rows = s.rows, D = s.D, ld = s.D + s.pad;
    const std::vector<bf16_t> x16 = rounded(random_floats(rows * ld, 61));
    std::vector<float> xw(rows * ld);
    for (size_t i = 0; i < xw.size(); ++i) xw[i] = bf16_to_float(x16[i]);
    const auto gamma = random_floats(D, 62), dy = random_floats(rows * ld, 63),
               u = random_floats(rows * D, 64), g = random_floats(rows * D, 65),
               ds = random_floats(rows, 66), rstd_raw = random_floats(rows, 67);
    std::vector<float> rstd(rows);
    for (int64_t r = 0; r < rows; ++r) rstd[r] = 0.5f + std::fabs(rstd_raw[r]);
    DeviceArray<bf16_t> gx16(x16);
    DeviceArray<float> gxw(xw), ggamma(gamma), gdy(dy), gu(u), gg(g), gds(ds), grstd(rstd);
    auto same_at = [&](const auto& a, const auto& b, int line) {
      EXPECT_TRUE(a.download() == b.download()) << "line " << line;
    };
#define same(a, b) same_at(a, b, __LINE__)
    // RMSNorm's dγ column sums: the compiler may contract dy·x·rstd into an FMA differently in
    // the two instantiations (a few fp32 ulps over ≤ 300 rows), so within 1e-6.
    auto near = [&](const auto& a, const auto& b) {
      EXPECT_TRUE(all_near(a.download(), b.download(), 1e-6, 1e-6));
    };

    {  // whole rows: fp32 and bf16 outputs
      // The outputs' padding is not written: both start from the same zeros.
      const std::vector<float> zeros(rows * ld, 0.0f);
      const std::vector<bf16_t> zeros16(rows * ld, bf16_t{});
      DeviceArray<float> y(zeros), yw(zeros), r1(rows), r2(rows);
      cuda::rmsnorm_forward(gx16.get(), ld, ggamma.get(), rows, D, eps, y.get(), ld, r1.get(),
                            stream);
      cuda::rmsnorm_forward(gxw.get(), ld, ggamma.get(), rows, D, eps, yw.get(), ld, r2.get(),
                            stream);
      DeviceArray<bf16_t> b(zeros16), bw(zeros16);
      DeviceArray<float> r3(rows), r4(rows);
      cuda::rmsnorm_forward_bf16(gx16.get(), ld, ggamma.get(), rows, D, eps, b.get(), ld, r3.get(),
                                 stream);
      cuda::rmsnorm_forward_bf16(gxw.get(), ld, ggamma.get(), rows, D, eps, bw.get(), ld, r4.get(),
                                 stream);
      sync();
      same(y, yw);
      same(r1, r2);
      same(b, bw);
      same(r3, r4);
    }
    {  // backward, whole rows and split
      DeviceArray<char> work(std::max(cuda::rmsnorm_backward_workspace_bytes(rows, D),
                                      cuda::rmsnorm_backward_apply_workspace_bytes(rows, D)));
      const std::vector<float> half(rows * ld, 0.5f), quarter(D, 0.25f);
      DeviceArray<float> dx(half), dxw(half), dg(quarter), dgw(quarter), dot(rows), dotw(rows);
      DeviceArray<bf16_t> dx16(rows * D);  // the residual gradient's copy
      cuda::rmsnorm_backward(gdy.get(), ld, gx16.get(), ld, ggamma.get(), grstd.get(), rows, D,
                             dx.get(), ld, dg.get(), true, work.get(), work.size(), stream,
                             dx16.get());
      cuda::rmsnorm_backward(gdy.get(), ld, gxw.get(), ld, ggamma.get(), grstd.get(), rows, D,
                             dxw.get(), ld, dgw.get(), true, work.get(), work.size(), stream);
      cuda::rmsnorm_partial_backward_dot(gdy.get(), ld, gx16.get(), ld, ggamma.get(), rows, D,
                                         dot.get(), stream);
      cuda::rmsnorm_partial_backward_dot(gdy.get(), ld, gxw.get(), ld, ggamma.get(), rows, D,
                                         dotw.get(), stream);
      sync();
      same(dx, dxw);
      near(dg, dgw);
      same(dot, dotw);
      {
        const std::vector<float> got = dx.download();
        const std::vector<bf16_t> copy = dx16.download();
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < D; ++j)
            ASSERT_EQ(copy[r * D + j], float_to_bf16(got[r * ld + j])) << r << " " << j;
      }
      cuda::rmsnorm_backward_apply(gdy.get(), ld, gx16.get(), ld, ggamma.get(), grstd.get(),
                                   dot.get(), rows, D, 2 * D, dx.get(), ld, dg.get(), true,
                                   work.get(), work.size(), stream);
      cuda::rmsnorm_backward_apply(gdy.get(), ld, gxw.get(), ld, ggamma.get(), grstd.get(),
                                   dot.get(), rows, D, 2 * D, dxw.get(), ld, dgw.get(), true,
                                   work.get(), work.size(), stream);
      DeviceArray<float> ss(rows), ssw(rows), y(rows * D), yw(rows * D);
      cuda::rmsnorm_partial_sum_squares(gx16.get(), ld, rows, D, ss.get(), stream);
      cuda::rmsnorm_partial_sum_squares(gxw.get(), ld, rows, D, ssw.get(), stream);
      cuda::rmsnorm_apply(gx16.get(), ld, ggamma.get(), grstd.get(), rows, D, y.get(), D, stream);
      cuda::rmsnorm_apply(gxw.get(), ld, ggamma.get(), grstd.get(), rows, D, yw.get(), D, stream);
      sync();
      same(dx, dxw);
      near(dg, dgw);
      same(ss, ssw);
      same(y, yw);
    }
    // The contiguous kernels on the first rows·D values.
    const std::vector<bf16_t> c16(x16.begin(), x16.begin() + rows * D);
    std::vector<float> cw(rows * D), sum_w(rows * D);
    std::vector<bf16_t> want_sum(rows * D);
    for (int64_t i = 0; i < rows * D; ++i) {
      cw[i] = bf16_to_float(c16[i]);
      want_sum[i] = float_to_bf16(cw[i] + u[i]);
      sum_w[i] = bf16_to_float(want_sum[i]);
    }
    DeviceArray<bf16_t> gc16(c16);
    DeviceArray<float> gcw(cw), gsum_w(sum_w);
    {
      DeviceArray<float> ss(rows), ssw(rows);
      DeviceArray<bf16_t> out(rows * D), outw(rows * D);
      cuda::online_norm_input_bf16(gc16.get(), ggamma.get(), ss.get(), rows, D, eps, out.get(),
                                   stream);
      cuda::online_norm_input_bf16(gcw.get(), ggamma.get(), ssw.get(), rows, D, eps, outw.get(),
                                   stream);
      sync();
      same(out, outw);
      same(ss, ssw);
    }
    {
      DeviceArray<char> work(cuda::online_norm_input_backward_workspace_bytes(rows, D));
      const std::vector<float> half(rows * D, 0.5f);
      const std::vector<float> zeros(D, 0.0f);
      DeviceArray<float> dx(half), dxw(half), dg(zeros), dgw(zeros);
      DeviceArray<bf16_t> d16(rows * D), d16w(rows * D);
      cuda::online_norm_input_backward(gg.get(), gc16.get(), ggamma.get(), gds.get(), rows, D, 1.0f,
                                       dx.get(), dg.get(), work.get(), work.size(), stream,
                                       d16.get());
      cuda::online_norm_input_backward(gg.get(), gcw.get(), ggamma.get(), gds.get(), rows, D, 1.0f,
                                       dxw.get(), dgw.get(), work.get(), work.size(), stream,
                                       d16w.get());
      sync();
      same(dx, dxw);
      same(dg, dgw);
      same(d16, d16w);
      // g in bf16 (btp's latent GEMM writes it so): the fp32-g form on the widened g.
      std::vector<bf16_t> g16(rows * D);
      std::vector<float> gw(rows * D);
      for (int64_t i = 0; i < rows * D; ++i) {
        g16[i] = float_to_bf16(g[i]);
        gw[i] = bf16_to_float(g16[i]);
      }
      DeviceArray<bf16_t> gg16(g16), e16(rows * D), e16w(rows * D);
      DeviceArray<float> ggw(gw), ex(half), exw(half), eg(zeros), egw(zeros);
      cuda::online_norm_input_backward(gg16.get(), gc16.get(), ggamma.get(), gds.get(), rows, D,
                                       1.0f, ex.get(), eg.get(), work.get(), work.size(), stream,
                                       e16.get());
      cuda::online_norm_input_backward(ggw.get(), gc16.get(), ggamma.get(), gds.get(), rows, D,
                                       1.0f, exw.get(), egw.get(), work.get(), work.size(), stream,
                                       e16w.get());
      sync();
      same(ex, exw);
      near(eg, egw);
      same(e16, e16w);
    }
    {  // add onto a bf16 residual, and the fused adds
      DeviceArray<bf16_t> sum(rows * D), fsum(rows * D), fsum2(rows * D), y(rows * D), yw(rows * D),
          out(rows * D), outw(rows * D);
      DeviceArray<float> r1(rows), r2(rows), ss(rows), ssw(rows);
      cuda::add(gc16.get(), gu.get(), sum.get(), rows * D, stream);
      cuda::residual_rmsnorm_forward_bf16(gc16.get(), gu.get(), fsum.get(), ggamma.get(), rows, D,
                                          eps, y.get(), r1.get(), stream);
      cuda::rmsnorm_forward_bf16(gsum_w.get(), D, ggamma.get(), rows, D, eps, yw.get(), D, r2.get(),
                                 stream);
      cuda::residual_online_norm_input_bf16(gc16.get(), gu.get(), fsum2.get(), ggamma.get(),
                                            ss.get(), rows, D, eps, out.get(), stream);
      cuda::online_norm_input_bf16(gsum_w.get(), ggamma.get(), ssw.get(), rows, D, eps, outw.get(),
                                   stream);
      sync();
      EXPECT_TRUE(sum.download() == want_sum);
      EXPECT_TRUE(fsum.download() == want_sum);
      EXPECT_TRUE(fsum2.download() == want_sum);
      same(y, yw);
      same(r1, r2);
      same(out, outw);
      same(ss, ssw);
    }
  }
#undef same
}

}  // namespace
}  // namespace boostlm
