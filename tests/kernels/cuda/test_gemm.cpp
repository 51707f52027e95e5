// The cuBLASLt GEMMs. On the host: the row-major to column-major mapping (checked by running the
// mapped problem through a plain column-major reference and comparing with the row-major product,
// exactly), the plan key (every field distinguishes), the plan cache's hits and misses, pointer
// alignment, the workspace size and the error text. On a GPU: every transpose pair, ragged shapes,
// padded strides, alpha/beta, batches, bf16 copies or not, fp32/TF32/bf16, against the CPU backend.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/device_allocator.h"
#include "kernels/cuda/event_timer.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_measure.h"
#include "kernels/cuda/gemm_plan.h"
#include "kernels/gemm.h"
#include "kernels/gemm_counters.h"

namespace boostlm {
namespace {

using cuda::column_major_problem;
using cuda::GemmKey;
using cuda::GemmKeyHash;
using cuda::GemmPrecision;
using cuda::LtProblem;
using cuda::PlanCache;
using cuda::testing::all_near;
using cuda::testing::DeviceArray;
using cuda::testing::DeviceTest;
using cuda::testing::random_floats;
using cuda::testing::rounded;

// A row-major call: shape, transposes, padded row strides, a batch.
struct Call {
  Trans ta, tb;
  int64_t M, N, K;
  int64_t pad_a, pad_b, pad_c;
  GemmBatch batch;
  // The stored operands' row-major shapes and row strides.
  int64_t a_rows() const { return ta == Trans::N ? M : K; }
  int64_t a_cols() const { return ta == Trans::N ? K : M; }
  int64_t b_rows() const { return tb == Trans::N ? K : N; }
  int64_t b_cols() const { return tb == Trans::N ? N : K; }
  int64_t lda() const { return a_cols() + pad_a; }
  int64_t ldb() const { return b_cols() + pad_b; }
  int64_t ldc() const { return N + pad_c; }
  // Elements each operand spans over the batch (members at their strides).
  int64_t a_span() const { return (batch.count - 1) * batch.stride_a + a_rows() * lda(); }
  int64_t b_span() const { return (batch.count - 1) * batch.stride_b + b_rows() * ldb(); }
  int64_t c_span() const { return (batch.count - 1) * batch.stride_c + M * ldc(); }
};

// A batch of `count` members, each operand's members packed back to back (plus a gap).
Call batched(Call c, int64_t count, int64_t gap) {
  c.batch.count = count;
  c.batch.stride_a = c.a_rows() * c.lda() + gap;
  c.batch.stride_b = c.b_rows() * c.ldb() + gap;
  c.batch.stride_c = c.M * c.ldc() + gap;
  return c;
}

std::vector<Call> calls() {
  std::vector<Call> out;
  for (Trans ta : {Trans::N, Trans::T})
    for (Trans tb : {Trans::N, Trans::T}) {
      out.push_back({ta, tb, 1, 1, 1, 0, 0, 0, {}});
      out.push_back({ta, tb, 17, 33, 65, 3, 0, 5, {}});
      out.push_back({ta, tb, 64, 96, 128, 0, 0, 0, {}});
      out.push_back({ta, tb, 5, 300, 7, 1, 2, 3, {}});
      out.push_back({ta, tb, 130, 8, 257, 0, 8, 0, {}});
      out.push_back(batched({ta, tb, 9, 12, 20, 0, 0, 0, {}}, 3, 0));
      out.push_back(batched({ta, tb, 31, 16, 24, 2, 1, 4, {}}, 4, 7));
    }
  return out;
}

// Integers in [-4, 4]: every product and sum below is exact in fp32.
std::vector<float> small_integers(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = std::floor(rng.uniform() * 9.0) - 4.0f;
  return v;
}

// C = alpha·op(A)·op(B) + beta·C, row-major, per member: the definition.
void row_major_reference(const Call& c, float alpha, const float* A, const float* B, float beta,
                         float* C) {
  for (int64_t m = 0; m < c.batch.count; ++m)
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t j = 0; j < c.N; ++j) {
        double sum = 0;
        for (int64_t k = 0; k < c.K; ++k) {
          const float a = c.ta == Trans::N ? A[m * c.batch.stride_a + i * c.lda() + k]
                                           : A[m * c.batch.stride_a + k * c.lda() + i];
          const float b = c.tb == Trans::N ? B[m * c.batch.stride_b + k * c.ldb() + j]
                                           : B[m * c.batch.stride_b + j * c.ldb() + k];
          sum += static_cast<double>(a) * b;
        }
        float& out = C[m * c.batch.stride_c + i * c.ldc() + j];
        out = static_cast<float>(alpha * sum + (beta == 0 ? 0.0 : beta * out));
      }
}

// What cuBLASLt computes for a column-major problem, by its definition: D = alpha·op_a(A')·
// op_b(B') + beta·C, element (i, j) of a column-major matrix at [j·ld + i].
void column_major_reference(const LtProblem& p, float alpha, const float* Ap, const float* Bp,
                            float beta, float* C) {
  auto at = [](const float* x, const cuda::LtMatrix& s, Trans t, int64_t i, int64_t j) {
    return t == Trans::N ? x[j * s.ld + i] : x[i * s.ld + j];  // op(X)(i, j)
  };
  for (int64_t m = 0; m < p.batch; ++m)
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) {
        double sum = 0;
        for (int64_t k = 0; k < p.k; ++k)
          sum += static_cast<double>(at(Ap + m * p.stride_a, p.a, p.trans_a, i, k)) *
                 at(Bp + m * p.stride_b, p.b, p.trans_b, k, j);
        float& out = C[m * p.stride_c + j * p.c.ld + i];
        out = static_cast<float>(alpha * sum + (beta == 0 ? 0.0 : beta * out));
      }
}

