// The backend's row-major-to-column-major mapping (kernels/cuda/gemm_plan.cpp) tested by
// execution: a row-major call C[M, N] = alpha·op(A)·op(B) + beta·C becomes column_major_problem's
// LtProblem, which is handed to the emulated cuBLASLt exactly as kernels/cuda/gemm.cpp hands it
// (the call's B as cuBLASLt's A, layouts in column order, batch count and strides only above one
// member), and the result must be the row-major product, checked against a double reference.
//
// Tolerance: as test_cublaslt.cpp, γ_{K+3}·(|alpha|·Σ|a·b| + |beta|·|c|) with u = 2^-24; a wrong
// mapping (a swapped operand, transpose or leading dimension) gives errors of the size of the
// values themselves.
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cuda/gemm_plan.h"

namespace boostlm::cuda {
namespace {

cublasLtMatrixLayout_t layout(const LtMatrix& m, int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  EXPECT_EQ(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, m.rows, m.cols, m.ld),
            CUBLAS_STATUS_SUCCESS);
  if (batch > 1) {
    const auto count = static_cast<int32_t>(batch);
    EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                               sizeof count),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                               &stride, sizeof stride),
              CUBLAS_STATUS_SUCCESS);
  }
  return l;
}

float* upload(const std::vector<float>& host) {
  float* device = nullptr;
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), host.size() * sizeof(float)),
            cudaSuccess);
  EXPECT_EQ(cudaMemcpy(device, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  return device;
}

struct RowMajorCall {
  Trans ta, tb;
  int64_t M, N, K, lda, ldb, ldc;
  GemmBatch batch;
};

// Runs the call through the mapping and the emulated cuBLASLt; checks C element by element.
void run_and_check(const RowMajorCall& call, unsigned seed) {
  const auto& [ta, tb, M, N, K, lda, ldb, ldc, batch] = call;
  // Stored row-major: A is [M, K] (N) or [K, M] (T), B is [K, N] or [N, K].
  const int64_t a_rows = ta == Trans::N ? M : K, b_rows = tb == Trans::N ? K : N;
  const int64_t a_size = (batch.count - 1) * batch.stride_a + a_rows * lda;
  const int64_t b_size = (batch.count - 1) * batch.stride_b + b_rows * ldb;
  const int64_t c_size = (batch.count - 1) * batch.stride_c + M * ldc;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  auto random = [&](int64_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
  };
  const std::vector<float> a = random(a_size), b = random(b_size), c = random(c_size);
  const float alpha = 0.75f, beta = -1.25f;

  const LtProblem p = column_major_problem(ta, tb, M, N, K, lda, ldb, ldc, batch);
  cublasLtHandle_t handle = nullptr;
  ASSERT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulDesc_t op = nullptr;
  ASSERT_EQ(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  const int32_t op_a = p.trans_a == Trans::N ? CUBLAS_OP_N : CUBLAS_OP_T;
  const int32_t op_b = p.trans_b == Trans::N ? CUBLAS_OP_N : CUBLAS_OP_T;
  ASSERT_EQ(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b),
            CUBLAS_STATUS_SUCCESS);
  cublasLtMatrixLayout_t la = layout(p.a, p.batch, p.stride_a);
  cublasLtMatrixLayout_t lb = layout(p.b, p.batch, p.stride_b);
  cublasLtMatrixLayout_t lc = layout(p.c, p.batch, p.stride_c);
  float *da = upload(a), *db = upload(b), *dc = upload(c);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  // cuBLASLt's A is the call's B (gemm_plan.h); no algorithm: the implicit heuristic.
  ASSERT_EQ(cublasLtMatmul(handle, op, &alpha, db, la, da, lb, &beta, dc, lc, dc, lc, nullptr,
                           nullptr, 0, stream),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  std::vector<float> got(c_size);
  ASSERT_EQ(cudaMemcpy(got.data(), dc, c_size * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);

  const double u = std::ldexp(1.0, -24), j = static_cast<double>(K + 3);
  const double gamma = j * u / (1 - j * u);
  std::vector<bool> written(c_size, false);
  for (int64_t i = 0; i < batch.count; ++i)
    for (int64_t row = 0; row < M; ++row)
      for (int64_t col = 0; col < N; ++col) {
        double sum = 0, magnitude = 0;
        for (int64_t q = 0; q < K; ++q) {
          const double x = a[i * batch.stride_a + (ta == Trans::N ? row * lda + q : q * lda + row)];
          const double y = b[i * batch.stride_b + (tb == Trans::N ? q * ldb + col : col * ldb + q)];
          sum += x * y;
          magnitude += std::fabs(x * y);
        }
        const int64_t at = i * batch.stride_c + row * ldc + col;
        written[at] = true;
        const double want = alpha * sum + beta * c[at];
        const double bound = gamma * (std::fabs(alpha) * magnitude + std::fabs(beta * c[at]));
        EXPECT_LE(std::fabs(got[at] - want), bound)
            << "member " << i << " C[" << row << "][" << col << "]";
      }
  for (int64_t e = 0; e < c_size; ++e) {
    if (!written[e]) {
      EXPECT_EQ(got[e], c[e]) << "C element " << e << " outside the call";
    }
  }
  cudaStreamDestroy(stream);
  for (float* d : {da, db, dc}) cudaFree(d);
  for (cublasLtMatrixLayout_t l : {la, lb, lc}) cublasLtMatrixLayoutDestroy(l);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(handle);
}

TEST(GemmMapping, EveryTransposeWithRowStridesAboveWidths) {
  unsigned seed = 1;
  for (Trans ta : {Trans::N, Trans::T})
    for (Trans tb : {Trans::N, Trans::T}) {
      SCOPED_TRACE(testing::Message() << "ta=" << (ta == Trans::N ? "N" : "T")
                                      << " tb=" << (tb == Trans::N ? "N" : "T"));
      const int64_t M = 5, N = 7, K = 3;
      const int64_t lda = (ta == Trans::N ? K : M) + 2, ldb = (tb == Trans::N ? N : K) + 1;
      run_and_check({ta, tb, M, N, K, lda, ldb, N + 3, GemmBatch{}}, seed++);
    }
}

// The batched shape of SPEC §3.5: members reading column blocks of one buffer (stride_a a column
// offset, lda the buffer's full width), and separate members with gaps.
TEST(GemmMapping, StridedBatches) {
  unsigned seed = 11;
  for (Trans ta : {Trans::N, Trans::T})
    for (Trans tb : {Trans::N, Trans::T}) {
      const int64_t M = 4, N = 6, K = 5, count = 3;
      const int64_t a_width = ta == Trans::N ? K : M, b_width = tb == Trans::N ? N : K;
      const int64_t b_rows = tb == Trans::N ? K : N;
      // A's members side by side in one row-major buffer; B's and C's one after another.
      const GemmBatch batch{count, a_width, b_rows * b_width + 7, M * N + 2};
      run_and_check({ta, tb, M, N, K, count * a_width, b_width, N, batch}, seed++);
    }
}

}  // namespace
}  // namespace boostlm::cuda
