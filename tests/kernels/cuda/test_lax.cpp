// LaX's latent kernels on the device (kernels/cuda/lax.cu) against the CPU backend's
// (kernels/cpu/lax.cpp) on random inputs: whole rows and rows split over ranks (r_local < r_total,
// the stats of column pieces summed as naive-tp's all-reduce sums them), row strides wider than the
// row with the padding left untouched, z written over s and ds over dz, and every entry run twice
// giving the same bits. They skip, with the reason, where no GPU is visible.
//
// Tolerances. Both backends sum the row and column sums in double and round once to fp32; only
// the order of the double additions differs (CUB's tree, row chunks), so a sum is the CPU's or
// its fp32 neighbour: 2.5e-7 relative (2^-22), plus 1e-12 absolute for a sum that cancels to ~0.
// The Kronecker factors' gradients are math.h's sums in the CPU's order. Everything else is one
// formula of math.h per element on the same inputs. On the emulated device the host compiler
// builds math.h's functions for both backends alike: all of that is then exact. nvcc may fuse a
// multiply-add (x̂·w + b, the terms of ds, of the variance, of the double sums) where the host
// compiler does not: on a GPU those compare within kFusedAtol/kFusedRtol (an fp32 ulp or two).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/kernels.h"

namespace boostlm {
namespace {

using cuda::testing::all_near;
using cuda::testing::DeviceArray;
using cuda::testing::DeviceTest;
using cuda::testing::random_floats;

using CudaLaxNorm = DeviceTest;
using CudaKron = DeviceTest;

#ifdef BOOSTLM_CUDA_EMULATOR
constexpr double kFusedAtol = 0, kFusedRtol = 0;  // exact: the host compiler's math.h both sides
#else
// A fused multiply-add rounds once where the unfused form rounds twice: an fp32 ulp or two of the
// larger term (x̂·w, dz·w with x̂, w, dz of a few units: ~1e-6 absolute), or of a double sum's
// fp32 rounding (2^-23 relative).
constexpr double kFusedAtol = 2e-6, kFusedRtol = 1e-6;
#endif
constexpr double kSumRtol = 2.5e-7, kSumAtol = 1e-12;
constexpr float kEps = 1e-6f;
constexpr float kUntouched = -7.0f;  // what the padding and unwritten columns hold

struct LaxShape {
  int64_t rows, r_local, pad, r_total;  // r_total > r_local: this rank's share of a split row
};
// One column; odd widths; padded strides; a row kernel of 128 and of 256 threads; more rows than
// one chunk of the column sums (32) and many chunks; split rows.
const LaxShape kShapes[] = {{1, 1, 0, 1},     {3, 7, 5, 7},     {17, 12, 3, 12},  {40, 64, 1, 64},
                            {5, 513, 2, 513}, {70, 16, 9, 16},  {300, 24, 4, 24}, {9, 8, 3, 24},
                            {65, 6, 0, 12},   {33, 100, 7, 201}};

// A [rows, ld] array whose first r_local columns are random and whose padding holds kUntouched.
std::vector<float> padded_random(const LaxShape& s, uint64_t seed, float scale = 1.0f,
                                 float shift = 0.0f) {
  const int64_t ld = s.r_local + s.pad;
  const auto values = random_floats(s.rows * ld, seed, scale);
  std::vector<float> out(s.rows * ld, kUntouched);
  for (int64_t r = 0; r < s.rows; ++r)
    for (int64_t j = 0; j < s.r_local; ++j) out[r * ld + j] = values[r * ld + j] + shift;
  return out;
}

// The stats or sums of a split row, as the all-reduce leaves them: this rank's partial sums plus
// random ones for the other ranks' columns (made consistent: Σs² ≥ (Σs)²/r_total is not needed by
// the kernels, which clamp the variance at 0, but keeps the rows' norms meaningful).
std::vector<float> with_other_ranks(std::vector<float> partial, const LaxShape& s, uint64_t seed) {
  if (s.r_total == s.r_local) return partial;
  const auto other = random_floats(2 * s.rows, seed);
  const double others = static_cast<double>(s.r_total - s.r_local);
  for (int64_t r = 0; r < s.rows; ++r) {
    partial[2 * r] += static_cast<float>(other[2 * r] * others * 0.1);
    partial[2 * r + 1] += static_cast<float>(others * (1.0 + 0.5 * std::abs(other[2 * r + 1])));
  }
  return partial;
}

TEST_F(CudaLaxNorm, PartialSumsMatchTheCpuBackend) {
  for (const LaxShape& s : kShapes) {
    SCOPED_TRACE(::testing::Message() << s.rows << "x" << s.r_local << "+" << s.pad);
    const int64_t ld = s.r_local + s.pad;
    const auto x = padded_random(s, 1, 2.0f, 0.7f), dz = padded_random(s, 2),
               xhat = padded_random(s, 3), weight = random_floats(s.r_local, 4);
    DeviceArray<float> gx(x), gdz(dz), gxhat(xhat), gweight(weight);

    std::vector<float> stats(2 * s.rows);
    cpu::lax_norm_partial_stats(x.data(), ld, s.rows, s.r_local, stats.data());
    DeviceArray<float> gstats(2 * s.rows);
    cuda::lax_norm_partial_stats(gx.get(), ld, s.rows, s.r_local, gstats.get(), stream);

    std::vector<float> sums(2 * s.rows);
    cpu::lax_norm_partial_backward(dz.data(), ld, xhat.data(), ld, s.rows, s.r_local, weight.data(),
                                   sums.data());
    DeviceArray<float> gsums(2 * s.rows);
    cuda::lax_norm_partial_backward(gdz.get(), ld, gxhat.get(), ld, s.rows, s.r_local,
                                    gweight.get(), gsums.get(), stream);
    sync();
    EXPECT_TRUE(all_near(gstats.download(), stats, kSumAtol, kSumRtol));
    EXPECT_TRUE(all_near(gsums.download(), sums, kSumAtol, kSumRtol));
  }
}

// A row cut in two column pieces (two ranks' shares, one of them strided from the row's start):
// the pieces' stats added equal the whole row's, as naive-tp's all-reduce adds them.
TEST_F(CudaLaxNorm, SplitStatsAddUpToTheWholeRow) {
  const int64_t rows = 21, r = 40, ld = 45;
  for (int64_t cut : {int64_t{1}, int64_t{13}, int64_t{20}, int64_t{39}}) {
    SCOPED_TRACE(cut);
    const auto x = random_floats(rows * ld, 11, 1.5f);
    DeviceArray<float> gx(x), left(2 * rows), right(2 * rows), whole(2 * rows);
    cuda::lax_norm_partial_stats(gx.get(), ld, rows, cut, left.get(), stream);
    cuda::lax_norm_partial_stats(gx.get() + cut, ld, rows, r - cut, right.get(), stream);
    cuda::lax_norm_partial_stats(gx.get(), ld, rows, r, whole.get(), stream);
    sync();
    const auto a = left.download(), b = right.download();
    std::vector<float> added(2 * rows);
    for (int64_t i = 0; i < 2 * rows; ++i) added[i] = a[i] + b[i];
    // Two fp32 roundings of the pieces and one of their sum, against one rounding of the whole:
    // a few fp32 ulps of the larger piece (|Σs| and Σs² here are O(10..100)).
    EXPECT_TRUE(all_near(added, whole.download(), 1e-5, 1e-6));
  }
}

TEST_F(CudaLaxNorm, ForwardAndApplyMatchTheCpuBackend) {
  for (const LaxShape& s : kShapes) {
    SCOPED_TRACE(::testing::Message()
                 << s.rows << "x" << s.r_local << "+" << s.pad << " of " << s.r_total);
    const int64_t ld = s.r_local + s.pad;
    const auto x = padded_random(s, 21, 2.0f, 0.7f), weight = random_floats(s.r_local, 22),
               bias = random_floats(s.r_local, 23);
    std::vector<float> stats(2 * s.rows);
    cpu::lax_norm_partial_stats(x.data(), ld, s.rows, s.r_local, stats.data());
    stats = with_other_ranks(stats, s, 24);
    const std::vector<float> blank(s.rows * ld, kUntouched);

    // Into separate z and x̂; the CPU's from the same stats.
    std::vector<float> z = blank, xhat = blank, rstd(s.rows);
    cpu::lax_norm_forward(x.data(), ld, stats.data(), s.rows, s.r_local, s.r_total, weight.data(),
                          bias.data(), kEps, z.data(), ld, xhat.data(), ld, rstd.data());
    DeviceArray<float> gx(x), gstats(stats), gweight(weight), gbias(bias), gz(blank), gxhat(blank),
        grstd(s.rows);
    cuda::lax_norm_forward(gx.get(), ld, gstats.get(), s.rows, s.r_local, s.r_total, gweight.get(),
                           gbias.get(), kEps, gz.get(), ld, gxhat.get(), ld, grstd.get(), stream);
    sync();
    // rstd and x̂ in double arithmetic and IEEE sqrt (var = Σs²/r − mean² may fuse on a GPU).
    EXPECT_TRUE(all_near(grstd.download(), rstd, kFusedAtol, kFusedRtol));
    EXPECT_TRUE(all_near(gxhat.download(), xhat, kFusedAtol, kFusedRtol));
    EXPECT_TRUE(
        all_near(gz.download(), z, kFusedAtol, kFusedRtol));  // padding untouched: both blank

    // z over s (the engine's call).
    std::vector<float> in_place = x, xhat2 = blank, rstd2(s.rows);
    cpu::lax_norm_forward(in_place.data(), ld, stats.data(), s.rows, s.r_local, s.r_total,
                          weight.data(), bias.data(), kEps, in_place.data(), ld, xhat2.data(), ld,
                          rstd2.data());
    DeviceArray<float> gin_place(x), gxhat2(blank), grstd2(s.rows);
    cuda::lax_norm_forward(gin_place.get(), ld, gstats.get(), s.rows, s.r_local, s.r_total,
                           gweight.get(), gbias.get(), kEps, gin_place.get(), ld, gxhat2.get(), ld,
                           grstd2.get(), stream);
    sync();
    EXPECT_TRUE(all_near(gin_place.download(), in_place, kFusedAtol, kFusedRtol));
    EXPECT_TRUE(all_near(gxhat2.download(), xhat2, kFusedAtol, kFusedRtol));

    // z again from the kept x̂, into a wider-strided output.
    const int64_t ldz = ld + 5;
    std::vector<float> applied(s.rows * ldz, kUntouched);
    cpu::lax_norm_apply(xhat.data(), ld, s.rows, s.r_local, weight.data(), bias.data(),
                        applied.data(), ldz);
    DeviceArray<float> gapplied(std::vector<float>(s.rows * ldz, kUntouched));
    cuda::lax_norm_apply(gxhat.get(), ld, s.rows, s.r_local, gweight.get(), gbias.get(),
                         gapplied.get(), ldz, stream);
    sync();
    EXPECT_TRUE(all_near(gapplied.download(), applied, kFusedAtol, kFusedRtol));
  }
}

TEST_F(CudaLaxNorm, BackwardMatchesTheCpuBackend) {
  for (const LaxShape& s : kShapes) {
    SCOPED_TRACE(::testing::Message()
                 << s.rows << "x" << s.r_local << "+" << s.pad << " of " << s.r_total);
    const int64_t ld = s.r_local + s.pad;
    const auto dz = padded_random(s, 31), xhat = padded_random(s, 32),
               weight = random_floats(s.r_local, 33), rstd = random_floats(s.rows, 34, 0.5f),
               dweight0 = random_floats(s.r_local, 35), dbias0 = random_floats(s.r_local, 36);
    std::vector<float> sums(2 * s.rows);
    cpu::lax_norm_partial_backward(dz.data(), ld, xhat.data(), ld, s.rows, s.r_local, weight.data(),
                                   sums.data());
    sums = with_other_ranks(sums, s, 37);
    const std::vector<float> blank(s.rows * ld, kUntouched);
    DeviceArray<float> gdz(dz), gxhat(xhat), gweight(weight), grstd(rstd), gsums(sums);
    const size_t bytes = cuda::lax_norm_backward_workspace_bytes(s.rows, s.r_local);
    DeviceArray<char> work(bytes);

    for (bool in_place : {false, true}) {
      SCOPED_TRACE(in_place ? "ds over dz" : "ds apart");
      std::vector<float> ds = in_place ? dz : blank, dweight = dweight0, dbias = dbias0;
      cpu::lax_norm_backward(in_place ? ds.data() : dz.data(), ld, xhat.data(), ld, rstd.data(),
                             sums.data(), s.rows, s.r_local, s.r_total, weight.data(), ds.data(),
                             ld, dweight.data(), dbias.data());
      DeviceArray<float> gds(in_place ? dz : blank), gdweight(dweight0), gdbias(dbias0);
      cuda::lax_norm_backward(in_place ? gds.get() : gdz.get(), ld, gxhat.get(), ld, grstd.get(),
                              gsums.get(), s.rows, s.r_local, s.r_total, gweight.get(), gds.get(),
                              ld, gdweight.get(), gdbias.get(), work.get(), bytes, stream);
      sync();
      EXPECT_TRUE(all_near(gds.download(), ds, kFusedAtol, kFusedRtol));
      // dw, db accumulated: a double column sum in row chunks vs the CPU's in one run, rounded to
      // fp32 and added to the initial values: one fp32 ulp of the sum, 300 rows of O(1) terms.
      EXPECT_TRUE(all_near(gdweight.download(), dweight, 1e-5, kSumRtol));
      EXPECT_TRUE(all_near(gdbias.download(), dbias, 1e-5, kSumRtol));
    }
  }
}

TEST_F(CudaKron, ExpandAndFactorGradientsMatchTheCpuBackend) {
  const std::pair<int64_t, int64_t> factors[] = {{1, 1}, {1, 5}, {2, 3}, {3, 4}, {4, 4}, {8, 16}};
  for (const auto& [p, q] : factors) {
    SCOPED_TRACE(::testing::Message() << p << "x" << q);
    const int64_t r = p * q;
    const auto pf = random_floats(p * p, 41), qf = random_floats(q * q, 42),
               dk = random_floats(r * r, 43), dp0 = random_floats(p * p, 44),
               dq0 = random_floats(q * q, 45);
    std::vector<float> k(r * r);
    cpu::kron_expand(pf.data(), p, qf.data(), q, k.data());
    DeviceArray<float> gp(pf), gq(qf), gk(r * r), gdk(dk), gdp(dp0), gdq(dq0);
    cuda::kron_expand(gp.get(), p, gq.get(), q, gk.get(), stream);
    std::vector<float> dp = dp0, dq = dq0;
    cpu::kron_factor_backward(dk.data(), pf.data(), p, qf.data(), q, dp.data(), dq.data());
    cuda::kron_factor_backward(gdk.get(), gp.get(), p, gq.get(), q, gdp.get(), gdq.get(), stream);
    sync();
    EXPECT_TRUE(all_near(gk.download(), k, 0, 0));  // one product each
    // The same double sums in the same order (math.h), up to nvcc's fused multiply-adds.
    EXPECT_TRUE(all_near(gdp.download(), dp, kFusedAtol, kFusedRtol));
    EXPECT_TRUE(all_near(gdq.download(), dq, kFusedAtol, kFusedRtol));
  }
}

// Every entry twice on the same inputs: the same bits (no atomics, fixed reduction trees), dw, db,
// dP and dQ accumulated from the same initial values each time.
TEST_F(CudaLaxNorm, EveryEntryIsDeterministic) {
  const LaxShape s{300, 24, 4, 53};
  const int64_t ld = s.r_local + s.pad, p = 4, q = 6, r = p * q;
  const auto x = padded_random(s, 51, 2.0f, 0.3f), dz = padded_random(s, 52),
             weight = random_floats(s.r_local, 53), bias = random_floats(s.r_local, 54),
             init = random_floats(s.r_local, 55), pf = random_floats(p * p, 56),
             qf = random_floats(q * q, 57), dk = random_floats(r * r, 58),
             dp0 = random_floats(p * p, 59), dq0 = random_floats(q * q, 60);
  DeviceArray<float> gx(x), gdz(dz), gweight(weight), gbias(bias), gpf(pf), gqf(qf), gdk(dk);
  const size_t bytes = cuda::lax_norm_backward_workspace_bytes(s.rows, s.r_local);
  DeviceArray<char> work(bytes);
  auto run = [&] {
    const std::vector<float> blank(s.rows * ld, kUntouched);
    DeviceArray<float> stats(2 * s.rows), z(blank), xhat(blank), rstd(s.rows), z2(blank),
        sums(2 * s.rows), ds(blank), dweight(init), dbias(init), k(r * r), dp(dp0), dq(dq0);
    cuda::lax_norm_partial_stats(gx.get(), ld, s.rows, s.r_local, stats.get(), stream);
    cuda::lax_norm_forward(gx.get(), ld, stats.get(), s.rows, s.r_local, s.r_total, gweight.get(),
                           gbias.get(), kEps, z.get(), ld, xhat.get(), ld, rstd.get(), stream);
    cuda::lax_norm_apply(xhat.get(), ld, s.rows, s.r_local, gweight.get(), gbias.get(), z2.get(),
                         ld, stream);
    cuda::lax_norm_partial_backward(gdz.get(), ld, xhat.get(), ld, s.rows, s.r_local, gweight.get(),
                                    sums.get(), stream);
    cuda::lax_norm_backward(gdz.get(), ld, xhat.get(), ld, rstd.get(), sums.get(), s.rows,
                            s.r_local, s.r_total, gweight.get(), ds.get(), ld, dweight.get(),
                            dbias.get(), work.get(), bytes, stream);
    cuda::kron_expand(gpf.get(), p, gqf.get(), q, k.get(), stream);
    cuda::kron_factor_backward(gdk.get(), gpf.get(), p, gqf.get(), q, dp.get(), dq.get(), stream);
    sync();
    return std::vector<std::vector<float>>{stats.download(), z.download(),       xhat.download(),
                                           rstd.download(),  z2.download(),      sums.download(),
                                           ds.download(),    dweight.download(), dbias.download(),
                                           k.download(),     dp.download(),      dq.download()};
  };
  const auto first = run(), second = run();
  ASSERT_EQ(first.size(), second.size());
  for (size_t i = 0; i < first.size(); ++i) {
    SCOPED_TRACE(i);
    ASSERT_EQ(first[i].size(), second[i].size());
    // Bit for bit (memcmp: NaN would compare unequal to itself with ==, and must not appear).
    EXPECT_EQ(0, std::memcmp(first[i].data(), second[i].data(), first[i].size() * sizeof(float)));
    EXPECT_TRUE(std::all_of(first[i].begin(), first[i].end(), [](float v) { return v == v; }));
  }
}

}  // namespace
}  // namespace boostlm