TEST(GemmPlan, TheColumnMajorProblemComputesTheRowMajorProductExactly) {
  for (const Call& c : calls()) {
    SCOPED_TRACE(::testing::Message()
                 << "M" << c.M << " N" << c.N << " K" << c.K << " ta" << (c.ta == Trans::T) << " tb"
                 << (c.tb == Trans::T) << " batch" << c.batch.count);
    const auto A = small_integers(c.a_span(), 1), B = small_integers(c.b_span(), 2);
    const auto C0 = small_integers(c.c_span(), 3);
    std::vector<float> expected = C0, actual = C0;
    row_major_reference(c, 2.0f, A.data(), B.data(), 0.5f, expected.data());
    const LtProblem p =
        column_major_problem(c.ta, c.tb, c.M, c.N, c.K, c.lda(), c.ldb(), c.ldc(), c.batch);
    EXPECT_EQ(p.m, c.N);
    EXPECT_EQ(p.n, c.M);
    EXPECT_EQ(p.k, c.K);
    // The stored matrices hold what each operand spans (rows ≤ ld, as cuBLASLt requires).
    EXPECT_EQ(p.a.rows * p.a.cols, c.b_rows() * c.b_cols());
    EXPECT_EQ(p.b.rows * p.b.cols, c.a_rows() * c.a_cols());
    EXPECT_LE(p.a.rows, p.a.ld);
    EXPECT_LE(p.b.rows, p.b.ld);
    EXPECT_LE(p.c.rows, p.c.ld);
    // cuBLASLt's A is the call's B.
    column_major_reference(p, 2.0f, B.data(), A.data(), 0.5f, actual.data());
    EXPECT_EQ(actual, expected);  // integers: exact; padding untouched on both sides
  }
}

TEST(GemmPlan, StridesBelowTheRowWidthAreRefused) {
  EXPECT_DEATH(column_major_problem(Trans::N, Trans::N, 4, 5, 6, 5, 5, 5, {}), "row stride");
  EXPECT_DEATH(column_major_problem(Trans::T, Trans::N, 4, 5, 6, 3, 5, 5, {}), "row stride");
  EXPECT_DEATH(column_major_problem(Trans::N, Trans::N, 4, 5, 6, 6, 5, 4, {}), "row stride");
}

GemmKey base_key() {
  GemmKey k;
  k.precision = GemmPrecision::bf16;
  k.problem = column_major_problem(Trans::N, Trans::T, 64, 128, 256, 256, 256, 128,
                                   GemmBatch{3, 64 * 256, 128 * 256, 64 * 128});
  k.reads_c = true;
  k.align_a = k.align_b = k.align_c = 256;
  return k;
}

