#include <gtest/gtest.h>

#include <array>
#include <cmath>

#include "core/dtype.h"
#include "kernels/gemm.h"
#include "kernels/gemm_counters.h"
#include "kernels/grad_check.h"

namespace boostlm {
namespace {

using test_support::random_vector;

// Reference C = alpha·op(A)·op(B) + beta·C in double; `round` rounds inputs to bf16 first.
void reference_gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
                    const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                    int64_t ldc, bool round) {
  auto in = [&](float x) { return round ? bf16_to_float(float_to_bf16(x)) : x; };
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) {
        const float a = ta == Trans::N ? A[i * lda + k] : A[k * lda + i];
        const float b = tb == Trans::N ? B[k * ldb + j] : B[j * ldb + k];
        s += static_cast<double>(in(a)) * in(b);
      }
      C[i * ldc + j] = static_cast<float>(alpha * s + beta * C[i * ldc + j]);
    }
}

struct GemmCase {
  Trans ta, tb;
  float alpha, beta;
  int64_t K = 53;
};

class GemmTest : public ::testing::TestWithParam<std::tuple<GemmCase, DType>> {};

TEST_P(GemmTest, MatchesReferenceWithStridesAndScales) {
  const auto [c, dtype] = GetParam();
  const int64_t M = 37, N = 29, K = c.K;
  // Leading dimensions larger than the logical width, to exercise strides.
  const int64_t lda = (c.ta == Trans::N ? K : M) + 3, ldb = (c.tb == Trans::N ? N : K) + 5,
                ldc = N + 2;
  auto A = random_vector((c.ta == Trans::N ? M : K) * lda, 1);
  auto B = random_vector((c.tb == Trans::N ? K : N) * ldb, 2);
  auto C = random_vector(M * ldc, 3);
  auto expected = C;
  const float padding = C[N];  // column N of row 0 lies outside the logical matrix
  gemm(c.ta, c.tb, M, N, K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, C.data(), ldc, dtype);
  reference_gemm(c.ta, c.tb, M, N, K, c.alpha, A.data(), lda, B.data(), ldb, c.beta,
                 expected.data(), ldc, dtype == DType::bf16);
  // fp32: summation-order differences over K terms of size ~1 stay below 1e-4.
  // bf16: inputs are rounded identically in the reference; only fp32 accumulation order differs.
  const float tol = 1e-4f * std::sqrt(static_cast<float>(K));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      ASSERT_NEAR(C[i * ldc + j], expected[i * ldc + j], tol) << i << "," << j;
  // The padding columns of C must be untouched.
  EXPECT_EQ(C[N], padding);
}

INSTANTIATE_TEST_SUITE_P(
    AllTransposes, GemmTest,
    ::testing::Combine(::testing::Values(GemmCase{Trans::N, Trans::N, 1.0f, 0.0f},
                                         GemmCase{Trans::N, Trans::T, 1.0f, 1.0f},
                                         GemmCase{Trans::T, Trans::N, 0.5f, 1.0f},
                                         GemmCase{Trans::T, Trans::T, 2.0f, 0.0f}),
                       ::testing::Values(DType::f32, DType::bf16)));

// fp32 X·Wᵀ with K >= 256 runs on the matmul primitive instead of sgemm (gemm.cpp): the same
// strides, scales and accumulation there.
INSTANTIATE_TEST_SUITE_P(
    LongReduction, GemmTest,
    ::testing::Combine(::testing::Values(GemmCase{Trans::N, Trans::T, 0.5f, 1.0f, 300},
                                         GemmCase{Trans::N, Trans::T, 1.0f, 0.0f, 256},
                                         GemmCase{Trans::N, Trans::N, 1.0f, 1.0f, 300}),
                       ::testing::Values(DType::f32, DType::bf16)));

TEST(Gemm, CountsCallsAndFlops) {
  auto A = random_vector(4 * 6, 1), B = random_vector(6 * 5, 2);
  std::vector<float> C(4 * 5);
  const GemmCounters before = gemm_counters();
  gemm(Trans::N, Trans::N, 4, 5, 6, 1.0f, A.data(), 6, B.data(), 5, 0.0f, C.data(), 5, DType::f32);
  gemm(Trans::N, Trans::N, 4, 5, 6, 1.0f, A.data(), 6, B.data(), 5, 0.0f, C.data(), 5, DType::bf16);
  EXPECT_EQ(gemm_counters().calls - before.calls, 2);
  EXPECT_DOUBLE_EQ(gemm_counters().flops - before.flops, 2 * 2.0 * 4 * 5 * 6);
}

