// General matrix multiply, the one op that carries almost all FLOPs.
//
//   C[M, N] = alpha * op(A)[M, K] · op(B)[K, N] + beta * C        (row-major, ld = row stride)
//
// `compute` picks the input precision: fp32 (oneDNN's sgemm; its matmul primitive for a batch),
// or bf16 (inputs rounded to bf16, fp32 accumulation and output; oneDNN's matmul primitive on the
// CPU's bf16 units). In bf16 an input can arrive already rounded (a GemmInput with a bf16 copy):
// weights are rounded once per step, and an operand read by several GEMMs is rounded once, not at
// every call.
// Every call is counted (calls, FLOPs, time) so benchmarks can report the share of time in GEMM,
// and can be recorded so the same shapes can be replayed in isolation.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace boostlm {

enum class Trans { N, T };

// A stored matrix operand: fp32 values and/or the same values rounded to bf16, same row stride.
struct GemmInput {
  const float* f32 = nullptr;
  const bf16_t* bf16 = nullptr;
  int64_t ld = 0;
  GemmInput(const float* values, int64_t ld_) : f32(values), ld(ld_) {}
  GemmInput(const float* values, const bf16_t* rounded, int64_t ld_)
      : f32(values), bf16(rounded), ld(ld_) {}
  // The operand `offset` elements on, in both copies (a column block, a batch member).
  GemmInput at(int64_t offset) const { return {f32 + offset, bf16 ? bf16 + offset : nullptr, ld}; }
};

void gemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha, GemmInput A,
          GemmInput B, float beta, float* C, int64_t ldc, DType compute);

inline void gemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                 int64_t ldc, DType compute) {
  gemm(trans_a, trans_b, M, N, K, alpha, GemmInput(A, lda), GemmInput(B, ldb), beta, C, ldc,
       compute);
}

// A strided batch of GEMMs of one shape (SPEC §3.5: the B factors of q, k, v reading column blocks
// of one latent buffer): member i reads A + i·stride_a and B + i·stride_b (the same offsets in
// their bf16 copies) and writes C + i·stride_c, with the leading dimensions of A, B and C. One
// call (oneDNN's matmul primitive with a batch dimension), counted and recorded as `count` GEMMs
// of the member shape, so FLOPs and shapes read the same as for separate calls.
struct GemmBatch {
  int64_t count = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // elements
  bool operator==(const GemmBatch&) const = default;
};

void gemm_batched(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  GemmInput A, GemmInput B, float beta, float* C, int64_t ldc,
                  const GemmBatch& batch, DType compute);

// Rounds a rows x cols fp32 block (row stride ld) to bf16, contiguous (row stride cols).
void round_to_bf16(const float* src, int64_t rows, int64_t cols, int64_t ld, bf16_t* dst);

// This rank's GEMM rate in GFLOP/s for C[M, N] = A[M, K] · B[K, N]: the fastest of `reps` calls
// after one warm-up. bf16 operands are rounded beforehand, as training rounds weights and shared
// inputs once rather than at every call. Run on every rank at once, it measures the rate under the
// same sharing of the cores as a multi-rank run.
double measure_gemm_gflops(int64_t M, int64_t N, int64_t K, DType compute, int reps = 5);

// The GEMM peak that model FLOPs utilisation (MFU) is measured against, by the trainer and the
// benchmarks alike: the fastest n³ product of n = 512, 1024, 2048 (no single size is the fastest
// for every precision and core count: oneDNN's large bf16 products run slower than mid-sized ones
// on one core here).
double measure_peak_gemm_gflops(DType compute);

struct GemmShape {
  Trans trans_a, trans_b;
  int64_t M, N, K;
  float beta;
  DType compute;
};

struct GemmCounters {
  int64_t calls = 0;  // a batched call counts once
  double flops = 0;
  double seconds = 0;
};

// Process-wide counters (not thread-safe: GEMM is called from the main thread; oneDNN threads it).
GemmCounters& gemm_counters();
void gemm_record_shapes(bool on);  // start/stop recording the shape of every GEMM (batch member)
const std::vector<GemmShape>& gemm_recorded_shapes();
void gemm_clear_recorded_shapes();

}  // namespace boostlm