// Every field of the key tells two plans apart: a cache holding the base key and one variant per
// field holds them all, and finds each again.
TEST(GemmPlan, EveryFieldOfTheKeyDistinguishesPlans) {
  std::vector<GemmKey> keys{base_key()};
  auto vary = [&](auto change) {
    GemmKey k = base_key();
    change(k);
    keys.push_back(k);
  };
  vary([](GemmKey& k) { k.precision = GemmPrecision::f32; });
  vary([](GemmKey& k) { k.precision = GemmPrecision::tf32; });
  vary([](GemmKey& k) { k.problem.trans_a = Trans::N; });
  vary([](GemmKey& k) { k.problem.trans_b = Trans::T; });
  vary([](GemmKey& k) { k.problem.m += 1; });
  vary([](GemmKey& k) { k.problem.n += 1; });
  vary([](GemmKey& k) { k.problem.k += 1; });
  vary([](GemmKey& k) { k.problem.a.rows += 1; });
  vary([](GemmKey& k) { k.problem.a.cols += 1; });
  vary([](GemmKey& k) { k.problem.a.ld += 8; });
  vary([](GemmKey& k) { k.problem.b.rows += 1; });
  vary([](GemmKey& k) { k.problem.b.cols += 1; });
  vary([](GemmKey& k) { k.problem.b.ld += 8; });
  vary([](GemmKey& k) { k.problem.c.rows += 1; });
  vary([](GemmKey& k) { k.problem.c.cols += 1; });
  vary([](GemmKey& k) { k.problem.c.ld += 8; });
  vary([](GemmKey& k) { k.problem.batch = 2; });
  vary([](GemmKey& k) { k.problem.stride_a += 8; });
  vary([](GemmKey& k) { k.problem.stride_b += 8; });
  vary([](GemmKey& k) { k.problem.stride_c += 8; });
  vary([](GemmKey& k) { k.reads_c = false; });
  vary([](GemmKey& k) { k.bf16_out = true; });
  vary([](GemmKey& k) { k.align_a = 16; });
  vary([](GemmKey& k) { k.align_b = 16; });
  vary([](GemmKey& k) { k.align_c = 16; });
  // Transposing A alone, or B alone, changes the key (the mapping swaps them: a mix-up of the two
  // would make these collide with each other).
  keys.push_back(base_key());
  keys.back().problem = column_major_problem(Trans::T, Trans::T, 64, 128, 256, 64, 256, 128,
                                             GemmBatch{3, 64 * 256, 128 * 256, 64 * 128});
  keys.push_back(base_key());
  keys.back().problem = column_major_problem(Trans::N, Trans::N, 64, 128, 256, 256, 128, 128,
                                             GemmBatch{3, 64 * 256, 128 * 256, 64 * 128});

  PlanCache<int> cache;
  int built = 0;
  for (const GemmKey& k : keys) cache.get(k, [&] { return built++; });
  EXPECT_EQ(cache.size(), keys.size());
  EXPECT_EQ(cache.misses(), static_cast<int64_t>(keys.size()));
  EXPECT_EQ(cache.hits(), 0);
  // Found again, each its own plan, without building.
  for (std::size_t i = 0; i < keys.size(); ++i)
    EXPECT_EQ(cache.get(keys[i], [&] { return -1; }), static_cast<int>(i));
  EXPECT_EQ(cache.hits(), static_cast<int64_t>(keys.size()));
  EXPECT_EQ(built, static_cast<int>(keys.size()));
  // The hash spreads them (not required for correctness, but a constant hash would be a bug).
  std::set<std::size_t> hashes;
  for (const GemmKey& k : keys) hashes.insert(GemmKeyHash{}(k));
  EXPECT_EQ(hashes.size(), keys.size());
}