// A strided batch against a loop of single GEMMs over the same members, laid out as the layouts
// use it: A members are column blocks of one buffer (offset, the buffer's row stride), B members
// separate matrices in one flat buffer (padding between them), C members column blocks again.
class GemmBatchedTest
    : public ::testing::TestWithParam<std::tuple<GemmCase, DType, bool /*prerounded*/>> {};

TEST_P(GemmBatchedTest, MatchesALoopOfGemms) {
  const auto [c, dtype, prerounded] = GetParam();
  const int64_t count = 3, M = 37, N = 29, K = 53;
  const int64_t a_rows = c.ta == Trans::N ? M : K, a_cols = c.ta == Trans::N ? K : M;
  const int64_t b_rows = c.tb == Trans::N ? K : N, b_cols = c.tb == Trans::N ? N : K;
  const int64_t lda = count * a_cols + 4, a_offset = 2;  // column blocks from column 2
  const int64_t ldb = b_cols + 5, b_stride = b_rows * ldb + 7;
  const int64_t ldc = count * N + 1;
  auto A = random_vector(a_rows * lda, 1), B = random_vector(count * b_stride, 2);
  auto C = random_vector(M * ldc, 3);
  std::vector<bf16_t> A16(A.size()), B16(B.size());
  round_to_bf16(A.data(), 1, A.size(), A.size(), A16.data());
  round_to_bf16(B.data(), 1, B.size(), B.size(), B16.data());
  const bool copies = prerounded && dtype == DType::bf16;
  const GemmInput a(A.data() + a_offset, copies ? A16.data() + a_offset : nullptr, lda);
  const GemmInput b(B.data(), copies ? B16.data() : nullptr, ldb);
  auto expected = C;
  for (int64_t i = 0; i < count; ++i)
    gemm(c.ta, c.tb, M, N, K, c.alpha,
         GemmInput(a.f32 + i * a_cols, a.bf16 ? a.bf16 + i * a_cols : nullptr, lda),
         GemmInput(b.f32 + i * b_stride, b.bf16 ? b.bf16 + i * b_stride : nullptr, ldb), c.beta,
         expected.data() + i * N, ldc, dtype);

  const GemmCounters before = gemm_counters();
  gemm_clear_recorded_shapes();
  gemm_record_shapes(true);
  gemm_batched(c.ta, c.tb, M, N, K, c.alpha, a, b, c.beta, C.data(), ldc,
               {count, a_cols, b_stride, N}, dtype);
  gemm_record_shapes(false);
  // The same inputs (rounded identically in bf16) and fp32 accumulation: only the summation
  // order of the K = 53 products of size ~1 may differ between the two oneDNN kernels.
  const float tol = 2e-5f * std::sqrt(static_cast<float>(K));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < ldc; ++j)  // the column past the last member must be untouched
      ASSERT_NEAR(C[i * ldc + j], expected[i * ldc + j], tol) << i << "," << j;
  // Counted as one call, and as `count` GEMMs of the member shape in FLOPs and recorded shapes.
  EXPECT_EQ(gemm_counters().calls - before.calls, 1);
  EXPECT_DOUBLE_EQ(gemm_counters().flops - before.flops, count * 2.0 * M * N * K);
  ASSERT_EQ(gemm_recorded_shapes().size(), static_cast<size_t>(count));
  for (const GemmShape& shape : gemm_recorded_shapes()) {
    EXPECT_EQ(std::tuple(shape.M, shape.N, shape.K), std::tuple(M, N, K));
    EXPECT_EQ(shape.trans_a, c.ta);
    EXPECT_EQ(shape.trans_b, c.tb);
  }
  gemm_clear_recorded_shapes();
}

INSTANTIATE_TEST_SUITE_P(
    AllTransposes, GemmBatchedTest,
    ::testing::Combine(::testing::Values(GemmCase{Trans::N, Trans::N, 1.0f, 0.0f},
                                         GemmCase{Trans::N, Trans::T, 1.0f, 0.0f},
                                         GemmCase{Trans::T, Trans::N, 1.0f, 1.0f},
                                         GemmCase{Trans::T, Trans::T, 0.5f, 1.0f}),
                       ::testing::Values(DType::f32, DType::bf16), ::testing::Bool()));

