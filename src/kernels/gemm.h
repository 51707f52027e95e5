// General matrix multiply, the one op that carries almost all FLOPs.
//
//   C[M, N] = alpha * op(A)[M, K] · op(B)[K, N] + beta * C        (row-major, ld = row stride)
//
// `compute` picks the input precision: fp32 (oneDNN's sgemm; its matmul primitive for a batch and
// for X·Wᵀ shapes, gemm.cpp), or bf16 (inputs rounded to bf16, fp32 accumulation and output;
// oneDNN's matmul primitive on the CPU's bf16 units). In bf16 an input can arrive already rounded
// (a GemmInput with a bf16 copy): weights are rounded once per step, and an operand read by several
// GEMMs is rounded once, not at every call. A transposed first operand is made plain as it is
// rounded (the backend's matmul runs far below its rate on a transposed bf16 source); that
// preparation is not counted as GEMM time. Every call is counted and can be recorded
// (kernels/gemm_counters.h); a machine's GEMM rate is measured with kernels/gemm_measure.h.
#pragma once

#include <cstdint>

#include "core/buffer.h"
#include "core/dtype.h"

namespace boostlm {

enum class Trans { N, T };

// A stored matrix operand: fp32 values and/or the same values rounded to bf16, same row stride
// (bf16 only: an activation kept or computed in bf16, for a bf16 GEMM).
struct GemmInput {
  const float* f32 = nullptr;
  const bf16_t* bf16 = nullptr;
  int64_t ld = 0;
  GemmInput(const float* values, int64_t ld_) : f32(values), ld(ld_) {}
  GemmInput(const float* values, const bf16_t* rounded, int64_t ld_)
      : f32(values), bf16(rounded), ld(ld_) {}
  // The operand `offset` elements on, in both copies (a column block, a batch member).
  GemmInput at(int64_t offset) const {
    return {f32 ? f32 + offset : nullptr, bf16 ? bf16 + offset : nullptr, ld};
  }
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

// The same in bf16 with C written in bf16 only: each member's fp32 result rounded to nearest even,
// the bits round_to_bf16 gives the fp32 output (beta 0: nothing read from C). For an output only
// bf16 readers take (SwiGLU's gate and up, which it rounds before anything else): half the bytes
// written, and the reader's read halved, where the GEMM's own epilogue rounds (cuBLASLt's bf16 D,
// oneDNN's bf16 dst).
void gemm_batched_bf16_out(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K,
                           float alpha, GemmInput A, GemmInput B, bf16_t* C, int64_t ldc,
                           const GemmBatch& batch);

// How the active backend runs GEMMs of `compute` precision, in words (the run's first line says
// it: on a CPU without AVX-512, bf16 GEMMs run as fp32 GEMMs of the widened operands).
const char* gemm_engine(DType compute);
// Where a backend chooses how GEMMs of `compute` precision run by measuring (the CPU's bf16:
// oneDNN's bf16 matmul or fp32 GEMMs of widened operands, whichever is faster here), its choice
// as a code (0: nothing chosen), and adopting another process's: a job's ranks take rank 0's, so
// all of them sum the same way (train).
int gemm_path(DType compute);
void set_gemm_path(DType compute, int path);

// Whether the active backend's GEMMs of `compute` precision keep the thread count they were made
// with whatever the OpenMP team is later, or sum differently on another team (on the CPU: bf16 on
// oneDNN's bf16 matmul; every GEMM where oneDNN has no AVX-512 kernels). A model that
// runs them holds the thread governor's whole team (core/threads.h).
bool gemm_keeps_threads(DType compute);

// Rounds a rows x cols fp32 block (row stride ld) to bf16, contiguous (row stride cols).
void round_to_bf16(const float* src, int64_t rows, int64_t cols, int64_t ld, bf16_t* dst);
// dst [rows, cols] (row stride ld_dst) = src [rows, cols] (row stride ld_src) widened to fp32,
// exactly: a bf16 activation that crossed a collective back into an fp32 buffer (issue 60).
void widen_bf16(const bf16_t* src, int64_t rows, int64_t cols, int64_t ld_src, float* dst,
                int64_t ld_dst);

// x [rows, cols] (contiguous) as a GEMM input: fp32 as it is; in bf16 also rounded once into
// `scratch` (grown as needed), for the GEMMs that share it.
inline GemmInput rounded_input(DType compute, const float* x, int64_t rows, int64_t cols,
                               Buffer<bf16_t>& scratch) {
  if (compute != DType::bf16) return {x, cols};
  if (scratch.size() < static_cast<size_t>(rows * cols)) scratch.resize(rows * cols);
  round_to_bf16(x, rows, cols, cols, scratch.data());
  return {x, scratch.data(), cols};
}

}  // namespace boostlm