// A repeated step (the same GEMMs again) is all hits.
TEST(GemmPlan, ARepeatedStepIsAllHits) {
  PlanCache<std::string> cache;
  const std::vector<GemmKey> step{base_key(), [] {
                                    GemmKey k = base_key();
                                    k.problem.k = 64;
                                    return k;
                                  }()};
  for (const GemmKey& k : step) cache.get(k, [&] { return cuda::describe(k); });
  for (int repeat = 0; repeat < 5; ++repeat)
    for (const GemmKey& k : step)
      EXPECT_EQ(cache.get(k, [] { return std::string(); }), cuda::describe(k));
  EXPECT_EQ(cache.misses(), 2);
  EXPECT_EQ(cache.hits(), 10);
}

TEST(GemmPlan, AlignmentWorkspaceAndDescription) {
  alignas(256) static char block[1024];
  EXPECT_EQ(cuda::pointer_alignment(block), 256u);
  EXPECT_EQ(cuda::pointer_alignment(block + 512), 256u);  // capped
  EXPECT_EQ(cuda::pointer_alignment(block + 16), 16u);
  EXPECT_EQ(cuda::pointer_alignment(block + 2), 2u);
  EXPECT_EQ(cuda::pointer_alignment(block + 3), 1u);
  EXPECT_EQ(cuda::pointer_alignment(block + 96), 32u);
  EXPECT_EQ(cuda::gemm_workspace_bytes(9), std::size_t{32} << 20);
  EXPECT_EQ(cuda::gemm_workspace_bytes(10), std::size_t{32} << 20);
  EXPECT_EQ(cuda::gemm_workspace_bytes(8), std::size_t{4} << 20);
  // The description is in the caller's row-major terms.
  const std::string d = cuda::describe(base_key());
  EXPECT_NE(d.find("bf16 GEMM M=64 N=128 K=256 op(A)=N op(B)=T lda=256 ldb=256 ldc=128"),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("batch=3 strides(A,B,C)=(16384,32768,8192)"), std::string::npos) << d;
  EXPECT_NE(d.find("beta!=0"), std::string::npos) << d;
}

// A failing cuBLASLt call throws Error naming the call, the GEMM in the caller's terms and
// cuBLAS's status (the status strings need no device).
TEST(GemmPlan, ErrorsNameTheCallTheShapeAndTheStatus) {
  try {
    cuda::check_cublaslt(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul", base_key());
    FAIL() << "no throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cublasLtMatmul failed for the bf16 GEMM M=64 N=128 K=256"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("CUBLAS_STATUS_NOT_SUPPORTED"), std::string::npos) << what;
  }
  EXPECT_NO_THROW(cuda::check_cublaslt(CUBLAS_STATUS_SUCCESS, "cublasLtMatmul", base_key()));
}

// ---- On a GPU, against the CPU backend.
using CudaGemm = DeviceTest;

// Σ_k |a_ik|·|b_kj| per element of C (per member), for the error bound of a K-term fp32 sum.
std::vector<float> abs_products(const Call& c, const std::vector<float>& A,
                                const std::vector<float>& B) {
  std::vector<float> absA(A.size()), absB(B.size()), out(c.c_span(), 0.0f);
  for (std::size_t i = 0; i < A.size(); ++i) absA[i] = std::abs(A[i]);
  for (std::size_t i = 0; i < B.size(); ++i) absB[i] = std::abs(B[i]);
  row_major_reference(c, 1.0f, absA.data(), absB.data(), 0.0f, out.data());
  return out;
}

// |gpu − cpu| ≤ tol_per_sum · Σ|a||b| + 1e-6·|cpu| element-wise over C's span.
::testing::AssertionResult within_bound(const std::vector<float>& gpu,
                                        const std::vector<float>& cpu,
                                        const std::vector<float>& abs_sum, double tol_per_sum) {
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    const double bound = tol_per_sum * abs_sum[i] + 1e-6 * std::abs(cpu[i]);
    if (!(std::abs(static_cast<double>(gpu[i]) - cpu[i]) <= bound))
      return ::testing::AssertionFailure()
             << "element " << i << ": " << gpu[i] << " vs " << cpu[i] << " (bound " << bound << ")";
  }
  return ::testing::AssertionSuccess();
}

struct Scalars {
  float alpha, beta;
};