// A bf16 output is the fp32 output rounded, and leaves the padding between rows and members
// alone: on oneDNN's bf16 matmul (its bf16 destination) and on the widened fallback (under
// ONEDNN_MAX_CPU_ISA=AVX2, the avx2.* and bf16_without_avx512_matmul runs). Bit for bit on Zen 5
// (AVX512-BF16) and on the fallback (the same fp32 GEMM, then rounded); held to one bf16 step, as
// another ISA's oneDNN kernel for a bf16 destination may sum in another order.
TEST(GemmBf16Out, IsTheFp32OutputRounded) {
  for (const GemmCase& c :
       {GemmCase{Trans::N, Trans::N, 1.0f, 0.0f}, GemmCase{Trans::N, Trans::T, 1.0f, 0.0f},
        GemmCase{Trans::T, Trans::N, 1.0f, 0.0f}, GemmCase{Trans::T, Trans::T, 0.5f, 0.0f}})
    for (const bool prerounded : {false, true})
      for (const auto& [M, N, K] : {std::array<int64_t, 3>{37, 29, 53}, {300, 700, 128}}) {
        SCOPED_TRACE(::testing::Message()
                     << "ta " << (c.ta == Trans::T) << " tb " << (c.tb == Trans::T)
                     << " prerounded " << prerounded << " " << M << "x" << N << "x" << K);
        const int64_t count = 3;
        const int64_t a_rows = c.ta == Trans::N ? M : K, a_cols = c.ta == Trans::N ? K : M;
        const int64_t b_rows = c.tb == Trans::N ? K : N, b_cols = c.tb == Trans::N ? N : K;
        const int64_t lda = count * a_cols + 4, ldb = b_cols + 5, b_stride = b_rows * ldb + 7;
        const int64_t ldc = count * N + 1;
        auto A = random_vector(a_rows * lda, 1), B = random_vector(count * b_stride, 2);
        std::vector<bf16_t> A16(A.size()), B16(B.size());
        round_to_bf16(A.data(), 1, A.size(), A.size(), A16.data());
        round_to_bf16(B.data(), 1, B.size(), B.size(), B16.data());
        const GemmInput a(A.data(), prerounded ? A16.data() : nullptr, lda);
        const GemmInput b(B.data(), prerounded ? B16.data() : nullptr, ldb);
        for (const int64_t members : {int64_t{1}, count}) {
          const GemmBatch batch{members, a_cols, b_stride, N};
          std::vector<float> C(M * ldc, 0.0f);
          gemm_batched(c.ta, c.tb, M, N, K, c.alpha, a, b, 0.0f, C.data(), ldc, batch, DType::bf16);
          std::vector<bf16_t> expected(M * N);  // one member's, rounded contiguous
          std::vector<bf16_t> C16(C.size(), 0x1234);
          const int64_t calls = gemm_counters().calls;
          gemm_batched_bf16_out(c.ta, c.tb, M, N, K, c.alpha, a, b, C16.data(), ldc, batch);
          EXPECT_EQ(gemm_counters().calls, calls + 1);
          for (int64_t m = 0; m < members; ++m) {
            round_to_bf16(C.data() + m * N, M, N, ldc, expected.data());
            for (int64_t i = 0; i < M; ++i)
              for (int64_t j = 0; j < N; ++j)
                ASSERT_LE(std::abs(bf16_to_float(C16[i * ldc + m * N + j]) -
                                   bf16_to_float(expected[i * N + j])),
                          std::ldexp(std::abs(bf16_to_float(expected[i * N + j])), -7))
                    << "member " << m << " of " << members << " at " << i << "," << j;
          }
          for (int64_t i = 0; i < M; ++i)  // the columns past the last member: untouched
            for (int64_t j = members * N; j < ldc; ++j) ASSERT_EQ(C16[i * ldc + j], 0x1234);
        }
      }
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 lies exactly between two bf16 values; ties go to the even mantissa (1.0).
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  EXPECT_EQ(bf16_to_float(float_to_bf16(-2.5f)), -2.5f);
}

}  // namespace
}  // namespace boostlm
