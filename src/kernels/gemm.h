// General matrix multiply, the one op that carries almost all FLOPs.
//
//   C[M, N] = alpha * op(A)[M, K] · op(B)[K, N] + beta * C        (row-major, ld = row stride)
//
// `compute` picks the input precision: fp32 (oneDNN's sgemm), or bf16 (inputs rounded to bf16,
// fp32 accumulation and output; oneDNN's matmul primitive, which uses the CPU's bf16/AMX units).
// Every call is counted (calls, FLOPs, time) so benchmarks can report the share of time in GEMM,
// and can optionally be recorded so the same shapes can be replayed in isolation.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace boostlm {

enum class Trans { N, T };

void gemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc, DType compute);

struct GemmShape {
  Trans trans_a, trans_b;
  int64_t M, N, K;
  float beta;
  DType compute;
};

struct GemmCounters {
  int64_t calls = 0;
  double flops = 0;
  double seconds = 0;
};

// Process-wide counters (not thread-safe: GEMM is called from the main thread; oneDNN threads it).
GemmCounters& gemm_counters();
void gemm_record_shapes(bool on);  // start/stop recording the shape of every call
const std::vector<GemmShape>& gemm_recorded_shapes();
void gemm_clear_recorded_shapes();

}  // namespace boostlm