void check_against_cpu(cuda::GemmContext& ctx, const Call& c, DType compute, bool with_bf16_copies,
                       Scalars s, double tol_per_sum, cudaStream_t stream) {
  SCOPED_TRACE(::testing::Message()
               << "M" << c.M << " N" << c.N << " K" << c.K << " ta" << (c.ta == Trans::T) << " tb"
               << (c.tb == Trans::T) << " batch" << c.batch.count << " alpha " << s.alpha
               << " beta " << s.beta << (compute == DType::bf16 ? " bf16" : " f32")
               << (with_bf16_copies ? " with copies" : ""));
  const auto A = random_floats(c.a_span(), 10), B = random_floats(c.b_span(), 11);
  auto C0 = random_floats(c.c_span(), 12);
  if (s.beta == 0.0f) C0[0] = NAN;  // beta 0 must not read C (0·NaN would leak)
  const auto A16 = rounded(A), B16 = rounded(B);
  std::vector<float> cpu = C0;
  const GemmInput a_cpu =
      with_bf16_copies ? GemmInput(A.data(), A16.data(), c.lda()) : GemmInput(A.data(), c.lda());
  const GemmInput b_cpu =
      with_bf16_copies ? GemmInput(B.data(), B16.data(), c.ldb()) : GemmInput(B.data(), c.ldb());
  gemm_batched(c.ta, c.tb, c.M, c.N, c.K, s.alpha, a_cpu, b_cpu, s.beta, cpu.data(), c.ldc(),
               c.batch, compute);

  DeviceArray<float> dA(A), dB(B), dC(C0);
  DeviceArray<bf16_t> dA16(A16), dB16(B16);
  const GemmInput a_gpu =
      with_bf16_copies ? GemmInput(dA.get(), dA16.get(), c.lda()) : GemmInput(dA.get(), c.lda());
  const GemmInput b_gpu =
      with_bf16_copies ? GemmInput(dB.get(), dB16.get(), c.ldb()) : GemmInput(dB.get(), c.ldb());
  cuda::gemm_batched(ctx, c.ta, c.tb, c.M, c.N, c.K, s.alpha, a_gpu, b_gpu, s.beta, dC.get(),
                     c.ldc(), c.batch, compute, stream);
  BOOSTLM_CHECK_CUDA(cudaStreamSynchronize(stream));
  std::vector<float> abs_sum = abs_products(c, A, B);
  for (float& x : abs_sum) x *= std::abs(s.alpha);
  // Padding and the gaps between members: untouched, exactly.
  EXPECT_TRUE(within_bound(dC.download(), cpu, abs_sum, tol_per_sum));
}

// fp32: both sides sum K exact-input products in fp32 in their own orders: each is within
// K·2^-24·Σ|a||b| of the exact sum (the classical bound γ_K), so they are within twice that.
// bf16: the inputs are rounded the same way on both sides (math.h's rounding is the CPU's), the
// products of bf16 values are exact in fp32, so the same bound holds, with Σ|a||b| of the fp32
// inputs (rounding moves each by at most 2^-8 relative: bound ×1.01).
TEST_F(CudaGemm, EveryTransposeShapeAndBatchMatchesTheCpuBackend) {
  cuda::GemmContext ctx;
  for (const Call& c : calls()) {
    const double gamma = 2.0 * std::max<int64_t>(c.K, 1) * std::ldexp(1.0, -24);
    for (Scalars s : {Scalars{1.0f, 0.0f}, Scalars{1.0f, 1.0f}, Scalars{0.7f, -0.5f}}) {
      check_against_cpu(ctx, c, DType::f32, false, s, gamma, stream);
      check_against_cpu(ctx, c, DType::bf16, false, s, 1.01 * gamma + 1e-7, stream);
      check_against_cpu(ctx, c, DType::bf16, true, s, 1.01 * gamma + 1e-7, stream);
    }
  }
}

// A bf16 C (cuBLASLt's bf16 D, rounded in its epilogue) is the same call's fp32 C rounded to
// nearest even, bit for bit on the emulated device (it runs the one product for both and rounds as
// a GPU's epilogue does; on a GPU within a bf16 step), the padding between rows and members
// untouched.
TEST_F(CudaGemm, Bf16OutputIsTheFp32OutputRounded) {
  cuda::GemmContext ctx;
  for (const Call& c : calls()) {
    if (c.K == 0) continue;
    SCOPED_TRACE(::testing::Message()
                 << "M" << c.M << " N" << c.N << " K" << c.K << " batch" << c.batch.count);
    const auto A = random_floats(c.a_span(), 10), B = random_floats(c.b_span(), 11);
    DeviceArray<float> dA(A), dB(B), dC(std::vector<float>(c.c_span(), 0.0f));
    DeviceArray<bf16_t> dC16(std::vector<bf16_t>(c.c_span(), 0x1234));
    cuda::gemm_batched(ctx, c.ta, c.tb, c.M, c.N, c.K, 0.7f, GemmInput(dA.get(), c.lda()),
                       GemmInput(dB.get(), c.ldb()), 0.0f, dC.get(), c.ldc(), c.batch, DType::bf16,
                       stream);
    cuda::gemm_batched_bf16_out(ctx, c.ta, c.tb, c.M, c.N, c.K, 0.7f, GemmInput(dA.get(), c.lda()),
                                GemmInput(dB.get(), c.ldb()), dC16.get(), c.ldc(), c.batch, stream);
    BOOSTLM_CHECK_CUDA(cudaStreamSynchronize(stream));
    const std::vector<float> f32 = dC.download();
    const std::vector<bf16_t> b16 = dC16.download();
    std::vector<bool> written(c.c_span(), false);
    for (int64_t m = 0; m < c.batch.count; ++m)
      for (int64_t i = 0; i < c.M; ++i)
        for (int64_t j = 0; j < c.N; ++j) written[m * c.batch.stride_c + i * c.ldc() + j] = true;
    for (int64_t e = 0; e < c.c_span(); ++e) {
      if (!written[e]) {
        ASSERT_EQ(b16[e], bf16_t{0x1234}) << "element " << e;
        continue;
      }
#ifdef BOOSTLM_CUDA_EMULATOR
      ASSERT_EQ(b16[e], float_to_bf16(f32[e])) << "element " << e;
#else
      // A GPU's heuristic may pick another algorithm (another summation order) for the bf16 D:
      // within one bf16 step of the fp32 result's rounding.
      ASSERT_LE(std::abs(bf16_to_float(b16[e]) - bf16_to_float(float_to_bf16(f32[e]))),
                std::ldexp(std::abs(f32[e]), -7) + 1e-30f)
          << "element " << e;
#endif
    }
  }
}

// TF32 products keep 10 mantissa bits of each input: each product is within ~2^-10 relative of
// the fp32 one, so the sum is within 2^-10·Σ|a||b| (+ the fp32 accumulation bound).
TEST_F(CudaGemm, Tf32IsAnOptionWithinItsPrecision) {
  cuda::GemmContext tf32(cuda::GemmOptions{.tf32 = true});
  EXPECT_TRUE(tf32.options().tf32);
  EXPECT_FALSE(cuda::GemmContext().options().tf32);  // off by default
  for (const Call& c : calls()) {
    const double bound =
        std::ldexp(1.0, -10) + 2.0 * std::max<int64_t>(c.K, 1) * std::ldexp(1.0, -24);
    check_against_cpu(tf32, c, DType::f32, false, {1.0f, 1.0f}, bound, stream);
  }
}

// K = 0: C = beta·C (beta 0 writes zeros even over NaN), as the CPU backend.
TEST_F(CudaGemm, AnEmptyReductionScalesC) {
  cuda::GemmContext ctx;
  for (float beta : {0.0f, 0.5f}) {
    const Call c = batched({Trans::N, Trans::N, 3, 5, 0, 0, 0, 2, {}}, 2, 1);
    std::vector<float> C0 = random_floats(c.c_span(), 5);
    C0[1] = NAN;
    std::vector<float> cpu = C0;
    const std::vector<float> none(1, 0.0f);
    gemm_batched(Trans::N, Trans::N, 3, 5, 0, 1.0f, GemmInput(none.data(), 1),
                 GemmInput(none.data(), 5), beta, cpu.data(), c.ldc(), c.batch, DType::f32);
    DeviceArray<float> dC(C0), dummy(std::vector<float>(8, 0.0f));
    cuda::gemm_batched(ctx, Trans::N, Trans::N, 3, 5, 0, 1.0f, GemmInput(dummy.get(), 1),
                       GemmInput(dummy.get(), 5), beta, dC.get(), c.ldc(), c.batch, DType::f32,
                       stream);
    sync();
    const std::vector<float> gpu = dC.download();
    for (std::size_t i = 0; i < gpu.size(); ++i)
      if (std::isnan(cpu[i]))
        EXPECT_TRUE(std::isnan(gpu[i])) << i;
      else
        EXPECT_EQ(gpu[i], cpu[i]) << i;
  }
}

// The second step's GEMMs build no plan; the counters see every call (FLOPs by the member shape),
// and with a timer the time too, once collected.
TEST_F(CudaGemm, PlansAreCachedAndCallsCountedAndTimed) {
  cuda::GemmContext ctx;
  const int64_t M = 256, N = 512, K = 384;
  DeviceArray<float> A(M * K), B(K * N), C(M * N);
  BOOSTLM_CHECK_CUDA(cudaMemsetAsync(A.get(), 0, M * K * 4, stream));
  BOOSTLM_CHECK_CUDA(cudaMemsetAsync(B.get(), 0, K * N * 4, stream));
  auto step = [&] {
    cuda::gemm(ctx, Trans::N, Trans::T, M, N, K, 1.0f, A.get(), K, B.get(), K, 0.0f, C.get(), N,
               DType::bf16, stream);
    cuda::gemm(ctx, Trans::T, Trans::N, K, N, M, 1.0f, A.get(), K, C.get(), N, 1.0f, B.get(), N,
               DType::f32, stream);
  };
  const GemmCounters before = gemm_counters();
  step();
  EXPECT_EQ(ctx.plans().misses(), 2);
  // The bf16 GEMM rounds its operands (no bf16 copies given) into blocks of the caching
  // allocator: after the first step, a step takes no new device memory.
  const int64_t allocated = cuda::device_allocator().stats().backing_allocations;
  step();
  step();
  EXPECT_EQ(cuda::device_allocator().stats().backing_allocations, allocated);
  EXPECT_EQ(ctx.plans().misses(), 2);
  EXPECT_EQ(ctx.plans().hits(), 4);
  EXPECT_EQ(gemm_counters().calls, before.calls + 6);
  EXPECT_DOUBLE_EQ(gemm_counters().flops, before.flops + 6 * 2.0 * M * N * K);
  sync();

  cuda::EventTimer timer(cuda::cuda_event_api());
  ctx.set_timer(&timer);
  const GemmCounters untimed = gemm_counters();
  step();
  // Calls and FLOPs are booked at once (gemm.h), the seconds only when collected.
  EXPECT_EQ(gemm_counters().calls, untimed.calls + 2);
  EXPECT_DOUBLE_EQ(gemm_counters().seconds, untimed.seconds);
  sync();
  ctx.collect_timings();
  EXPECT_EQ(gemm_counters().calls, untimed.calls + 2);
  EXPECT_GT(gemm_counters().seconds, untimed.seconds);
  EXPECT_EQ(timer.pending(), 0u);
  const std::size_t events = timer.events_created();
  step();
  sync();
  ctx.collect_timings();
  EXPECT_EQ(timer.events_created(), events);  // pooled
  ctx.set_timer(nullptr);
}

// The rate measurement runs and reports a positive, plausible figure (below 10 PFLOP/s; an H200's
// bf16 datasheet peak is 989 TFLOP/s dense), printed for the device-check log.
TEST_F(CudaGemm, MeasuresTheGemmRate) {
  cuda::GemmContext ctx;
  for (DType compute : {DType::f32, DType::bf16}) {
    const double gflops = cuda::measure_gemm_gflops(ctx, 2048, 2048, 2048, compute, 3, stream);
    EXPECT_GT(gflops, 0.0);
    EXPECT_LT(gflops, 1e7);
    std::printf("%s GEMM 2048^3: %.0f GFLOP/s\n", compute == DType::bf16 ? "bf16" : "fp32", gflops);
  }
}

}  // namespace
}  // namespace boostlm
